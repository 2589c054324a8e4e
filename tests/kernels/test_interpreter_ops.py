"""Every public op, forward and backward, through the Triton kernels on the CPU interpreter, against
the float64 reference: fp32/fp16/bf16 (bf16 dots upcast in the interpreter), odd shapes, leading batch
dims, with and without bias, every activation."""

import os

import fused_mlp
import fused_mlp.reference as ref
import pytest
import torch
from kernel_numerics import ACTIVATIONS, as64, assert_act_and_mul_far_tails, assert_close, grads, randn

pytestmark = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1", reason="runs the Triton kernels on CPU: set TRITON_INTERPRET=1"
)
DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def test_cpu_tensors_run_triton_under_interpreter():
    assert fused_mlp._CPU_OPS.__name__ == "fused_mlp.triton.ops"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("has_bias", (True, False))
def test_linear_forward_backward(dtype, activation, has_bias):
    x = randn(2, 37, 96, dtype=dtype, grad=True)
    w = randn(80, 96, dtype=dtype, scale=0.1, grad=True)
    b = randn(80, dtype=dtype, grad=True) if has_bias else None
    out = fused_mlp.linear(x, w, b, activation)
    x64, w64, b64 = as64(x, w, b)
    expected = ref.linear(x64, w64, b64, activation)
    assert_close(out, expected, dtype, "linear forward")
    up = torch.randn(expected.shape, dtype=torch.float64)
    for name, got, want in zip(
        ("dx", "dw", "db"), grads(out, (x, w, b), up), grads(expected, (x64, w64, b64), up)
    ):
        if want is not None:
            assert_close(got, want, dtype, f"linear {name}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_linear_k_not_multiple_of_block(dtype):
    x, w, b = randn(37, 40, dtype=dtype), randn(80, 40, dtype=dtype, scale=0.2), randn(80, dtype=dtype)
    assert_close(fused_mlp.linear(x, w, b, "silu"), ref.linear(*as64(x, w, b), "silu"), dtype, "linear K=40")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("activation", ("relu", "gelu", "gelu_tanh", "silu"))
def test_mlp_forward_backward(dtype, activation):
    x = randn(3, 13, 96, dtype=dtype, grad=True)
    ws = [randn(80, 96, dtype=dtype, scale=0.1, grad=True), randn(48, 80, dtype=dtype, scale=0.1, grad=True),
          randn(40, 48, dtype=dtype, scale=0.15, grad=True)]  # fmt: skip
    bs = [randn(80, dtype=dtype, grad=True), None, randn(40, dtype=dtype, grad=True)]
    out = fused_mlp.mlp(x, ws, bs, activation)
    x64, *p64 = as64(x, *ws, *bs)
    expected = ref.mlp(x64, p64[:3], p64[3:], activation)
    assert_close(out, expected, dtype, "mlp forward")
    if dtype != torch.float32 and activation == "relu":
        return  # relu'(z) flips where 16-bit rounding of a hidden layer moves z across 0 (eager misses as much)
    up = torch.randn(expected.shape, dtype=torch.float64)
    for i, (got, want) in enumerate(zip(grads(out, (x, *ws, *bs), up), grads(expected, (x64, *p64), up))):
        if want is not None:
            assert_close(got, want, dtype, f"mlp grad of input {i}")


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16))
def test_mlp_training_without_activation_frozen_input_and_weight(dtype):
    """activation "none" (no act' between layers), an input that needs no gradient (layer 0's dgrad is
    skipped) and a frozen middle weight: every other gradient still matches float64."""
    x = randn(2, 11, 64, dtype=dtype)
    ws = [randn(48, 64, dtype=dtype, scale=0.15, grad=True), randn(32, 48, dtype=dtype, scale=0.15),
          randn(24, 32, dtype=dtype, scale=0.2, grad=True)]  # fmt: skip
    bs = [None, randn(32, dtype=dtype, grad=True), randn(24, dtype=dtype, grad=True)]
    out = fused_mlp.mlp(x, ws, bs, "none")
    x64, *p64 = as64(x, *ws, *bs)
    expected = ref.mlp(x64, p64[:3], p64[3:], "none")
    assert_close(out, expected, dtype, "mlp forward")
    up = torch.randn(expected.shape, dtype=torch.float64)
    got, want = grads(out, (x, *ws, *bs), up), grads(expected, (x64, *p64), up)
    for i, (g, w) in enumerate(zip(got, want)):
        if w is not None:
            assert_close(g, w, dtype, f"mlp grad of input {i}")


def test_eager_training_dispatches_no_registered_op():
    """Eager forward + backward of every op launches the kernels directly: not one call goes through the
    registered custom ops (their dispatch and recompute made small-batch training host-bound)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    namespace = fused_mlp.OPS_NAMESPACE

    class Seen(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    x = randn(6, 32, dtype=torch.float32, grad=True)
    w1, w2 = (
        randn(48, 32, dtype=torch.float32, scale=0.2, grad=True),
        randn(32, 48, dtype=torch.float32, grad=True),
    )
    g, u = randn(6, 48, dtype=torch.float32, grad=True), randn(6, 48, dtype=torch.float32, grad=True)
    with Seen() as seen:
        loss = fused_mlp.mlp(x, [w1, w2], None, "gelu").sum() + fused_mlp.linear(x, w1, None, "silu").sum()
        loss = (
            loss
            + fused_mlp.gated_mlp(x, w1, w1, w2, "silu").sum()
            + fused_mlp.act_and_mul(g, u, "gelu").sum()
        )
        loss.backward()
    assert seen.ops, "the dispatch mode saw nothing: it did not observe the calls"
    assert not [op for op in seen.ops if op.startswith(namespace)], seen.ops
    assert x.grad is not None and w1.grad is not None and w2.grad is not None and g.grad is not None


def test_mlp_without_biases_and_single_layer():
    x, w = randn(5, 96, dtype=torch.float32), randn(80, 96, dtype=torch.float32, scale=0.1)
    assert_close(fused_mlp.mlp(x, [w]), ref.mlp(*as64(x), [as64(w)[0]]), torch.float32, "1-layer mlp")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_gated_mlp_forward_backward(dtype, activation):
    x = randn(2, 19, 96, dtype=dtype, scale=0.5, grad=True)
    wg, wu = (
        randn(80, 96, dtype=dtype, scale=0.1, grad=True),
        randn(80, 96, dtype=dtype, scale=0.1, grad=True),
    )
    wd = randn(96, 80, dtype=dtype, scale=0.1, grad=True)
    out = fused_mlp.gated_mlp(x, wg, wu, wd, activation)
    p64 = as64(x, wg, wu, wd)
    expected = ref.gated_mlp(*p64, activation)
    assert_close(out, expected, dtype, "gated_mlp forward")
    up = torch.randn(expected.shape, dtype=torch.float64)
    for name, got, want in zip(
        ("dx", "dwg", "dwu", "dwd"), grads(out, (x, wg, wu, wd), up), grads(expected, p64, up)
    ):
        assert_close(got, want, dtype, f"gated_mlp {name}")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_act_and_mul_forward_backward(dtype, activation):
    gate, up = randn(3, 37, 80, dtype=dtype, scale=2.0, grad=True), randn(3, 37, 80, dtype=dtype, grad=True)
    out = fused_mlp.act_and_mul(gate, up, activation)
    g64, u64 = as64(gate, up)
    expected = ref.act_and_mul(g64, u64, activation)
    assert_close(out, expected, dtype, "act_and_mul forward")
    upstream = torch.randn(expected.shape, dtype=torch.float64)
    for name, got, want in zip(
        ("dgate", "dup"), grads(out, (gate, up), upstream), grads(expected, (g64, u64), upstream)
    ):
        assert_close(got, want, dtype, f"act_and_mul {name}")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("activation", ("gelu_tanh", "silu", "gelu"))
def test_act_and_mul_far_tails(dtype, activation):
    """The Triton kernels' exp overflows to inf far below zero; outputs and gradients stay finite and close."""
    assert_act_and_mul_far_tails(fused_mlp.act_and_mul, ref.act_and_mul, dtype, activation, "cpu")


def test_non_contiguous_inputs():
    x = randn(96, 37, dtype=torch.float32).t()  # rows not unit-stride
    w = randn(96, 80, dtype=torch.float32, scale=0.1).t()
    assert_close(fused_mlp.linear(x, w), ref.linear(*as64(x, w)), torch.float32, "transposed operands")


def test_mismatched_dtypes_are_rejected_with_both_named():
    with pytest.raises(TypeError, match="weight is torch.float16.*x is torch.float32"):
        fused_mlp.linear(torch.randn(4, 8), torch.randn(8, 8, dtype=torch.float16))


def test_wrong_weight_shape_is_rejected():
    with pytest.raises(ValueError, match=r"weight has shape \(8, 5\)"):
        fused_mlp.linear(torch.randn(4, 8), torch.randn(8, 5))


@pytest.mark.parametrize(
    ("weights", "biases", "error", "message"),
    [
        (
            [(6, 8), (5, 6)],
            [None, torch.zeros(5, dtype=torch.float16)],
            TypeError,
            r"mlp layer 1: bias is torch.float16",
        ),
        (
            [(6, 8), (5, 7)],
            None,
            ValueError,
            r"mlp layer 1: weight has shape \(5, 7\) but the input has 6 features",
        ),
        (
            [(6, 8), (5, 6)],
            [torch.zeros(6), torch.zeros(4)],
            ValueError,
            r"mlp layer 1: bias has shape \(4,\), expected \(5,\)",
        ),
        ([(6, 8), (6,)], None, ValueError, r"mlp layer 1: weight has shape \(6,\)"),
    ],
)
def test_mlp_names_the_layer_and_tensor_that_does_not_fit(weights, biases, error, message):
    """check_mlp compares each tensor once on the fast path and words the error through check_tensors /
    check_linear_shapes only when something differs: the message still names the layer and the tensor."""
    ws = [torch.randn(*shape) for shape in weights]
    with pytest.raises(error, match=message):
        fused_mlp.mlp(torch.randn(3, 8), ws, biases, "relu")
