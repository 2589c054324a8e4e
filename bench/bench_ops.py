"""Op-level benchmark of what users get: every implementation of every workload, side by side, in one run.

Implementations: ours (each loaded kernel, e.g. the stable-ABI CUDA variant and the torch-cuda Triton
variant, as `get_kernel` or a built variant dir gives them; see harness.py), eager PyTorch, eager inside a
CUDA graph, cuBLASLt epilogues (`torch._addmm_activation`), torch.compile (default; max-autotune only on
the rows in MAX_AUTOTUNE_ROWS: it autotunes every GEMM for minutes), Liger (when importable), and the
floor = max(FLOPs / peak, bytes / bandwidth) of the card (harness.peaks: H200 788 TFLOP/s, 4.25 TB/s; H100 798, 3.0). Each row: wall µs per call in a stream of calls and
GPU µs per call replayed in a graph (medians of interleaved rounds), and the relative error against float64.
`cublas_gemms_only` (the workload's GEMMs alone, by cuBLAS) is the reference of the %-of-cuBLAS column.

    python bench/bench_ops.py --variant-dir dist/fused-mlp/build/<variant>=label ... --json out.json
    python bench/bench_ops.py --hub URL --repo acme/fused-mlp=cuda --repo acme/fused-mlp-triton=triton ...
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
import harness

# The standard workloads: one list for this benchmark, `kernel-hub bench` and the loader's speed check.
from registry.client.workloads import WORKLOADS, Workload, api_forward, as_call, make_inputs

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


# What users already have: the implementations ours must beat (cublas_gemms_only is a reference, not one).
ANCHORS = ("eager", "eager_cuda_graph", "cublaslt_epilogue", "compile", "compile_max_autotune", "liger")

# torch.compile(mode="max-autotune") only here: it autotunes each GEMM shape (minutes of device time).
MAX_AUTOTUNE_ROWS = ("gated GeGLU-tanh H=768 I=3072 M=8192",)


def floor_us(w: Workload, elem: int) -> float:
    """max(FLOPs / peak FLOP/s, bytes / peak bandwidth) of this GPU in µs (harness.peaks)."""
    flops, nbytes = w.flops_bytes(elem)
    peak_flops, peak_bytes = harness.peaks()
    return max(flops / peak_flops, nbytes / peak_bytes) * 1e6


def eager_forward(w: Workload, a: dict) -> torch.Tensor:
    """Plain PyTorch: what a user writes without our kernel."""
    if w.kind == "mlp":
        h = a["x"]
        for i, (wt, b) in enumerate(zip(a["ws"], a["bs"])):
            h = F.linear(h, wt, b)
            h = F.relu(h) if i < 2 else h
        return h
    if w.kind == "gated":
        g = F.gelu(F.linear(a["x"], a["wg"]), approximate="tanh")
        return F.linear(g * F.linear(a["x"], a["wu"]), a["wd"])
    return F.gelu(a["gate"], approximate="tanh") * a["up"]


def cublaslt_forward(w: Workload, a: dict) -> torch.Tensor | None:
    if w.kind != "mlp":
        return None
    ws, bs = a["ws"], a["bs"]
    h = torch._addmm_activation(bs[0], a["x"], ws[0].t())
    h = torch._addmm_activation(bs[1], h, ws[1].t())
    return torch.addmm(bs[2], h, ws[2].t())


def liger_forward(w: Workload, a: dict) -> torch.Tensor | None:
    if w.kind == "mlp":
        return None
    from liger_kernel.ops.geglu import LigerGELUMulFunction

    if w.kind == "gated":
        return F.linear(
            LigerGELUMulFunction.apply(F.linear(a["x"], a["wg"]), F.linear(a["x"], a["wu"])), a["wd"]
        )
    return LigerGELUMulFunction.apply(a["gate"], a["up"])


def reference64(w: Workload, a: dict) -> torch.Tensor:
    a64 = {
        k: ([t.detach().double() for t in v] if isinstance(v, list) else v.detach().double())
        for k, v in a.items()
    }
    return eager_forward(w, a64)


def implementations(
    w: Workload, a: dict, kernels: dict, max_autotune: bool, skip: set[str]
) -> dict[str, Callable]:
    """impl name -> builder of the forward callable (None: not applicable); builders run lazily."""

    def compiled(mode):
        def build():
            torch._dynamo.reset()
            fn = torch.compile(lambda: eager_forward(w, a), mode=mode, dynamic=False)
            return fn

        return build

    impls: dict[str, Callable] = {
        "eager": lambda: lambda: eager_forward(w, a),
        "cublaslt_epilogue": lambda: (
            (lambda: cublaslt_forward(w, a)) if w.kind == "mlp" and not w.train else None
        ),
        "compile": compiled(None),
    }
    if max_autotune and w.name in MAX_AUTOTUNE_ROWS:
        impls["compile_max_autotune"] = compiled("max-autotune")
    impls["liger"] = lambda: (lambda: liger_forward(w, a)) if w.kind != "mlp" else None
    for label, kernel in kernels.items():
        impls[f"ours:{label}"] = lambda kernel=kernel: lambda: api_forward(w, a, kernel)
    return {name: build for name, build in impls.items() if name not in skip}


def cublas_gemms(w: Workload, a: dict) -> Callable[[], object] | None:
    """The workload's GEMMs alone, by cuBLAS (`torch.mm`: no bias, activation or elementwise pass), on
    fresh operands of the same shapes; forward+backward adds each layer's dgrad and wgrad GEMM. Not an
    anchor (it does not compute the workload): the reference of the %-of-cuBLAS column."""
    if w.kind == "act_and_mul":
        return None
    m, s, dt = w.rows, w.shape, a["x"].dtype
    if w.kind == "mlp":
        dims = [(s[0], s[0])] * 3  # (N, K) per layer
    else:
        h, i = s
        dims = [(2 * i, h), (h, i)]  # [gate; up] as one GEMM, then down
    layers = [(torch.randn(m, k, device="cuda", dtype=dt), torch.randn(n, k, device="cuda", dtype=dt) * k**-0.5,
               torch.randn(m, n, device="cuda", dtype=dt)) for n, k in dims]  # fmt: skip

    def run():
        out = None
        for x, wt, dy in layers:
            out = torch.mm(x, wt.t())
            if w.train:
                torch.mm(dy, wt)
                torch.mm(dy.t(), x)
        return out

    return run


def bench_workload(
    w: Workload, dtype: torch.dtype, kernels: dict, max_autotune: bool, skip: set[str], rounds: int = 5
) -> list[dict]:
    """Every implementation of `w`, prepared first (built, checked against float64, captured), then timed in
    `rounds` interleaved rounds, each in a rotated order: the GPU's clocks drift with heat over a run (up to
    15% on the H200, bench/RESULTS.md session 26), so timing one implementation after another would favour
    whichever runs first. Each number is the median of the rounds; `*_spread` keeps their min and max."""
    torch.manual_seed(0)
    a = make_inputs(w, dtype)
    elem = torch.empty((), dtype=dtype).element_size()
    expected = reference64(w, a)
    iters, repeat = (100 if w.rows <= 1024 else 30), 20
    done, timed = [], []  # rows with an error or nothing to time; (row, call, replay or None) to time
    builders = implementations(w, a, kernels, max_autotune, skip)
    if "cublas_gemms_only" not in skip and not max_autotune:
        builders["cublas_gemms_only"] = lambda: cublas_gemms(w, a)
    for name, build in builders.items():
        row = {"workload": w.name, "dtype": str(dtype).removeprefix("torch."), "impl": name,
               "floor_us": floor_us(w, elem)}  # fmt: skip
        t0 = time.perf_counter()
        try:
            forward = build()
            if forward is None:
                continue
            if name == "cublas_gemms_only":
                call = forward
            else:
                if not w.train:
                    with torch.no_grad():
                        row["rel_err"] = harness.rel_err(forward(), expected)
                call = as_call(w, a, forward)
            replay = _graphed_or_none(call, repeat)
            timed.append((row, call, replay))
            if name == "eager":  # the same forward captured once by the user: its replay is both numbers
                timed.append(
                    ({**row, "impl": "eager_cuda_graph", "same_gpu_as": "eager"}, harness.graphed(call), None)
                )
        except Exception as exc:  # noqa: BLE001  (one implementation failing must not stop the table)
            row["error"] = f"{type(exc).__name__}: {exc}"[:400]
            traceback.print_exc()
            done.append(row)
        row["seconds"] = round(time.perf_counter() - t0, 2)
    walls: dict[int, list[float]] = {id(r): [] for r, _, _ in timed}
    gpus: dict[int, list[float]] = {id(r): [] for r, _, _ in timed}
    for r in range(rounds if timed else 0):
        shift = r % len(timed)
        order = timed[shift:] + timed[:shift]
        # Graph replays in a pass of their own, before the wall loops, so each follows GPU-bound work: timed
        # right after its own wall loop, a host-bound implementation's replay started on a GPU that had idled
        # half the time (H100, session 32: the torch-cuda fallback 21 µs ahead of the stable-ABI variant in the
        # gated training row, level with it in back-to-back graphs of the same kernels).
        for row, _, replay in order:
            if replay is not None:
                gpus[id(row)].append(harness.replay_us(replay, repeat, replays=3))
        for row, call, _ in order:
            walls[id(row)].append(harness.stream_us(call, iters, rounds=1))
    by_impl = {row["impl"]: row for row, _, _ in timed}
    for row, _, _ in timed:
        row["wall_us"], row["wall_spread"] = _median_spread(walls[id(row)])
        source = by_impl[row.pop("same_gpu_as")] if "same_gpu_as" in row else row
        row["gpu_us"], row["gpu_spread"] = _median_spread(gpus[id(source)])
        row["rounds"] = rounds
        print(format_row(row), flush=True)
    torch.cuda.synchronize()
    return [row for row, _, _ in timed] + done


def _graphed_or_none(call: Callable[[], object], repeat: int) -> Callable[[], None] | None:
    """`repeat` calls captured in one CUDA graph (its replay), or None when the call cannot be captured."""
    try:
        return harness.graphed(call, repeat)
    except Exception:  # noqa: BLE001  (not capturable: the row reports no GPU time)
        torch.cuda.synchronize()
        return None


def _median_spread(values: list[float]) -> tuple[float | None, list[float] | None]:
    if not values:
        return None, None
    return statistics.median(values), [min(values), max(values)]


def format_row(r: dict) -> str:
    if "error" in r:
        return f"{r['workload']:<46} {r['impl']:<22} ERROR {r['error'][:100]}"
    # No rel_err: a training row (tests/cuda checks its gradients).
    gpu, err = r.get("gpu_us"), r.get("rel_err")
    return (f"{r['workload']:<46} {r['dtype']:<8} {r['impl']:<22} wall {r['wall_us']:8.1f}  gpu "
            f"{'-' if gpu is None else f'{gpu:8.1f}'}  floor {r['floor_us']:6.1f}  err {'-' if err is None else f'{err:.1e}'}")  # fmt: skip


def table(rows: list[dict]) -> str:
    """Markdown: one line per workload, one column per implementation, `wall / gpu` µs; then, per loaded
    kernel of ours, its GPU time as % of the workload's cuBLAS GEMMs alone and % of the floor (100% = at the
    reference; above 100% = faster than it), and the fastest anchor's GPU time."""
    impls = list(dict.fromkeys(r["impl"] for r in rows))
    ours = [i for i in impls if i.startswith("ours:")]
    extra = [f"{i}: % of cuBLAS GEMMs / % of floor" for i in ours] + ["best anchor (GPU)"]
    out = ["| workload | dtype | " + " | ".join(impls + ["floor"] + extra) + " |",
           "|---" * (len(impls) + len(extra) + 3) + "|"]  # fmt: skip
    for key in dict.fromkeys((r["workload"], r["dtype"]) for r in rows):
        by = {r["impl"]: r for r in rows if (r["workload"], r["dtype"]) == key and "error" not in r}
        cells = []
        for i in impls:
            r = by.get(i)
            if r is None:
                failed = any(x["impl"] == i and (x["workload"], x["dtype"]) == key for x in rows)
                cells.append("error" if failed else "–")
            else:
                gpu = r.get("gpu_us")
                cells.append(f"{r['wall_us']:.1f} / {'–' if gpu is None else f'{gpu:.1f}'}")
        floor = next(r["floor_us"] for r in rows if (r["workload"], r["dtype"]) == key)
        cells.append(f"{floor:.1f}")
        ref = (by.get("cublas_gemms_only") or {}).get("gpu_us")
        for i in ours:
            gpu = (by.get(i) or {}).get("gpu_us")
            pct_cublas = f"{100 * ref / gpu:.0f}%" if gpu and ref else "–"
            cells.append(f"{pct_cublas} / {100 * floor / gpu:.0f}%" if gpu else "–")
        anchors = {i: r["gpu_us"] for i, r in by.items()
                   if i in ANCHORS and r.get("gpu_us") is not None}  # fmt: skip
        best = min(anchors, key=anchors.get) if anchors else None
        cells.append(f"{best} {anchors[best]:.1f}" if best else "–")
        out.append(f"| {key[0]} | {key[1]} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    harness.add_loading_args(parser)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--dtypes", default="bf16")
    parser.add_argument(
        "--only", action="append", default=[], help="substring filter on workload names (repeat: any of them)"
    )
    parser.add_argument(
        "--max-autotune", action="store_true", help=f"also compile max-autotune on {MAX_AUTOTUNE_ROWS}"
    )
    parser.add_argument(
        "--skip", default="", help="comma list of implementations to leave out (e.g. compile)"
    )
    parser.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds per workload")
    args = parser.parse_args(argv)
    kernels = harness.load_kernels(args)
    report = {"environment": harness.environment(), "kernels": harness.describe(kernels),
              "max_autotune_rows": list(MAX_AUTOTUNE_ROWS) if args.max_autotune else [], "rows": []}  # fmt: skip
    skip = set(args.skip.split(","))
    dtypes = [DTYPES[d] for d in args.dtypes.split(",")]

    def wanted(name: str) -> bool:
        return not args.only or any(part in name for part in args.only)

    for dtype in dtypes:
        for w in WORKLOADS:
            if wanted(w.name):
                report["rows"] += bench_workload(w, dtype, kernels, False, skip, args.rounds)
                harness.write_json(args.json, report)
    # max-autotune last: it takes the longest, and every other row is in the JSON before it starts.
    others = {"eager", "cublaslt_epilogue", "compile", "liger"}
    for dtype in dtypes if args.max_autotune else []:
        for w in WORKLOADS:
            if w.name in MAX_AUTOTUNE_ROWS and wanted(w.name):
                report["rows"] += bench_workload(w, dtype, {}, True, skip | others, args.rounds)
                harness.write_json(args.json, report)
    print(table(report["rows"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
