"""The CUDA backend on a GPU: every op against the float64 eager reference (bf16/fp16/fp32, forward and
backward, inference and autograd paths, every implementation of the path table, odd shapes, leading batch
dims), opcheck, torch.compile fullgraph without recompiles, capture in a user's CUDA graph, and a many-layer
model with distinct weights against eager. Runs against a built variant (tests/cuda/conftest.py):
FUSED_MLP_VARIANT_DIR=<dist>/build/torch-stable-abi211-cu130-x86_64-linux pytest -m gpu tests/cuda."""

import itertools
import sys
from contextlib import nullcontext
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parents[1] / "kernels"))
import fused_mlp.reference as ref
from fused_mlp import cuda as cuda_backend
from fused_mlp._build_info import OPS_NAMESPACE
from kernel_numerics import (
    ACTIVATIONS,
    TOL,
    as64,
    assert_act_and_mul_far_tails,
    assert_close,
    grads,
    randn,
    rel_err,
)
from path_forcing import forced

OK, WHY = cuda_backend.available() if torch.cuda.is_available() else (False, "no CUDA device")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not OK, reason=f"CUDA backend unavailable: {WHY}")]
if OK:
    from fused_mlp.cuda import ops
DTYPES = (torch.bfloat16, torch.float16, torch.float32)
DEV = "cuda"


def launched_names(call) -> set[str]:
    """The names of the CUDA kernels `call` launched (a profiler trace)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        call()
        torch.cuda.synchronize()
    return {e.name for e in prof.events()}


def launched(call, kernel_name: str) -> bool:
    """Whether `call` launched a CUDA kernel whose name contains `kernel_name`."""
    return any(kernel_name in name for name in launched_names(call))


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


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("activation", ("gelu_tanh", "silu", "gelu"))
def test_act_and_mul_far_tails_elementwise(dtype, activation):
    """Every implementation of the step: the CUDA kernel and the Triton cubin."""
    for impl in ("cuda", "triton"):
        with forced("act_and_mul", impl):
            assert_act_and_mul_far_tails(ops.act_and_mul, ref.act_and_mul, dtype, activation, DEV)


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


# ---- inference path (the `*_infer` ops) and the path table's implementations ---------------------------------

NS = getattr(torch.ops, OPS_NAMESPACE) if OK else None
IMPL_CASES = (
    ("linear", "triton"),
    ("linear", "tma"),
    ("linear", "cublaslt"),
    ("gate_up", "triton"),
    ("gate_up", "tma"),
    ("gate_up", "split"),
    ("linear", "gemv"),
    ("gate_up", "gemv"),
    ("act_and_mul", "triton"),
    ("act_and_mul", "cuda"),
)


def _check_mlp(rows, dims, dtype, activation, with_bias, what):
    x = randn(rows, dims[0], dtype=dtype, device=DEV)
    ws = [randn(o, i, dtype=dtype, device=DEV, scale=i**-0.5) for i, o in itertools.pairwise(dims)]
    bs = [randn(o, dtype=dtype, device=DEV) for o in dims[1:]] if with_bias else None
    p64 = as64(x, *ws, *(bs or []))
    n = len(ws)
    expected = ref.mlp(p64[0], p64[1 : 1 + n], p64[1 + n :] or None, activation)
    assert_close(ops.mlp(x, ws, bs, activation), expected, dtype, what)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("step", "impl"), IMPL_CASES)
def test_inference_every_implementation(dtype, step, impl):
    """No grad: the `*_infer` ops, each implementation forced, aligned shapes (where Triton cubins apply)
    and ragged ones (the fallback), M from 1 to beyond the 1024-row configs."""
    with forced(step, impl), torch.no_grad():
        for rows in (1, 16, 100, 1100):
            what = f"{step}={impl} M={rows}"
            if step == "linear":
                _check_mlp(rows, (256, 512, 256), dtype, "relu", True, f"{what} mlp aligned")
                _check_mlp(rows, (72, 40, 24), dtype, "silu", False, f"{what} mlp ragged")
                for act in ("gelu", "gelu_tanh"):
                    x, w = (
                        randn(rows, 128, dtype=dtype, device=DEV),
                        randn(64, 128, dtype=dtype, device=DEV, scale=0.1),
                    )
                    b = randn(64, dtype=dtype, device=DEV)
                    assert_close(
                        ops.linear(x, w, b, act), ref.linear(*as64(x, w, b), act), dtype, f"{what} {act}"
                    )
            elif step == "gate_up":
                for hidden, inter in ((128, 256), (45, 77)):
                    x = randn(rows, hidden, dtype=dtype, device=DEV)
                    wg, wu = (
                        randn(inter, hidden, dtype=dtype, device=DEV, scale=hidden**-0.5) for _ in range(2)
                    )
                    wd = randn(hidden, inter, dtype=dtype, device=DEV, scale=inter**-0.5)
                    for act in ("gelu_tanh", "silu"):
                        expected = ref.gated_mlp(*as64(x, wg, wu, wd), act)
                        assert_close(
                            ops.gated_mlp(x, wg, wu, wd, act),
                            expected,
                            dtype,
                            f"{what} {hidden}x{inter} {act}",
                        )
            else:
                for cols in (3072, 50):
                    g, u = (
                        randn(rows, cols, dtype=dtype, device=DEV),
                        randn(rows, cols, dtype=dtype, device=DEV),
                    )
                    for act in ACTIVATIONS:
                        expected = ref.act_and_mul(*as64(g, u), act)
                        assert_close(
                            ops.act_and_mul(g, u, act), expected, dtype, f"{what} [{rows},{cols}] {act}"
                        )


@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float16))
def test_decode_kernels_serve_few_rows_on_weights_past_the_threshold(dtype):
    """By the table's rule (no forcing): few rows against 16 MiB+ of weights launch the gemv cubins, right
    against float64 at 1, 5 and the last decode row count; one row more does not take them."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("decode rows ship for sm_90a only")
    from fused_mlp.triton.configs import DECODE_GATE_UP

    last = max(bound for bound, _ in DECODE_GATE_UP["sm_90a"])
    hidden, inter = 2048, 4096  # gate|up 32 MiB, down 16 MiB in 16 bits
    wg, wu = (randn(inter, hidden, dtype=dtype, device=DEV, scale=hidden**-0.5) for _ in range(2))
    wd = randn(hidden, inter, dtype=dtype, device=DEV, scale=inter**-0.5)
    with torch.no_grad():
        for rows in (1, 5, last, last + 1):
            x = randn(rows, hidden, dtype=dtype, device=DEV)
            out = torch.full((rows, hidden), float("nan"), dtype=dtype, device=DEV)
            got = launched(
                lambda x=x, out=out: out.copy_(ops.gated_mlp(x, wg, wu, wd, "silu")), "gemv_gate_up"
            )
            assert got == (rows <= last), f"M={rows}: gemv_gate_up launched {got}"
            assert_close(out, ref.gated_mlp(*as64(x, wg, wu, wd), "silu"), dtype, f"decode gated M={rows}")


def test_inference_and_training_forwards_agree():
    """The MLP's inference and training forwards run the same kernels: equal bit for bit. The gated training
    forward also keeps (g, u): where gate_up is the portable fused kernel (<= 256 rows on sm_90a), which keeps
    them in registers only, training runs split instead (g, u rounded to the dtype before act(g) * u, as
    eager does), so y agrees within the dtype's tolerance there and bit for bit where both run the Hopper
    kernel (forced below: the tables run training's gate_up as split; the kernel's epilogue computes h the
    same way whether or not it stores g, u)."""
    d = torch.bfloat16
    x = randn(3, 7, 128, dtype=d, device=DEV)
    ws = [randn(256, 128, dtype=d, device=DEV, scale=0.1), randn(64, 256, dtype=d, device=DEV, scale=0.1)]
    bs = [randn(256, dtype=d, device=DEV), randn(64, dtype=d, device=DEV)]
    wg, wu, wd = (randn(*s, dtype=d, device=DEV, scale=0.1) for s in ((192, 128), (192, 128), (128, 192)))
    assert torch.equal(NS.cuda_mlp_infer(x, ws, bs, "gelu"), NS.cuda_mlp(x, ws, bs, "gelu")[-1])
    assert torch.equal(NS.cuda_mlp_infer(x, ws, bs, "gelu"), NS.cuda_mlp_train(x, ws, bs, "gelu")[-1])
    assert NS.cuda_mlp_infer(x, ws, bs, "gelu").shape == (3, 7, 64)
    want = ref.gated_mlp(*as64(x, wg, wu, wd), "silu")
    y, h, gu = NS.cuda_gated_mlp_train(x, wg, wu, wd, "silu")
    assert_close(y, want, d, "gated training forward")
    assert gu.shape == (2, 21, 192), gu.shape
    assert torch.equal(y, NS.cuda_gated_mlp(x, wg, wu, wd, "silu")[0])
    assert_close(NS.cuda_gated_mlp_infer(x, wg, wu, wd, "silu"), want, d, "gated inference forward")
    g64, u64 = (x.double().reshape(21, 128) @ w.double().T for w in (wg, wu))
    assert_close(gu[0], g64, d, "saved g")
    assert_close(gu[1], u64, d, "saved u")
    assert_close(h.reshape(21, 192), torch.nn.functional.silu(g64) * u64, d, "saved h")
    if torch.cuda.get_device_capability() == (9, 0):
        with forced("gate_up", "tma"):
            assert torch.equal(NS.cuda_gated_mlp_train(x, wg, wu, wd, "silu")[0],
                               NS.cuda_gated_mlp_infer(x, wg, wu, wd, "silu"))  # fmt: skip


@pytest.mark.parametrize("layout", ("separate", "up_first", "one_tensor"))
def test_hopper_gate_up_reads_weights_in_any_layout(layout):
    """The Hopper gate/up kernel reads w_gate and w_up as two planes of one 3D tensor, lower address first
    (a cubin per order): weights allocated apart in either order, or two views of one [2I, H] tensor, at a
    real layer's K and at the table's own choice (2048 rows) as well as forced (1100 rows)."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the Hopper kernel ships for sm_90a")
    d = torch.bfloat16
    hidden, inter = 768, 3072
    if layout == "one_tensor":
        w = randn(2 * inter, hidden, dtype=d, device=DEV, scale=hidden**-0.5)
        wg, wu = w[:inter], w[inter:]
    else:
        wg, wu = (randn(inter, hidden, dtype=d, device=DEV, scale=hidden**-0.5) for _ in range(2))
        if (wu.data_ptr() < wg.data_ptr()) != (layout == "up_first"):
            wg, wu = wu, wg
    assert (wu.data_ptr() < wg.data_ptr()) == (layout == "up_first")
    wd = randn(hidden, inter, dtype=d, device=DEV, scale=inter**-0.5)
    with torch.no_grad():
        for rows, force in ((1100, True), (2048, False)):
            x = randn(rows, hidden, dtype=d, device=DEV)
            expected = ref.gated_mlp(*as64(x, wg, wu, wd), "gelu_tanh")
            with forced("gate_up", "tma") if force else nullcontext():
                got = ops.gated_mlp(x, wg, wu, wd, "gelu_tanh")
            assert_close(got, expected, d, f"tma gate_up {layout} M={rows}")


def test_opcheck_inference_ops():
    d = torch.bfloat16
    x = randn(5, 64, dtype=d, device=DEV)
    w1, w2 = randn(48, 64, dtype=d, device=DEV, scale=0.1), randn(32, 48, dtype=d, device=DEV)
    b1, b2 = randn(48, dtype=d, device=DEV), randn(32, dtype=d, device=DEV)
    wg, wu, wd = (
        randn(48, 64, dtype=d, device=DEV),
        randn(48, 64, dtype=d, device=DEV),
        randn(64, 48, dtype=d, device=DEV),
    )
    g, u = randn(5, 48, dtype=d, device=DEV), randn(5, 48, dtype=d, device=DEV)
    utils = ("test_schema", "test_faketensor", "test_aot_dispatch_dynamic")
    for op, args in [
        (NS.cuda_linear_infer, (x, w1, b1, "relu")),
        (NS.cuda_mlp_infer, (x, [w1, w2], [b1, b2], "gelu_tanh")),
        (NS.cuda_mlp_infer, (x, [w1, w2], [], "silu")),
        (NS.cuda_gated_mlp_infer, (x, wg, wu, wd, "gelu_tanh")),
        (NS.cuda_act_and_mul_infer, (g, u, "silu")),
        (NS.cuda_mlp_train, (x, [w1, w2], [b1, b2], "relu")),
        (NS.cuda_gated_mlp_train, (x, wg, wu, wd, "silu")),
    ]:
        torch.library.opcheck(op, args, test_utils=utils)
    y, h, gu = NS.cuda_gated_mlp_train(x, wg, wu, wd, "silu")
    dy = randn(*y.shape, dtype=d, device=DEV)
    torch.library.opcheck(
        NS.cuda_gated_mlp_backward, (dy, None, x, wg, wu, wd, h, gu, "silu"), test_utils=utils
    )
    outs = NS.cuda_mlp_train(x, [w1, w2], [b1, b2], "gelu")
    torch.library.opcheck(NS.cuda_mlp_backward, (randn(5, 32, dtype=d, device=DEV), [], x, [w1, w2], [b1, b2],
                                                 list(outs), "gelu"), test_utils=utils)  # fmt: skip


def test_compile_inference_fullgraph_no_recompile_across_batch_sizes():
    torch._dynamo.reset()
    d = torch.float16
    ws = [randn(256, 128, dtype=d, device=DEV, scale=0.1), randn(128, 256, dtype=d, device=DEV, scale=0.1)]
    wg, wu, wd = (randn(*s, dtype=d, device=DEV, scale=0.1) for s in ((192, 128), (192, 128), (128, 192)))

    def model(x):
        h = ops.mlp(x, ws, None, "gelu")
        return ops.act_and_mul(ops.gated_mlp(h, wg, wu, wd, "silu"), h, "relu")

    def model_ref(x):
        w64 = [t.double() for t in (*ws, wg, wu, wd)]
        h = ref.mlp(x.double(), w64[:2], None, "gelu")
        return ref.act_and_mul(ref.gated_mlp(h, *w64[2:], "silu"), h, "relu")

    compiled = torch.compile(model, fullgraph=True, dynamic=True)
    try:
        with torch.no_grad():
            for rows in (8, 17, 64, 333, 1000):  # new sizes after the first must not recompile
                x = randn(rows, 128, dtype=d, device=DEV)
                assert rel_err(compiled(x), model_ref(x)) <= TOL[d]
                torch._dynamo.config.error_on_recompile = True
    finally:
        torch._dynamo.config.error_on_recompile = False


def test_every_op_captures_inside_a_user_graph():
    d = torch.bfloat16
    x = randn(16, 128, dtype=d, device=DEV)
    w, b = randn(64, 128, dtype=d, device=DEV, scale=0.1), randn(64, dtype=d, device=DEV)
    wg, wu, wd = (randn(*s, dtype=d, device=DEV, scale=0.1) for s in ((256, 128), (256, 128), (128, 256)))
    g, u = randn(16, 3072, dtype=d, device=DEV), randn(16, 3072, dtype=d, device=DEV)

    def run():
        return (
            ops.linear(x, w, b, "gelu"),
            ops.gated_mlp(x, wg, wu, wd, "gelu_tanh"),
            ops.act_and_mul(g, u, "silu"),
        )

    with torch.no_grad():
        run()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            outs = run()
        for _ in range(2):  # new contents in the same buffers: every replay must read them
            for t in (x, g, u):
                t.copy_(torch.randn_like(t))
            graph.replay()
            expected = (ref.linear(*as64(x, w, b), "gelu"), ref.gated_mlp(*as64(x, wg, wu, wd), "gelu_tanh"),
                        ref.act_and_mul(*as64(g, u), "silu"))  # fmt: skip
            for out, want, what in zip(outs, expected, ("linear", "gated_mlp", "act_and_mul")):
                assert_close(out, want, d, f"{what} replayed from a user graph")


@pytest.mark.parametrize("kind", ("gated", "mlp"))
def test_many_layer_model_with_distinct_weights_matches_eager(kind):
    """32 layers, each with its own weights, on a residual stream: forward (no grad, several batch sizes in a
    row) and the input gradient through autograd, against float64; bound by eager bf16's own error."""
    d, layers, dim = torch.bfloat16, 32, 128
    if kind == "gated":
        params = [tuple(randn(*s, dtype=d, device=DEV, scale=s[1] ** -0.5) for s in ((256, dim), (256, dim), (dim, 256)))
                  for _ in range(layers)]  # fmt: skip
    else:
        params = [([randn(dim, dim, dtype=d, device=DEV, scale=dim**-0.5) for _ in range(3)],
                   [randn(dim, dtype=d, device=DEV, scale=0.1) for _ in range(3)]) for _ in range(layers)]  # fmt: skip

    def forward(x, impl, cast=lambda t: t):
        h = x
        for p in params:
            if kind == "gated":
                h = h + impl.gated_mlp(h, *(cast(t) for t in p), "gelu_tanh")
            else:
                h = h + impl.mlp(h, [cast(t) for t in p[0]], [cast(t) for t in p[1]], "relu")
        return h

    for rows in (1, 16, 77, 300):
        x = randn(rows, dim, dtype=d, device=DEV)
        with torch.no_grad():
            want = forward(x.double(), ref, lambda t: t.double())
            eager_err = rel_err(forward(x, ref), want)
            assert rel_err(forward(x, ops), want) <= max(TOL[d], 3 * eager_err), f"{kind} M={rows}"
    x = randn(16, dim, dtype=d, device=DEV, grad=True)
    x64 = x.detach().double().requires_grad_()
    upstream = torch.randn(16, dim, device=DEV, dtype=torch.float64)
    (got,) = torch.autograd.grad(forward(x, ops), x, upstream.to(d))
    (want,) = torch.autograd.grad(forward(x64, ref, lambda t: t.double()), x64, upstream)
    (eager,) = torch.autograd.grad(forward(x, ref), x, upstream.to(d))
    assert rel_err(got, want) <= max(TOL[d], 3 * rel_err(eager, want)), f"{kind} input gradient"


def test_first_call_of_a_process_inside_a_user_graph_capture():
    """No warm-up: the cubins load, the cuBLASLt plans are made and the scratch is allocated during capture."""
    import os
    import subprocess

    code = """
import torch, fused_mlp.cuda.ops as ops
torch.manual_seed(0)
d = torch.bfloat16
x = torch.randn(16, 1024, device="cuda", dtype=d)
ws = [torch.randn(1024, 1024, device="cuda", dtype=d) * 0.03 for _ in range(3)]
wg, wu, wd = (torch.randn(*s, device="cuda", dtype=d) * 0.03 for s in ((3072, 1024), (3072, 1024), (1024, 3072)))
graph = torch.cuda.CUDAGraph()
with torch.no_grad(), torch.cuda.graph(graph):
    y = ops.gated_mlp(ops.mlp(x, ws, None, "relu"), wg, wu, wd, "gelu_tanh")
graph.replay()
h = x.double()
for i, w in enumerate(ws):
    h = h @ w.double().T
    h = h.relu() if i < 2 else h
want = (torch.nn.functional.gelu(h @ wg.double().T, approximate="tanh") * (h @ wu.double().T)) @ wd.double().T
print("rel", ((y.double() - want).norm() / want.norm()).item())
"""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert float(proc.stdout.split("rel")[-1]) <= TOL[torch.bfloat16], proc.stdout


# ---- training: eager autograd.Function path, saved (g, u), every gate_up implementation ---------------------


@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float16))  # fp32 runs split whatever is forced
@pytest.mark.parametrize("impl", ("tma", "triton", "split"))
def test_gated_training_every_gate_up_implementation(dtype, impl):
    """Forward + backward of gated_mlp with gate_up forced (the training forward stores (g, u): tma from its
    epilogue, split from its GEMMs; the portable kernel cannot, so it runs split), against float64: M=1, a
    3-D input, dims TMA cannot address (45, 77: the fallback), more rows than one persistent wave."""
    with forced("gate_up", impl):
        # the last: a real layer's K loop (12 k-tiles), where the warp-specialized gate/up wrote NaN
        cases = (((1, 64), 64, 128), ((3, 33, 72), 72, 200), ((19, 45), 45, 77), ((1100, 128), 128, 256),
                 ((300, 768), 768, 3072))  # fmt: skip
        for shape, hidden, inter in cases:
            x = randn(*shape[:-1], hidden, dtype=dtype, device=DEV, grad=True)
            wg, wu = (
                randn(inter, hidden, dtype=dtype, device=DEV, scale=hidden**-0.5, grad=True) for _ in range(2)
            )
            wd = randn(hidden, inter, dtype=dtype, device=DEV, scale=inter**-0.5, grad=True)
            out = ops.gated_mlp(x, wg, wu, wd, "gelu_tanh")
            p64 = as64(x, wg, wu, wd)
            expected = ref.gated_mlp(*p64, "gelu_tanh")
            assert_close(out, expected, dtype, f"gated train gate_up={impl} {shape}x{inter}")
            check_grads(out, (x, wg, wu, wd), expected, p64, dtype, f"gated train gate_up={impl} {shape}")


@pytest.mark.parametrize("activation", ("relu", "gelu_tanh", "none"))
def test_mlp_training_eager_and_registered_paths_agree(activation):
    """The eager autograd.Function path and the registered op (what torch.compile differentiates) give the
    same gradients, bit for bit, and match float64; biases on some layers only."""
    d = torch.bfloat16
    x = randn(37, 64, dtype=d, device=DEV, grad=True)
    ws = [
        randn(o, i, dtype=d, device=DEV, scale=i**-0.5, grad=True) for i, o in ((64, 96), (96, 48), (48, 32))
    ]
    bs = [randn(96, dtype=d, device=DEV, grad=True), None, randn(32, dtype=d, device=DEV, grad=True)]
    upstream = randn(37, 32, dtype=d, device=DEV)
    leaves = [x, *ws, bs[0], bs[2]]
    eager = torch.autograd.grad(ops.mlp(x, ws, bs, activation), leaves, upstream)
    dense = [bs[0], torch.zeros(48, dtype=d, device=DEV), bs[2]]
    registered = torch.autograd.grad(NS.cuda_mlp(x, ws, dense, activation)[-1], leaves, upstream)
    for a, b in zip(eager, registered):
        assert torch.equal(a, b)
    p64 = as64(*leaves)
    want = ref.mlp(p64[0], p64[1:4], [p64[4], None, p64[5]], activation)
    flips = activation == "relu"
    eager_ref = ref.mlp(x, ws, bs, activation) if flips else None
    check_grads(ops.mlp(x, ws, bs, activation), leaves, want, p64, d, f"mlp train {activation}", eager_ref)


def test_compile_gated_training_fullgraph_no_recompile():
    """torch.compile differentiates the registered gated op (saved (g, u) are not differentiable)."""
    torch._dynamo.reset()
    d = torch.bfloat16
    wg, wu = (randn(256, 128, dtype=d, device=DEV, scale=0.1, grad=True) for _ in range(2))
    wd = randn(128, 256, dtype=d, device=DEV, scale=0.06, grad=True)
    compiled = torch.compile(lambda x: ops.gated_mlp(x, wg, wu, wd, "silu"), fullgraph=True, dynamic=True)
    try:
        for rows in (8, 300, 1100):
            x = randn(rows, 128, dtype=d, device=DEV, grad=True)
            out = compiled(x)
            p64 = as64(x, wg, wu, wd)
            expected = ref.gated_mlp(*p64, "silu")
            assert_close(out, expected, d, f"compiled gated M={rows}")
            check_grads(out, (x, wg, wu, wd), expected, p64, d, f"compiled gated M={rows}")
            torch._dynamo.config.error_on_recompile = True
    finally:
        torch._dynamo.config.error_on_recompile = False


def test_disable_switch_takes_the_fallback():
    """FUSED_MLP_CUDA_DISABLE=triton: the path table's triton rows report and run their step's fallback
    (no row picks tma since 2026-12-03, so the switch is checked on triton)."""
    import json
    import os
    import subprocess

    code = """
import json, torch
from fused_mlp.cuda import _library
ns = _library.load()
info = json.loads(ns.cuda_build_info(0))
print("GATE_UP", json.dumps(info["paths"]["gated_mlp/gate_up"]))
"""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "FUSED_MLP_CUDA_DISABLE": "triton"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300,
                          check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(proc.stdout.split("GATE_UP")[-1])
    assert all("triton" not in (eager, graph) for _, eager, graph in rows), rows
    normal = json.loads(NS.cuda_build_info(0))["paths"]["gated_mlp/gate_up"]
    assert any("triton" in r for r in normal) == (torch.cuda.get_device_capability() == (9, 0)), normal
