"""The Hopper GEMM core (hopper.py: TMA descriptors made in the kernel, persistent grid, every epilogue) on
the CPU interpreter against float64: Triton 3.6's interpreter runs tensor-descriptor kernels, so CI
checks the kernels' logic here; wgmma, TMA hardware, warp specialization and speed are checked on the
H200 (test_gpu.py; the tile sweep, `git show 1aded6b^:bench/tune_gemm.py`). Small tiles make odd shapes span
several tiles and the 4 interpreter programs walk several tiles each (the persistent loop)."""

import os

import fused_mlp.reference as ref
import pytest
import torch
from fused_mlp.triton import backward, configs, forward, gemm, ops
from kernel_numerics import as64, assert_close, grads, randn

pytestmark = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1", reason="runs the Triton kernels on CPU: set TRITON_INTERPRET=1"
)
DTYPES = (torch.float32, torch.float16, torch.bfloat16)
SMALL = configs.TmaConfig(32, 32, 16, 2, 4, 2)
SPLIT = configs.TmaConfig(32, 32, 16, 2, 4, 2, epi_split=True)


@pytest.fixture
def hopper_tables(monkeypatch):
    """Route every role to the Hopper kernels on the interpreter (no arch table names it by default)."""
    for table in configs.TMA_ROLES.values():
        monkeypatch.setitem(table, "interpreter", ((None, SMALL),))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cfg", (SMALL, SPLIT), ids=("tile", "epi_split"))
def test_linear_every_activation_and_pre_store(dtype, cfg):
    # K, N multiples of 8 (TMA's 16-byte rule) but not of the tile; 37 rows = 2 row tiles, one ragged
    x, w, b = randn(37, 56, dtype=dtype), randn(72, 56, dtype=dtype, scale=0.2), randn(72, dtype=dtype)
    x64, w64, b64 = as64(x, w, b)
    for activation in ref.ACTIVATIONS:
        out, pre = (
            torch.full((37, 72), float("nan"), dtype=dtype),
            torch.full((37, 72), float("nan"), dtype=dtype),
        )
        forward.linear_rows(x, w, b, activation, out, cfg, pre=pre)
        assert_close(out, ref.linear(x64, w64, b64, activation), dtype, f"tma linear {activation}")
        assert_close(pre, ref.linear(x64, w64, b64, "none"), dtype, "tma linear pre-activation")


@pytest.mark.parametrize("dtype", DTYPES)
def test_linear_one_row_no_bias(dtype):
    x, w = randn(1, 40, dtype=dtype), randn(24, 40, dtype=dtype, scale=0.2)
    out = torch.full((1, 24), float("nan"), dtype=dtype)
    forward.linear_rows(x, w, None, "gelu_tanh", out, SMALL)
    assert_close(out, ref.linear(*as64(x, w), None, "gelu_tanh"), dtype, "tma linear M=1")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cfg", (SMALL, SPLIT), ids=("tile", "epi_split"))
def test_gate_up_with_and_without_pre_activation_store(dtype, cfg):
    x = randn(37, 48, dtype=dtype)
    wg, wu = randn(40, 48, dtype=dtype, scale=0.2), randn(40, 48, dtype=dtype, scale=0.2)
    x64, wg64, wu64 = as64(x, wg, wu)
    g64, u64 = x64 @ wg64.T, x64 @ wu64.T
    for store in (False, True):
        h, gu = (
            torch.full((37, 40), float("nan"), dtype=dtype),
            torch.full((2, 37, 40), float("nan"), dtype=dtype),
        )
        forward.gate_up_rows(x, wg, wu, "silu", h, cfg, gu=gu if store else None)
        assert_close(h, ref.act_and_mul(g64, u64, "silu"), dtype, f"tma gate_up store={store}")
        if store:
            assert_close(gu, torch.stack([g64, u64]), dtype, "tma gate_up (g, u)")


def test_gate_up_fits_only_weights_one_tma_tensor_can_span():
    """Distinct bases less than 2**40 bytes apart (TMA's largest stride), one row stride."""

    class W:  # what gate_up_fits reads of a tensor
        def __init__(self, ptr, ld=768):
            self.ptr, self.ld = ptr, ld

        def data_ptr(self):
            return self.ptr

        def stride(self, dim):
            return self.ld

    base = 1 << 33
    assert gemm.gate_up_fits(W(base), W(base + 3072 * 768 * 2))
    assert gemm.gate_up_fits(W(base + 4096), W(base))  # w_up below w_gate
    assert not gemm.gate_up_fits(W(base), W(base))  # one tensor twice
    assert not gemm.gate_up_fits(W(base), W(base + (1 << 40)))  # further apart than a TMA stride reaches
    assert not gemm.gate_up_fits(W(base), W(base + 4096, ld=1024))


@pytest.mark.parametrize("layout", ("up_first", "one_tensor", "same_tensor"))
def test_gate_up_reads_its_weights_in_any_layout(layout):
    """The kernel reads w_gate and w_up as two planes of one 3D tensor, the lower address first: w_up
    below w_gate, both views of one [2N, K] weight, or one tensor passed twice (no second plane: the
    portable kernel takes it) must all give act(g) * u with g from w_gate."""
    dtype = torch.float32
    x = randn(37, 48, dtype=dtype)
    if layout == "one_tensor":
        w = randn(80, 48, dtype=dtype, scale=0.2)
        wg, wu = w[:40], w[40:]
    else:
        wg, wu = randn(40, 48, dtype=dtype, scale=0.2), randn(40, 48, dtype=dtype, scale=0.2)
        if layout == "same_tensor":
            wu = wg
        elif wu.data_ptr() > wg.data_ptr():
            wg, wu = wu, wg
    assert (wu.data_ptr() < wg.data_ptr()) == (layout == "up_first")
    x64, wg64, wu64 = as64(x, wg, wu)
    g64, u64 = x64 @ wg64.T, x64 @ wu64.T
    h, gu = (
        torch.full((37, 40), float("nan"), dtype=dtype),
        torch.full((2, 37, 40), float("nan"), dtype=dtype),
    )
    forward.gate_up_rows(x, wg, wu, "gelu_tanh", h, SMALL, gu=gu)
    assert_close(h, ref.act_and_mul(g64, u64, "gelu_tanh"), dtype, f"tma gate_up {layout}")
    assert_close(gu, torch.stack([g64, u64]), dtype, f"tma gate_up (g, u) {layout}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_backward_gemms(dtype, hopper_tables):
    """wgrad (A and B transposed), dgrad with the act' epilogue, and the gated backward's four GEMMs."""
    dz, x, w = randn(37, 40, dtype=dtype), randn(37, 56, dtype=dtype), randn(40, 56, dtype=dtype, scale=0.2)
    pre = randn(37, 56, dtype=dtype)
    dz64, x64, w64, pre64 = as64(dz, x, w, pre)
    out = torch.full((40, 56), float("nan"), dtype=dtype)
    assert_close(backward.wgrad_rows(dz, x, out), dz64.T @ x64, dtype, "tma wgrad")
    dx = torch.full((37, 56), float("nan"), dtype=dtype)
    z = pre64.detach().requires_grad_()
    (want,) = torch.autograd.grad(ref.apply_activation(z, "gelu"), z, dz64 @ w64)
    assert_close(backward.dgrad_rows(dz, w, dx, pre, "gelu"), want, dtype, "tma dgrad act'")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows", (1, 37))
def test_gated_mlp_training_forward_backward(dtype, rows, hopper_tables):
    """The public op under autograd: training forward (h and (g, u) stored by the gate/up epilogue) and the
    fused backward op (dg/du epilogue, wgrad, dual dgrad), all on the Hopper kernels."""
    x = randn(rows, 48, dtype=dtype, grad=True)
    wg, wu = (randn(40, 48, dtype=dtype, scale=0.2, grad=True) for _ in range(2))
    wd = randn(48, 40, dtype=dtype, scale=0.2, grad=True)
    out = ops.gated_mlp(x, wg, wu, wd, "gelu_tanh")
    p64 = as64(x, wg, wu, wd)
    expected = ref.gated_mlp(*p64, "gelu_tanh")
    assert_close(out, expected, dtype, "gated_mlp forward")
    up = torch.randn(expected.shape, dtype=torch.float64)
    for name, got, want in zip(("dx", "dw_gate", "dw_up", "dw_down"), grads(out, (x, wg, wu, wd), up),
                               grads(expected, p64, up)):  # fmt: skip
        assert_close(got, want, dtype, f"gated_mlp {name}")


def test_unaligned_shapes_take_the_portable_kernels(hopper_tables, monkeypatch):
    """K = 33 breaks TMA's 16-byte row rule: the call must not reach the Hopper kernel, and stays right."""
    calls = []
    monkeypatch.setattr(forward, "tma_gemm", lambda *a, **k: calls.append(a))
    x, w = randn(9, 33, dtype=torch.float32), randn(16, 33, dtype=torch.float32, scale=0.2)
    assert not gemm.tma_ok(x, w)
    out = torch.empty(9, 16)
    forward.linear_rows(x, w, None, "relu", out, SMALL)
    assert not calls
    assert_close(out, ref.linear(*as64(x, w), None, "relu"), torch.float32, "portable fallback")
