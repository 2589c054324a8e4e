"""Model-level benchmark: a stack of N layers, each with its own weights, on a residual stream, run the way
a real model runs (not one layer in a loop).

Models: `gated` (N gated-MLP layers, GeGLU-tanh H=768 I=3072) and `mlp` (N 3xLinear(1024)+ReLU layers
with biases). Modes: inference (no grad) and training (forward + backward, grads of every weight). Rows
M in --rows; implementations: eager PyTorch, torch.compile (dynamic shapes, compiled once per model and
mode), and ours (each loaded kernel, harness.py), each also inside a CUDA graph the user captures.
Wall µs per forward in a stream of calls, GPU µs per forward from graph replay.

Two more cases, no graphs (capturing per shape is what they must not need):
- `changing M`: 24 batch sizes never seen before, one call each, against 24 calls of one warm size
  (goal: ≤ 2x; no capture, no JIT, no recompile per new M);
- `address churn`: every call gets an input at a new address (64 buffers in rotation), which makes any
  cache keyed by tensor addresses miss on every layer of every call; against the steady state.

    python bench/bench_model.py --variant-dir DIR=label ... [--layers 32] [--json out.json]
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness

NEW_SIZES = (
    3,
    5,
    9,
    17,
    24,
    33,
    48,
    65,
    80,
    100,
    127,
    150,
    200,
    255,
    300,
    384,
    450,
    511,
    600,
    700,
    777,
    850,
    960,
    1000,
)
WARM_SIZE = 512


class Stack:
    """N layers with their own weights; forward(x, ops) runs them on a residual stream."""

    def __init__(self, kind: str, layers: int, dtype: torch.dtype, train: bool):
        self.kind, self.dim = kind, 768 if kind == "gated" else 1024

        def rnd(*shape, scale=1.0):
            return (torch.randn(*shape, device="cuda") * scale).to(dtype).requires_grad_(train)

        if kind == "gated":
            h, i = 768, 3072
            self.layers = [(rnd(i, h, scale=h**-0.5), rnd(i, h, scale=h**-0.5), rnd(h, i, scale=0.1 * i**-0.5))
                           for _ in range(layers)]  # fmt: skip
        else:
            d = 1024
            self.layers = [([rnd(d, d, scale=d**-0.5) for _ in range(2)] + [rnd(d, d, scale=0.1 * d**-0.5)],
                            [rnd(d, scale=0.1) for _ in range(3)]) for _ in range(layers)]  # fmt: skip

    def params(self) -> list[torch.Tensor]:
        flat = []
        for layer in self.layers:
            for p in layer:
                flat += p if isinstance(p, list) else [p]
        return flat

    def forward_eager(self, x: torch.Tensor) -> torch.Tensor:
        h = x
        for layer in self.layers:
            if self.kind == "gated":
                wg, wu, wd = layer
                h = h + F.linear(F.gelu(F.linear(h, wg), approximate="tanh") * F.linear(h, wu), wd)
            else:
                ws, bs = layer
                y = F.relu(F.linear(h, ws[0], bs[0]))
                y = F.relu(F.linear(y, ws[1], bs[1]))
                h = h + F.linear(y, ws[2], bs[2])
        return h

    def forward_ours(self, x: torch.Tensor, kernel) -> torch.Tensor:
        h = x
        for layer in self.layers:
            if self.kind == "gated":
                h = h + kernel.gated_mlp(h, *layer, "gelu_tanh")
            else:
                h = h + kernel.mlp(h, layer[0], layer[1], "relu")
        return h


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


def bench_fixed(stack: Stack, fns: dict, rows: tuple[int, ...], train: bool, dtype) -> list[dict]:
    out = []
    for m in rows:
        x = torch.randn(m, stack.dim, device="cuda", dtype=dtype)
        ref = None
        for name, fn in fns.items():
            row = {"model": stack.kind, "layers": len(stack.layers), "mode": "train" if train else "infer",
                   "rows": m, "impl": name}  # fmt: skip
            try:
                call = make_call(stack, fn, x, train)
                if not train:
                    y = call()
                    ref = y if ref is None else ref
                    row["rel_diff_vs_eager"] = harness.rel_err(y, ref)
                iters = 20 if m <= 128 else 8
                row["wall_us"] = harness.stream_us(call, iters, rounds=3)
                replay = harness.graphed(call)
                row["graph_us"] = harness.stream_us(replay, iters, rounds=3)
            except Exception as exc:  # noqa: BLE001
                row["error"] = f"{type(exc).__name__}: {exc}"[:300]
                traceback.print_exc()
            out.append(row)
            print(row, flush=True)
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
    for name, fn in fns.items():
        row = {
            "model": stack.kind,
            "layers": len(stack.layers),
            "mode": "train" if train else "infer",
            "impl": name,
        }
        try:
            warm = make_call(stack, fn, warm_x, train)
            warm()
            steady = statistics.median(_timed([warm] * len(NEW_SIZES)) for _ in range(3))
            new_xs = [torch.randn(m, stack.dim, device="cuda", dtype=dtype) for m in NEW_SIZES]
            row["new_sizes_us"] = _timed([make_call(stack, fn, x, train) for x in new_xs])
            row["steady_us"] = steady
            row["new_over_steady"] = row["new_sizes_us"] / steady
            calls = [make_call(stack, fn, x, train) for x in churn]
            for c in calls[:4]:
                c()
            row["churn_us_per_call"] = _timed(calls) / len(calls)
            row["steady_us_per_call"] = steady / len(NEW_SIZES)
        except Exception as exc:  # noqa: BLE001
            row["error"] = f"{type(exc).__name__}: {exc}"[:300]
            traceback.print_exc()
        out.append(row)
        print(row, flush=True)
    return out


def run(
    kernels: dict,
    layers: int,
    rows: tuple[int, ...],
    models: list[str],
    modes: list[str],
    dtype,
    with_compile: bool,
    results: list[dict],
    save: Callable[[], None],
) -> None:
    """Append every (model, mode) block's rows to `results`, calling `save` after each block."""
    for kind in models:
        for mode in modes:
            train = mode == "train"
            torch.manual_seed(0)
            stack = Stack(kind, layers, dtype, train)
            fns = forwards(stack, kernels, with_compile)
            t0 = time.perf_counter()
            results += bench_fixed(stack, fns, rows, train, dtype)
            results += bench_dynamic(stack, fns, train, dtype)
            print(f"{kind} {mode}: {time.perf_counter() - t0:.1f} s", flush=True)
            save()
            del stack, fns
            torch.cuda.empty_cache()


def table(results: list[dict]) -> str:
    fixed = [r for r in results if "rows" in r and "error" not in r]
    impls = list(dict.fromkeys(r["impl"] for r in fixed))
    lines = [
        "| model | mode | M | " + " | ".join(f"{i} wall / graph" for i in impls) + " |",
        "|---" * (len(impls) + 3) + "|",
    ]
    for key in dict.fromkeys((r["model"], r["mode"], r["rows"]) for r in fixed):
        by = {r["impl"]: r for r in fixed if (r["model"], r["mode"], r["rows"]) == key}
        cells = [f"{by[i]['wall_us']:.0f} / {by[i]['graph_us']:.0f}" if i in by else "–" for i in impls]
        lines.append(f"| {key[0]} | {key[1]} | {key[2]} | " + " | ".join(cells) + " |")
    dyn = [r for r in results if "new_sizes_us" in r]
    if dyn:
        lines += ["", "| model | mode | impl | 24 new sizes µs | 24 x one size µs | ratio | churn µs/call | steady µs/call |",
                  "|---|---|---|---|---|---|---|---|"]  # fmt: skip
        for r in dyn:
            lines.append(f"| {r['model']} | {r['mode']} | {r['impl']} | {r['new_sizes_us']:.0f} | {r['steady_us']:.0f} | "
                         f"{r['new_over_steady']:.2f} | {r['churn_us_per_call']:.0f} | {r['steady_us_per_call']:.0f} |")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    harness.add_loading_args(parser)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--layers", type=int, default=32)
    parser.add_argument("--rows", default="1,16,128,1024")
    parser.add_argument("--models", default="gated,mlp")
    parser.add_argument("--modes", default="infer,train")
    parser.add_argument("--dtype", default="bf16", choices=("bf16", "fp16"))
    parser.add_argument(
        "--no-compile", action="store_true", help="leave torch.compile out (it compiles per model/mode)"
    )
    args = parser.parse_args(argv)
    kernels = harness.load_kernels(args)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    rows = tuple(int(r) for r in args.rows.split(","))
    report = {"environment": harness.environment(), "kernels": harness.describe(kernels), "layers": args.layers,
              "new_sizes": list(NEW_SIZES), "results": []}  # fmt: skip
    run(kernels, args.layers, rows, args.models.split(","), args.modes.split(","), dtype, not args.no_compile,
        report["results"], lambda: harness.write_json(args.json, report))  # fmt: skip
    harness.write_json(args.json, report)
    print(table(report["results"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
