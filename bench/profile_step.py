"""One call of a bench_ops.py workload (forward, or forward + backward) between cudaProfilerStart/Stop, for Nsight
Compute to list every kernel it launches with its GPU time: where a row of the ops table goes. The call is the one
bench_ops.py times (the shared workloads' inputs and `as_call`: backward through autograd.grad, nothing accumulated
into .grad), for each loaded kernel and, with --compile, torch.compile of bench_ops' eager forward. Warm-up calls
first, so the profiled one runs what a steady loop runs.

    ncu --profile-from-start off --cache-control none --clock-control none --metrics gpu__time_duration.sum \\
        --csv python bench/profile_step.py --variant-dir DIR=stable-abi --op gated --rows 8192 --mode train
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
import bench_ops
import harness

from registry.client.workloads import Workload, api_forward, as_call, make_inputs


def add_workload_args(parser: argparse.ArgumentParser) -> None:
    """Which kernels to load and which bench_ops workload to run, with the anchors to run beside them (shared
    with graph_timeline.py)."""
    harness.add_loading_args(parser)
    parser.add_argument("--op", choices=("gated", "mlp", "act_and_mul"), default="gated")
    parser.add_argument("--rows", type=int, default=8192)
    parser.add_argument("--mode", choices=("train", "infer"), default="train")
    parser.add_argument(
        "--compile", action="store_true", help="also torch.compile of bench_ops' eager forward"
    )
    parser.add_argument(
        "--cublaslt",
        action="store_true",
        help="also bench_ops' cuBLASLt-epilogue anchor (torch._addmm_activation; mlp inference only)",
    )


def workload_forwards(args: argparse.Namespace) -> tuple[Workload, dict, dict]:
    """(workload, its bf16 inputs, {label: forward}) for every loaded kernel and each anchor asked for."""
    w = Workload(args.op, args.rows, train=args.mode == "train")
    a = make_inputs(w, torch.bfloat16)
    forwards = {
        label: (lambda k=kernel: api_forward(w, a, k)) for label, kernel in harness.load_kernels(args).items()
    }
    if args.compile:
        forwards["compile"] = torch.compile(lambda: bench_ops.eager_forward(w, a), dynamic=False)
    if args.cublaslt and bench_ops.cublaslt_forward(w, a) is not None:
        forwards["cublaslt_epilogue"] = lambda: bench_ops.cublaslt_forward(w, a)
    return w, a, forwards


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_workload_args(parser)
    args = parser.parse_args(argv)
    w, a, forwards = workload_forwards(args)
    for label, forward in forwards.items():
        call = as_call(w, a, forward)
        for _ in range(3):
            call()
        torch.cuda.synchronize()
        print(f"profiling {label}: {w.name}", flush=True)
        torch.cuda.cudart().cudaProfilerStart()
        call()
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
