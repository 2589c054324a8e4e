"""The same checks on a CUDA device in bf16/fp16/fp32, plus what only a GPU shows: opcheck on CUDA,
torch.compile (inductor) fullgraph without recompiles, repeated calls on one buffer, capture inside a
user's CUDA graph, and AOT cubins launching with the JIT's results. Run on the device: pytest -m gpu."""

from pathlib import Path

import fused_mlp
import fused_mlp.reference as ref
import pytest
import torch
from fused_mlp._build_info import OPS_NAMESPACE
from fused_mlp.triton import ops as triton_ops  # the backend under test, whichever one fused_mlp picked
from kernel_numerics import ACTIVATIONS, TOL, as64, assert_close, grads, randn, rel_err

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device; run on the GPU machine"),
]
DTYPES = (torch.bfloat16, torch.float16, torch.float32)
DEV = "cuda"


def test_triton_or_cuda_backend_is_selected():
    assert fused_mlp.BACKEND in ("triton", "cuda"), fused_mlp.BACKEND_SKIPPED


def test_public_api_runs_on_cuda():
    x, w = (
        randn(5, 64, dtype=torch.bfloat16, device=DEV),
        randn(32, 64, dtype=torch.bfloat16, device=DEV, scale=0.1),
    )
    assert_close(
        fused_mlp.linear(x, w, None, "silu"), ref.linear(*as64(x, w), None, "silu"), torch.bfloat16, "api"
    )


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_linear(dtype, activation):
    for has_bias in (True, False):
        x = randn(2, 37, 96, dtype=dtype, device=DEV, grad=True)
        w = randn(80, 96, dtype=dtype, device=DEV, scale=0.1, grad=True)
        b = randn(80, dtype=dtype, device=DEV, grad=True) if has_bias else None
        out = triton_ops.linear(x, w, b, activation)
        p64 = as64(x, w, b)
        expected = ref.linear(*p64, activation)
        assert_close(out, expected, dtype, "linear forward")
        up = torch.randn(expected.shape, dtype=torch.float64, device=DEV)
        for got, want in zip(grads(out, (x, w, b), up), grads(expected, p64, up)):
            if want is not None:
                assert_close(got, want, dtype, f"linear grad {activation} bias={has_bias}")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("activation", "rows"), (("relu", 16), ("gelu_tanh", 37), ("silu", 4099)))
def test_mlp(dtype, activation, rows):
    x = randn(rows, 96, dtype=dtype, device=DEV, grad=True)
    ws = [randn(80, 96, dtype=dtype, device=DEV, scale=0.1, grad=True),
          randn(48, 80, dtype=dtype, device=DEV, scale=0.1, grad=True)]  # fmt: skip
    bs = [randn(80, dtype=dtype, device=DEV, grad=True), None]
    out = triton_ops.mlp(x, ws, bs, activation)
    x64, *p64 = as64(x, *ws, *bs)
    expected = ref.mlp(x64, p64[:2], p64[2:], activation)
    assert_close(out, expected, dtype, "mlp forward")
    if dtype != torch.float32 and activation == "relu":
        return  # relu'(z) flips where 16-bit rounding of a hidden layer moves z across 0 (eager misses as much)
    up = torch.randn(expected.shape, dtype=torch.float64, device=DEV)
    for got, want in zip(grads(out, (x, *ws, *bs), up), grads(expected, (x64, *p64), up)):
        if want is not None:
            assert_close(got, want, dtype, "mlp grad")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("activation", "rows"), (("gelu_tanh", 19), ("silu", 1024)))
def test_gated_mlp(dtype, activation, rows):
    x = randn(rows, 256, dtype=dtype, device=DEV, scale=0.5, grad=True)
    wg, wu = (randn(384, 256, dtype=dtype, device=DEV, scale=0.06, grad=True) for _ in range(2))
    wd = randn(256, 384, dtype=dtype, device=DEV, scale=0.05, grad=True)
    out = triton_ops.gated_mlp(x, wg, wu, wd, activation)
    p64 = as64(x, wg, wu, wd)
    expected = ref.gated_mlp(*p64, activation)
    assert_close(out, expected, dtype, "gated_mlp forward")
    up = torch.randn(expected.shape, dtype=torch.float64, device=DEV)
    for got, want in zip(grads(out, (x, wg, wu, wd), up), grads(expected, p64, up)):
        assert_close(got, want, dtype, "gated_mlp grad")


@pytest.mark.parametrize("dtype", DTYPES)
def test_act_and_mul(dtype):
    for activation in ACTIVATIONS if dtype == torch.bfloat16 else ("gelu_tanh",):
        gate = randn(3, 37, 80, dtype=dtype, device=DEV, scale=2.0, grad=True)
        up = randn(3, 37, 80, dtype=dtype, device=DEV, grad=True)
        out = triton_ops.act_and_mul(gate, up, activation)
        p64 = as64(gate, up)
        expected = ref.act_and_mul(*p64, activation)
        assert_close(out, expected, dtype, f"act_and_mul {activation}")
        upstream = torch.randn(expected.shape, dtype=torch.float64, device=DEV)
        for got, want in zip(grads(out, (gate, up), upstream), grads(expected, p64, upstream)):
            assert_close(got, want, dtype, f"act_and_mul grad {activation}")


def test_opcheck_on_cuda():
    ops = getattr(torch.ops, OPS_NAMESPACE)
    d = torch.bfloat16
    x = randn(5, 64, dtype=d, device=DEV, grad=True)
    w1, w2 = (
        randn(48, 64, dtype=d, device=DEV, scale=0.1, grad=True),
        randn(32, 48, dtype=d, device=DEV, grad=True),
    )
    b1 = randn(48, dtype=d, device=DEV, grad=True)
    wg, wu = randn(48, 64, dtype=d, device=DEV, grad=True), randn(48, 64, dtype=d, device=DEV, grad=True)
    g, u = randn(5, 48, dtype=d, device=DEV, grad=True), randn(5, 48, dtype=d, device=DEV, grad=True)
    for op, args in [
        (ops.triton_linear, (x, w1, b1, "gelu_tanh")),
        (ops.triton_mlp, (x, [w1, w2], [b1], [0], "relu")),
        (ops.triton_gated_mlp, (x, wg, wu, w2, "silu")),
        (ops.triton_act_and_mul, (g, u, "gelu")),
    ]:
        torch.library.opcheck(op, args)


def test_compile_inductor_fullgraph_no_recompile():
    torch._dynamo.reset()
    d = torch.bfloat16
    ws = [randn(256, 128, dtype=d, device=DEV, scale=0.1), randn(128, 256, dtype=d, device=DEV, scale=0.1)]
    bs = [randn(256, dtype=d, device=DEV), randn(128, dtype=d, device=DEV)]
    wg, wu, wd = (randn(*s, dtype=d, device=DEV, scale=0.1) for s in ((192, 128), (192, 128), (128, 192)))

    def model(x):
        return triton_ops.gated_mlp(triton_ops.mlp(x, ws, bs, "relu"), wg, wu, wd, "gelu_tanh")

    def model_ref(x):
        ws64, bs64 = [w.double() for w in ws], [b.double() for b in bs]
        return ref.gated_mlp(
            ref.mlp(x, ws64, bs64, "relu"), wg.double(), wu.double(), wd.double(), "gelu_tanh"
        )

    compiled = torch.compile(model, fullgraph=True, dynamic=True)
    try:
        for rows in (8, 24, 333, 1000):
            x = randn(rows, 128, dtype=d, device=DEV)
            assert rel_err(compiled(x), model_ref(x.double())) <= TOL[d]
            torch._dynamo.config.error_on_recompile = True
    finally:
        torch._dynamo.config.error_on_recompile = False


def test_repeated_calls_read_fresh_inputs_and_keep_earlier_outputs():
    d = torch.float16
    ws = [randn(64, 64, dtype=d, device=DEV, scale=0.1) for _ in range(3)]
    bs = [randn(64, dtype=d, device=DEV) for _ in range(3)]
    x = randn(16, 64, dtype=d, device=DEV)

    def expected():
        return ref.mlp(x.double(), [w.double() for w in ws], [b.double() for b in bs], "silu")

    with torch.no_grad():
        for _ in range(4):
            x.copy_(torch.randn_like(x))  # same address, new contents: every call must read them
            assert_close(triton_ops.mlp(x, ws, bs, "silu"), expected(), d, "repeated mlp")
        kept, kept_expected = triton_ops.mlp(x, ws, bs, "silu"), expected()
        for _ in range(3):  # later calls must not overwrite an output the caller still holds
            x.copy_(torch.randn_like(x))
            triton_ops.mlp(x, ws, bs, "silu")
    assert_close(kept, kept_expected, d, "earlier output after later calls")


def test_ops_capture_inside_user_cuda_graph():
    d = torch.bfloat16
    ws = [randn(128, 128, dtype=d, device=DEV, scale=0.1) for _ in range(3)]
    x = randn(16, 128, dtype=d, device=DEV)
    with torch.no_grad():
        triton_ops.mlp(x, ws)  # compile outside the capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = triton_ops.mlp(x, ws)
        x.copy_(torch.randn_like(x))
        graph.replay()
    assert_close(out, ref.mlp(x.double(), [w.double() for w in ws]), d, "mlp in a user graph")


def test_aot_cubin_matches_jit(tmp_path, monkeypatch):
    """Compile one config AOT, launch the cubin through the loader path, compare with the JIT result."""
    import triton
    from fused_mlp.triton import aot, aot_build, forward
    from fused_mlp.triton.linear import LINEAR

    from registry.spec.build_matrix import read_matrix

    matrix = read_matrix(Path(__file__).resolve().parents[2] / "build" / "matrix.toml")
    arch = forward.device_arch(torch.empty(1, device=DEV))
    if arch not in {a for v in matrix.variants if v.kind == "triton" for a in v.archs}:
        pytest.skip(f"no AOT target for {arch}")
    aot_build.compile_all(tmp_path, arch, kernels=["linear_kernel"], dtypes=["bf16"], jobs=8)
    index = aot.load_index(tmp_path, triton.__version__, arch)
    x, w = (
        randn(256, 1024, dtype=torch.bfloat16, device=DEV),
        randn(512, 1024, dtype=torch.bfloat16, device=DEV),
    )
    b = randn(512, dtype=torch.bfloat16, device=DEV)
    jit_out = torch.empty(256, 512, dtype=torch.bfloat16, device=DEV)
    with monkeypatch.context() as m:
        m.setattr(aot, "_DISABLED", True)
        forward.linear_rows(x, w, b, "gelu_tanh", jit_out)
    from fused_mlp.triton.configs import LINEAR as TABLE
    from fused_mlp.triton.configs import PDL_PREFETCH, gemm_config, uses_pdl
    from fused_mlp.triton.linear import linear_consts

    cfg = gemm_config(TABLE, arch, 256)
    pdl = uses_pdl(arch, 256)
    consts = linear_consts(cfg, has_bias=True, act=3, even_k=True, pdl=pdl, prefetch=pdl and PDL_PREFETCH)
    entry = index[("linear_kernel", "bf16", consts, cfg.num_warps, cfg.num_stages)]
    aot_out = torch.empty_like(jit_out)
    grid = (triton.cdiv(256, cfg.BM) * triton.cdiv(512, cfg.BN), 1, 1)
    entry.kernel(LINEAR)[grid](x, w, b, aot_out, 256, 512, 1024, 1024, 1024, 512, *consts)
    torch.cuda.synchronize()
    assert torch.equal(aot_out, jit_out)
