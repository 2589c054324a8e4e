"""The decode kernels (fused_mlp/triton/decode.py) against float64: both families, every tile form (the
tensor-core dot from 16 rows, the multiply-and-reduce below), odd sizes (K not a multiple of BK, N and M not
multiples of the tile), outputs poisoned with NaN first; and the forward ops' dispatch to them by rows and
weight bytes. On the CPU interpreter; the same checks on a GPU are marked `gpu`."""

from __future__ import annotations

import pytest
import torch
from fused_mlp.triton import configs, forward, gemm
from fused_mlp.triton.decode import GEMV_GATE_UP, GEMV_LINEAR
from kernel_numerics import ACT64, as64, assert_close, randn

INTERPRET_DTYPES = (torch.float32, torch.bfloat16)
# (M, N, K): one row, a few, more rows than one BM=16 tile; K off the BK grid; N off the BN grid
SHAPES = ((1, 48, 96), (3, 40, 100), (19, 24, 80))
TILES = (configs.GemmConfig(1, 16, 32, 1, 4, 2), configs.GemmConfig(4, 16, 32, 1, 4, 2),
         configs.GemmConfig(16, 16, 32, 1, 4, 2))  # fmt: skip


def _device(gpu: bool) -> str:
    return "cuda" if gpu else "cpu"


def _check_tiles(dtype, device):
    for (M, N, K), cfg in zip(SHAPES * 2, TILES * 2):
        x = randn(M, K, dtype=dtype, device=device)
        w, wu = (randn(N, K, dtype=dtype, device=device, scale=K**-0.5) for _ in range(2))
        b = randn(N, dtype=dtype, device=device)
        out = torch.full((M, N), float("nan"), dtype=dtype, device=device)
        gemm.ptr_linear(x, w, b, 4, out, cfg, GEMV_LINEAR)
        x64, w64, wu64, b64 = as64(x, w, wu, b)
        assert_close(out, ACT64["silu"](x64 @ w64.T + b64), dtype, f"gemv linear {M}x{N}x{K} {cfg}")
        h = torch.full((M, N), float("nan"), dtype=dtype, device=device)
        gemm.ptr_gate_up(x, w, wu, 3, h, cfg, GEMV_GATE_UP)
        want = ACT64["gelu_tanh"](x64 @ w64.T) * (x64 @ wu64.T)
        assert_close(h, want, dtype, f"gemv gate_up {M}x{N}x{K} {cfg}")


@pytest.mark.parametrize("dtype", INTERPRET_DTYPES)
def test_every_tile_form_matches_float64(dtype):
    _check_tiles(dtype, "cpu")


def _force_decode(monkeypatch, arch: str, rows: int = 64):
    """Make `arch` send every call of at most `rows` rows to the decode kernels, whatever the weight size."""
    monkeypatch.setitem(configs.DECODE_MIN_WEIGHT_BYTES, arch, 0)
    cfg = configs.GemmConfig(16, 16, 32, 1, 4, 2) if arch == "interpreter" else None
    for table in (configs.DECODE_LINEAR, configs.DECODE_GATE_UP):
        monkeypatch.setitem(table, arch, table.get(arch) or ((rows, cfg),))


def test_the_ops_take_the_decode_path_by_rows_and_weight_bytes(monkeypatch):
    launched = []
    for name in ("ptr_linear", "ptr_gate_up"):
        real = getattr(forward, name)
        monkeypatch.setattr(
            forward,
            name,
            lambda *a, _r=real: (launched.append(getattr(a[-1], "name", "portable")), _r(*a))[1],
        )
    x, (wg, wu) = randn(3, 100, dtype=torch.float32), (randn(40, 100, dtype=torch.float32) for _ in range(2))
    wd = randn(100, 40, dtype=torch.float32)
    forward.gated_rows(x, wg, wu, wd, "silu")
    assert launched == ["portable", "portable"]  # the interpreter's threshold keeps small weights there
    launched.clear()
    _force_decode(monkeypatch, "interpreter")
    y = forward.gated_rows(x, wg, wu, wd, "silu")
    assert launched == ["gemv_gate_up_kernel", "gemv_linear_kernel"]
    x64, wg64, wu64, wd64 = as64(x, wg, wu, wd)
    assert_close(
        y, (ACT64["silu"](x64 @ wg64.T) * (x64 @ wu64.T)) @ wd64.T, torch.float32, "decode gated_mlp"
    )
    launched.clear()
    forward.gated_rows(randn(65, 100, dtype=torch.float32), wg, wu, wd, "silu")  # past the row bound
    assert launched == ["portable", "portable"]


def test_decode_rule_is_by_rows_and_bytes_not_by_shape():
    cfg = configs.GemmConfig(16, 16, 32, 1, 4, 2)
    tables = {"sm_test": ((16, cfg),)}
    saved = (dict(configs.DECODE_LINEAR), dict(configs.DECODE_MIN_WEIGHT_BYTES))
    try:
        configs.DECODE_LINEAR.update(tables)
        configs.DECODE_MIN_WEIGHT_BYTES["sm_test"] = 1000
        assert configs.decode_config("linear", "sm_test", 16, 1000) == cfg
        assert configs.decode_config("linear", "sm_test", 17, 1000) is None
        assert configs.decode_config("linear", "sm_test", 1, 999) is None
        assert configs.decode_config("linear", "sm_unmeasured", 1, 1 << 40) is None
        assert configs.decode_config("linear", "sm_test", 1, 1000, element_size=4).BK == 16
    finally:
        configs.DECODE_LINEAR.clear(), configs.DECODE_LINEAR.update(saved[0])
        configs.DECODE_MIN_WEIGHT_BYTES.clear(), configs.DECODE_MIN_WEIGHT_BYTES.update(saved[1])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: run with pytest -m gpu there")
@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float16, torch.float32))
def test_gpu_every_tile_form_and_the_ops(dtype, monkeypatch):
    _check_tiles(dtype, "cuda")
    arch = gemm.device_arch(torch.empty(1, device="cuda"))
    for M in (1, 5, 16, 33, 64):
        x = randn(M, 4096, dtype=dtype, device="cuda")
        wg, wu = (randn(2048, 4096, dtype=dtype, device="cuda", scale=4096**-0.5) for _ in range(2))
        wd = randn(4096, 2048, dtype=dtype, device="cuda", scale=2048**-0.5)
        if configs.DECODE_LINEAR.get(arch) is None:
            pytest.skip(f"no decode rows for {arch}")
        monkeypatch.setitem(configs.DECODE_MIN_WEIGHT_BYTES, arch, 0)
        y = forward.gated_rows(x, wg, wu, wd, "silu")
        x64, wg64, wu64, wd64 = as64(x, wg, wu, wd)
        want = (ACT64["silu"](x64 @ wg64.T) * (x64 @ wu64.T)) @ wd64.T
        assert_close(y, want, dtype, f"decode gated_mlp M={M} ({arch})")
