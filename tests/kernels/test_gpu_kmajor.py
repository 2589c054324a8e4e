"""K-major weights (the transpose view of a contiguous [in, out] tensor, as GPT2MLP passes Conv1D's weights)
through the Triton backend on a CUDA device: the JIT-compiled `linear_kmajor_kernel` at the portable rows, the
Hopper kernel reading B stored [K, N] past 1024 rows on sm_90a, cuBLAS where the tables say so; forward and
backward against float64, every GEMM launch reading the parameter's own memory. Run on the device: pytest -m gpu
(test_kmajor_weights.py runs the same kernels on the CPU interpreter)."""

import pytest
import torch
from fused_mlp import reference as ref
from fused_mlp.triton import gemm
from fused_mlp.triton import ops as triton_ops
from kernel_numerics import as64, assert_close, grads, randn

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device; run on the GPU machine"),
]
DEV = "cuda"


@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float16, torch.float32))
@pytest.mark.parametrize("rows", (1, 16, 300, 2048))
def test_gpt2_shaped_mlp_kmajor(dtype, rows, monkeypatch):
    seen = []
    real = gemm.launch

    def record(kdef, grid, args, consts, num_warps, num_stages):
        seen.append((kdef.name, args[1].data_ptr()))
        return real(kdef, grid, args, consts, num_warps, num_stages)

    monkeypatch.setattr(gemm, "launch", record)
    fc, proj = (
        randn(k, n, dtype=dtype, device=DEV, scale=k**-0.5, grad=True) for k, n in ((768, 3072), (3072, 768))
    )
    b_fc, b_proj = (randn(n, dtype=dtype, device=DEV, scale=0.1, grad=True) for n in (3072, 768))
    x = randn(rows, 768, dtype=dtype, device=DEV, grad=True)
    p64 = as64(x, fc, proj, b_fc, b_proj)
    expected = ref.mlp(p64[0], [p64[1].t(), p64[2].t()], p64[3:], "gelu_tanh")
    with torch.no_grad():
        assert_close(
            triton_ops.mlp(x, [fc.t(), proj.t()], [b_fc, b_proj], "gelu_tanh"), expected, dtype, "infer"
        )
    out = triton_ops.mlp(x, [fc.t(), proj.t()], [b_fc, b_proj], "gelu_tanh")
    assert_close(out, expected, dtype, f"K-major mlp M={rows}")
    upstream = torch.randn(expected.shape, dtype=torch.float64, device=DEV)
    got = grads(out, (x, fc, proj, b_fc, b_proj), upstream)
    for i, (g, w) in enumerate(zip(got, grads(expected, p64, upstream))):
        assert_close(g, w, dtype, f"K-major mlp M={rows} grad of input {i}")
    assert got[1].stride() == fc.stride() and got[2].stride() == proj.stride()
    # Every GEMM of ours read a parameter in place (cuBLAS rows, e.g. sm_90a's last layer, launch none of ours);
    # the gelu_tanh layer runs the K-major portable kernel, or the Hopper kernel past 1024 rows on sm_90a.
    assert seen and all(ptr in (fc.data_ptr(), proj.data_ptr()) for _, ptr in seen), seen
    hopper = dtype != torch.float32 and rows > 1024 and torch.cuda.get_device_capability() == (9, 0)
    assert ("tma_gemm_kernel" if hopper else "linear_kmajor_kernel") in {name for name, _ in seen}, seen


@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float16))
@pytest.mark.parametrize("activation", ("none", "relu", "gelu", "silu"))
def test_linear_kmajor(dtype, activation):
    for has_bias, rows in ((True, 37), (False, 2048)):
        x = randn(rows, 256, dtype=dtype, device=DEV, grad=True)
        wp = randn(256, 192, dtype=dtype, device=DEV, scale=0.1, grad=True)
        b = randn(192, dtype=dtype, device=DEV, grad=True) if has_bias else None
        out = triton_ops.linear(x, wp.t(), b, activation)
        p64 = as64(x, wp, b)
        expected = ref.linear(p64[0], p64[1].t(), p64[2], activation)
        assert_close(out, expected, dtype, f"K-major linear {activation} M={rows}")
        up = torch.randn(expected.shape, dtype=torch.float64, device=DEV)
        for got, want in zip(grads(out, (x, wp, b), up), grads(expected, p64, up)):
            if want is not None:
                assert_close(got, want, dtype, f"K-major linear grad {activation} M={rows}")
