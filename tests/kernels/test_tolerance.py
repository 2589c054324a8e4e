"""The per-dtype tolerances must catch real kernel bugs: run the real GEMM kernel with classic mistakes
(a reduction one term short, a dropped bias, the wrong activation variant) and check each fails."""

import os

import fused_mlp.reference as ref
import pytest
import torch
from kernel_numerics import TOL, as64, randn, rel_err

pytestmark = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1", reason="runs the Triton kernels on CPU: set TRITON_INTERPRET=1"
)


def _run_kernel(x, w, b, activation, k_used):
    from fused_mlp.triton import forward

    out = torch.empty(x.shape[0], w.shape[0], dtype=x.dtype)
    # Narrowing the operands makes the kernel reduce over k_used columns only.
    return forward.linear_rows(x[:, :k_used], w[:, :k_used], b, activation, out)


@pytest.mark.parametrize("dtype", (torch.float32, torch.float16, torch.bfloat16))
def test_one_term_short_reduction_fails(dtype):
    x, w, b = randn(37, 96, dtype=dtype), randn(80, 96, dtype=dtype, scale=0.1), randn(80, dtype=dtype)
    expected = ref.linear(*as64(x, w, b), "none")
    assert rel_err(_run_kernel(x, w, b, "none", 96), expected) <= TOL[dtype]
    assert rel_err(_run_kernel(x, w, b, "none", 95), expected) > TOL[dtype]


@pytest.mark.parametrize("dtype", (torch.float32, torch.float16, torch.bfloat16))
def test_dropped_bias_fails(dtype):
    x, w, b = (
        randn(37, 96, dtype=dtype),
        randn(80, 96, dtype=dtype, scale=0.1),
        randn(80, dtype=dtype, scale=0.3),
    )
    expected = ref.linear(*as64(x, w, b), "relu")
    assert rel_err(_run_kernel(x, w, None, "relu", 96), expected) > TOL[dtype]


def test_gelu_instead_of_gelu_tanh_fails_in_fp32():
    x, w = randn(37, 96, dtype=torch.float32), randn(80, 96, dtype=torch.float32, scale=0.1)
    expected = ref.linear(*as64(x, w), activation="gelu_tanh")
    assert rel_err(_run_kernel(x, w, None, "gelu", 96), expected) > TOL[torch.float32]


def test_nan_never_passes():
    assert rel_err(torch.tensor([float("nan"), 1.0]), torch.tensor([1.0, 1.0])) == float("inf")
