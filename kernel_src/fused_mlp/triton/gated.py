"""Gated-MLP kernel: one GEMM over the [gate; up] weight pair whose epilogue writes act(g) * u.

For each [BM, BN] tile of h[M, I] the program reads the matching BN rows of w_gate and of w_up
(the concatenated [gate; up] weight, tile by tile) and keeps both products in registers, so the
[M, 2I] intermediate never reaches HBM. The down projection is a plain `linear` GEMM.
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from .activations import activate
from .specs import KernelDef
from .tiles import mma, prefetch_rows_l2, tile_ids


@triton.jit
def gate_up_kernel(
    x_ptr, wg_ptr, wu_ptr, h_ptr,
    M, N, K, stride_xm, stride_wg, stride_wu, stride_hm,
    ACT: tl.constexpr, EVEN_K: tl.constexpr, UPCAST: tl.constexpr, PRECISION: tl.constexpr,
    PDL: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr,
    PREFETCH: tl.constexpr,
):  # fmt: skip
    pid_m, pid_n = tile_ids(M, N, BM, BN, GROUP_M)
    offs_m = pid_m * BM + tl.arange(0, BM)
    offs_n = pid_n * BN + tl.arange(0, BN)
    offs_k = tl.arange(0, BK)
    rm = offs_m % M
    m_in = offs_m[:, None] < M  # x rows past M masked, not wrapped (linear._linear_tile says why)
    rn = offs_n % N
    if PREFETCH:  # weights never depend on the previous kernel: fetch them into L2 before waiting on it
        prefetch_rows_l2(wg_ptr, rn, stride_wg, K, 8)
        prefetch_rows_l2(wu_ptr, rn, stride_wu, K, 8)
    if PDL:  # programmatic dependent launch: start early, wait for the previous kernel's writes here
        gdc_launch_dependents()
        gdc_wait()
    x_ptrs = x_ptr + rm[:, None] * stride_xm + offs_k[None, :]
    wg_ptrs = wg_ptr + rn[None, :] * stride_wg + offs_k[:, None]
    wu_ptrs = wu_ptr + rn[None, :] * stride_wu + offs_k[:, None]

    acc_g = tl.zeros((BM, BN), dtype=tl.float32)
    acc_u = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(tl.cdiv(K, BK)):
        if EVEN_K:
            a = tl.load(x_ptrs, mask=m_in, other=0.0)
            bg = tl.load(wg_ptrs)
            bu = tl.load(wu_ptrs)
        else:
            k_left = K - k * BK
            a = tl.load(x_ptrs, mask=m_in & (offs_k[None, :] < k_left), other=0.0)
            bg = tl.load(wg_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
            bu = tl.load(wu_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        acc_g = mma(a, bg, acc_g, UPCAST, PRECISION)
        acc_u = mma(a, bu, acc_u, UPCAST, PRECISION)
        x_ptrs += BK
        wg_ptrs += BK
        wu_ptrs += BK

    # Epilogue: act(g) * u, cast, store.
    h = activate(acc_g, ACT) * acc_u
    h_ptrs = h_ptr + offs_m[:, None] * stride_hm + offs_n[None, :]
    tl.store(h_ptrs, h.to(h_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def gate_up_consts(cfg, *, act: int, even_k: bool, pdl: bool, prefetch: bool, upcast: bool = False,
                   precision: str = "tf32") -> tuple:  # fmt: skip
    """GATE_UP's constexpr values, in declared order, for config `cfg` (a configs.GemmConfig)."""
    return (act, even_k, upcast, precision, pdl, cfg.BM, cfg.BN, cfg.BK, cfg.GROUP_M, prefetch)


GATE_UP = KernelDef(
    fn=gate_up_kernel,
    params=(
        ("x_ptr", "ptr"), ("wg_ptr", "ptr"), ("wu_ptr", "ptr"), ("h_ptr", "ptr"),
        ("M", "i32"), ("N", "i32:16"), ("K", "i32:16"),
        ("stride_xm", "i32:16"), ("stride_wg", "i32:16"), ("stride_wu", "i32:16"), ("stride_hm", "i32:16"),
    ),
    constexprs=("ACT", "EVEN_K", "UPCAST", "PRECISION", "PDL", "BM", "BN", "BK", "GROUP_M", "PREFETCH"),
)  # fmt: skip
