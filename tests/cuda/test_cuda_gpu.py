"""The CUDA backend on a GPU: every op against the float64 eager reference (bf16/fp16/fp32, forward and
backward, odd shapes, leading batch dims), opcheck, torch.compile fullgraph, capture in a user's CUDA
graph. Needs the built extension (build/cuda/build_variant.py) inside kernel_src, since pytest's `pythonpath`
puts kernel_src ahead of PYTHONPATH: cp build/_work/cuda/stage/fused_mlp/cuda/{_C.abi3.so,build.json}
kernel_src/fused_mlp/cuda/ (both git-ignored build outputs), then on the device: pytest -m gpu tests/cuda."""

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parents[1] / "kernels"))
import fused_mlp.reference as ref
from fused_mlp import cuda as cuda_backend
from fused_mlp._build_info import OPS_NAMESPACE
from kernel_numerics import ACTIVATIONS, TOL, as64, assert_close, grads, randn, rel_err

OK, WHY = cuda_backend.available() if torch.cuda.is_available() else (False, "no CUDA device")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not OK, reason=f"CUDA backend unavailable: {WHY}")]
if OK:
    from fused_mlp.cuda import ops
DTYPES = (torch.bfloat16, torch.float16, torch.float32)
DEV = "cuda"


def check_grads(out, inputs, expected, p64, dtype, what, eager=None):
    """Grads against the float64 oracle. `eager`: the same computation by eager torch in `dtype`; then the
    bound is max(TOL, 3 x eager's own error), for relu chains in 16 bits, where rounding moves hidden
    pre-activations across 0 and flips relu' (eager misses by as much, ~sqrt(share of flips))."""
    upstream = torch.randn(expected.shape, dtype=torch.float64, device=DEV)
    want_all = grads(expected, p64, upstream)
    eager_all = grads(eager, inputs, upstream) if eager is not None else [None] * len(inputs)
    for i, (got, want, base) in enumerate(zip(grads(out, inputs, upstream), want_all, eager_all)):
        if want is None:
            continue
        if base is None:
            assert_close(got, want, dtype, f"{what} grad of input {i}")
        else:
            bound = max(TOL[dtype], 3 * rel_err(base, want))
            assert rel_err(got, want) <= bound, (
                f"{what} grad of input {i}: {rel_err(got, want):.3e} > {bound:.3e}"
            )


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_linear(dtype, activation):
    for has_bias, shape in ((True, (2, 37, 96)), (False, (53, 72)), (True, (7, 33))):
        k = shape[-1]
        x = randn(*shape, dtype=dtype, device=DEV, grad=True)
        w = randn(80 if k % 8 == 0 else 45, k, dtype=dtype, device=DEV, scale=0.1, grad=True)
        b = randn(w.shape[0], dtype=dtype, device=DEV, grad=True) if has_bias else None
        out = ops.linear(x, w, b, activation)
        p64 = as64(x, w, b)
        expected = ref.linear(*p64, activation)
        assert_close(out, expected, dtype, f"linear {activation} bias={has_bias} {shape}")
        check_grads(out, (x, w, b), expected, p64, dtype, f"linear {activation}")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("activation", ("relu", "gelu", "silu"))
def test_mlp(dtype, activation):
    for with_bias in (True, False):
        x = randn(3, 41, 64, dtype=dtype, device=DEV, grad=True)
        ws = [
            randn(o, i, dtype=dtype, device=DEV, scale=0.15, grad=True)
            for o, i in ((96, 64), (40, 96), (24, 40))
        ]
        bs = [randn(w.shape[0], dtype=dtype, device=DEV, grad=True) for w in ws] if with_bias else None
        out = ops.mlp(x, ws, bs, activation)
        p64 = as64(x, *ws, *(bs or []))
        expected = ref.mlp(p64[0], p64[1:4], p64[4:] or None, activation)
        assert_close(out, expected, dtype, f"mlp {activation} bias={with_bias}")
        flips = activation == "relu" and dtype != torch.float32
        eager = ref.mlp(x, ws, bs, activation) if flips else None
        check_grads(out, (x, *ws, *(bs or [])), expected, p64, dtype, f"mlp {activation}", eager)


def test_mlp_with_some_biases_none():
    d = torch.float32
    x = randn(9, 16, dtype=d, device=DEV)
    ws = [randn(24, 16, dtype=d, device=DEV), randn(8, 24, dtype=d, device=DEV)]
    bs = [None, randn(8, dtype=d, device=DEV)]
    assert_close(
        ops.mlp(x, ws, bs), ref.mlp(x.double(), [w.double() for w in ws], [None, bs[1].double()]), d, "mlp"
    )


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("activation", ("gelu_tanh", "silu", "gelu"))
def test_gated_mlp(dtype, activation):
    # (rows, hidden, inter): aligned; ragged everything (K % 8 != 0 takes the unvectorized path);
    # many rows (the 128-row tile path).
    for rows, hidden, inter in ((2 * 37, 96, 136), (19, 45, 77), (2100, 64, 160)):
        x = randn(rows, hidden, dtype=dtype, device=DEV, grad=True)
        wg = randn(inter, hidden, dtype=dtype, device=DEV, scale=0.15, grad=True)
        wu = randn(inter, hidden, dtype=dtype, device=DEV, scale=0.15, grad=True)
        wd = randn(hidden, inter, dtype=dtype, device=DEV, scale=0.15, grad=True)
        out = ops.gated_mlp(x, wg, wu, wd, activation)
        p64 = as64(x, wg, wu, wd)
        expected = ref.gated_mlp(*p64, activation)
        assert_close(out, expected, dtype, f"gated_mlp {activation} {rows}x{hidden}x{inter}")
        check_grads(out, (x, wg, wu, wd), expected, p64, dtype, f"gated_mlp {activation}")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_act_and_mul(dtype, activation):
    for shape in ((4, 33, 50), (64, 128)):  # odd element count (scalar path) and 16-byte vectors
        gate = randn(*shape, dtype=dtype, device=DEV, grad=True)
        up = randn(*shape, dtype=dtype, device=DEV, grad=True)
        out = ops.act_and_mul(gate, up, activation)
        p64 = as64(gate, up)
        expected = ref.act_and_mul(*p64, activation)
        assert_close(out, expected, dtype, f"act_and_mul {activation} {shape}")
        check_grads(out, (gate, up), expected, p64, dtype, f"act_and_mul {activation}")


def test_opcheck():
    o = getattr(torch.ops, OPS_NAMESPACE)
    d = torch.bfloat16
    x = randn(5, 64, dtype=d, device=DEV, grad=True)
    w1, w2 = (
        randn(48, 64, dtype=d, device=DEV, scale=0.1, grad=True),
        randn(32, 48, dtype=d, device=DEV, grad=True),
    )
    b1, b2 = randn(48, dtype=d, device=DEV, grad=True), randn(32, dtype=d, device=DEV, grad=True)
    wg, wu = randn(48, 64, dtype=d, device=DEV, grad=True), randn(48, 64, dtype=d, device=DEV, grad=True)
    wd = randn(64, 48, dtype=d, device=DEV, grad=True)
    g, u = randn(5, 48, dtype=d, device=DEV, grad=True), randn(5, 48, dtype=d, device=DEV, grad=True)
    for op, args in [
        (o.cuda_linear, (x, w1, b1, "gelu_tanh")),
        (o.cuda_linear, (x, w1, None, "silu")),
        (o.cuda_mlp, (x, [w1, w2], [b1, b2], "relu")),
        (o.cuda_mlp, (x, [w1, w2], [], "gelu")),
        (o.cuda_gated_mlp, (x, wg, wu, wd, "silu")),
        (o.cuda_act_and_mul, (g, u, "gelu")),
    ]:
        torch.library.opcheck(op, args)


def test_compile_fullgraph_no_recompile():
    torch._dynamo.reset()
    d = torch.bfloat16
    ws = [randn(256, 128, dtype=d, device=DEV, scale=0.1), randn(128, 256, dtype=d, device=DEV, scale=0.1)]
    bs = [randn(256, dtype=d, device=DEV), randn(128, dtype=d, device=DEV)]
    wg, wu, wd = (randn(*s, dtype=d, device=DEV, scale=0.1) for s in ((192, 128), (192, 128), (128, 192)))

    def model(x):
        return ops.gated_mlp(ops.mlp(x, ws, bs, "relu"), wg, wu, wd, "gelu_tanh")

    def model_ref(x):
        w64 = [t.double() for t in (*ws, *bs, wg, wu, wd)]
        return ref.gated_mlp(ref.mlp(x.double(), w64[:2], w64[2:4], "relu"), *w64[4:], "gelu_tanh")

    compiled = torch.compile(model, fullgraph=True, dynamic=True)
    try:
        for rows in (8, 24, 333):
            x = randn(rows, 128, dtype=d, device=DEV)
            assert rel_err(compiled(x), model_ref(x)) <= TOL[d]
            torch._dynamo.config.error_on_recompile = True
    finally:
        torch._dynamo.config.error_on_recompile = False


def test_compile_backward():
    torch._dynamo.reset()
    d = torch.float32
    x = randn(12, 32, dtype=d, device=DEV, grad=True)
    w = randn(16, 32, dtype=d, device=DEV, grad=True)
    b = randn(16, dtype=d, device=DEV, grad=True)
    compiled = torch.compile(lambda x, w, b: ops.linear(x, w, b, "silu").sum(), fullgraph=True)
    compiled(x, w, b).backward()
    p64 = as64(x, w, b)
    ref.linear(*p64, "silu").sum().backward()
    for got, want in zip((x, w, b), p64):
        assert_close(got.grad, want.grad, d, "compiled linear backward")


def test_capture_inside_user_cuda_graph():
    d = torch.bfloat16
    ws = [randn(128, 128, dtype=d, device=DEV, scale=0.1) for _ in range(3)]
    bs = [randn(128, dtype=d, device=DEV) for _ in range(3)]
    x = randn(16, 128, dtype=d, device=DEV)
    with torch.no_grad():
        ops.mlp(x, ws, bs)  # algorithm choice outside the capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = ops.mlp(x, ws, bs)
        x.copy_(torch.randn_like(x))
        graph.replay()
    assert_close(
        out, ref.mlp(x.double(), [w.double() for w in ws], [b.double() for b in bs]), d, "mlp in a graph"
    )


def test_cpu_tensor_is_refused_clearly():
    with pytest.raises(RuntimeError, match="needs a CUDA device"):
        ops.linear(torch.randn(2, 3), torch.randn(4, 3))
