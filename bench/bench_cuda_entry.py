"""CUDA-backend entry of the fused-MLP benchmark: the issue's cases and goals, timed two ways.

- host: wall-clock per call over a loop of eager calls (what a Python caller sees; includes the host
  cost of the call when it exceeds the GPU time);
- graph: GPU time per call when the calls are replayed from a captured CUDA graph (what a user who
  captures their forward sees; the figure the small-batch goals are about).
`rows(impls)` returns one dict per (case, impl) for bench/bench_mlp.py's table; run this file alone for
the CUDA backend next to the eager anchors: python bench/bench_cuda_entry.py [--json FILE].
"""

from __future__ import annotations

import argparse
import functools
import json
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

# (op, rows M, goal in µs per forward) from the Triton issue; bf16 throughout.
CASES = (("mlp", 16, 8.0), ("mlp", 1024, 12.0), ("mlp", 8192, 75.0),
         ("gated_mlp", 1024, 30.0), ("gated_mlp", 8192, 170.0), ("act_and_mul", 8192, 38.0))  # fmt: skip
HIDDEN_MLP, HIDDEN_GATED, INTER_GATED = 1024, 768, 3072


def make_case(op: str, m: int, dtype=torch.bfloat16, device="cuda") -> tuple[tuple, dict]:
    """Fresh random inputs for one case: (args, kwargs) of the public op."""

    def r(*shape, scale=1.0):
        return torch.randn(*shape, device=device, dtype=dtype) * scale

    if op == "mlp":
        ws = [r(HIDDEN_MLP, HIDDEN_MLP, scale=HIDDEN_MLP**-0.5) for _ in range(3)]
        return (r(m, HIDDEN_MLP), ws, [r(HIDDEN_MLP) for _ in range(3)]), {"activation": "relu"}
    if op == "gated_mlp":
        h, i = HIDDEN_GATED, INTER_GATED
        return (r(m, h), r(i, h, scale=h**-0.5), r(i, h, scale=h**-0.5), r(h, i, scale=i**-0.5)), {
            "activation": "gelu_tanh"
        }
    return (r(m, INTER_GATED), r(m, INTER_GATED)), {"activation": "gelu_tanh"}


def time_host(fn: Callable[[], object], iters: int = 200) -> float:
    """µs per call, eager calls back to back, synchronized at the end."""
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / iters * 1e6


def time_graph(fn: Callable[[], object], calls: int = 20, replays: int = 10) -> float:
    """µs of GPU time per call, `calls` calls captured in one CUDA graph, median of `replays` replays."""
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / calls)
    return sorted(times)[len(times) // 2]


def unfused_gated(x, wg, wu, wd, activation, act_and_mul):
    """The alternative to the fused gate/up kernel: gate and up as cuBLAS GEMMs through HBM, then act_and_mul."""
    return F.linear(act_and_mul(F.linear(x, wg), F.linear(x, wu), activation), wd)


def impls() -> dict[str, object]:
    """name -> module with the public ops: the CUDA backend and the eager reference."""
    from fused_mlp import reference
    from fused_mlp.cuda import available, ops

    ok, why = available()
    if not ok:
        raise RuntimeError(f"the CUDA backend cannot run here: {why}")
    return {"cuda": ops, "eager": reference}


def rows(modules: dict[str, object] | None = None, only: str | None = None) -> list[dict]:
    """One row per (case, impl): op, M, impl, host_us, graph_us, goal_us, meets_goal (graph time)."""
    modules = modules or impls()
    out = []
    with torch.no_grad():
        for op, m, goal in CASES:
            if only and op != only:
                continue
            args, kwargs = make_case(op, m)
            fns = {
                name: functools.partial(getattr(mod, op), *args, **kwargs) for name, mod in modules.items()
            }
            if op == "gated_mlp" and "cuda" in modules:
                fns["cuda unfused gate/up"] = functools.partial(
                    unfused_gated, *args, kwargs["activation"], modules["cuda"].act_and_mul
                )
            for name, fn in fns.items():
                host, graph = time_host(fn), time_graph(fn)
                out.append({"op": op, "M": m, "impl": name, "host_us": round(host, 1), "graph_us": round(graph, 1),
                            "goal_us": goal, "meets_goal": graph <= goal})  # fmt: skip
    return out


def markdown(table: list[dict]) -> str:
    lines = [
        "| op | M | impl | host µs/call | graph µs/call | goal µs | meets |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in table:
        lines.append(f"| {r['op']} | {r['M']} | {r['impl']} | {r['host_us']} | {r['graph_us']} | {r['goal_us']} | "
                     f"{'yes' if r['meets_goal'] else 'no'} |")  # fmt: skip
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description="CUDA backend benchmark (bf16, H200 goals)")
    parser.add_argument("--json", default=None, help="also write the rows here")
    parser.add_argument("--only", default=None, choices=sorted({c[0] for c in CASES}), help="one op's cases")
    args = parser.parse_args()
    table = rows(only=args.only)
    print(f"{torch.cuda.get_device_name()} torch {torch.__version__}")
    print(markdown(table))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": table},
                f,
                indent=1,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
