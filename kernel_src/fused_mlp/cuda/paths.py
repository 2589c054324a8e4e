"""Which implementation runs each step of the CUDA backend's ops, per GPU arch and row count.

Data only, read at build time: build/cuda/embed_cubins.py compiles this table into the extension
(`_C.abi3.so`) and embeds the Triton cubins that the table's "triton" rows need, so a call picks its
kernels in C++ with no Python per kernel. Stdlib only: the build reads it without importing torch.

Steps: `linear` (every GEMM with a bias/activation epilogue: `linear`, each `mlp` layer, the gated
down projection), `gate_up` (the gated MLP's act(x W_g^T) * (x W_u^T)), `act_and_mul`.
Implementations:
- `triton`: our Triton kernel, compiled ahead of time for the arch (fused epilogue; launched with
  programmatic dependent launch where its config says so). bf16/fp16, 16-byte aligned operands, sizes
  the cubin was specialised for; any other call takes the step's fallback.
- `cublaslt`: a cuBLASLt GEMM with the bias/relu/gelu_tanh epilogue (gelu and silu: one more kernel).
- `split`: gate_up as two `linear` steps (gate, up) into scratch, then the `act_and_mul` step.
- `cuda`: the CUDA C++ elementwise act_and_mul kernel.
FALLBACK names what runs when the chosen implementation cannot take a call (fp32, misaligned, no cubin).

Rows: (max rows M or None for any, implementation); the first row whose bound admits M wins. An arch
without an entry uses "default". Numbers behind each choice: bench/RESULTS.md ("path table").
"""

from __future__ import annotations

STEPS = ("linear", "gate_up", "act_and_mul")
IMPLS = {
    "linear": ("triton", "cublaslt"),
    "gate_up": ("triton", "split"),
    "act_and_mul": ("triton", "cuda"),
}
FALLBACK = {"linear": "cublaslt", "gate_up": "split", "act_and_mul": "cuda"}
# The Triton kernel (fused_mlp.triton) behind each step's "triton" implementation.
TRITON_KERNELS = {"linear": "linear_kernel", "gate_up": "gate_up_kernel", "act_and_mul": "act_and_mul_kernel"}

Rows = tuple[tuple[int | None, str], ...]

PATHS: dict[str, dict[str, Rows]] = {
    # H200, bf16, 2026-12-03 (bench/bench_paths.py, GPU µs per call in a graph; bench/RESULTS.md "path
    # table"). linear, summed over mlp 3x1024 relu+bias and a 3072->768 linear: M=1 Triton 23.6 vs cuBLASLt
    # 29.1; M=16 20.8 vs 18.2; M=1024 36.2 vs 26.6; M=8192 175.7 vs 131.1. gate_up (gated 768x3072): Triton
    # fused 13.3-16.5 vs split 16.6-18.7 up to M=256; M=1024 34.9 vs 34.6; M=8192 221.7 vs 208.5 (the WMMA
    # kernel, 41-559, lost everywhere and is gone). act_and_mul [M, 3072]: CUDA 1.7-2.8 vs Triton 2.4-2.9 up to
    # M=256; from M=1024 Triton (8192: 37.7 vs 40.8).
    "sm_90a": {
        "linear": ((16, "triton"), (None, "cublaslt")),
        "gate_up": ((256, "triton"), (None, "split")),
        "act_and_mul": ((256, "cuda"), (None, "triton")),
    },
    # Not measured on other archs yet: the vendor library and the portable CUDA kernels.
    "default": {
        "linear": ((None, "cublaslt"),),
        "gate_up": ((None, "split"),),
        "act_and_mul": ((None, "cuda"),),
    },
}


def triton_archs() -> dict[str, set[str]]:
    """arch -> the Triton kernel names its rows use (the cubins the build must embed for it)."""
    return {
        arch: {TRITON_KERNELS[step] for step, rows in steps.items() if any(i == "triton" for _, i in rows)}
        for arch, steps in PATHS.items()
        if arch != "default"
    }
