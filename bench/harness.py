"""Shared pieces of the user-path benchmarks (bench_ops.py, bench_model.py, bench_paths.py, host_cost.py):
loading the kernel the way users do, timing, and the run's environment record.

Loading (never from kernel_src): `--hub URL --repo ORG/NAME[=label]` calls `registry.get_kernel` against a
running hub (as a user's code does); `--variant-dir DIR[=label]` imports a built variant directory
(`dist/fused-mlp/build/<variant>`) under a unique module name, as `kernels` does.

Timing (METHOD.md): `stream_us` = wall µs per call of back-to-back async calls (what a Python loop
gets: host and GPU overlap, so it is max(host, GPU) per call); `gpu_us` = GPU µs per call from replaying
one CUDA graph that holds `repeat` calls (no host cost, no launch gaps); `host_us` = CPU µs to issue one
call (loop time without waiting for the GPU, the launch queue absorbing the work). Medians, warm-up first.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import torch

REPO_ROOT = Path(__file__).resolve().parents[1]
# Ceilings measured on the lent cards (the device tool's KINDS.md): bf16 dense 8192^3 matmul on random data and
# a device-to-device copy (bytes read + written). The device tool lends an H100 or an H200 for the same call, so
# a row's floor must be the card's own: an H200 floor on an H100 reads as 70% where the card is at its limit.
PEAKS = {"H200": (788e12, 4.25e12), "H100": (798e12, 3.0e12)}


def peaks(gpu: str | None = None) -> tuple[float, float]:
    """(FLOP/s, bytes/s) ceilings of this GPU (or the one named); the H200's where the card is not listed."""
    name = gpu if gpu is not None else torch.cuda.get_device_name()
    return next((v for k, v in PEAKS.items() if k in name), PEAKS["H200"])


def add_loading_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--hub", help="hub URL to load from with registry.get_kernel (HF_TOKEN for auth)")
    parser.add_argument(
        "--repo", action="append", default=[], help="ORG/NAME[=label] to load from --hub (repeatable)"
    )
    parser.add_argument(
        "--variant-dir",
        action="append",
        default=[],
        help="built variant dir DIR[=label] to import (repeatable)",
    )
    parser.add_argument(
        "--set-path",
        action="append",
        default=[],
        metavar="STEP=IMPL",
        help="force a step of every loaded stable-ABI CUDA kernel for the whole run (cuda_set_path), e.g. "
        "chain_backward=layers: an A/B of one implementation on one build, run as two processes (repeatable)",
    )


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
        sys.path.insert(0, str(REPO_ROOT))
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


def load_cuda_kernel(args: argparse.Namespace, tool: str) -> tuple[str, ModuleType] | None:
    """(label, module) of the first loaded kernel running the stable-ABI CUDA backend (BACKEND 'cuda'), for the
    tools that force its C++ paths; None, after saying so on stderr, when none was loaded."""
    for label, module in load_kernels(args).items():
        if getattr(module, "BACKEND", None) == "cuda":
            return label, module
    print(f"{tool} needs a loaded stable-ABI CUDA kernel (BACKEND 'cuda')", file=sys.stderr)
    return None


def tool_parser(doc: str) -> argparse.ArgumentParser:
    """The argument parser every benchmark tool starts from: the loading options and --json OUT."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    add_loading_args(parser)
    parser.add_argument("--json", type=Path, default=None)
    return parser


def parse_and_load_cuda(
    parser: argparse.ArgumentParser, argv: list[str] | None, tool: str
) -> tuple[argparse.Namespace, str, ModuleType] | None:
    """(args, label, module) for the tools that force the stable-ABI kernel's C++ paths; None (said on stderr)
    when no such kernel was loaded."""
    args = parser.parse_args(argv)
    loaded = load_cuda_kernel(args, tool)
    return None if loaded is None else (args, *loaded)


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


def stream_us(fn: Callable[[], object], iters: int = 100, rounds: int = 5) -> float:
    """Wall µs per call of `iters` back-to-back calls, synchronized at the end; median of `rounds`."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) / iters * 1e6)
    return statistics.median(times)


def host_us(fn: Callable[[], object], iters: int = 200, rounds: int = 7) -> float:
    """CPU µs to issue one call: a loop of `iters` calls timed without waiting for the GPU; median of rounds."""
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        times.append((time.perf_counter() - t0) / iters * 1e6)
        torch.cuda.synchronize()
    return statistics.median(times)


def stream_gpu_us(fn: Callable[[], object], calls: int = 50, rounds: int = 5) -> float:
    """GPU µs per call of back-to-back calls issued while the GPU is held busy (a 3 ms sleep kernel first),
    so the host is ahead: the GPU's own time in a stream, launch gaps included, without host cost."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(rounds):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(6_000_000)  # ~3 ms at the H200's clock: longer than issuing `calls` calls
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / calls)
    return statistics.median(times)


def gpu_us(fn: Callable[[], object], repeat: int = 20, replays: int = 10) -> float | None:
    """GPU µs per call from replaying one graph of `repeat` calls (CUDA events); None if not capturable."""
    try:
        replay = graphed(fn, repeat)
    except Exception:  # noqa: BLE001  (not capturable: the row says so with None)
        torch.cuda.synchronize()
        return None
    return replay_us(replay, repeat, replays)


def replay_us(replay: Callable[[], None], repeat: int, replays: int = 10) -> float:
    """GPU µs per call of a captured graph of `repeat` calls: the median of `replays` timed replays, after one."""
    replay()
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / repeat)
    return statistics.median(times)


def rel_err(out: torch.Tensor, expected: torch.Tensor) -> float:
    """‖out − expected‖ / ‖expected‖ in float64; NaN propagates (and fails any bound)."""
    return ((out.double() - expected.double()).norm() / expected.double().norm()).item()


def environment() -> dict:
    import triton

    return {
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "gpu": torch.cuda.get_device_name(),
        "capability": list(torch.cuda.get_device_capability()),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "command": " ".join(sys.argv),
    }


def write_json(path: Path | None, report: dict) -> None:
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(report, indent=1, default=str))
