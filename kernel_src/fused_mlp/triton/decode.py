"""Decode kernels: few rows (M <= 64) against weights that stream from HBM, so the GEMM is a weight read.

Each program owns BN weight rows (output features) for BM input rows and walks the whole K, so every weight
element is read once per BM rows; the small x tile comes from L2. The product is computed transposed,
acc^T[BN, BM] = W[BN, BK] @ x^T[BK, BM] ("swap AB"): the weight tile is the dot's big side and BM may be the
dot's minimum of 16, or, below 16, a multiply-and-reduce on the CUDA cores (no padding rows at all). Many
narrow programs (BN 16-64) spread the weight stream over every SM with several programs resident per SM.

The kernels take the runtime parameters and constexprs of the portable `linear_kernel` / `gate_up_kernel`
(same order, same meaning; GROUP_M is unused) and the same grid, cdiv(M, BM) * cdiv(N, BN), so the C++
launcher runs them with the portable family's arguments (docs/CONTRACTS.md "Kernel families").
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from .activations import activate
from .gated import GATE_UP as _PORTABLE_GATE_UP
from .linear import LINEAR as _PORTABLE_LINEAR
from .specs import KernelDef
from .tiles import prefetch_rows_l2


@triton.jit
def _tile_ids(M, BM: tl.constexpr):
    """(pid_m, pid_n) with the row blocks of one weight tile adjacent: they read it from L2 together."""
    num_m = tl.cdiv(M, BM)
    pid = tl.program_id(0)
    return pid % num_m, pid // num_m


@triton.jit
def _wx(w, x, acc, BM: tl.constexpr, UPCAST: tl.constexpr, PRECISION: tl.constexpr):
    """acc[BN, BM] + w[BN, BK] @ x[BM, BK]^T: a tensor-core dot from 16 rows, else multiply and reduce."""
    if BM >= 16:
        if UPCAST:
            w = w.to(tl.float32)
            x = x.to(tl.float32)
        return tl.dot(w, tl.trans(x), acc, input_precision=PRECISION)
    prod = w.to(tl.float32)[:, None, :] * x.to(tl.float32)[None, :, :]
    return acc + tl.sum(prod, axis=2)


# M is not specialised (Triton would compile M == 1 apart): the shipped cubins serve every M with one code.
@triton.jit(do_not_specialize=["M"])
def gemv_linear_kernel(
    x_ptr, w_ptr, b_ptr, out_ptr,
    M, N, K, stride_xm, stride_wn, stride_om,
    HAS_BIAS: tl.constexpr, ACT: tl.constexpr, EVEN_K: tl.constexpr, UPCAST: tl.constexpr,
    PRECISION: tl.constexpr, PDL: tl.constexpr,
    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr, PREFETCH: tl.constexpr,
):  # fmt: skip
    pid_m, pid_n = _tile_ids(M, BM)
    offs_m = pid_m * BM + tl.arange(0, BM)
    offs_n = pid_n * BN + tl.arange(0, BN)
    offs_k = tl.arange(0, BK)
    # Rows past M are masked, not wrapped: wrapped, every program's x loads (cp.async, past L1) ask the same
    # L2 lines 16 times at one row, and that one hot spot made one row slower than sixteen.
    rm = offs_m % M
    m_in = offs_m[:, None] < M
    rn = offs_n % N
    if PREFETCH:
        prefetch_rows_l2(w_ptr, rn, stride_wn, K, 8)
    if PDL:  # weights never depend on the previous kernel; x does: wait for it here
        gdc_launch_dependents()
        gdc_wait()
    x_ptrs = x_ptr + rm[:, None] * stride_xm + offs_k[None, :]
    w_ptrs = w_ptr + rn[:, None] * stride_wn + offs_k[None, :]
    acc = tl.zeros((BN, BM), dtype=tl.float32)
    for k in range(tl.cdiv(K, BK)):
        if EVEN_K:
            x = tl.load(x_ptrs, mask=m_in, other=0.0)
            w = tl.load(w_ptrs, eviction_policy="evict_first")
        else:
            k_in = offs_k[None, :] < K - k * BK
            x = tl.load(x_ptrs, mask=m_in & k_in, other=0.0)
            w = tl.load(w_ptrs, mask=k_in, other=0.0, eviction_policy="evict_first")
        acc = _wx(w, x, acc, BM, UPCAST, PRECISION)
        x_ptrs += BK
        w_ptrs += BK
    if HAS_BIAS:
        acc += tl.load(b_ptr + rn).to(tl.float32)[:, None]
    acc = activate(acc, ACT)
    out_ptrs = out_ptr + offs_m[None, :] * stride_om + offs_n[:, None]
    tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty), mask=(offs_m[None, :] < M) & (offs_n[:, None] < N))


@triton.jit(do_not_specialize=["M"])
def gemv_gate_up_kernel(
    x_ptr, wg_ptr, wu_ptr, h_ptr,
    M, N, K, stride_xm, stride_wg, stride_wu, stride_hm,
    ACT: tl.constexpr, EVEN_K: tl.constexpr, UPCAST: tl.constexpr, PRECISION: tl.constexpr,
    PDL: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr,
    PREFETCH: tl.constexpr,
):  # fmt: skip
    pid_m, pid_n = _tile_ids(M, BM)
    offs_m = pid_m * BM + tl.arange(0, BM)
    offs_n = pid_n * BN + tl.arange(0, BN)
    offs_k = tl.arange(0, BK)
    rm = offs_m % M
    m_in = offs_m[:, None] < M  # masked, not wrapped: see gemv_linear_kernel
    rn = offs_n % N
    if PREFETCH:
        prefetch_rows_l2(wg_ptr, rn, stride_wg, K, 8)
        prefetch_rows_l2(wu_ptr, rn, stride_wu, K, 8)
    if PDL:
        gdc_launch_dependents()
        gdc_wait()
    x_ptrs = x_ptr + rm[:, None] * stride_xm + offs_k[None, :]
    wg_ptrs = wg_ptr + rn[:, None] * stride_wg + offs_k[None, :]
    wu_ptrs = wu_ptr + rn[:, None] * stride_wu + offs_k[None, :]
    acc_g = tl.zeros((BN, BM), dtype=tl.float32)
    acc_u = tl.zeros((BN, BM), dtype=tl.float32)
    for k in range(tl.cdiv(K, BK)):
        if EVEN_K:
            x = tl.load(x_ptrs, mask=m_in, other=0.0)
            wg = tl.load(wg_ptrs, eviction_policy="evict_first")
            wu = tl.load(wu_ptrs, eviction_policy="evict_first")
        else:
            k_in = offs_k[None, :] < K - k * BK
            x = tl.load(x_ptrs, mask=m_in & k_in, other=0.0)
            wg = tl.load(wg_ptrs, mask=k_in, other=0.0, eviction_policy="evict_first")
            wu = tl.load(wu_ptrs, mask=k_in, other=0.0, eviction_policy="evict_first")
        acc_g = _wx(wg, x, acc_g, BM, UPCAST, PRECISION)
        acc_u = _wx(wu, x, acc_u, BM, UPCAST, PRECISION)
        x_ptrs += BK
        wg_ptrs += BK
        wu_ptrs += BK
    h = activate(acc_g, ACT) * acc_u
    h_ptrs = h_ptr + offs_m[None, :] * stride_hm + offs_n[:, None]
    tl.store(h_ptrs, h.to(h_ptr.dtype.element_ty), mask=(offs_m[None, :] < M) & (offs_n[:, None] < N))


# Same parameters and constexprs as the portable families: their consts helpers (linear.linear_consts,
# gated.gate_up_consts) build these kernels' constexpr tuples too.
GEMV_LINEAR = KernelDef(gemv_linear_kernel, _PORTABLE_LINEAR.params, _PORTABLE_LINEAR.constexprs)
GEMV_GATE_UP = KernelDef(gemv_gate_up_kernel, _PORTABLE_GATE_UP.params, _PORTABLE_GATE_UP.constexprs)
