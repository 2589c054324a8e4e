"""Measure every implementation of every step of the CUDA variant, per row count: the numbers behind the
path table (kernel_src/fused_mlp/cuda/paths.py).

For a loaded stable-ABI kernel (harness.py), each step is forced to each implementation in turn
(`torch.ops.<ns>.cuda_set_path`) and a whole public op that exercises it is timed (GPU µs per call from
graph replay): `linear` through `mlp` 3x1024 relu (+bias) and a K=3072 `linear` (the gated down
projection's shape), `gate_up` through `gated_mlp` H=768 I=3072 (inference, and the training forward that also
stores (g, u)), `act_and_mul` on [M, 3072], `chain` (the
whole op in one persistent kernel, or layer by layer) through both `mlp` and `gated_mlp`, `chain_backward`
(the whole backward in one persistent kernel, or cuBLASLt GEMMs per layer) through a forward + backward of
`mlp` 3x1024 relu, of a relu `linear` 768->3072 and of `gated_mlp` H=768 I=3072 gelu_tanh. The printout
ends with the fastest implementation per (step, M) by GPU time (paths.GRAPH_PATHS: calls captured in a
graph) and, up to M=2048 where calls are host-bound, by wall time of a stream of calls (paths.PATHS): copy
the changes into paths.py. Forcing a step forces it in every op (the table can also choose per op).

    python bench/bench_paths.py --variant-dir DIR=cuda [--steps chain,linear] [--json out.json]
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness

ROWS = (1, 16, 64, 256, 1024, 2048, 4096, 8192)
HOST_BOUND_ROWS = 2048
IMPLS = {
    "linear": ("triton", "tma", "cublaslt"),
    "gate_up": ("triton", "tma", "split"),
    "act_and_mul": ("triton", "cuda"),
    "chain": ("persistent", "layers"),
    "chain_backward": ("persistent", "layers"),
}
# The persistent chain kernels take 1-64 rows (else they run layers: the same numbers as `layers`).
STEP_ROWS = {"chain": (1, 8, 16, 32, 48, 64), "chain_backward": (1, 8, 16, 32, 48, 64)}


def problems(step: str, m: int, kernel, dt: torch.dtype) -> dict:
    """name -> call exercising `step` at M=m."""

    def r(*shape, scale=1.0):
        return torch.randn(*shape, device="cuda", dtype=dt) * scale

    if step == "linear":
        x, ws, bs = (
            r(m, 1024),
            [r(1024, 1024, scale=1024**-0.5) for _ in range(3)],
            [r(1024) for _ in range(3)],
        )
        h, wd = r(m, 3072), r(768, 3072, scale=3072**-0.5)
        return {"mlp 3x1024 relu": lambda: kernel.mlp(x, ws, bs, "relu"),
                "linear 3072->768": lambda: kernel.linear(h, wd, None, "none")}  # fmt: skip
    if step == "gate_up":
        x, wg, wu, wd = r(m, 768), r(3072, 768, scale=768**-0.5), r(3072, 768, scale=768**-0.5), r(768, 3072)
        # the training forward, which also stores (g, u)
        train = getattr(torch.ops, kernel.OPS_NAMESPACE).cuda_gated_mlp_train
        return {"gated 768x3072": lambda: kernel.gated_mlp(x, wg, wu, wd, "gelu_tanh"),
                "gated 768x3072 training forward": lambda: train(x, wg, wu, wd, "gelu_tanh")[0]}  # fmt: skip
    if step == "chain":  # the whole ops that the linear and gate_up rows exercise
        mlp = problems("linear", m, kernel, dt)["mlp 3x1024 relu"]
        return {"mlp 3x1024 relu": mlp, **problems("gate_up", m, kernel, dt)}
    if step == "chain_backward":  # forward + backward (grad mode on inside the sweep's no_grad); returns dx
        x, ws, bs = (
            r(m, 1024),
            [r(1024, 1024, scale=1024**-0.5) for _ in range(3)],
            [r(1024) for _ in range(3)],
        )
        h, w1, b1 = r(m, 768), r(3072, 768, scale=768**-0.5), r(3072)
        params = [t.requires_grad_() for t in (x, *ws, *bs, h, w1, b1)]
        up, up1 = r(m, 1024), r(m, 3072)

        def step_of(forward, inputs, upstream):
            def run():
                with torch.enable_grad():
                    return torch.autograd.grad(forward(), inputs, upstream)[0]

            return run

        xg, wg, wu = r(m, 768), r(3072, 768, scale=768**-0.5), r(3072, 768, scale=768**-0.5)
        wd, upg = r(768, 3072, scale=3072**-0.5), r(m, 768)
        gated = [t.requires_grad_() for t in (xg, wg, wu, wd)]
        return {"mlp 3x1024 relu fwd+bwd": step_of(lambda: kernel.mlp(x, ws, bs, "relu"), params[:7], up),
                "linear 768->3072 relu fwd+bwd": step_of(lambda: kernel.linear(h, w1, b1, "relu"), params[7:], up1),
                "gated 768x3072 gelu_tanh fwd+bwd": step_of(lambda: kernel.gated_mlp(xg, wg, wu, wd, "gelu_tanh"), gated, upg)}  # fmt: skip
    g, u = r(m, 3072), r(m, 3072)
    return {"act_and_mul [M,3072]": lambda: kernel.act_and_mul(g, u, "gelu_tanh")}


def sweep(
    kernel, dt: torch.dtype, written: Callable[[list[dict]], None] = lambda rows: None, steps=tuple(IMPLS)
) -> list[dict]:
    """Every implementation of each of `steps` at every M; `written(rows)` after each step (the JSON so far)."""
    ns = getattr(torch.ops, kernel.OPS_NAMESPACE)
    rows = []
    with torch.no_grad():
        for step in steps:
            impls = IMPLS[step]
            for m in STEP_ROWS.get(step, ROWS):
                for name, call in problems(step, m, kernel, dt).items():
                    expected = None
                    for impl in impls:
                        ns.cuda_set_path(step, impl)
                        try:
                            out = call()
                            expected = out if expected is None else expected
                            row = {"step": step, "impl": impl, "rows": m, "problem": name,
                                   "gpu_us": harness.gpu_us(call), "rel_diff": harness.rel_err(out, expected)}  # fmt: skip
                            if m <= HOST_BOUND_ROWS:  # where an implementation's host cost shows in the wall
                                row["host_us"] = harness.host_us(call, 100, 3)
                                row["wall_us"] = harness.stream_us(call, 100, 3)
                        except Exception as exc:  # noqa: BLE001
                            row = {
                                "step": step,
                                "impl": impl,
                                "rows": m,
                                "problem": name,
                                "error": str(exc)[:300],
                            }
                        finally:
                            ns.cuda_set_path(step, "table")
                        rows.append(row)
                        print(row, flush=True)
            written(rows)
    return rows


def best(rows: list[dict]) -> list[dict]:
    """Fastest implementation per (step, M) by GPU µs summed over the step's problems, with the summed wall µs
    (stream of calls) where it was measured. Training-forward problems count apart (step "gated_mlp_train/<step>",
    as the path table keys them)."""
    totals: dict[tuple, dict[str, dict[str, float]]] = {}
    for r in rows:
        for what in ("gpu_us", "wall_us"):
            if r.get(what) is not None:
                step = f"gated_mlp_train/{r['step']}" if "training" in r["problem"] else r["step"]
                by = totals.setdefault((step, r["rows"]), {}).setdefault(what, {})
                by[r["impl"]] = by.get(r["impl"], 0.0) + r[what]
    out = []
    for (step, m), by in totals.items():
        winner = min(by["gpu_us"], key=by["gpu_us"].get)
        entry = {
            "step": step,
            "rows": m,
            "best": winner,
            "us": {k: round(v, 2) for k, v in by["gpu_us"].items()},
        }
        if "wall_us" in by:
            entry["wall_us"] = {k: round(v, 2) for k, v in by["wall_us"].items()}
            entry["best_wall"] = min(by["wall_us"], key=by["wall_us"].get)
        out.append(entry)
        print(f"{step:<24} M={m:<6} best {winner:<9} " + "  ".join(f"{k} {v:.1f}" for k, v in by["gpu_us"].items())
              + ("  wall " + "  ".join(f"{k} {v:.1f}" for k, v in by["wall_us"].items()) if "wall_us" in by else ""))  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    parser = harness.tool_parser(__doc__)
    parser.add_argument("--dtype", default="bf16", choices=("bf16", "fp16"))
    parser.add_argument(
        "--steps", default=",".join(IMPLS), help="comma list of steps to measure (default: all)"
    )
    got = harness.parse_and_load_cuda(parser, argv, "bench_paths")
    if got is None:
        return 2
    args, label, kernel = got
    dt = harness.dtype_of(args.dtype)
    report = {"environment": harness.environment(), "kernels": harness.describe({label: kernel}), "rows": []}

    def written(rows: list[dict]) -> None:
        harness.write_json(args.json, {**report, "rows": rows})

    steps = tuple(args.steps.split(","))
    if unknown := set(steps) - set(IMPLS):
        parser.error(f"unknown step(s) {sorted(unknown)}; choose from {', '.join(IMPLS)}")
    rows = sweep(kernel, dt, written, steps)
    harness.write_json(args.json, {**report, "rows": rows, "best": best(rows)})
    harness.append_csv("paths", rows, ("step", "problem", "rows"), ("gpu_us", "wall_us", "host_us"), args.csv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
