"""CUDA C++ backend of fused_mlp: cuBLASLt GEMMs with fused bias/activation epilogues, a fused
gate/up tensor-core kernel for the gated MLP, and elementwise kernels; one `_C.abi3.so` built on the
torch stable ABI (torch >= 2.11, CUDA 13), SASS per GPU arch plus PTX for the newest.

`ops` is the backend module the package selects (docs/CONTRACTS.md); `available()` says whether it
can run here and, when not, why.
"""

from __future__ import annotations

from . import _library


def available() -> tuple[bool, str]:
    """(True, "") when the compiled extension loads here and has code for this GPU, else (False, why)."""
    return _library.availability()
