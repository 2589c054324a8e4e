"""The one harness of every script in bench/: loading the kernel as users do, the shape suite and its anchors,
timing, error against float64, the run's environment, and where results go.

Loading (never from kernel_src): `--hub URL --repo ORG/NAME[=label]` calls `registry.get_kernel` against a
running hub (as a user's code does); `--variant-dir DIR[=label]` imports a built variant directory
(`dist/fused-mlp/build/<variant>`) under a unique module name, as `kernels` does.

Shapes: the real-model presets of `registry.spec.presets` (llama-3-8b, gpt2, ...). For each, `inputs` makes
fresh random operands and `implementations` the callables of ours and of every anchor a user already has:
eager PyTorch, eager in a CUDA graph (the caller captures it), cuBLASLt epilogues, torch.compile (default and
max-autotune) and Liger-Kernel (when importable).

Timing: `stream_us` = wall µs per call of back-to-back async calls (what a Python loop gets: host and GPU
overlap, so it is max(host, GPU) per call); `gpu_us` = GPU µs per call from replaying one CUDA graph that
holds `repeat` calls (no host cost, no launch gaps); `host_us` = CPU µs to issue one call. Medians, warm-up
first. Results: `--json OUT` for the run's own report (the summary reads it) and one line per number appended
to the CSV of `--csv` / $BENCH_CSV (default bench/benchmark_data.csv, git-ignored): results never go to git.
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from types import ModuleType

try:  # the hub benchmarks use the records and the environment on machines without torch
    import torch
    import torch.nn.functional as F
except ImportError:  # pragma: no cover
    torch = F = None

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(1, str(REPO_ROOT))
from registry.client.workloads import as_call, leaves  # noqa: F401  (the scripts call them from here)
from registry.spec.presets import Case, Preset

CSV_COLUMNS = ("timestamp", "gpu", "bench", "case", "impl", "metric", "value")
DEFAULT_CSV = REPO_ROOT / "bench" / "benchmark_data.csv"
# Dense bf16 peak (8192^3 matmul on random data) and device-to-device copy bandwidth (bytes read + written),
# measured on the lent cards: a row's floor must be its own card's, an H200 floor reads 70% on an H100.
PEAKS = {"H200": (788e12, 4.25e12), "H100": (798e12, 3.0e12)}
DTYPES = {"bf16": "bfloat16", "fp16": "float16", "bfloat16": "bfloat16", "float16": "float16"}
ANCHORS = ("eager", "eager_cuda_graph", "cublaslt_epilogue", "compile", "compile_max_autotune", "liger")


def peaks(gpu: str | None = None) -> tuple[float, float]:
    """(FLOP/s, bytes/s) ceilings of this GPU (or the one named); the H200's where the card is not listed."""
    name = gpu if gpu is not None else torch.cuda.get_device_name()
    return next((v for k, v in PEAKS.items() if k in name), PEAKS["H200"])


# ---- loading ----------------------------------------------------------------------------------------------


def add_loading_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--hub", help="hub URL to load from with registry.get_kernel (HF_TOKEN for auth)")
    parser.add_argument("--repo", action="append", default=[], help="ORG/NAME[=label] to load from --hub")
    parser.add_argument("--variant-dir", action="append", default=[], help="built variant dir DIR[=label]")
    parser.add_argument("--set-path", action="append", default=[], metavar="STEP=IMPL",
                        help="force a step of every loaded stable-ABI CUDA kernel for the whole run (cuda_set_path), "
                        "e.g. chain_backward=layers: an A/B of one implementation on one build, run as two processes "
                        "(repeatable)")  # fmt: skip


def tool_parser(doc: str) -> argparse.ArgumentParser:
    """The parser every benchmark starts from: the loading options, --json OUT and --csv PATH."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    add_loading_args(parser)
    parser.add_argument("--json", type=Path, default=None, help="write this run's report here")
    parser.add_argument("--csv", type=Path, default=None, help=f"append results here ($BENCH_CSV, {DEFAULT_CSV})")  # fmt: skip
    return parser


def _split_label(spec: str, default: str) -> tuple[str, str]:
    value, _, label = spec.partition("=")
    return value, label or default


def import_variant_dir(path: Path, label: str) -> ModuleType:
    """Import `path/<package>/__init__.py` (or `path/__init__.py`) as a fresh package named `fused_mlp_<label>`."""
    init = path / "__init__.py"
    if not init.is_file():
        (init,) = path.glob("*/__init__.py")
    name = f"fused_mlp_bench_{label.replace('-', '_')}"
    spec = importlib.util.spec_from_file_location(name, init, submodule_search_locations=[str(init.parent)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def load_kernels(args: argparse.Namespace) -> dict[str, ModuleType]:
    """label -> loaded kernel module, in the order given; each module says its backend in `BACKEND`."""
    kernels: dict[str, ModuleType] = {}
    for spec in args.repo:
        repo, label = _split_label(spec, spec.split("/")[-1])
        import registry

        # No speed check: a benchmark times the variant the repo serves first, even one slower than eager.
        kernels[label] = registry.get_kernel(repo, version=1, endpoint=args.hub, check=None, speed_check=None)
    for spec in args.variant_dir:
        path, label = _split_label(spec, Path(spec).name)
        kernels[label] = import_variant_dir(Path(path), label)
    for spec in getattr(args, "set_path", []):
        step, _, impl = spec.partition("=")
        for module in kernels.values():
            if getattr(module, "BACKEND", None) == "cuda":
                getattr(torch.ops, module.OPS_NAMESPACE).cuda_set_path(step, impl)
                print(f"forced: {step} -> {impl}", file=sys.stderr)
    return kernels


def parse_and_load_cuda(
    parser: argparse.ArgumentParser, argv: list[str] | None, tool: str
) -> tuple[argparse.Namespace, str, ModuleType] | None:
    """(args, label, module) of the first loaded stable-ABI CUDA kernel, for the tools that force its C++
    paths; None (said on stderr) when none was loaded."""
    args = parser.parse_args(argv)
    for label, module in load_kernels(args).items():
        if getattr(module, "BACKEND", None) == "cuda":
            return args, label, module
    print(f"{tool} needs a loaded stable-ABI CUDA kernel (BACKEND 'cuda')", file=sys.stderr)
    return None


def describe(kernels: dict[str, ModuleType]) -> dict[str, dict]:
    """What each loaded kernel is: backend, loader info, and the CUDA extension's build info if any."""
    out = {}
    for label, m in kernels.items():
        info = {"backend": getattr(m, "BACKEND", None), "skipped": getattr(m, "BACKEND_SKIPPED", None)}
        kinfo = getattr(m, "__kernel_info__", None)
        if kinfo:
            info.update({k: kinfo.get(k) for k in ("source", "variant", "reason")})
        ns = getattr(torch.ops, m.OPS_NAMESPACE, None) if hasattr(m, "OPS_NAMESPACE") else None
        if info["backend"] == "cuda" and ns is not None:
            info["cuda_build"] = json.loads(ns.cuda_build_info(torch.cuda.current_device()))
        out[label] = info
    return out


# ---- the shape suite and its anchors ---------------------------------------------------------------------


def act(x, activation: str):
    """The activations of the presets, written as a user writes them in PyTorch."""
    if activation == "none":
        return x
    if activation == "gelu_tanh":
        return F.gelu(x, approximate="tanh")
    return {"relu": F.relu, "gelu": F.gelu, "silu": F.silu}[activation](x)


def inputs(
    p: Preset, rows: int, dtype, train: bool = False, device: str = "cuda", last_scale: float = 1.0
) -> dict:
    """Fresh random operands (never zeros) of one block: x [rows, hidden], weights scaled by fan-in^-0.5
    (the last one also by `last_scale`, so a stack of residual blocks stays O(1)), biases; leaves require
    grad for `train`."""

    def rnd(*shape, scale=1.0):
        return (torch.randn(*shape, device=device) * scale).to(dtype).requires_grad_(train)

    shapes = p.weight_shapes
    scales = [k**-0.5 * (last_scale if i == len(shapes) - 1 else 1.0) for i, (_, k) in enumerate(shapes)]
    ws = [rnd(o, k, scale=scale) for (o, k), scale in zip(shapes, scales)]
    bs = [rnd(o, scale=0.1) for o, _ in shapes] if p.bias else []
    return {"x": rnd(rows, p.hidden), "ws": ws, "bs": bs}


def eager(p: Preset, x, ws: list, bs: list):
    """The block in plain PyTorch: what a user writes without our kernel (float64 operands: the reference)."""
    if p.op == "gated_mlp":
        return F.linear(act(F.linear(x, ws[0]), p.activation) * F.linear(x, ws[1]), ws[2])
    for i, w in enumerate(ws):
        x = F.linear(x, w, bs[i] if bs else None)
        x = act(x, p.activation) if i < len(ws) - 1 else x
    return x


def ours(p: Preset, kernel: ModuleType, x, ws: list, bs: list):
    """The block through the public ops of a loaded kernel."""
    if p.op == "gated_mlp":
        return kernel.gated_mlp(x, *ws, p.activation)
    return kernel.mlp(x, ws, bs or None, p.activation)


def cublaslt(p: Preset, x, ws: list, bs: list):
    """cuBLASLt's bias+activation epilogues (`torch._addmm_activation`): plain mlps of relu / gelu_tanh only."""
    for i, (w, b) in enumerate(zip(ws, bs)):
        last = i == len(ws) - 1
        gelu = p.activation != "relu"
        x = torch.addmm(b, x, w.t()) if last else torch._addmm_activation(b, x, w.t(), use_gelu=gelu)
    return x


def liger(p: Preset, x, ws: list, bs: list):
    """Liger-Kernel's fused act*mul between cuBLAS GEMMs, as its LlamaMLP / GemmaMLP do."""
    if p.activation == "silu":
        from liger_kernel.ops.swiglu import LigerSiLUMulFunction as mul
    else:
        from liger_kernel.ops.geglu import LigerGELUMulFunction as mul
    return F.linear(mul.apply(F.linear(x, ws[0]), F.linear(x, ws[1])), ws[2])


def implementations(
    p: Preset, a: dict, kernels: dict, train: bool, compile_modes: Iterable[str] = ("default",)
):
    """impl name -> builder of the forward callable, built lazily (torch.compile compiles when built);
    anchors that do not apply to this block are left out. `eager_cuda_graph` is eager captured by the caller."""
    x, ws, bs = a["x"], a["ws"], a["bs"]

    def compiled(mode):
        def build():
            torch._dynamo.reset()
            return torch.compile(
                lambda: eager(p, x, ws, bs), mode=None if mode == "default" else mode, dynamic=False
            )

        return build

    impls: dict[str, Callable] = {"eager": lambda: lambda: eager(p, x, ws, bs)}
    # use_gelu is the tanh form on CUDA (cuBLASLt's GELU epilogue) but the exact one on a CPU.
    epilogues = ("relu", "gelu_tanh") if x.is_cuda else ("relu",)
    if p.op == "mlp" and p.bias and p.activation in epilogues and not train:
        impls["cublaslt_epilogue"] = lambda: lambda: cublaslt(p, x, ws, bs)
    for mode in compile_modes:
        impls["compile" if mode == "default" else f"compile_{mode.replace('-', '_')}"] = compiled(mode)
    liger_applies = p.op == "gated_mlp" and p.activation in ("silu", "gelu_tanh")
    if liger_applies and importlib.util.find_spec("liger_kernel"):
        impls["liger"] = lambda: lambda: liger(p, x, ws, bs)
    for label, kernel in kernels.items():
        impls[f"ours:{label}"] = lambda kernel=kernel: lambda: ours(p, kernel, x, ws, bs)
    return impls


def reference64(p: Preset, a: dict):
    """The block in float64 on the same operands: what every implementation's error is measured against."""
    d = lambda ts: [t.detach().double() for t in ts]
    return eager(p, a["x"].detach().double(), d(a["ws"]), d(a["bs"]))


def floor_us(case: Case, elem: int) -> float:
    """max(FLOPs / peak FLOP/s, bytes that must move / copy bandwidth) of this GPU, in µs. Bytes: the weights
    once (training: read twice and their gradients written) and the block's input and output per pass."""
    p, f = case.preset, 3 if case.train else 1
    nbytes = f * (p.weight_bytes(elem) + 2 * case.rows * p.hidden * elem)
    peak_flops, peak_bytes = peaks()
    return max(p.flops(case.rows, case.train) / peak_flops, nbytes / peak_bytes) * 1e6


# ---- timing -----------------------------------------------------------------------------------------------


def graphed(fn: Callable[[], object], repeat: int = 1) -> Callable[[], None]:
    """fn captured `repeat` times in one CUDA graph (after a warm-up call on a side stream); returns replay."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(repeat):
            fn()
    return graph.replay


def graphed_or_none(fn: Callable[[], object], repeat: int = 1) -> Callable[[], None] | None:
    """`graphed`, or None when the call cannot be captured (the row then reports no GPU time)."""
    try:
        return graphed(fn, repeat)
    except Exception:  # noqa: BLE001
        torch.cuda.synchronize()
        return None


def _loop_us(fn: Callable[[], object], iters: int, rounds: int, wait_each: bool, warmup: int) -> float:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        if wait_each:
            torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) / iters * 1e6)
        torch.cuda.synchronize()
    return statistics.median(times)


def stream_us(fn: Callable[[], object], iters: int = 100, rounds: int = 5) -> float:
    """Wall µs per call of `iters` back-to-back calls, synchronized at the end; median of `rounds`."""
    return _loop_us(fn, iters, rounds, wait_each=True, warmup=3)


def host_us(fn: Callable[[], object], iters: int = 200, rounds: int = 7) -> float:
    """CPU µs to issue one call: a loop of `iters` calls timed without waiting for the GPU; median of rounds."""
    return _loop_us(fn, iters, rounds, wait_each=False, warmup=5)


def _events_us(
    run: Callable[[], None], per: int, rounds: int, before: Callable[[], None] = lambda: None
) -> float:
    """GPU µs per call between two CUDA events around `run` (which makes `per` calls); median of `rounds`."""
    times = []
    for _ in range(rounds):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        before()
        start.record()
        run()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / per)
    return statistics.median(times)


def stream_gpu_us(fn: Callable[[], object], calls: int = 50, rounds: int = 5) -> float:
    """GPU µs per call of back-to-back calls issued while the GPU is held busy (a sleep kernel first), so the
    host is ahead: the GPU's own time in a stream, launch gaps included, without host cost."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    # ~3 ms at an H200's clock: longer than issuing `calls` calls.
    return _events_us(
        lambda: [fn() for _ in range(calls)], calls, rounds, lambda: torch.cuda._sleep(6_000_000)
    )


def replay_us(replay: Callable[[], None], repeat: int, replays: int = 10) -> float:
    """GPU µs per call of a captured graph of `repeat` calls: the median of `replays` timed replays, after one."""
    replay()
    return _events_us(replay, repeat, replays)


def gpu_us(fn: Callable[[], object], repeat: int = 20, replays: int = 10) -> float | None:
    """GPU µs per call from replaying one graph of `repeat` calls; None if not capturable."""
    replay = graphed_or_none(fn, repeat)
    return None if replay is None else replay_us(replay, repeat, replays)


def median_spread(values: list[float]) -> tuple[float | None, list[float] | None]:
    """(median, [min, max]) of interleaved rounds, or (None, None) when nothing was timed."""
    return (statistics.median(values), [min(values), max(values)]) if values else (None, None)


def rel_err(out, expected) -> float:
    """‖out − expected‖ / ‖expected‖ in float64; NaN propagates (and fails any bound)."""
    return ((out.double() - expected.double()).norm() / expected.double().norm()).item()


# ---- the record of a run ------------------------------------------------------------------------------------


def environment() -> dict:
    """Card, versions and command of this run: every report starts with it."""
    env = {"date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "python": platform.python_version(),
           "command": " ".join(sys.argv), "commit": _commit()}  # fmt: skip
    if torch is not None:
        env.update(torch=torch.__version__, cuda=torch.version.cuda)
        if torch.cuda.is_available():
            env.update(gpu=torch.cuda.get_device_name(), capability=list(torch.cuda.get_device_capability()))
    if importlib.util.find_spec("triton"):
        import triton

        env["triton"] = triton.__version__
    return env


def _commit() -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"], check=False,
                             capture_output=True, text=True)  # fmt: skip
    except OSError:
        return None
    return out.stdout.strip() or None


def write_json(path: Path | None, report: dict) -> None:
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(report, indent=1, default=str))


def hub_token(data: Path, user: str, *options: str, env: dict | None = None) -> str:
    """A token of a new user of the hub whose data folder is `data` (`kernel-hub token create ...options`)."""
    create = [sys.executable, "-m", "registry.cli", "token", "create", "--user", user]
    cmd = [*create, *options, "--data", str(data), "-q"]
    run = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, check=True, env=env)
    return run.stdout.strip()


def save_hub_run(
    bench: str, args: argparse.Namespace, results: dict, metrics: tuple[str, ...], **more
) -> None:
    """A hub benchmark's `results` ({setup: {size or phase: {metric: value}}}): one CSV line per number, and
    with `args.out` the JSON report with the environment, the options and `more`."""
    rows = [{"case": f"{setup} {part}", "impl": setup, **m} for setup, by in results.items()
            for part, m in by.items() if isinstance(m, dict)]  # fmt: skip
    append_csv(bench, rows, ("case",), metrics, getattr(args, "csv", None), gpu=platform.node())
    if getattr(args, "out", None):
        meta = {**environment(), "cpus": os.cpu_count(), "args": {k: str(v) for k, v in vars(args).items()}}
        write_json(args.out, {"meta": {**meta, **more}, "results": results})


def csv_path(path: Path | None = None) -> Path:
    return path or Path(os.environ.get("BENCH_CSV") or DEFAULT_CSV)


def append_csv(bench: str, rows: Iterable[dict], case_keys: tuple[str, ...], metrics: tuple[str, ...],
               path: Path | None = None, gpu: str | None = None) -> Path:  # fmt: skip
    """One CSV line per (row, metric) with a number: case = the row's `case_keys` values joined by spaces,
    impl = its `impl`. Appends (the header once) to `path`, else $BENCH_CSV, else bench/benchmark_data.csv."""
    path = csv_path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    gpu = gpu or environment().get("gpu", platform.node())
    new = not path.exists() or path.stat().st_size == 0
    with path.open("a", newline="") as f:
        out = csv.writer(f)
        if new:
            out.writerow(CSV_COLUMNS)
        for row in rows:
            case = " ".join(str(row[k]) for k in case_keys if row.get(k) is not None)
            for metric in metrics:
                if isinstance(row.get(metric), int | float):
                    out.writerow((stamp, gpu, bench, case, row.get("impl", ""), metric, f"{row[metric]:.6g}"))
    return path


def dtype_of(name: str):
    """torch dtype of `bf16` / `fp16` / `bfloat16` / `float16`."""
    return getattr(torch, DTYPES[name])
