"""On a machine without a GPU the CUDA backend imports, says why it is unavailable, and a call fails
with "needs a CUDA device" (here: the unbuilt source tree under the CPU torch of .venv)."""

import pytest
import torch
from fused_mlp import cuda as cuda_backend
from fused_mlp.cuda import ops


def test_unavailable_with_reason():
    ok, why = cuda_backend.available()
    assert not ok and why


def test_call_needs_a_cuda_device():
    for call in (lambda: ops.linear(torch.randn(2, 3), torch.randn(4, 3)),
                 lambda: ops.mlp(torch.randn(2, 3), [torch.randn(4, 3)]),
                 lambda: ops.gated_mlp(torch.randn(2, 3), torch.randn(4, 3), torch.randn(4, 3), torch.randn(3, 4)),
                 lambda: ops.act_and_mul(torch.randn(2, 3), torch.randn(2, 3), "silu")):  # fmt: skip
        with pytest.raises(RuntimeError, match="needs a CUDA device"):
            call()


def test_public_api_matches_the_package():
    import fused_mlp

    assert ops.__all__ == fused_mlp.__all__
    import inspect

    for name in fused_mlp.__all__:
        assert inspect.signature(getattr(ops, name)) == inspect.signature(getattr(fused_mlp, name)), name
