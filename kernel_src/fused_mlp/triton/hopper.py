"""Hopper GEMM core (sm_90a): TMA tensor descriptors made in the kernel, a multi-stage shared-memory
pipeline feeding wgmma (`tl.dot`), a persistent grid walking output tiles in grouped order, and
optionally producer/consumer warp specialization of the K loop (`WARP_SPEC`).

Epilogues: bias + activation (forward), the pre-activation store (training forward), act' (dgrad with
the saved pre-activation), and the gated MLP: act(g) * u from one GEMM per tile (forward,
`tma_gate_up_kernel`: one [BM, 2*BN] accumulator, the two weights read as one 3D tensor), dg / du from
the saved g, u (backward, EPI 3). Pairs (g, u), (dg, du) live in [2, M, N] buffers: the kernels get
plane 0 and find plane 1 M x ld elements later, so each plane is a plain contiguous matrix for cuBLAS
and the elementwise kernels.

Descriptors are built per program from base pointer, shape and strides (global scratch, 128 B each), so
a launcher passes only pointers and ints (docs/CONTRACTS.md "Kernel families"). TMA zero-fills loads
out of bounds and clips stores, so M, N, K need neither masks nor alignment; base pointers and row
strides must be 16-byte aligned (`forward.tma_ok` checks before choosing these kernels).
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from .activations import activate, activate_grad
from .specs import KernelDef
from .tiles import grouped_tile, mma

# EPI codes of tma_gemm_kernel.
EPI_ACT = 0  # c = act(acc + bias)
EPI_ACT_STORE_PRE = 1  # c = act(acc + bias), aux = acc + bias
EPI_ACT_GRAD = 2  # c = acc * act'(aux)
EPI_GATED_GRAD = 3  # aux = (g, u) planes: c = (acc * u * act'(g), acc * act(g)) planes


@triton.jit
def _load_a(desc, off_m, off_k, A_T: tl.constexpr):
    """The [BM, BK] tile of A at (off_m, off_k); A_T: A is stored [K, M]."""
    if A_T:
        return desc.load([off_k, off_m]).T
    else:
        return desc.load([off_m, off_k])


@triton.jit
def _load_b(desc, off_n, off_k, B_T: tl.constexpr):
    """The [BK, BN] tile of B at (off_k, off_n); B_T: B is stored [K, N], else [N, K] (weights)."""
    if B_T:
        return desc.load([off_k, off_n])
    else:
        return desc.load([off_n, off_k]).T


@triton.jit
def _gemm_epilogue(
    acc, off_m, off_n, N, c_desc, c2_desc, aux_desc, u_desc, bias_ptr,
    HAS_BIAS: tl.constexpr, ACT: tl.constexpr, EPI: tl.constexpr, BN: tl.constexpr,
):  # fmt: skip
    """Finish one [BM, BN] accumulator (sub)tile at (off_m, off_n) as EPI says and store it."""
    dtype = c_desc.dtype
    if EPI == 3:  # aux_desc reads g, u_desc reads u; c_desc gets dg, c2_desc du
        g = aux_desc.load([off_m, off_n]).to(tl.float32)
        u = u_desc.load([off_m, off_n]).to(tl.float32)
        c_desc.store([off_m, off_n], (acc * u * activate_grad(g, ACT)).to(dtype))
        c2_desc.store([off_m, off_n], (acc * activate(g, ACT)).to(dtype))
    elif EPI == 2:
        z = aux_desc.load([off_m, off_n]).to(tl.float32)
        c_desc.store([off_m, off_n], (acc * activate_grad(z, ACT)).to(dtype))
    else:
        if HAS_BIAS:
            offs_n = off_n + tl.arange(0, BN)
            acc += tl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)[None, :]
        if EPI == 1:
            aux_desc.store([off_m, off_n], acc.to(dtype))
        c_desc.store([off_m, off_n], activate(acc, ACT).to(dtype))


@triton.jit
def tma_gemm_kernel(
    a_ptr, b_ptr, b2_ptr, c_ptr, bias_ptr, aux_ptr,
    M, N, K, lda, ldb, ldb2, ldc, ld_aux,
    A_T: tl.constexpr, B_T: tl.constexpr, DUAL: tl.constexpr, HAS_BIAS: tl.constexpr, ACT: tl.constexpr,
    EPI: tl.constexpr, UPCAST: tl.constexpr, PRECISION: tl.constexpr, PDL: tl.constexpr,
    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr, WARP_SPEC: tl.constexpr,
    EPI_SPLIT: tl.constexpr,
):  # fmt: skip
    """C[M, N] = epilogue(A @ B (+ A' @ B2 when DUAL, A' = A's second [M, K] plane)); see the EPI codes."""
    if PDL:  # programmatic dependent launch: start early, wait for the previous kernel's writes here
        gdc_launch_dependents()
        gdc_wait()
    if A_T:
        a_desc = tl.make_tensor_descriptor(a_ptr, [K, M], [lda, 1], [BK, BM])
    else:
        a_desc = tl.make_tensor_descriptor(a_ptr, [M, K], [lda, 1], [BM, BK])
    if B_T:
        b_desc = tl.make_tensor_descriptor(b_ptr, [K, N], [ldb, 1], [BK, BN])
    else:
        b_desc = tl.make_tensor_descriptor(b_ptr, [N, K], [ldb, 1], [BN, BK])
    # Plane offsets via tl.cast: the JIT passes M=1 as a constexpr (no `.to`), and int64 keeps M x ld exact.
    if DUAL:  # the second product reads A's second plane (the gated dgrad's du after dg)
        a2_desc = tl.make_tensor_descriptor(a_ptr + tl.cast(M, tl.int64) * lda, [M, K], [lda, 1], [BM, BK])
        if B_T:
            b2_desc = tl.make_tensor_descriptor(b2_ptr, [K, N], [ldb2, 1], [BK, BN])
        else:
            b2_desc = tl.make_tensor_descriptor(b2_ptr, [N, K], [ldb2, 1], [BN, BK])
    # The epilogue works on [BM, EN] subtiles: EPI_SPLIT halves the registers and staging it needs.
    if EPI_SPLIT:
        EN: tl.constexpr = BN // 2
    else:
        EN: tl.constexpr = BN
    c_desc = tl.make_tensor_descriptor(c_ptr, [M, N], [ldc, 1], [BM, EN])
    aux_desc = c_desc  # stand-ins for the descriptors this EPI does not use (never read)
    u_desc = c_desc
    c2_desc = c_desc
    if EPI == 1 or EPI == 2:
        aux_desc = tl.make_tensor_descriptor(aux_ptr, [M, N], [ld_aux, 1], [BM, EN])
    if EPI == 3:  # (g, u) planes in, (dg, du) planes out
        aux_desc = tl.make_tensor_descriptor(aux_ptr, [M, N], [ld_aux, 1], [BM, EN])
        u_desc = tl.make_tensor_descriptor(
            aux_ptr + tl.cast(M, tl.int64) * ld_aux, [M, N], [ld_aux, 1], [BM, EN]
        )
        c2_desc = tl.make_tensor_descriptor(c_ptr + tl.cast(M, tl.int64) * ldc, [M, N], [ldc, 1], [BM, EN])

    num_pid_m = tl.cdiv(M, BM)
    num_pid_n = tl.cdiv(N, BN)
    num_tiles = num_pid_m * num_pid_n
    k_tiles = tl.cdiv(K, BK)
    step = tl.num_programs(0)
    tile_c = tl.program_id(0) - step  # the epilogue's own tile counter keeps the K loop's indices short-lived
    for tile in tl.range(tl.program_id(0), num_tiles, step, flatten=not WARP_SPEC):
        pid_m, pid_n = grouped_tile(tile, num_pid_m, num_pid_n, GROUP_M)
        off_m = pid_m * BM
        off_n = pid_n * BN
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for ki in tl.range(k_tiles, warp_specialize=WARP_SPEC):
            off_k = ki * BK
            acc = mma(
                _load_a(a_desc, off_m, off_k, A_T), _load_b(b_desc, off_n, off_k, B_T), acc, UPCAST, PRECISION
            )
            if DUAL:
                acc = mma(
                    a2_desc.load([off_m, off_k]), _load_b(b2_desc, off_n, off_k, B_T), acc, UPCAST, PRECISION
                )

        tile_c += step
        pid_m, pid_n = grouped_tile(tile_c, num_pid_m, num_pid_n, GROUP_M)
        off_m = pid_m * BM
        off_n = pid_n * BN
        if EPI_SPLIT:
            acc0, acc1 = acc.reshape(BM, 2, EN).permute(0, 2, 1).split()
            _gemm_epilogue(
                acc0, off_m, off_n, N, c_desc, c2_desc, aux_desc, u_desc, bias_ptr, HAS_BIAS, ACT, EPI, EN
            )
            _gemm_epilogue(
                acc1,
                off_m,
                off_n + EN,
                N,
                c_desc,
                c2_desc,
                aux_desc,
                u_desc,
                bias_ptr,
                HAS_BIAS,
                ACT,
                EPI,
                EN,
            )
        else:
            _gemm_epilogue(
                acc, off_m, off_n, N, c_desc, c2_desc, aux_desc, u_desc, bias_ptr, HAS_BIAS, ACT, EPI, EN
            )


TMA_GEMM = KernelDef(
    fn=tma_gemm_kernel,
    params=(
        ("a_ptr", "ptr"), ("b_ptr", "ptr"), ("b2_ptr", "ptr"), ("c_ptr", "ptr"), ("bias_ptr", "ptr"), ("aux_ptr", "ptr"),
        ("M", "i32"), ("N", "i32"), ("K", "i32"),
        ("lda", "i32"), ("ldb", "i32"), ("ldb2", "i32"), ("ldc", "i32"), ("ld_aux", "i32"),
    ),
    constexprs=("A_T", "B_T", "DUAL", "HAS_BIAS", "ACT", "EPI", "UPCAST", "PRECISION", "PDL",
                "BM", "BN", "BK", "GROUP_M", "WARP_SPEC", "EPI_SPLIT"),
)  # fmt: skip


def gemm_consts(
    cfg, *, a_t: bool = False, b_t: bool = False, dual: bool = False, has_bias: bool = False, act: int = 0,
    epi: int = EPI_ACT, pdl: bool = False, upcast: bool = False, precision: str = "tf32",
) -> tuple:  # fmt: skip
    """TMA_GEMM's constexpr values, in declared order, for config `cfg` (a configs.TmaConfig)."""
    return (a_t, b_t, dual, has_bias, act, epi, upcast, precision, pdl,
            cfg.BM, cfg.BN, cfg.BK, cfg.GROUP_M, cfg.warp_spec, cfg.epi_split)  # fmt: skip


@triton.jit
def _gate_up_epilogue(
    acc_g, acc_u, off_m, off_n, h_desc, g_desc, u_desc, ACT: tl.constexpr, STORE_GU: tl.constexpr
):
    """Store h = act(g) * u for one (sub)tile, and g, u themselves when STORE_GU."""
    dtype = h_desc.dtype
    if STORE_GU:
        g_desc.store([off_m, off_n], acc_g.to(dtype))
        u_desc.store([off_m, off_n], acc_u.to(dtype))
    h_desc.store([off_m, off_n], (activate(acc_g, ACT) * acc_u).to(dtype))


@triton.jit
def _gate_up_tile(
    acc_g, acc_u, off_m, off_n, h_desc, g_desc, u_desc, ACT: tl.constexpr, STORE_GU: tl.constexpr,
    BM: tl.constexpr, EN: tl.constexpr, EPI_SPLIT: tl.constexpr,
):  # fmt: skip
    """_gate_up_epilogue over one [BM, BN] tile, in two [BM, EN] halves when EPI_SPLIT."""
    if EPI_SPLIT:
        g0, g1 = acc_g.reshape(BM, 2, EN).permute(0, 2, 1).split()
        u0, u1 = acc_u.reshape(BM, 2, EN).permute(0, 2, 1).split()
        _gate_up_epilogue(g0, u0, off_m, off_n, h_desc, g_desc, u_desc, ACT, STORE_GU)
        _gate_up_epilogue(g1, u1, off_m, off_n + EN, h_desc, g_desc, u_desc, ACT, STORE_GU)
    else:
        _gate_up_epilogue(acc_g, acc_u, off_m, off_n, h_desc, g_desc, u_desc, ACT, STORE_GU)


@triton.jit
def tma_gate_up_kernel(
    x_ptr, wg_ptr, wu_ptr, h_ptr, gu_ptr,
    M, N, K, ldx, ldwg, ldwu, ldh, ld_gu,
    ACT: tl.constexpr, STORE_GU: tl.constexpr, UP_FIRST: tl.constexpr, UPCAST: tl.constexpr,
    PRECISION: tl.constexpr, PDL: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
    GROUP_M: tl.constexpr, WARP_SPEC: tl.constexpr, EPI_SPLIT: tl.constexpr,
):  # fmt: skip
    """h[M, N] = act(x @ w_gate^T) * (x @ w_up^T) as ONE GEMM per tile: the two weights are read as one 3D
    tensor (plane 0 the lower-addressed of the two, plane 1 the other, their distance the outer stride), so
    each K step loads a [2, BN, BK] weight tile, used as [2*BN, BK], and issues one wgmma chain into a
    [BM, 2*BN] accumulator (gate columns, then up columns). Two separate dots ran at ~60% of cuBLAS on the
    H200 (two wgmma chains per K step); one chain is a plain 2*BN-wide GEMM to the hardware. The
    pre-activations never reach HBM unless STORE_GU asks for them (training: gu = the (g, u) planes).
    Needs ldwu == ldwg and w_up != w_gate (`gemm.gate_up_fits`); `ldwu` is not read. UP_FIRST must say
    whether w_up lies below w_gate (the launchers compare the pointers): a constexpr, because choosing the
    halves at run time costs a second set of accumulator registers (slower at large M), and
    Triton 3.6 cannot flatten the persistent loop around a run-time branch with stores."""
    if PDL:
        gdc_launch_dependents()
        gdc_wait()
    x_desc = tl.make_tensor_descriptor(x_ptr, [M, K], [ldx, 1], [BM, BK])
    # Byte distance between the weights; TMA strides must be positive, so the lower one is plane 0.
    if UP_FIRST:
        base = wu_ptr
        dist = wg_ptr.to(tl.int64, bitcast=True) - wu_ptr.to(tl.int64, bitcast=True)
    else:
        base = wg_ptr
        dist = wu_ptr.to(tl.int64, bitcast=True) - wg_ptr.to(tl.int64, bitcast=True)
    plane = dist // (wg_ptr.dtype.element_ty.primitive_bitwidth // 8)
    w_desc = tl.make_tensor_descriptor(base, [2, N, K], [plane, ldwg, 1], [2, BN, BK])
    if EPI_SPLIT:
        EN: tl.constexpr = BN // 2
    else:
        EN: tl.constexpr = BN
    h_desc = tl.make_tensor_descriptor(h_ptr, [M, N], [ldh, 1], [BM, EN])
    g_desc = h_desc  # stand-ins when the pre-activations are not stored (never written)
    u_desc = h_desc
    if STORE_GU:
        g_desc = tl.make_tensor_descriptor(gu_ptr, [M, N], [ld_gu, 1], [BM, EN])
        u_desc = tl.make_tensor_descriptor(
            gu_ptr + tl.cast(M, tl.int64) * ld_gu, [M, N], [ld_gu, 1], [BM, EN]
        )

    num_pid_m = tl.cdiv(M, BM)
    num_pid_n = tl.cdiv(N, BN)
    num_tiles = num_pid_m * num_pid_n
    k_tiles = tl.cdiv(K, BK)
    step = tl.num_programs(0)
    tile_c = tl.program_id(0) - step
    for tile in tl.range(tl.program_id(0), num_tiles, step, flatten=not WARP_SPEC):
        pid_m, pid_n = grouped_tile(tile, num_pid_m, num_pid_n, GROUP_M)
        off_m = pid_m * BM
        off_n = pid_n * BN
        acc = tl.zeros((BM, 2 * BN), dtype=tl.float32)
        for ki in tl.range(k_tiles, warp_specialize=WARP_SPEC):
            off_k = ki * BK
            w = w_desc.load([0, off_n, off_k]).reshape(2 * BN, BK)
            acc = mma(x_desc.load([off_m, off_k]), w.T, acc, UPCAST, PRECISION)

        tile_c += step
        pid_m, pid_n = grouped_tile(tile_c, num_pid_m, num_pid_n, GROUP_M)
        off_m = pid_m * BM
        off_n = pid_n * BN
        lo, hi = acc.reshape(BM, 2, BN).permute(0, 2, 1).split()
        if UP_FIRST:
            _gate_up_tile(hi, lo, off_m, off_n, h_desc, g_desc, u_desc, ACT, STORE_GU, BM, EN, EPI_SPLIT)
        else:
            _gate_up_tile(lo, hi, off_m, off_n, h_desc, g_desc, u_desc, ACT, STORE_GU, BM, EN, EPI_SPLIT)


def gate_up_consts(
    cfg, *, act: int, store_gu: bool, pdl: bool, up_first: bool = False, upcast: bool = False,
    precision: str = "tf32",
) -> tuple:  # fmt: skip
    """TMA_GATE_UP's constexpr values, in declared order, for config `cfg` (a configs.TmaConfig)."""
    return (
        act,
        store_gu,
        up_first,
        upcast,
        precision,
        pdl,
        cfg.BM,
        cfg.BN,
        cfg.BK,
        cfg.GROUP_M,
        cfg.warp_spec,
        cfg.epi_split,
    )


TMA_GATE_UP = KernelDef(
    fn=tma_gate_up_kernel,
    params=(
        ("x_ptr", "ptr"), ("wg_ptr", "ptr"), ("wu_ptr", "ptr"), ("h_ptr", "ptr"), ("gu_ptr", "ptr"),
        ("M", "i32"), ("N", "i32"), ("K", "i32"),
        ("ldx", "i32"), ("ldwg", "i32"), ("ldwu", "i32"), ("ldh", "i32"), ("ld_gu", "i32"),
    ),
    constexprs=("ACT", "STORE_GU", "UP_FIRST", "UPCAST", "PRECISION", "PDL", "BM", "BN", "BK", "GROUP_M",
                "WARP_SPEC", "EPI_SPLIT"),
)  # fmt: skip
