"""One call (or training step) of a loaded kernel between cudaProfilerStart/Stop, for Nsight Compute to list
every kernel it launches with its GPU time: where a workload's microseconds go. Warm-up calls first, so the
profiled one runs what a steady loop runs (plans and cuBLASLt heuristics cached, no first-use work).

    ncu --profile-from-start off --cache-control none --clock-control none --metrics gpu__time_duration.sum \\
        --csv python bench/profile_step.py --variant-dir DIR=stable-abi --op gated --rows 8192 --mode train
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness


def step(kernel, op: str, m: int, train: bool, dt: torch.dtype):
    """The call to profile: the same shapes as bench_ops.py's rows (gated H=768 I=3072, mlp 3x1024 relu)."""

    def r(*shape, scale=1.0):
        return (torch.randn(*shape, device="cuda", dtype=dt) * scale).requires_grad_(train)

    if op == "gated":
        x, wg, wu, wd = r(m, 768), r(3072, 768, scale=768**-0.5), r(3072, 768, scale=768**-0.5), r(768, 3072)
        fwd = lambda: kernel.gated_mlp(x, wg, wu, wd, "gelu_tanh")
    else:
        x, ws = r(m, 1024), [r(1024, 1024, scale=1024**-0.5) for _ in range(3)]
        bs = [r(1024) for _ in range(3)]
        fwd = lambda: kernel.mlp(x, ws, bs, "relu")
    if not train:
        return lambda: fwd()
    dy = torch.randn(m, 768 if op == "gated" else 1024, device="cuda", dtype=dt)
    return lambda: fwd().backward(dy)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    harness.add_loading_args(parser)
    parser.add_argument("--op", choices=("gated", "mlp"), default="gated")
    parser.add_argument("--rows", type=int, default=8192)
    parser.add_argument("--mode", choices=("train", "infer"), default="train")
    parser.add_argument("--compile", action="store_true", help="also profile torch.compile of the eager ops")
    args = parser.parse_args(argv)
    kernels = harness.load_kernels(args)
    if args.compile:
        kernels["compile"] = SimpleNamespace(
            gated_mlp=torch.compile(
                lambda x, wg, wu, wd, act: F.linear(
                    F.gelu(F.linear(x, wg), approximate="tanh") * F.linear(x, wu), wd
                )
            ),
            mlp=torch.compile(
                lambda x, ws, bs, act: F.linear(
                    F.relu(F.linear(F.relu(F.linear(x, ws[0], bs[0])), ws[1], bs[1])), ws[2], bs[2]
                )
            ),
        )
    for label, kernel in kernels.items():
        call = step(kernel, args.op, args.rows, args.mode == "train", torch.bfloat16)
        with torch.no_grad() if args.mode == "infer" else torch.enable_grad():
            for _ in range(3):
                call()
            torch.cuda.synchronize()
            print(f"profiling {label}: {args.op} M={args.rows} {args.mode}", flush=True)
            torch.cuda.cudart().cudaProfilerStart()
            call()
            torch.cuda.synchronize()
            torch.cuda.cudart().cudaProfilerStop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
