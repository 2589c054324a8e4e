"""K-major weights (a [N, K] weight that is the transpose view of a contiguous [K, N] tensor, as GPT-2's Conv1D
keeps its [in, out] weight) through the Triton kernels on the CPU interpreter: `linear` and `mlp`, forward and
backward, against float64 and against the same weights row-major; the kernel reads the parameter's own memory
(no copy) and the gradient lands on the parameter in its layout."""

import os

import fused_mlp
import fused_mlp.reference as ref
import pytest
import torch
from fused_mlp.triton import gemm
from kernel_numerics import as64, assert_close, grads, randn

pytestmark = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1", reason="runs the Triton kernels on CPU: set TRITON_INTERPRET=1"
)
DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def kmajor(k: int, n: int, dtype: torch.dtype, scale: float) -> torch.Tensor:
    """A leaf [K, N] parameter (Conv1D's layout) requiring grad; the op gets its transpose view."""
    return randn(k, n, dtype=dtype, scale=scale, grad=True)


@pytest.fixture
def launches(monkeypatch):
    """(kernel name, weight data_ptr, weight strides) of every GEMM launch, recorded around the real launcher."""
    seen = []
    real = gemm.launch

    def record(kdef, grid, args, consts, num_warps, num_stages):
        seen.append((kdef.name, args[1].data_ptr(), tuple(args[1].stride())))
        return real(kdef, grid, args, consts, num_warps, num_stages)

    monkeypatch.setattr(gemm, "launch", record)
    return seen


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("activation", ("none", "relu", "gelu_tanh", "silu"))
@pytest.mark.parametrize("has_bias", (True, False))
def test_linear_kmajor_forward_backward(dtype, activation, has_bias):
    x = randn(2, 37, 96, dtype=dtype, grad=True)
    wp = kmajor(96, 80, dtype, 0.1)
    b = randn(80, dtype=dtype, grad=True) if has_bias else None
    out = fused_mlp.linear(x, wp.t(), b, activation)
    x64, wp64, b64 = as64(x, wp, b)
    expected = ref.linear(x64, wp64.t(), b64, activation)
    assert_close(out, expected, dtype, "K-major linear forward")
    # The same weights row-major take the row-major kernel: both agree within the dtype's rounding.
    assert_close(out, fused_mlp.linear(x, wp.t().contiguous(), b, activation), dtype, "K-major vs row-major")
    up = torch.randn(expected.shape, dtype=torch.float64)
    got, want = grads(out, (x, wp, b), up), grads(expected, (x64, wp64, b64), up)
    for name, g, w in zip(("dx", "dW [in, out]", "db"), got, want):
        if w is not None:
            assert_close(g, w, dtype, f"K-major linear {name}")
    assert got[1].shape == wp.shape and got[1].stride() == wp.stride(), got[1].stride()


@pytest.mark.parametrize("dtype", DTYPES)
def test_gpt2_shaped_mlp_kmajor_forward_backward(dtype):
    """GPT-2's MLP: c_fc [H, 4H] and c_proj [4H, H] as Conv1D keeps them, gelu_tanh, biases; a K not a multiple
    of the block (the masked K loop reads K-major rows too); and one layer K-major beside a row-major one."""
    x = randn(3, 11, 72, dtype=dtype, grad=True)
    fc, proj = kmajor(72, 120, dtype, 72**-0.5), kmajor(120, 72, dtype, 120**-0.5)
    b_fc, b_proj = randn(120, dtype=dtype, grad=True), randn(72, dtype=dtype, grad=True)
    out = fused_mlp.mlp(x, [fc.t(), proj.t()], [b_fc, b_proj], "gelu_tanh")
    p64 = as64(x, fc, proj, b_fc, b_proj)
    expected = ref.mlp(p64[0], [p64[1].t(), p64[2].t()], p64[3:], "gelu_tanh")
    assert_close(out, expected, dtype, "K-major mlp forward")
    up = torch.randn(expected.shape, dtype=torch.float64)
    got = grads(out, (x, fc, proj, b_fc, b_proj), up)
    for i, (g, w) in enumerate(zip(got, grads(expected, p64, up))):
        assert_close(g, w, dtype, f"K-major mlp grad of input {i}")
    assert got[1].stride() == fc.stride() and got[2].stride() == proj.stride()
    mixed = fused_mlp.mlp(x, [fc.t(), proj.t().contiguous()], [b_fc, b_proj], "gelu_tanh")
    assert_close(mixed, expected, dtype, "mlp with one K-major and one row-major layer")


def test_kmajor_weight_is_read_in_place(launches):
    """Every GEMM of a K-major `linear` / `mlp` forward reads the parameter's own memory with its strides (the
    K-major kernel), inference and training alike; a row-major weight keeps the row-major kernel."""
    d = torch.float32
    x = randn(9, 48, dtype=d)
    fc, proj = kmajor(48, 64, d, 0.2), kmajor(64, 48, d, 0.2)
    with torch.no_grad():
        fused_mlp.mlp(x, [fc.t(), proj.t()], None, "gelu")
    # Training: the forward also stores the pre-activation (the same kernel into `pre`).
    fused_mlp.linear(x, fc.t(), None, "gelu_tanh").sum().backward()
    want = [("linear_kmajor_kernel", w.data_ptr(), (1, w.shape[1])) for w in (fc, proj, fc)]
    assert launches == want, launches
    launches.clear()
    row_major = fc.detach().t().contiguous()
    with torch.no_grad():
        fused_mlp.linear(x, row_major, None, "relu")
    assert launches == [("linear_kernel", row_major.data_ptr(), (48, 1))], launches


def test_nan_in_kmajor_weight_fails_the_check():
    """A NaN in the weight reaches the output (the kernel reads the element, it does not skip it) and the
    numerics check refuses it."""
    x = randn(5, 32, dtype=torch.float32)
    wp = kmajor(32, 16, torch.float32, 0.2).detach()
    wp[7, 3] = float("nan")
    out = fused_mlp.linear(x, wp.t(), None, "none")
    assert torch.isnan(out[:, 3]).all() and not torch.isnan(out[:, :3]).any()
    with pytest.raises(AssertionError, match="relative error inf"):
        assert_close(out, ref.linear(*as64(x, wp.t(), None), "none"), torch.float32, "NaN weight")


def test_strided_weight_of_neither_layout_still_computes():
    """A weight that is neither row-major nor K-major (every other column of a wider one) is laid out for the
    kernels once, as before, and gives the right result."""
    x = randn(6, 40, dtype=torch.float32)
    wide = randn(24, 80, dtype=torch.float32, scale=0.2)
    w = wide[:, ::2]
    assert w.stride() == (80, 2)
    assert_close(
        fused_mlp.linear(x, w, None, "silu"), ref.linear(*as64(x, w, None), "silu"), torch.float32, "strided"
    )


@pytest.mark.parametrize("dtype", DTYPES)
def test_hopper_kernel_reads_kmajor_weight_as_b_stored_k_by_n(dtype, launches):
    """On the Hopper tables' rows the TMA kernel takes a K-major weight as its B operand stored [K, N] (B_T),
    with the bias + activation epilogue and the training pre-activation store; checked with a small tile so
    the odd shape spans several tiles (test_hopper_interpreter.py runs the kernel's row-major forms)."""
    from fused_mlp.triton import configs, forward

    cfg = configs.TmaConfig(32, 32, 16, 2, 4, 2)
    x, b = randn(37, 56, dtype=dtype), randn(72, dtype=dtype)
    wp = randn(56, 72, dtype=dtype, scale=0.2)
    x64, w64, b64 = as64(x, wp.t(), b)
    out, pre = (torch.full((37, 72), float("nan"), dtype=dtype) for _ in range(2))
    forward.linear_rows(x, wp.t(), b, "gelu_tanh", out, cfg, pre=pre)
    assert_close(out, ref.linear(x64, w64, b64, "gelu_tanh"), dtype, "tma K-major linear")
    assert_close(pre, ref.linear(x64, w64, b64, "none"), dtype, "tma K-major pre-activation")
    assert launches == [("tma_gemm_kernel", wp.data_ptr(), (72, 1))], launches
