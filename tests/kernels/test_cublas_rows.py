"""The Triton backend's cuBLAS rows (configs.CUBLAS_LINEAR_ABOVE): which `linear` GEMMs an arch's table gives
to cuBLAS, and that the aten calls replacing the kernel there give the op's results, forward and backward.

On the CPU machine the rows are reached by making the interpreter's tensors report an arch with such a row
(sm_90a); the aten calls then run on the CPU, the same calls the GPU runs through cuBLAS."""

import os

import fused_mlp
import fused_mlp.reference as ref
import pytest
import torch
from fused_mlp.triton import configs, forward, gemm
from kernel_numerics import as64, assert_close, grads, randn

GEMM_KERNELS = ("linear_kernel", "gate_up_kernel", "tma_gemm_kernel", "tma_gate_up_kernel")
pytestmark = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1", reason="runs the Triton backend on CPU: set TRITON_INTERPRET=1"
)


def test_table_gives_cublas_only_relu_and_none_above_the_bound_on_measured_archs():
    assert configs.cublas_linear("sm_90a", 2, "relu") and configs.cublas_linear("sm_90a", 8192, "none")
    assert not configs.cublas_linear("sm_90a", 1, "relu")  # one row: the Triton kernel (PDL hides its launch)
    for activation in ("gelu", "gelu_tanh", "silu"):  # the fused Triton epilogue stays
        assert not configs.cublas_linear("sm_90a", 1024, activation)
    assert not configs.cublas_linear("sm_80", 1024, "relu")  # not measured there
    assert not configs.cublas_linear("interpreter", 1024, "relu")


@pytest.fixture
def as_sm90(monkeypatch):
    """CPU tensors report sm_90a; a Triton GEMM launch is recorded, not run (the interpreter cannot run
    sm_90a's GEMM launch options, PDL among them): the cuBLAS rows must make none, the others the expected
    ones. Elementwise kernels (act' in backward) run."""
    launches = []
    monkeypatch.setattr(forward, "device_arch", lambda t: "sm_90a")
    monkeypatch.setattr(gemm, "device_arch", lambda t: "sm_90a")
    real = gemm.launch

    def counted(kdef, *args, **kwargs):
        if kdef.name in GEMM_KERNELS:
            launches.append(kdef.name)
        else:
            real(kdef, *args, **kwargs)

    monkeypatch.setattr(gemm, "launch", counted)
    monkeypatch.setattr(forward, "launch", counted)
    return launches


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16))
@pytest.mark.parametrize("has_bias", (True, False))
def test_relu_mlp_forward_backward_on_the_cublas_rows(as_sm90, dtype, has_bias):
    x = randn(2, 9, 64, dtype=dtype, grad=True)
    ws = [
        randn(48, 64, dtype=dtype, scale=0.15, grad=True),
        randn(40, 48, dtype=dtype, scale=0.15, grad=True),
    ]
    bs = [randn(48, dtype=dtype, grad=True), randn(40, dtype=dtype, grad=True)] if has_bias else [None, None]
    out = fused_mlp.mlp(x, ws, bs, "relu")
    assert as_sm90 == [], f"the cuBLAS rows launched Triton GEMMs: {as_sm90}"
    x64, *p64 = as64(x, *ws, *bs)
    expected = ref.mlp(x64, p64[:2], p64[2:], "relu")
    assert_close(out, expected, dtype, "mlp forward")
    if dtype == torch.bfloat16:
        return  # relu'(z) flips where 16-bit rounding moves z across 0 (eager misses as much)
    up = torch.randn(expected.shape, dtype=torch.float64)
    for i, (got, want) in enumerate(zip(grads(out, (x, *ws, *bs), up), grads(expected, (x64, *p64), up))):
        if want is not None:
            assert_close(got, want, dtype, f"mlp grad of input {i}")


@pytest.mark.parametrize("has_bias", (True, False))
def test_relu_mlp_inference_on_the_cublas_rows_returns_cublas_own_outputs(as_sm90, has_bias):
    """No grad: the direct path, where cuBLAS's calls allocate each layer's output (no `out=`)."""
    x = randn(3, 5, 64, dtype=torch.float32)
    ws = [randn(*shape, dtype=torch.float32, scale=0.15) for shape in ((48, 64), (40, 48), (24, 40))]
    bs = [randn(48, dtype=torch.float32), None, randn(24, dtype=torch.float32)] if has_bias else None
    with torch.no_grad():
        out = fused_mlp.mlp(x, ws, bs, "relu")
    assert as_sm90 == [], f"the cuBLAS rows launched Triton GEMMs: {as_sm90}"
    assert out.shape == (3, 5, 24) and out.data_ptr() != x.data_ptr()
    x64, *w64 = as64(x, *ws)
    b64 = [None if b is None else b.double() for b in bs] if has_bias else None
    assert_close(out, ref.mlp(x64, w64, b64, "relu"), torch.float32, "mlp inference on the cuBLAS rows")


def test_one_row_and_fused_activations_keep_the_triton_kernels(as_sm90):
    w = randn(48, 64, dtype=torch.float32, scale=0.15)
    fused_mlp.linear(randn(1, 64, dtype=torch.float32), w, None, "relu")
    fused_mlp.linear(randn(7, 64, dtype=torch.float32), w, None, "silu")
    assert as_sm90 == ["linear_kernel", "linear_kernel"], as_sm90


def test_gated_down_projection_on_cublas(as_sm90):
    x = randn(5, 32, dtype=torch.float32, scale=0.5)
    wg, wu = randn(48, 32, dtype=torch.float32, scale=0.2), randn(48, 32, dtype=torch.float32, scale=0.2)
    h = torch.empty(5, 48)
    forward.gate_up_rows(x, wg, wu, "silu", h)
    h.copy_(ref.act_and_mul(x @ wg.t(), x @ wu.t(), "silu"))  # what the recorded, not run, kernel would write
    wd = randn(32, 48, dtype=torch.float32, scale=0.2)
    out = forward.linear_rows(h, wd, None, "none", torch.empty(5, 32))
    assert_close(out, h.double() @ wd.double().t(), torch.float32, "gated down projection")
    assert as_sm90 == ["gate_up_kernel"], as_sm90  # the fused gate/up kernel; the down GEMM on cuBLAS


def test_gate_up_runs_split_on_real_model_weights_between_the_table_rows(as_sm90):
    """65-256 rows against >= 16 MiB of gate + up weights: two cuBLAS GEMMs and the act_and_mul kernel (run
    here), no Triton GEMM; fewer rows or smaller weights keep the fused kernel (recorded, not run)."""
    hidden, inter = 2048, 1024  # gate + up: 2 x 1024 x 2048 x 4 bytes = 16 MiB
    wg, wu = (randn(inter, hidden, dtype=torch.float32, scale=hidden**-0.5) for _ in range(2))
    wd = randn(hidden, inter, dtype=torch.float32, scale=inter**-0.5)
    x = randn(100, hidden, dtype=torch.float32)
    out = forward.gated_rows(x, wg, wu, wd, "gelu_tanh")
    assert as_sm90 == [], f"split launched Triton GEMMs: {as_sm90}"
    x64, wg64, wu64, wd64 = as64(x, wg, wu, wd)
    want = ref.act_and_mul(x64 @ wg64.T, x64 @ wu64.T, "gelu_tanh") @ wd64.T
    assert_close(out, want, torch.float32, "gated_mlp on the split row")
    for rows, w_rows in ((64, inter), (100, inter // 2)):  # below the row, and under the weight bound
        forward.gate_up_rows(x[:rows], wg[:w_rows], wu[:w_rows], "silu", torch.empty(rows, w_rows))
    assert as_sm90 == ["gate_up_kernel", "gate_up_kernel"], as_sm90
