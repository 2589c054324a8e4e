"""Triton backend of fused_mlp: GEMMs with fused epilogues, the gated GEMM, elementwise act_and_mul.

`ops` is the backend module the package selects (docs/CONTRACTS.md); `aot` loads shipped cubins.
"""

from __future__ import annotations

from .. import constants


def available() -> tuple[bool, str]:
    """(True, "") when Triton can run here: a CUDA device of sm_80+, or TRITON_INTERPRET=1."""
    try:
        import triton  # noqa: F401
    except ImportError as exc:
        return False, f"triton is not installed ({exc}); pip install triton"
    import torch

    if constants.interpret():
        return True, ""
    if not torch.cuda.is_available():
        return False, "no CUDA device (set TRITON_INTERPRET=1 to run the kernels on the CPU interpreter)"
    from .configs import MIN_CC

    major, minor = torch.cuda.get_device_capability()
    if (major, minor) < MIN_CC:
        return (
            False,
            f"GPU compute capability {major}.{minor} is below {MIN_CC[0]}.{MIN_CC[1]}, which these kernels need",
        )
    return True, ""
