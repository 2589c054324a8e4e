"""Model-level benchmark: a stack of N blocks of one shape preset, each with its own weights, on a residual
stream, run the way a real model runs (not one layer in a loop).

Models: presets of `registry.spec.presets` (default the project's geglu-768-3072 and mlp-3x1024; e.g.
`--models llama-3.2-1b --layers 16`). Modes: inference (no grad) and training (forward + backward, grads of
every weight). Rows M in --rows; implementations: eager PyTorch, torch.compile (dynamic shapes, compiled
once per model and mode), and ours (each loaded kernel, harness.py), each also inside a CUDA graph the
user captures. Wall µs per forward in a stream of calls, GPU µs per forward from graph replay.

Two more cases, no graphs (capturing per shape is what they must not need):
- `changing M`: 24 batch sizes never seen before, one call each, against 24 calls of one warm size (goal: ≤ 2x;
  no capture, no JIT, no recompile per new M); AGAIN_SIZES: 24 more in M buckets seen (no cuBLASLt timing);
- `address churn`: every call gets an input at a new address (64 buffers in rotation), which makes any
  cache keyed by tensor addresses miss on every layer of every call; against the steady state.

    python bench/bench_model.py --variant-dir DIR=label ... [--layers 32] [--json out.json]
"""

from __future__ import annotations

import statistics
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness

from registry.spec import presets
from registry.spec.presets import Preset

NEW_SIZES = (3, 5, 9, 17, 24, 33, 48, 65, 80, 100, 127, 150,
             200, 255, 300, 384, 450, 511, 600, 700, 777, 850, 960, 1000)  # fmt: skip
WARM_SIZE = 512
AGAIN_SIZES = tuple(m + 1 if m + 1 not in (*NEW_SIZES, WARM_SIZE) else m - 1 for m in NEW_SIZES)


class Stack:
    """N blocks of `preset` with their own weights; forward(x, block) runs them on a residual stream."""

    def __init__(self, preset: Preset, layers: int, dtype: torch.dtype, train: bool):
        self.preset, self.dim = preset, preset.hidden
        # The last weight of each block scaled by 0.1: 32 residual additions stay O(1).
        self.layers = [harness.inputs(preset, 1, dtype, train, last_scale=0.1) for _ in range(layers)]

    def params(self) -> list[torch.Tensor]:
        return [t for a in self.layers for t in harness.leaves(a)[1:]]

    def forward_eager(self, x: torch.Tensor) -> torch.Tensor:
        for a in self.layers:
            x = x + harness.eager(self.preset, x, a["ws"], a["bs"])
        return x

    def forward_ours(self, x: torch.Tensor, kernel) -> torch.Tensor:
        for a in self.layers:
            x = x + harness.ours(self.preset, kernel, x, a["ws"], a["bs"])
        return x


def make_call(stack: Stack, forward: Callable, x: torch.Tensor, train: bool) -> Callable[[], object]:
    if not train:

        def infer():
            with torch.no_grad():
                return forward(x)

        return infer
    params = stack.params()
    upstream = torch.randn(x.shape[0], stack.dim, device="cuda", dtype=x.dtype)

    def step():
        return torch.autograd.grad(forward(x), params, upstream)

    return step


def forwards(stack: Stack, kernels: dict, with_compile: bool) -> dict[str, Callable]:
    out = {"eager": stack.forward_eager}
    if with_compile:
        torch._dynamo.reset()
        out["compile"] = torch.compile(stack.forward_eager, dynamic=True)
    for label, kernel in kernels.items():
        out[f"ours:{label}"] = lambda x, kernel=kernel: stack.forward_ours(x, kernel)
    return out


def _record(out: list[dict], row: dict, measure: Callable[[dict], None]) -> None:
    """Fill `row` with `measure`; a failure becomes the row's error, never the end of the run."""
    try:
        measure(row)
    except Exception as exc:  # noqa: BLE001
        row["error"] = f"{type(exc).__name__}: {exc}"[:300]
        traceback.print_exc()
    out.append(row)
    print(row, flush=True)


def _row(stack: Stack, train: bool, impl: str, **more) -> dict:
    mode = "train" if train else "infer"
    return {"model": stack.preset.name, "layers": len(stack.layers), "mode": mode, **more, "impl": impl}


def bench_fixed(stack: Stack, fns: dict, rows: tuple[int, ...], train: bool, dtype) -> list[dict]:
    out = []

    def measure(row: dict, fn: Callable, x: torch.Tensor, ref: list) -> None:
        call = make_call(stack, fn, x, train)
        if not train:
            ref.append(call())
            row["rel_diff_vs_eager"] = harness.rel_err(ref[-1], ref[0])
        iters = 20 if x.shape[0] <= 128 else 8
        row["wall_us"] = harness.stream_us(call, iters, rounds=3)
        row["graph_us"] = harness.stream_us(harness.graphed(call), iters, rounds=3)

    for m in rows:
        x, ref = torch.randn(m, stack.dim, device="cuda", dtype=dtype), []
        for name, fn in fns.items():
            timed = lambda row, fn=fn, x=x, ref=ref: measure(row, fn, x, ref)
            _record(out, _row(stack, train, name, rows=m), timed)
    return out


def _timed(calls: list[Callable[[], object]]) -> float:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for c in calls:
        c()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e6


def bench_dynamic(stack: Stack, fns: dict, train: bool, dtype) -> list[dict]:
    """24 new sizes vs 24 calls of one warm size; and new input addresses every call vs the steady state."""
    out = []
    warm_x = torch.randn(WARM_SIZE, stack.dim, device="cuda", dtype=dtype)
    churn = [torch.randn(WARM_SIZE, stack.dim, device="cuda", dtype=dtype) for _ in range(64)]

    def measure(row: dict, fn: Callable) -> None:
        warm = make_call(stack, fn, warm_x, train)
        warm()
        steady = statistics.median(_timed([warm] * len(NEW_SIZES)) for _ in range(3))
        new_xs = [torch.randn(m, stack.dim, device="cuda", dtype=dtype) for m in NEW_SIZES]
        row["new_sizes_us"] = _timed([make_call(stack, fn, x, train) for x in new_xs])
        row["steady_us"] = steady
        row["new_over_steady"] = row["new_sizes_us"] / steady
        again = [torch.randn(m, stack.dim, device="cuda", dtype=dtype) for m in AGAIN_SIZES]
        row["again_over_steady"] = _timed([make_call(stack, fn, x, train) for x in again]) / steady
        calls = [make_call(stack, fn, x, train) for x in churn]
        for c in calls[:4]:
            c()
        row["churn_us_per_call"] = _timed(calls) / len(calls)
        row["steady_us_per_call"] = steady / len(NEW_SIZES)

    for name, fn in fns.items():
        _record(out, _row(stack, train, name), lambda row, fn=fn: measure(row, fn))
    return out


def run(kernels: dict, layers: int, rows: tuple[int, ...], models: list[str], modes: list[str], dtype,
        with_compile: bool, results: list[dict], save: Callable[[], None]) -> None:  # fmt: skip
    """Append every (model, mode) block's rows to `results`, calling `save` after each block."""
    for name in models:
        for mode in modes:
            train = mode == "train"
            torch.manual_seed(0)
            stack = Stack(presets.get(name), layers, dtype, train)
            fns = forwards(stack, kernels, with_compile)
            t0 = time.perf_counter()
            results += bench_fixed(stack, fns, rows, train, dtype)
            results += bench_dynamic(stack, fns, train, dtype)
            print(f"{name} {mode}: {time.perf_counter() - t0:.1f} s", flush=True)
            save()
            del stack, fns
            torch.cuda.empty_cache()


def table(results: list[dict]) -> str:
    fixed = [r for r in results if "rows" in r and "error" not in r]
    impls = list(dict.fromkeys(r["impl"] for r in fixed))
    head = "| model | mode | M | " + " | ".join(f"{i} wall / graph" for i in impls) + " |"
    lines = [head, "|---" * (len(impls) + 3) + "|"]
    for key in dict.fromkeys((r["model"], r["mode"], r["rows"]) for r in fixed):
        by = {r["impl"]: r for r in fixed if (r["model"], r["mode"], r["rows"]) == key}
        cells = [f"{by[i]['wall_us']:.0f} / {by[i]['graph_us']:.0f}" if i in by else "–" for i in impls]
        lines.append(f"| {key[0]} | {key[1]} | {key[2]} | " + " | ".join(cells) + " |")
    dyn = [r for r in results if "new_sizes_us" in r]
    if dyn:
        lines += ["", ("| model | mode | impl | 24 new sizes µs | 24 x one size µs | ratio | 24 more, seen buckets | "
                       "churn µs/call | steady µs/call |"), "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
        for r in dyn:
            lines.append(f"| {r['model']} | {r['mode']} | {r['impl']} | {r['new_sizes_us']:.0f} | {r['steady_us']:.0f} | "
                         f"{r['new_over_steady']:.2f} | {r['again_over_steady']:.2f} | {r['churn_us_per_call']:.0f} | "
                         f"{r['steady_us_per_call']:.0f} |")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = harness.tool_parser(__doc__)
    parser.add_argument("--layers", type=int, default=32)
    parser.add_argument("--rows", default="1,16,128,1024")
    parser.add_argument("--models", default="geglu-768-3072,mlp-3x1024", help="comma list of preset names")
    parser.add_argument("--modes", default="infer,train")
    parser.add_argument("--dtype", default="bf16", choices=("bf16", "fp16"))
    parser.add_argument(
        "--no-compile", action="store_true", help="leave torch.compile out (compiles per model)"
    )
    args = parser.parse_args(argv)
    models = args.models.split(",")
    for name in models:
        presets.get(name)  # an unknown name fails here, before anything loads
    kernels = harness.load_kernels(args)
    rows = tuple(int(r) for r in args.rows.split(","))
    report = {"environment": harness.environment(), "kernels": harness.describe(kernels), "layers": args.layers,
              "new_sizes": list(NEW_SIZES), "results": []}  # fmt: skip
    run(kernels, args.layers, rows, models, args.modes.split(","), harness.dtype_of(args.dtype), not args.no_compile,
        report["results"], lambda: harness.write_json(args.json, report))  # fmt: skip
    harness.write_json(args.json, report)
    keys = ("model", "layers", "mode", "rows")
    harness.append_csv("model", report["results"], keys, ("wall_us", "graph_us", "new_over_steady"), args.csv)
    print(table(report["results"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
