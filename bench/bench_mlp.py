"""Kernel-developer benchmark of the Triton backend in kernel_src (JIT), and its tile-config tuning.

What users get (a built variant, loaded with get_kernel) is measured by bench/bench_ops.py and
bench/bench_model.py; this file times kernel_src's Triton kernels next to the same anchors while they are
being developed. Implementations: eager PyTorch, cuBLASLt epilogue (`torch._addmm_activation`), eager inside
a CUDA graph, torch.compile (default; max-autotune with --max-autotune), Liger-Kernel (when importable), and
ours (the Triton backend's ops, launched from Python, and inside a user-captured CUDA graph).
Reports µs per forward in a stream of async calls (what a host loop gets), GPU µs per forward (replay of
a captured graph of 20 forwards), % of the floor = max(FLOPs / peak, bytes / bandwidth) of the card (harness.peaks) and GPU
kernels per forward; writes everything as JSON.

    python bench/bench_mlp.py --out bench.json [--dtypes bf16,fp16] [--max-autotune] [--tune]

--tune first measures candidate tile configs per GEMM problem (GPU time, do_bench), applies the best
ones to this process, and records them in the JSON (copy them into kernel_src/fused_mlp/triton/configs.py).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "kernel_src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import fused_mlp
import harness
from fused_mlp import reference as ref
from fused_mlp.triton import ops as triton_ops  # "ours" = the Triton backend, whichever one fused_mlp picked

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass(frozen=True)
class Workload:
    name: str
    kind: str  # mlp | gated | act_and_mul
    rows: int
    dims: tuple[int, ...]
    goal_us: float | None

    def flops_bytes(self, elem: int) -> tuple[float, float]:
        M = self.rows
        if self.kind == "mlp":
            (d,) = self.dims
            return 2 * M * d * d * 3, elem * (2 * M * d + 3 * d * d + 3 * d)
        if self.kind == "gated":
            h, i = self.dims
            return 6 * M * h * i, elem * (2 * M * h + 3 * h * i)
        (i,) = self.dims
        return 5 * M * i, elem * 3 * M * i

    def floor_us(self, elem: int) -> float:
        flops, nbytes = self.flops_bytes(elem)
        peak_flops, peak_bytes = harness.peaks()
        return max(flops / peak_flops, nbytes / peak_bytes) * 1e6


WORKLOADS = (
    Workload("mlp 3xLinear(1024)+ReLU M=1024", "mlp", 1024, (1024,), 12),
    Workload("mlp 3xLinear(1024)+ReLU M=16", "mlp", 16, (1024,), 8),
    Workload("mlp 3xLinear(1024)+ReLU M=8192", "mlp", 8192, (1024,), 75),
    Workload("gated_mlp GeGLU-tanh H=768 I=3072 M=8192", "gated", 8192, (768, 3072), 170),
    Workload("gated_mlp GeGLU-tanh H=768 I=3072 M=1024", "gated", 1024, (768, 3072), 30),
    Workload("act_and_mul gelu_tanh [8192,3072]", "act_and_mul", 8192, (3072,), 38),
)


def make_inputs(w: Workload, dtype: torch.dtype) -> dict:
    g = torch.Generator(device="cuda").manual_seed(0)

    def rnd(*shape, scale=1.0):
        return (torch.randn(*shape, device="cuda", generator=g) * scale).to(dtype)

    if w.kind == "mlp":
        (d,) = w.dims
        return {
            "x": rnd(w.rows, d),
            "ws": [rnd(d, d, scale=d**-0.5) for _ in range(3)],
            "bs": [rnd(d) for _ in range(3)],
        }
    if w.kind == "gated":
        h, i = w.dims
        return {"x": rnd(w.rows, h), "wg": rnd(i, h, scale=h**-0.5), "wu": rnd(i, h, scale=h**-0.5),
                "wd": rnd(h, i, scale=i**-0.5)}  # fmt: skip
    (i,) = w.dims
    return {"gate": rnd(w.rows, i), "up": rnd(w.rows, i)}


def eager_fn(w: Workload, a: dict) -> Callable[[], torch.Tensor]:
    if w.kind == "mlp":
        return lambda: ref.mlp(a["x"], a["ws"], a["bs"], "relu")
    if w.kind == "gated":
        return lambda: ref.gated_mlp(a["x"], a["wg"], a["wu"], a["wd"], "gelu_tanh")
    return lambda: ref.act_and_mul(a["gate"], a["up"], "gelu_tanh")


def cublaslt_fn(w: Workload, a: dict) -> Callable[[], torch.Tensor] | None:
    if w.kind != "mlp":
        return None
    ws, bs = a["ws"], a["bs"]

    def run():
        h = torch._addmm_activation(bs[0], a["x"], ws[0].t())
        h = torch._addmm_activation(bs[1], h, ws[1].t())
        return torch.addmm(bs[2], h, ws[2].t())

    return run


def liger_fn(w: Workload, a: dict) -> Callable[[], torch.Tensor] | None:
    if w.kind == "mlp":
        return None
    from liger_kernel.ops.geglu import LigerGELUMulFunction

    if w.kind == "gated":
        return lambda: F.linear(
            LigerGELUMulFunction.apply(F.linear(a["x"], a["wg"]), F.linear(a["x"], a["wu"])), a["wd"]
        )
    return lambda: LigerGELUMulFunction.apply(a["gate"], a["up"])


def ours_fn(w: Workload, a: dict, ops=triton_ops) -> Callable[[], torch.Tensor]:
    """One forward of the workload through a backend's `ops` module (the Triton one by default)."""
    if w.kind == "mlp":
        return lambda: ops.mlp(a["x"], a["ws"], a["bs"], "relu")
    if w.kind == "gated":
        return lambda: ops.gated_mlp(a["x"], a["wg"], a["wu"], a["wd"], "gelu_tanh")
    return lambda: ops.act_and_mul(a["gate"], a["up"], "gelu_tanh")


def stream_us(fn: Callable, iters: int) -> float:
    """µs per call of fn issued back to back (host and GPU overlap), median of 5 rounds."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    rounds = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
        rounds.append((time.perf_counter() - t0) / iters * 1e6)
    return statistics.median(rounds)


def gpu_us(fn: Callable[[], torch.Tensor], repeat: int = 20) -> float | None:
    """GPU µs per call: replay of one graph holding `repeat` calls, timed with events (median of 10)."""
    try:
        replay = harness.graphed(fn, repeat)
    except Exception:  # noqa: BLE001  (not capturable, or the candidate does not compile/fit)
        return None
    replay()
    times = []
    for _ in range(10):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / repeat)
    return statistics.median(times)


def kernels_per_call(fn: Callable) -> int:
    """GPU kernels one warm call launches, from the profiler."""
    fn()
    torch.cuda.synchronize()
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)


def check(out: torch.Tensor, expected: torch.Tensor) -> float:
    return ((out.double() - expected.double()).norm() / expected.double().norm()).item()


def implementations(w: Workload, a: dict, max_autotune: bool) -> dict[str, Callable[[], Callable | None]]:
    """name -> builder of the callable to time (builders run lazily so one failure stays local)."""
    eager = eager_fn(w, a)

    def compiled(mode):
        def build():
            torch._dynamo.reset()
            return torch.compile(eager_fn(w, a), mode=mode)

        return build

    def ours_graph_without_pdl():
        from fused_mlp.triton import configs

        configs.PDL_ENABLED = False
        try:
            return harness.graphed(ours_fn(w, a))
        finally:
            configs.PDL_ENABLED = True

    impls = {
        "eager": lambda: eager,
        "cublaslt_epilogue": lambda: cublaslt_fn(w, a),
        "eager_cuda_graph": lambda: harness.graphed(eager),
        "compile": compiled(None),
    }
    if max_autotune:
        impls["compile_max_autotune"] = compiled("max-autotune")
    impls["liger"] = lambda: liger_fn(w, a)
    impls["ours"] = lambda: ours_fn(w, a)
    impls["ours_in_user_graph"] = lambda: harness.graphed(ours_fn(w, a))
    if w.kind != "act_and_mul":
        impls["ours_in_user_graph_no_pdl"] = ours_graph_without_pdl
    return impls


def bench_workload(w: Workload, dtype: torch.dtype, max_autotune: bool) -> list[dict]:
    a = make_inputs(w, dtype)
    elem = torch.empty((), dtype=dtype).element_size()
    floor = w.floor_us(elem)
    expected = eager_fn(w, a)()
    iters = 200 if w.rows <= 1024 else 50
    rows = []
    for name, build in implementations(w, a, max_autotune).items():
        row = {"workload": w.name, "dtype": str(dtype).removeprefix("torch."), "impl": name, "floor_us": floor,
               "goal_us": w.goal_us}  # fmt: skip
        try:
            fn = build()
            if fn is None:
                continue
            with torch.no_grad():
                out = fn()
                if isinstance(out, torch.Tensor):
                    row["rel_err_vs_eager"] = check(out, expected)
                row["stream_us"] = stream_us(fn, iters)
                replays_graph = name == "eager_cuda_graph" or "_in_user_graph" in name
                if replays_graph:
                    row["gpu_us"] = row["stream_us"]
                elif not name.startswith("compile"):
                    row["gpu_us"] = gpu_us(fn)
                row["kernels_per_call"] = kernels_per_call(fn)
            row["pct_of_floor"] = 100 * floor / row["stream_us"]
        except Exception as exc:  # noqa: BLE001  (one implementation failing must not stop the table)
            row["error"] = f"{type(exc).__name__}: {exc}"[:400]
            traceback.print_exc()
        rows.append(row)
        print(format_row(row), flush=True)
    return rows


def format_row(r: dict) -> str:
    if "error" in r:
        return f"{r['workload']:<44} {r['dtype']:<9} {r['impl']:<22} ERROR {r['error'][:120]}"
    gpu = r.get("gpu_us")
    return (f"{r['workload']:<44} {r['dtype']:<9} {r['impl']:<22} {r['stream_us']:9.1f} us  "
            f"gpu {gpu if gpu is None else round(gpu, 1)!s:>7}  floor {r['floor_us']:6.1f}  "
            f"{r['pct_of_floor']:5.1f}% of floor  kernels {r.get('kernels_per_call')}  "
            f"err {r.get('rel_err_vs_eager', float('nan')):.1e}")  # fmt: skip


# ---- tile-config tuning ------------------------------------------------------------------------------

SMALL = [
    (16, 16, 256, 4, 4),
    (16, 32, 256, 4, 4),
    (16, 32, 128, 4, 4),
    (16, 64, 128, 4, 4),
    (32, 32, 128, 4, 4),
]
MID = [
    (64, 128, 64, 4, 4),
    (128, 128, 64, 8, 3),
    (64, 64, 128, 4, 4),
    (128, 64, 64, 4, 4),
    (64, 128, 128, 4, 3),
]
LARGE = [
    (128, 256, 64, 8, 3),
    (128, 128, 64, 8, 3),
    (128, 128, 64, 4, 4),
    (256, 128, 64, 8, 3),
    (128, 256, 64, 8, 4),
]
GATED_LARGE = [
    (128, 128, 64, 8, 3),
    (128, 64, 64, 4, 4),
    (64, 128, 64, 4, 4),
    (128, 128, 64, 8, 4),
    (256, 64, 64, 8, 3),
]
GATED_MID = [
    (64, 128, 64, 4, 4),
    (64, 64, 64, 4, 4),
    (128, 64, 64, 4, 4),
    (128, 128, 64, 8, 3),
    (64, 128, 64, 8, 3),
]
GATED_SMALL = [(16, 32, 256, 4, 4), (16, 64, 128, 4, 4), (16, 32, 128, 4, 4), (16, 16, 256, 4, 4)]

# (table, row bound it tunes, candidates, problems (M, N, K) that bound must serve)
TUNE_PLAN = (
    ("LINEAR", 16, SMALL, [(16, 1024, 1024), (16, 768, 3072)]),
    ("LINEAR", 64, SMALL + MID[:2], [(64, 1024, 1024)]),
    ("LINEAR", 1024, MID + LARGE[:2], [(1024, 1024, 1024), (1024, 768, 3072)]),
    ("LINEAR", None, LARGE, [(8192, 1024, 1024), (8192, 768, 3072)]),
    ("GATE_UP", 16, GATED_SMALL, [(16, 3072, 768)]),
    ("GATE_UP", 1024, GATED_MID, [(1024, 3072, 768)]),
    ("GATE_UP", None, GATED_LARGE, [(8192, 3072, 768)]),
)


def _time_candidate(run: Callable[[], object]) -> float:
    """GPU µs per call (graph replay, so host launch cost does not hide the kernel); inf if it fails."""
    us = gpu_us(run)
    return float("inf") if us is None else us


def tune(dtype: torch.dtype) -> list[dict]:
    """Measure each candidate on each problem of its bound; apply the best (least summed GPU time)."""
    from fused_mlp.triton import configs, forward

    arch = forward.device_arch(torch.empty(1, device="cuda"))
    results = []
    for table_name, bound, candidates, problems in TUNE_PLAN:
        totals = {}
        for cand in candidates:
            cfg = configs.GemmConfig(cand[0], cand[1], cand[2], 8, cand[3], cand[4])
            total = 0.0
            for M, N, K in problems:
                x = torch.randn(M, K, device="cuda", dtype=dtype)
                wa = torch.randn(N, K, device="cuda", dtype=dtype) * K**-0.5
                wb = torch.randn(N, K, device="cuda", dtype=dtype) * K**-0.5
                bias = torch.randn(N, device="cuda", dtype=dtype)
                out = torch.empty(M, N, device="cuda", dtype=dtype)
                if table_name == "LINEAR":
                    total += _time_candidate(lambda: forward.linear_rows(x, wa, bias, "relu", out, cfg))  # noqa: B023
                else:
                    total += _time_candidate(lambda: forward.gate_up_rows(x, wa, wb, "gelu_tanh", out, cfg))  # noqa: B023
            totals[cfg] = total
            results.append({"table": table_name, "bound": bound, "config": list(cand), "gpu_us": total,
                            "problems": problems})  # fmt: skip
        best = min(totals, key=totals.get)
        print(f"tune {table_name} rows<={bound}: best {best} {totals[best]:.1f} us", flush=True)
        table = getattr(configs, table_name)
        table[arch] = tuple((b, best if b == bound else c) for b, c in table.get(arch, table["default"]))
        results.append({"table": table_name, "bound": bound, "best": [best.BM, best.BN, best.BK, best.num_warps,
                                                                      best.num_stages]})  # fmt: skip
    gate, up = (torch.randn(8192, 3072, device="cuda", dtype=dtype) for _ in range(2))
    timings = {}
    for block, warps in ((1024, 4), (2048, 8), (4096, 8), (8192, 8), (4096, 16), (8192, 16)):
        configs.ELEMENTWISE[arch] = configs.ElementwiseConfig(block, warps)
        timings[(block, warps)] = _time_candidate(lambda: forward.act_and_mul(gate, up, "gelu_tanh"))
        results.append({"table": "ELEMENTWISE", "config": [block, warps], "gpu_us": timings[(block, warps)]})
    best_block, best_warps = min(timings, key=timings.get)
    configs.ELEMENTWISE[arch] = configs.ElementwiseConfig(best_block, best_warps)
    print(
        f"tune ELEMENTWISE: best BLOCK={best_block} warps={best_warps} {timings[(best_block, best_warps)]:.1f} us"
    )
    return results


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
        "fused_mlp_backend": fused_mlp.BACKEND,
        "aot_cubins_for_this_gpu": _aot_count(),
    }


def _aot_count() -> int:
    from fused_mlp.triton import aot

    return len(aot._device_index(torch.device("cuda")))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("bench_mlp.json"))
    parser.add_argument("--dtypes", default="bf16,fp16", help="comma list of bf16, fp16")
    parser.add_argument(
        "--max-autotune", action="store_true", help="also time torch.compile(mode='max-autotune')"
    )
    parser.add_argument("--tune", action="store_true", help="measure tile configs first and use the best")
    parser.add_argument("--only", default="", help="substring filter on workload names")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_mlp needs a CUDA GPU", file=sys.stderr)
        return 2
    report = {"environment": environment(), "tuning": [], "rows": []}
    print(json.dumps(report["environment"]))
    dtypes = [DTYPES[d] for d in args.dtypes.split(",")]
    if args.tune:
        report["tuning"] = tune(dtypes[0])
    for dtype in dtypes:
        for w in WORKLOADS:
            if args.only in w.name:
                report["rows"].extend(bench_workload(w, dtype, args.max_autotune))
                args.out.write_text(json.dumps(report, indent=1, default=str))
    args.out.write_text(json.dumps(report, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
