"""The Hopper GEMM core on an sm_90a GPU (TMA, wgmma, warp specialization, PDL): every kernel and epilogue
against float64 in bf16/fp16/fp32, odd shapes (K, N not multiples of the tile), M=1, forward and backward;
the new ops under opcheck and torch.compile(fullgraph=True); a shipped Hopper cubin against the JIT. The
same kernels' logic runs on the CPU interpreter in test_hopper_interpreter.py. Run: pytest -m gpu."""

import fused_mlp.reference as ref
import pytest
import torch
from fused_mlp._build_info import OPS_NAMESPACE
from fused_mlp.arch import arch_of
from fused_mlp.triton import backward, configs, forward, gemm, ops
from kernel_numerics import TOL, as64, assert_close, grads, randn, rel_err

DEV = "cuda"
DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def _arch() -> str | None:
    return arch_of(torch.cuda.get_device_capability()) if torch.cuda.is_available() else None


pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(_arch() != "sm_90a", reason="the Hopper kernels run on sm_90a (H100/H200); run there"),
]
# TMA-aligned (multiples of 8 elements) but not multiples of any tile; M=1; several row tiles.
SHAPES = ((1, 136, 200), (37, 200, 136), (300, 520, 1000))
# The warp-specialized K loop is not tested here: with Triton 3.6 it wrote NaN on the H200 (no table uses it,
# test_hopper_tables.py keeps it that way).
PLAIN = configs.TmaConfig(128, 128, 64, 8, 8, 3)
SPLIT = configs.TmaConfig(128, 128, 64, 8, 8, 3, epi_split=True)


def _cfg(role: str, dtype: torch.dtype) -> configs.TmaConfig:
    return configs.tma_config(role, "sm_90a", 1 << 20, torch.empty((), dtype=dtype).element_size())


def _nan(*shape: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.full(shape, float("nan"), dtype=dtype, device=DEV)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("activation", ref.ACTIVATIONS)
def test_tma_linear(dtype, activation):
    for M, N, K in SHAPES:
        x, w = randn(M, K, dtype=dtype, device=DEV), randn(N, K, dtype=dtype, device=DEV, scale=K**-0.5)
        b = randn(N, dtype=dtype, device=DEV)
        out, pre = _nan(M, N, dtype=dtype), _nan(M, N, dtype=dtype)
        forward.linear_rows(x, w, b, activation, out, _cfg("linear", dtype), pre=pre)
        x64, w64, b64 = as64(x, w, b)
        assert_close(
            out, ref.linear(x64, w64, b64, activation), dtype, f"tma linear {activation} {M}x{N}x{K}"
        )
        assert_close(pre, ref.linear(x64, w64, b64, "none"), dtype, f"tma linear pre-activation {M}x{N}x{K}")


@pytest.mark.parametrize("cfg", (PLAIN, SPLIT), ids=("plain", "epi_split"))
@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float16))
def test_tma_loop_and_epilogue_forms(cfg, dtype):
    """The plain and the split epilogue forms, whichever the tables picked, on a real layer's K (768)."""
    x, w = randn(300, 768, dtype=dtype, device=DEV), randn(520, 768, dtype=dtype, device=DEV, scale=0.03)
    out = _nan(300, 520, dtype=dtype)
    forward.linear_rows(x, w, None, "silu", out, cfg)
    assert_close(out, ref.linear(*as64(x, w), None, "silu"), dtype, "tma linear form")
    wu = randn(520, 768, dtype=dtype, device=DEV, scale=0.03)
    h, gu = _nan(300, 520, dtype=dtype), _nan(2, 300, 520, dtype=dtype)
    forward.gate_up_rows(x, w, wu, "gelu", h, cfg, gu=gu)
    g64, u64 = x.double() @ w.double().T, x.double() @ wu.double().T
    assert_close(h, ref.act_and_mul(g64, u64, "gelu"), dtype, "tma gate_up form")
    assert_close(gu, torch.stack([g64, u64]), dtype, "tma gate_up form (g, u)")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("store", (False, True))
def test_tma_gate_up(dtype, store):
    for M, N, K in SHAPES:
        x = randn(M, K, dtype=dtype, device=DEV)
        wg, wu = (randn(N, K, dtype=dtype, device=DEV, scale=K**-0.5) for _ in range(2))
        h, gu = _nan(M, N, dtype=dtype), _nan(2, M, N, dtype=dtype)
        forward.gate_up_rows(x, wg, wu, "gelu_tanh", h, _cfg("gate_up", dtype), gu=gu if store else None)
        g64, u64 = x.double() @ wg.double().T, x.double() @ wu.double().T
        assert_close(h, ref.act_and_mul(g64, u64, "gelu_tanh"), dtype, f"tma gate_up {M}x{N}x{K}")
        if store:
            assert_close(gu, torch.stack([g64, u64]), dtype, f"tma gate_up (g, u) {M}x{N}x{K}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_backward_gemms(dtype):
    for M, N, K in SHAPES:
        dz, x = randn(M, N, dtype=dtype, device=DEV), randn(M, K, dtype=dtype, device=DEV)
        w, pre = randn(N, K, dtype=dtype, device=DEV, scale=N**-0.5), randn(M, K, dtype=dtype, device=DEV)
        dz64, x64, w64, pre64 = as64(dz, x, w, pre)
        assert_close(backward.wgrad_rows(dz, x, _nan(N, K, dtype=dtype)), dz64.T @ x64, dtype, "tma wgrad")
        z = pre64.requires_grad_()
        (want,) = torch.autograd.grad(ref.apply_activation(z, "silu"), z, dz64 @ w64)
        assert_close(
            backward.dgrad_rows(dz, w, _nan(M, K, dtype=dtype), pre, "silu"), want, dtype, "tma dgrad"
        )


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    ("rows", "hidden", "inter"), ((1, 136, 200), (37, 200, 136), (1024, 768, 3072), (300, 96, 99))
)
def test_gated_mlp_training(dtype, rows, hidden, inter):
    """Forward and backward through autograd: training forward + fused backward op (the last shape breaks
    TMA's 16-byte rule and takes the portable / cuBLAS paths)."""
    x = randn(rows, hidden, dtype=dtype, device=DEV, grad=True)
    wg, wu = (randn(inter, hidden, dtype=dtype, device=DEV, scale=hidden**-0.5, grad=True) for _ in range(2))
    wd = randn(hidden, inter, dtype=dtype, device=DEV, scale=inter**-0.5, grad=True)
    out = ops.gated_mlp(x, wg, wu, wd, "gelu_tanh")
    p64 = as64(x, wg, wu, wd)
    expected = ref.gated_mlp(*p64, "gelu_tanh")
    assert_close(out, expected, dtype, "gated_mlp forward")
    up = torch.randn(expected.shape, dtype=torch.float64, device=DEV)
    for name, got, want in zip(("dx", "dw_gate", "dw_up", "dw_down"), grads(out, (x, wg, wu, wd), up),
                               grads(expected, p64, up)):  # fmt: skip
        assert_close(got, want, dtype, f"gated_mlp {name} {rows}x{hidden}x{inter}")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows", (1, 16))
def test_pdl_prefetch_chain_in_user_graph(dtype, rows):
    """Small-M portable kernels prefetch their weights before the PDL wait: a chain inside a user graph
    must still read each layer's fresh input."""
    x = randn(rows, 256, dtype=dtype, device=DEV)
    ws = [randn(256, 256, dtype=dtype, device=DEV, scale=1 / 16) for _ in range(3)]
    bs = [randn(256, dtype=dtype, device=DEV) for _ in range(3)]
    out = torch.empty(rows, 256, dtype=dtype, device=DEV)
    forward.mlp_rows(x, ws, bs, "silu", out)  # compile outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        forward.mlp_rows(x, ws, bs, "silu", out)
    x.copy_(torch.randn_like(x))
    out.fill_(float("nan"))
    graph.replay()
    want = ref.mlp(x.double(), [w.double() for w in ws], [b.double() for b in bs], "silu")
    assert_close(out, want, dtype, f"mlp chain with prefetch M={rows}")


def test_opcheck_training_ops():
    ns = getattr(torch.ops, OPS_NAMESPACE)
    d = torch.bfloat16
    x = randn(37, 136, dtype=d, device=DEV, grad=True)
    wg, wu = (randn(200, 136, dtype=d, device=DEV, scale=0.1, grad=True) for _ in range(2))
    wd = randn(136, 200, dtype=d, device=DEV, scale=0.1, grad=True)
    torch.library.opcheck(ns.triton_gated_mlp_train, (x, wg, wu, wd, "gelu_tanh"))
    _, h, gu = ns.triton_gated_mlp_train(x, wg, wu, wd, "gelu_tanh")
    dy = randn(37, 136, dtype=d, device=DEV)
    saved = [t.detach() for t in (x, wg, wu, wd, h, gu)]  # the backward op has no backward of its own
    torch.library.opcheck(ns.triton_gated_mlp_backward, (dy, *saved, "gelu_tanh"))


def test_compile_fullgraph_training_no_recompile():
    """Forward + backward of the gated op under torch.compile(fullgraph=True): the training op and the
    fused backward op trace; new batch sizes do not recompile."""
    torch._dynamo.reset()
    d = torch.bfloat16
    wg, wu = (randn(384, 256, dtype=d, device=DEV, scale=0.06, grad=True) for _ in range(2))
    wd = randn(256, 384, dtype=d, device=DEV, scale=0.05, grad=True)

    def step(x):
        return ops.gated_mlp(x, wg, wu, wd, "silu").float().square().sum()

    compiled = torch.compile(step, fullgraph=True, dynamic=True)
    try:
        for rows in (24, 333, 1000):
            x = randn(rows, 256, dtype=d, device=DEV, grad=True)
            got = torch.autograd.grad(compiled(x), (x, wg, wu, wd))
            p64 = as64(x, wg, wu, wd)
            want = torch.autograd.grad(ref.gated_mlp(*p64, "silu").square().sum(), p64)
            for g, w in zip(got, want):
                assert rel_err(g, w) <= TOL[d]
            torch._dynamo.config.error_on_recompile = True
    finally:
        torch._dynamo.config.error_on_recompile = False


def test_aot_hopper_cubin_matches_jit(tmp_path):
    """A shipped tma_gemm_kernel spec compiled ahead of time (as the builder does, no GPU) and launched from
    its .cubin + .json gives the JIT's bits; its metadata carries the global scratch the C++ launcher sizes."""
    import json

    import triton
    from fused_mlp.triton import aot, aot_build
    from fused_mlp.triton.hopper import TMA_GEMM, gemm_consts

    M, N, K = 2048, 768, 1024  # above 1024 rows: a shipped Hopper row (no PDL)
    cfg = configs.tma_config("linear", "sm_90a", M)
    spec = next(s for s in aot_build.shipped_specs("sm_90a", ["bf16"])
                if s.kernel == "tma_gemm_kernel" and s.consts == gemm_consts(cfg, act=3, pdl=configs.uses_pdl("sm_90a", M)))  # fmt: skip
    aot_build.compile_specs([spec], "sm_90a", tmp_path / triton.__version__ / "sm_90a", jobs=1)
    entry = aot.load_index(tmp_path, triton.__version__, "sm_90a")[spec.key()]
    meta = json.loads(entry.json_path.read_text())
    assert meta["global_scratch_size"] >= 3 * 128 and meta["fused_mlp_spec"]["params"] == [
        list(p) for p in TMA_GEMM.params
    ]
    x, w = randn(M, K, dtype=torch.bfloat16, device=DEV), randn(N, K, dtype=torch.bfloat16, device=DEV)
    jit_out, aot_out = (torch.empty(M, N, dtype=torch.bfloat16, device=DEV) for _ in range(2))
    saved, aot._DISABLED = aot._DISABLED, True
    try:
        gemm.tma_gemm(x, w, jit_out, M, N, K, cfg, act=3)
    finally:
        aot._DISABLED = saved
    grid = (gemm.num_programs(x, triton.cdiv(M, cfg.BM) * triton.cdiv(N, cfg.BN)), 1, 1)
    args = (x, w, w, aot_out, aot_out, aot_out, M, N, K, K, K, K, N, N)
    entry.kernel(TMA_GEMM)[grid](*args, *spec.consts)
    torch.cuda.synchronize()
    assert torch.equal(aot_out, jit_out)
