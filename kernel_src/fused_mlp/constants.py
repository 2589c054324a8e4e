"""Every environment variable the kernel package's Python reads, in one place (registry/constants.py is
kernel-hub's). Each is a function that reads when called; a module that decides once calls it at import.
The CUDA extension reads its own two in C++: FUSED_MLP_CUDA_DISABLE (paths switched off) and
FUSED_MLP_GEMM_TUNE."""

from __future__ import annotations

import os


def interpret() -> bool:
    """TRITON_INTERPRET=1: the Triton kernels run on CPU tensors through Triton's interpreter (how CI tests them)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def pdl_enabled() -> bool:
    """FUSED_MLP_PDL=0 turns programmatic dependent launch off (on by default where the arch has it)."""
    return os.environ.get("FUSED_MLP_PDL", "1") != "0"


def cublas_enabled() -> bool:
    """FUSED_MLP_CUBLAS=0 keeps every forward GEMM the Triton backend would give cuBLAS on Triton."""
    return os.environ.get("FUSED_MLP_CUBLAS", "1") != "0"


def aot_disabled() -> bool:
    """FUSED_MLP_AOT=0: compile Triton kernels just in time instead of loading the build's shipped cubins."""
    return os.environ.get("FUSED_MLP_AOT") == "0"
