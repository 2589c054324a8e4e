"""Linear op kernels: GEMM with fused bias + activation epilogue, and the activation backward.

out[M, N] = act(x[M, K] @ w[N, K]^T + b[N]); rows of x and out are unit-stride, w is row-major
(`linear_kernel`) or K-major (`linear_kmajor_kernel`: w's transpose is the contiguous tensor).
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from .activations import activate, activate_grad
from .specs import KernelDef
from .tiles import mma, prefetch_rows_l2, tile_ids


@triton.jit
def _linear_tile(
    x_ptr, w_ptr, b_ptr, out_ptr, M, N, K, stride_xm, stride_wn, stride_wk, stride_om,
    HAS_BIAS: tl.constexpr, ACT: tl.constexpr, EVEN_K: tl.constexpr, UPCAST: tl.constexpr,
    PRECISION: tl.constexpr, PDL: tl.constexpr,
    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr, PREFETCH: tl.constexpr,
):  # fmt: skip
    """This program's output tile; w[n, k] is at w_ptr + n * stride_wn + k * stride_wk (the kernels below pass
    a literal 1 for the unit stride, which the compiler folds)."""
    pid_m, pid_n = tile_ids(M, N, BM, BN, GROUP_M)
    offs_m = pid_m * BM + tl.arange(0, BM)
    offs_n = pid_n * BN + tl.arange(0, BN)
    offs_k = tl.arange(0, BK)
    # Wrapped columns keep weight loads in bounds without masks; the store masks the tail. x rows past M are
    # masked instead: wrapped, a few rows' L2 lines are asked many times by every program (decode.py).
    rm = offs_m % M
    m_in = offs_m[:, None] < M
    rn = offs_n % N
    if PREFETCH:  # weights never depend on the previous kernel: fetch them into L2 before waiting on it
        prefetch_rows_l2(w_ptr, rn, stride_wn, K, 8)
    if PDL:  # programmatic dependent launch: start early, wait for the previous kernel's writes here
        gdc_launch_dependents()
        gdc_wait()
    x_ptrs = x_ptr + rm[:, None] * stride_xm + offs_k[None, :]
    w_ptrs = w_ptr + rn[None, :] * stride_wn + offs_k[:, None] * stride_wk

    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(tl.cdiv(K, BK)):
        if EVEN_K:
            a = tl.load(x_ptrs, mask=m_in, other=0.0)
            b = tl.load(w_ptrs)
        else:
            k_left = K - k * BK
            a = tl.load(x_ptrs, mask=m_in & (offs_k[None, :] < k_left), other=0.0)
            b = tl.load(w_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        acc = mma(a, b, acc, UPCAST, PRECISION)
        x_ptrs += BK
        w_ptrs += BK * stride_wk

    # Epilogue: bias, activation, cast, store.
    if HAS_BIAS:
        acc += tl.load(b_ptr + rn).to(tl.float32)[None, :]
    acc = activate(acc, ACT)
    out_ptrs = out_ptr + offs_m[:, None] * stride_om + offs_n[None, :]
    tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


@triton.jit
def linear_kernel(
    x_ptr, w_ptr, b_ptr, out_ptr,
    M, N, K, stride_xm, stride_wn, stride_om,
    HAS_BIAS: tl.constexpr, ACT: tl.constexpr, EVEN_K: tl.constexpr, UPCAST: tl.constexpr,
    PRECISION: tl.constexpr, PDL: tl.constexpr,
    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr, PREFETCH: tl.constexpr,
):  # fmt: skip
    """Row-major weight w[N, K] (nn.Linear's layout)."""
    _linear_tile(x_ptr, w_ptr, b_ptr, out_ptr, M, N, K, stride_xm, stride_wn, 1, stride_om, HAS_BIAS, ACT, EVEN_K,
                 UPCAST, PRECISION, PDL, BM, BN, BK, GROUP_M, PREFETCH)  # fmt: skip


@triton.jit
def linear_kmajor_kernel(
    x_ptr, w_ptr, b_ptr, out_ptr,
    M, N, K, stride_xm, stride_wk, stride_om,
    HAS_BIAS: tl.constexpr, ACT: tl.constexpr, EVEN_K: tl.constexpr, UPCAST: tl.constexpr,
    PRECISION: tl.constexpr, PDL: tl.constexpr,
    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr, PREFETCH: tl.constexpr,
):  # fmt: skip
    """K-major weight: w[N, K] stored as its transpose [K, N] (transformers' Conv1D), read in place. JIT only:
    no cubin ships for it, and the CUDA backend sends such weights to cuBLASLt."""
    _linear_tile(x_ptr, w_ptr, b_ptr, out_ptr, M, N, K, stride_xm, 1, stride_wk, stride_om, HAS_BIAS, ACT, EVEN_K,
                 UPCAST, PRECISION, PDL, BM, BN, BK, GROUP_M, PREFETCH)  # fmt: skip


def linear_consts(cfg, *, has_bias: bool, act: int, even_k: bool, pdl: bool, prefetch: bool,
                  upcast: bool = False, precision: str = "tf32") -> tuple:  # fmt: skip
    """LINEAR's constexpr values, in declared order, for config `cfg` (a configs.GemmConfig)."""
    return (has_bias, act, even_k, upcast, precision, pdl, cfg.BM, cfg.BN, cfg.BK, cfg.GROUP_M, prefetch)


LINEAR = KernelDef(
    fn=linear_kernel,
    params=(
        ("x_ptr", "ptr"), ("w_ptr", "ptr"), ("b_ptr", "ptr"), ("out_ptr", "ptr"),
        ("M", "i32"), ("N", "i32:16"), ("K", "i32:16"),
        ("stride_xm", "i32:16"), ("stride_wn", "i32:16"), ("stride_om", "i32:16"),
    ),
    constexprs=("HAS_BIAS", "ACT", "EVEN_K", "UPCAST", "PRECISION", "PDL", "BM", "BN", "BK", "GROUP_M", "PREFETCH"),
)  # fmt: skip
# The same parameters, the fifth int being the weight's stride along K (`forward.ptr_linear` passes it).
LINEAR_KMAJOR = KernelDef(linear_kmajor_kernel, LINEAR.params[:8] + (("stride_wk", "i32:16"),) + LINEAR.params[9:],
                          LINEAR.constexprs)  # fmt: skip


@triton.jit
def activation_backward_kernel(dy_ptr, z_ptr, dz_ptr, n, ACT: tl.constexpr, BLOCK: tl.constexpr):
    """dz = dy * act'(z), elementwise over n contiguous elements."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    dy = tl.load(dy_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    z = tl.load(z_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(dz_ptr + offs, (dy * activate_grad(z, ACT)).to(dz_ptr.dtype.element_ty), mask=mask)


ACTIVATION_BACKWARD = KernelDef(
    fn=activation_backward_kernel,
    params=(("dy_ptr", "ptr"), ("z_ptr", "ptr"), ("dz_ptr", "ptr"), ("n", "i32")),
    constexprs=("ACT", "BLOCK"),
)
