"""Op-level benchmark of what users get: every implementation of every workload, side by side, in one run.

Implementations: ours (each loaded kernel, e.g. the stable-ABI CUDA variant and the torch-cuda Triton
variant, as `get_kernel` or a built variant dir gives them; see harness.py), eager PyTorch, eager inside a
CUDA graph, cuBLASLt epilogues (`torch._addmm_activation`), torch.compile (default; max-autotune only on
the rows in MAX_AUTOTUNE_ROWS: it autotunes every GEMM for minutes), Liger (when importable), and the
floor = max(FLOPs / 788 TFLOP/s, bytes / 4.25 TB/s). Each row: wall µs per call in a stream of calls and
GPU µs per call replayed in a graph, and the relative error against float64.

    python bench/bench_ops.py --variant-dir dist/fused-mlp/build/<variant>=label ... --json out.json
    python bench/bench_ops.py --hub URL --repo acme/fused-mlp=cuda --repo acme/fused-mlp-triton=triton ...
"""

from __future__ import annotations

import argparse
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


# torch.compile(mode="max-autotune") only here: it autotunes each GEMM shape (minutes of device time).
MAX_AUTOTUNE_ROWS = ("gated GeGLU-tanh H=768 I=3072 M=8192",)


def floor_us(w: Workload, elem: int) -> float:
    """max(FLOPs / peak FLOP/s, bytes / peak bandwidth) of the H200 in µs."""
    flops, nbytes = w.flops_bytes(elem)
    return max(flops / harness.PEAK_FLOPS, nbytes / harness.PEAK_BYTES) * 1e6


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


def bench_workload(
    w: Workload, dtype: torch.dtype, kernels: dict, max_autotune: bool, skip: set[str]
) -> list[dict]:
    torch.manual_seed(0)
    a = make_inputs(w, dtype)
    elem = torch.empty((), dtype=dtype).element_size()
    expected = reference64(w, a)
    iters = 100 if w.rows <= 1024 else 30
    rows = []
    for name, build in implementations(w, a, kernels, max_autotune, skip).items():
        row = {"workload": w.name, "dtype": str(dtype).removeprefix("torch."), "impl": name,
               "floor_us": floor_us(w, elem)}  # fmt: skip
        t0 = time.perf_counter()
        try:
            forward = build()
            if forward is None:
                continue
            if not w.train:
                with torch.no_grad():
                    row["rel_err"] = harness.rel_err(forward(), expected)
            call = as_call(w, a, forward)
            row["wall_us"] = harness.stream_us(call, iters)
            row["gpu_us"] = harness.gpu_us(call)
            if name == "eager":  # the same forward captured once by the user: its replay is both numbers
                replay = harness.graphed(call)
                rows.append({**row, "impl": "eager_cuda_graph", "wall_us": harness.stream_us(replay, iters),
                             "gpu_us": row["gpu_us"]})  # fmt: skip
        except Exception as exc:  # noqa: BLE001  (one implementation failing must not stop the table)
            row["error"] = f"{type(exc).__name__}: {exc}"[:400]
            traceback.print_exc()
        row["seconds"] = round(time.perf_counter() - t0, 2)
        rows.append(row)
        print(format_row(row), flush=True)
    return rows


def format_row(r: dict) -> str:
    if "error" in r:
        return f"{r['workload']:<46} {r['impl']:<22} ERROR {r['error'][:100]}"
    gpu = r.get("gpu_us")
    return (f"{r['workload']:<46} {r['dtype']:<8} {r['impl']:<22} wall {r['wall_us']:8.1f}  gpu "
            f"{'-' if gpu is None else f'{gpu:8.1f}'}  floor {r['floor_us']:6.1f}  err {r.get('rel_err', float('nan')):.1e}")  # fmt: skip


def table(rows: list[dict]) -> str:
    """Markdown: one line per workload, one column per implementation, `wall / gpu` µs."""
    impls = list(dict.fromkeys(r["impl"] for r in rows))
    out = ["| workload | dtype | " + " | ".join(impls) + " | floor |", "|---" * (len(impls) + 3) + "|"]
    for key in dict.fromkeys((r["workload"], r["dtype"]) for r in rows):
        by = {r["impl"]: r for r in rows if (r["workload"], r["dtype"]) == key}
        cells = []
        for i in impls:
            r = by.get(i)
            if r is None:
                cells.append("–")
            elif "error" in r:
                cells.append("error")
            else:
                gpu = r.get("gpu_us")
                cells.append(f"{r['wall_us']:.1f} / {'–' if gpu is None else f'{gpu:.1f}'}")
        floor = next(iter(by.values()))["floor_us"]
        out.append(f"| {key[0]} | {key[1]} | " + " | ".join(cells) + f" | {floor:.1f} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    harness.add_loading_args(parser)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--dtypes", default="bf16")
    parser.add_argument("--only", default="", help="substring filter on workload names")
    parser.add_argument(
        "--max-autotune", action="store_true", help=f"also compile max-autotune on {MAX_AUTOTUNE_ROWS}"
    )
    parser.add_argument(
        "--skip", default="", help="comma list of implementations to leave out (e.g. compile)"
    )
    args = parser.parse_args(argv)
    kernels = harness.load_kernels(args)
    report = {"environment": harness.environment(), "kernels": harness.describe(kernels),
              "max_autotune_rows": list(MAX_AUTOTUNE_ROWS) if args.max_autotune else [], "rows": []}  # fmt: skip
    skip = set(args.skip.split(","))
    dtypes = [DTYPES[d] for d in args.dtypes.split(",")]
    for dtype in dtypes:
        for w in WORKLOADS:
            if args.only in w.name:
                report["rows"] += bench_workload(w, dtype, kernels, False, skip)
                harness.write_json(args.json, report)
    # max-autotune last: it takes the longest, and every other row is in the JSON before it starts.
    others = {"eager", "cublaslt_epilogue", "compile", "liger"}
    for dtype in dtypes if args.max_autotune else []:
        for w in WORKLOADS:
            if w.name in MAX_AUTOTUNE_ROWS and args.only in w.name:
                report["rows"] += bench_workload(w, dtype, {}, True, skip | others)
                harness.write_json(args.json, report)
    print(table(report["rows"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
