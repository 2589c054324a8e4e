"""act_and_mul on [M, 3072] bf16 gelu_tanh, every candidate in one process on the GPU: the built stable-ABI
variant forced to each of its implementations (CUDA C++ and the AOT Triton cubin), torch.compile of the eager
expression, and the Triton kernel (kernel_src's source, JIT) at several BLOCK / num_warps, each with a fresh
output per call (what an op does) and with one preallocated output (what bench/cuda_proto's standalone harness
does, which measured the same CUDA kernel ~1.3 µs faster than the op on 2026-12-04; for the Triton kernel the two
made no difference). GPU µs per call from graph replay.

    PYTHONPATH=kernel_src python bench/act_mul_sweep.py --variant-dir DIR=stable-abi [--json out.json]
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness

ROWS = (1024, 4096, 8192)
CONFIGS = ((1024, 4), (2048, 4), (2048, 8), (4096, 8), (4096, 16), (8192, 8), (8192, 16), (16384, 16))


def candidates(m: int, label: str, kernel, compiled, act_and_mul_kernel) -> tuple[dict, torch.Tensor]:
    """name -> call for M=m rows (fresh inputs), and the float64 result they must all match."""
    g = torch.randn(m, 3072, device="cuda", dtype=torch.bfloat16)
    u = torch.randn(m, 3072, device="cuda", dtype=torch.bfloat16)
    n, kept = g.numel(), torch.empty_like(g)
    calls = {
        f"{label} {impl}": (impl, lambda: kernel.act_and_mul(g, u, "gelu_tanh"))
        for impl in ("cuda", "triton")
    }
    calls["torch.compile"] = (None, lambda: compiled(g, u))

    def jit(block: int, warps: int, fresh: bool):
        def call():
            out = torch.empty_like(g) if fresh else kept
            act_and_mul_kernel[((n + block - 1) // block,)](g, u, out, n, ACT=3, BLOCK=block, num_warps=warps)
            return out

        return call

    for block, warps in CONFIGS:
        for fresh in (True, False):
            calls[f"triton jit {block}x{warps} {'fresh' if fresh else 'same'} out"] = (
                None,
                jit(block, warps, fresh),
            )
    return calls, F.gelu(g.double(), approximate="tanh") * u.double()


def main(argv: list[str] | None = None) -> int:
    got = harness.parse_and_load_cuda(harness.tool_parser(__doc__), argv, "act_mul_sweep")
    if got is None:
        return 2
    args, label, kernel = got
    ns = getattr(torch.ops, kernel.OPS_NAMESPACE)
    from fused_mlp.triton.act_and_mul import act_and_mul_kernel

    compiled = torch.compile(lambda g, u: F.gelu(g, approximate="tanh") * u)
    rows = []
    for m in ROWS:
        calls, expected = candidates(m, label, kernel, compiled, act_and_mul_kernel)
        for name, (impl, fn) in calls.items():
            if impl:
                ns.cuda_set_path("act_and_mul", impl)
            try:
                out = fn()
                row = {
                    "rows": m,
                    "impl": name,
                    "gpu_us": harness.gpu_us(fn),
                    "rel_diff": harness.rel_err(out, expected),
                }
            finally:
                ns.cuda_set_path("act_and_mul", "table")
            rows.append(row)
            print(row, flush=True)
    harness.write_json(args.json, {"environment": harness.environment(), "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
