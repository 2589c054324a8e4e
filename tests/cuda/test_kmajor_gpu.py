"""K-major weights on the CUDA backend: a [N, K] weight that is the transpose view of a contiguous [K, N]
tensor (GPT-2's Conv1D keeps [in, out]; layers.GPT2MLP passes weight.t()). `linear` and `mlp` read it in place
through cuBLASLt's transpose flag, forward and backward (the dW GEMM writes the gradient K-major, so the
parameter gets it in its own layout), and the steps that read weights row-major (Triton cubins, the persistent
chain kernels, gemv) are not chosen for it. Checked against float64 and against the same weights row-major, at
every path the table or a forced step would otherwise take, and with the profiler: no copy of any tensor, where
the op used to lay out both weights on every call. Runs against a built variant, as tests/cuda/test_cuda_gpu.py."""

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parents[1] / "kernels"))
import fused_mlp.reference as ref
from fused_mlp import cuda as cuda_backend
from fused_mlp._build_info import OPS_NAMESPACE
from kernel_numerics import as64, assert_close, grads, randn
from path_forcing import forced

OK, WHY = cuda_backend.available() if torch.cuda.is_available() else (False, "no CUDA device")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not OK, reason=f"CUDA backend unavailable: {WHY}")]
if OK:
    from fused_mlp.cuda import ops
DTYPES = (torch.bfloat16, torch.float16, torch.float32)
DEV = "cuda"


def conv1d_weight(k: int, n: int, dtype, grad: bool = True) -> torch.Tensor:
    """A leaf [K, N] parameter as Conv1D keeps it; the ops get its transpose view [N, K] with strides (1, N)."""
    return randn(k, n, dtype=dtype, device=DEV, scale=k**-0.5, grad=grad)


def check_training(out, inputs, expected, p64, dtype, what):
    """Every gradient against float64, and each [K, N] parameter's gradient in the parameter's own layout."""
    upstream = torch.randn(expected.shape, dtype=torch.float64, device=DEV)
    for i, (got, want) in enumerate(zip(grads(out, inputs, upstream), grads(expected, p64, upstream))):
        if want is not None:
            assert_close(got, want, dtype, f"{what} grad of input {i}")
            assert got.stride() == inputs[i].stride(), f"{what} grad {i}: strides {got.stride()}"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("activation", ("none", "relu", "gelu", "gelu_tanh", "silu"))
def test_linear_kmajor(dtype, activation):
    for has_bias, rows in ((True, 1), (False, 37), (True, 1100)):
        x = randn(rows, 96, dtype=dtype, device=DEV, grad=True)
        wp = conv1d_weight(96, 80, dtype)
        b = randn(80, dtype=dtype, device=DEV, grad=True) if has_bias else None
        what = f"K-major linear {activation} M={rows} bias={has_bias}"
        out = ops.linear(x, wp.t(), b, activation)
        p64 = as64(x, wp, b)
        expected = ref.linear(p64[0], p64[1].t(), p64[2], activation)
        assert_close(out, expected, dtype, what)
        with torch.no_grad():
            infer = ops.linear(x, wp.t(), b, activation)
            assert_close(
                infer, ops.linear(x, wp.t().contiguous(), b, activation), dtype, f"{what} vs row-major"
            )
        assert_close(infer, expected, dtype, f"{what} inference")
        check_training(out, (x, wp, b), expected, p64, dtype, what)


@pytest.mark.parametrize("dtype", DTYPES)
def test_gpt2_mlp_kmajor_at_every_table_row(dtype):
    """GPT-2's widths (768 -> 3072 -> 768, gelu_tanh, biases) at row counts where row-major weights take the
    persistent chain kernels (1, 16), the Triton linear (300) and cuBLASLt (2048); a layer of each layout."""
    fc, proj = conv1d_weight(768, 3072, dtype), conv1d_weight(3072, 768, dtype)
    b_fc, b_proj = (randn(n, dtype=dtype, device=DEV, scale=0.1, grad=True) for n in (3072, 768))
    for rows in (1, 16, 300, 2048):
        x = randn(rows, 768, dtype=dtype, device=DEV, grad=True)
        p64 = as64(x, fc, proj, b_fc, b_proj)
        expected = ref.mlp(p64[0], [p64[1].t(), p64[2].t()], p64[3:], "gelu_tanh")
        with torch.no_grad():
            assert_close(
                ops.mlp(x, [fc.t(), proj.t()], [b_fc, b_proj], "gelu_tanh"), expected, dtype, f"M={rows}"
            )
            mixed = ops.mlp(x, [fc.t(), proj.t().contiguous()], [b_fc, b_proj], "gelu_tanh")
            assert_close(mixed, expected, dtype, f"one K-major, one row-major layer M={rows}")
        out = ops.mlp(x, [fc.t(), proj.t()], [b_fc, b_proj], "gelu_tanh")
        check_training(out, (x, fc, proj, b_fc, b_proj), expected, p64, dtype, f"K-major mlp M={rows}")


@pytest.mark.parametrize(
    ("step", "impl"),
    (("linear", "triton"), ("linear", "tma"), ("linear", "gemv"), ("chain", "persistent"),
     ("chain_backward", "persistent")),
)  # fmt: skip
def test_forced_steps_that_read_row_major_fall_back(step, impl):
    """A step forced to an implementation that reads weights row-major still gives the right result with
    K-major weights (cuBLASLt, layer by layer), relu chains included (the persistent backward's activation)."""
    d = torch.bfloat16
    fc, proj = conv1d_weight(256, 512, d), conv1d_weight(512, 128, d)
    b_fc, b_proj = randn(512, dtype=d, device=DEV, grad=True), randn(128, dtype=d, device=DEV, grad=True)
    with forced(step, impl):
        for rows in (1, 16, 1100):
            x = randn(rows, 256, dtype=d, device=DEV, grad=True)
            p64 = as64(x, fc, proj, b_fc, b_proj)
            expected = ref.mlp(p64[0], [p64[1].t(), p64[2].t()], p64[3:], "relu")
            out = ops.mlp(x, [fc.t(), proj.t()], [b_fc, b_proj], "relu")
            assert_close(out, expected, d, f"{step}={impl} M={rows}")
            # relu' flips where bf16 rounding moves a hidden pre-activation across 0: compare the weight
            # gradients of the last layer and the biases, which see no flip of their own layer.
            upstream = torch.randn(expected.shape, dtype=torch.float64, device=DEV)
            got = grads(out, (x, fc, proj, b_fc, b_proj), upstream)
            want = grads(expected, p64, upstream)
            assert_close(got[2], want[2], d, f"{step}={impl} M={rows} dW c_proj")
            assert_close(got[4], want[4], d, f"{step}={impl} M={rows} db c_proj")
            assert got[1].stride() == fc.stride() and got[2].stride() == proj.stride()


def _copies(call) -> list[str]:
    """Names of every profiler event of `call` (host ops and GPU kernels) that copies a tensor."""
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    ) as prof:
        call()
        torch.cuda.synchronize()
    names = {e.name for e in prof.events()}
    return sorted(n for n in names if any(w in n.lower() for w in ("copy", "clone", "contiguous")))


@pytest.mark.parametrize("rows", (1, 16, 2048))
def test_no_copy_of_kmajor_weights_forward_or_backward(rows):
    """GPT-2's MLP with its Conv1D weights passed transposed: the inference forward, and a training forward +
    backward with gradients accumulated into the parameters, run without one copy (the op used to lay both
    weights out row-major per call: aten::contiguous -> clone -> copy_ and a copy kernel each; and autograd
    copied each weight gradient into the parameter's layout)."""
    d = torch.bfloat16
    fc, proj = conv1d_weight(768, 3072, d), conv1d_weight(3072, 768, d)
    b_fc, b_proj = (randn(n, dtype=d, device=DEV, grad=True) for n in (3072, 768))
    x = randn(rows, 768, dtype=d, device=DEV, grad=True)
    upstream = randn(rows, 768, dtype=d, device=DEV)

    def infer():
        with torch.no_grad():
            ops.mlp(x, [fc.t(), proj.t()], [b_fc, b_proj], "gelu_tanh")
            ops.linear(x, fc.t(), b_fc, "gelu_tanh")

    def train():
        ops.mlp(x, [fc.t(), proj.t()], [b_fc, b_proj], "gelu_tanh").backward(upstream)
        ops.linear(x, fc.t(), None, "relu").backward(torch.ones(rows, 3072, dtype=d, device=DEV))

    infer()  # plans and algorithm choices outside the profile
    train()
    for p in (x, fc, proj, b_fc, b_proj):
        p.grad = None
    assert _copies(infer) == [], "K-major inference copied"
    assert _copies(train) == [], "K-major training copied"
    assert fc.grad.is_contiguous() and proj.grad.is_contiguous()
    # The check sees copies: the same weights in a layout the ops lay out (every other column) do copy.
    wide = randn(3072, 1536, dtype=d, device=DEV)
    with torch.no_grad():
        assert _copies(lambda: ops.linear(x, wide[:, ::2], None, "none")), "the profiler saw no copy"


def test_opcheck_kmajor():
    """The registered ops with K-major weights: schema, fake kernels (a K-major weight's gradient is K-major),
    autograd registration."""
    o = getattr(torch.ops, OPS_NAMESPACE)
    d = torch.bfloat16
    x = randn(5, 64, dtype=d, device=DEV, grad=True)
    fc, proj = conv1d_weight(64, 48, d), conv1d_weight(48, 32, d)
    b_fc, b_proj = randn(48, dtype=d, device=DEV, grad=True), randn(32, dtype=d, device=DEV, grad=True)
    for op, args in [
        (o.cuda_linear, (x, fc.t(), b_fc, "gelu_tanh")),
        (o.cuda_linear, (x, fc.t(), None, "relu")),
        (o.cuda_mlp, (x, [fc.t(), proj.t()], [b_fc, b_proj], "gelu_tanh")),
        (o.cuda_mlp, (x, [fc.t(), proj.t().contiguous()], [], "silu")),
    ]:
        torch.library.opcheck(op, args)
