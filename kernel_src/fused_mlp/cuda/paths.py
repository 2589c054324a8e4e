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
- `wmma`: gate_up as one CUDA C++ tensor-core (WMMA) kernel with the act(g)*u epilogue.
- `cuda`: the CUDA C++ elementwise act_and_mul kernel.
FALLBACK names what runs when the chosen implementation cannot take a call (fp32, misaligned, no cubin).

Rows: (max rows M or None for any, implementation); the first row whose bound admits M wins. An arch
without an entry uses "default". Numbers behind each choice: bench/RESULTS.md ("path table").
"""

from __future__ import annotations

STEPS = ("linear", "gate_up", "act_and_mul")
IMPLS = {
    "linear": ("triton", "cublaslt"),
    "gate_up": ("triton", "split", "wmma"),
    "act_and_mul": ("triton", "cuda"),
}
FALLBACK = {"linear": "cublaslt", "gate_up": "split", "act_and_mul": "cuda"}
# The Triton kernel (fused_mlp.triton) behind each step's "triton" implementation.
TRITON_KERNELS = {"linear": "linear_kernel", "gate_up": "gate_up_kernel", "act_and_mul": "act_and_mul_kernel"}

Rows = tuple[tuple[int | None, str], ...]

PATHS: dict[str, dict[str, Rows]] = {
    # H200 (2026-12-02, bf16, GPU µs in a graph): 3-layer MLP 1024 at M=16 Triton+PDL 11.9 vs cuBLASLt
    # 13.2; at M=1024 cuBLASLt 19.2 vs Triton 22.2; gated M=1024 Triton fused 40.0 vs WMMA 85, M=8192
    # two cuBLAS GEMMs + act_and_mul (Liger's shape of work) 222 vs Triton 249; act_and_mul Triton 37.5 vs 40.4.
    "sm_90a": {
        "linear": ((16, "triton"), (None, "cublaslt")),
        "gate_up": ((1024, "triton"), (None, "split")),
        "act_and_mul": ((None, "triton"),),
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
