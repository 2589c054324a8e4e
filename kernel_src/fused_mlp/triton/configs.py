"""Tile configs per GPU arch, kept beside the kernels; chosen by measurement, no runtime autotuning.

Tables map a row count bound (M <= bound; None = any) to a config; the first matching row wins.
sm_90a rows were measured on an H200 (the tile sweep, `git show 1aded6b^:bench/tune_gemm.py`; bench/BENCHMARKS.md);
other archs use the conservative Ampere-style rows until measured there and have no Hopper (TMA) rows.
"interpreter" keeps the CPU interpreter fast.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cache

from .. import constants
from ..arch import at_least


@dataclass(frozen=True)
class GemmConfig:
    BM: int
    BN: int
    BK: int
    GROUP_M: int
    num_warps: int
    num_stages: int


@dataclass(frozen=True)
class TmaConfig:
    """A Hopper (hopper.py) GEMM config: tile, grouped order, warps/stages, and the two loop/epilogue forms.
    warp_spec: producer/consumer warp specialization of the K loop (launches 3x num_warps warps; Triton 3.6
    supports it on sm_90 with num_warps=4 and without epi_split or DUAL). epi_split: the epilogue in two
    [BM, BN/2] halves (fewer registers: the gated epilogues spill without it at 128x128)."""

    BM: int
    BN: int
    BK: int
    GROUP_M: int
    num_warps: int
    num_stages: int
    warp_spec: bool = False
    epi_split: bool = False


@dataclass(frozen=True)
class ElementwiseConfig:
    BLOCK: int
    num_warps: int


Table = tuple[tuple[int | None, GemmConfig | tuple[GemmConfig, ...]], ...]

LINEAR: dict[str, Table] = {
    # The fastest candidate in GPU time over (M,N,K) = (16|64|1024|8192, 1024, 1024) and (.., 768, 3072)
    # (`git show 1aded6b^:bench/tune_gemm.py`; bench/BENCHMARKS.md).
    "sm_90a": (
        (16, GemmConfig(16, 16, 256, 8, 4, 4)),
        (64, GemmConfig(32, 32, 128, 8, 4, 4)),
        (128, GemmConfig(64, 64, 64, 8, 4, 4)),
        (1024, GemmConfig(64, 128, 128, 8, 4, 3)),
        (None, GemmConfig(128, 128, 64, 8, 8, 3)),
    ),
    "default": (
        (16, GemmConfig(16, 32, 128, 8, 4, 4)),
        (64, GemmConfig(64, 64, 64, 8, 4, 4)),
        (1024, GemmConfig(64, 128, 32, 8, 4, 4)),
        (None, GemmConfig(128, 128, 32, 8, 4, 3)),
    ),
    "interpreter": ((None, GemmConfig(32, 32, 32, 4, 4, 1)),),
}

GATE_UP: dict[str, Table] = {
    # The fastest in GPU time at (M, I, H) = (16|1024|8192, 3072, 768).
    "sm_90a": (
        (16, GemmConfig(16, 32, 256, 8, 4, 4)),
        (1024, GemmConfig(64, 64, 64, 8, 4, 4)),
        (None, GemmConfig(256, 64, 64, 8, 8, 3)),
    ),
    "default": (
        (16, GemmConfig(16, 32, 128, 8, 4, 4)),
        (1024, GemmConfig(64, 64, 32, 8, 4, 4)),
        (None, GemmConfig(128, 64, 32, 8, 4, 3)),
    ),
    "interpreter": ((None, GemmConfig(32, 32, 32, 4, 4, 1)),),
}

# Hopper (TMA + wgmma) GEMMs per role; a row's config None means "not the Hopper kernel": the portable
# pointer kernel (its LINEAR / GATE_UP row) for the forward roles, cuBLAS (torch.mm) for the backward ones.
# Archs without an entry never use them. Roles: forward `linear` (bias + act, also the pre-activation
# store), `gate_up` (gated forward), `dgrad` (dz @ W with act' of the saved pre-activation),
# `gated_dgrad` (dy @ W_down with the dg/du epilogue), `wgrad` (dz^T @ x), `dual` (dg @ W_gate + du @ W_up).
# sm_90a (`git show 1aded6b^:bench/tune_gemm.py`; bench/BENCHMARKS.md): up to 1024 rows the portable kernels win (the persistent
# TMA kernel has more fixed cost); every backward role loses to cuBLAS, so the backward runs on cuBLAS.
TmaTable = tuple[tuple[int | None, TmaConfig | tuple[TmaConfig, ...] | None], ...]
_T = TmaConfig
TMA_LINEAR: dict[str, TmaTable] = {
    "sm_90a": ((1024, None), (None, (_T(128, 256, 64, 8, 8, 3), _T(128, 128, 64, 8, 8, 4)))),
}
# gate_up: one dot per K step over the 3D weight view (BN columns of each weight per tile), never
# warp-specialized (Triton 3.6's warp-specialized loop wrote NaN on Hopper). The tiles are the fastest in GPU
# time for (2x3072)x768 at 1024 and 8192 rows (`git show 1aded6b^:bench/gate_up_single_dot.py`; bench/BENCHMARKS.md).
TMA_GATE_UP: dict[str, TmaTable] = {
    "sm_90a": ((256, None), (1024, _T(128, 64, 64, 8, 8, 4)), (None, _T(128, 128, 64, 8, 8, 4))),
}
TMA_DGRAD: dict[str, TmaTable] = {"sm_90a": ((None, None),)}
TMA_GATED_DGRAD: dict[str, TmaTable] = {"sm_90a": ((None, None),)}
TMA_WGRAD: dict[str, TmaTable] = {"sm_90a": ((None, None),)}
TMA_DUAL: dict[str, TmaTable] = {"sm_90a": ((None, None),)}
TMA_ROLES: dict[str, dict[str, TmaTable]] = {
    "linear": TMA_LINEAR, "gate_up": TMA_GATE_UP, "dgrad": TMA_DGRAD, "gated_dgrad": TMA_GATED_DGRAD,
    "wgrad": TMA_WGRAD, "dual": TMA_DUAL,
}  # fmt: skip

ELEMENTWISE: dict[str, ElementwiseConfig] = {
    # 1024-element blocks of 4 warps: as fast as larger blocks or faster on act_and_mul [M, 3072] at every
    # measured M (`git show 1aded6b^:bench/act_mul_sweep.py`; bench/BENCHMARKS.md).
    "sm_90a": ElementwiseConfig(BLOCK=1024, num_warps=4),
    "default": ElementwiseConfig(BLOCK=1024, num_warps=4),
    "interpreter": ElementwiseConfig(BLOCK=1024, num_warps=4),
}

# The oldest GPU the kernels run on (bf16 tensor-core MMA starts at 8.0).
MIN_CC = (8, 0)

# Decode kernels (decode.py): at most `bound` rows against weights of at least DECODE_MIN_WEIGHT_BYTES[arch]
# bytes, the forward GEMMs are a weight read and these GEMV-style tiles stream it; smaller weights stay with
# the tables above (and cuBLAS), which were measured on them. Archs without rows here never take the path.
# The rule is by rows and weight bytes, not by shape, so widths no sweep has seen take it too.
# sm_90a: H100, bf16, bench/bench_paths.py --decode over five gated widths (hidden 1024-4096, intermediate 4096-18944)
# at 1-64 rows, weights rotated past L2; the rows and the 16 MiB threshold are explained with the numbers in
# bench/BENCHMARKS.md "Decode". Below 16 rows the tensor-core tile (BM=16) beat multiply-and-reduce everywhere.
DECODE_LINEAR: dict[str, Table] = {
    "sm_90a": (
        (16, GemmConfig(16, 32, 512, 1, 4, 4)),
        (32, GemmConfig(16, 64, 256, 1, 4, 4)),
    ),
    "interpreter": ((64, GemmConfig(16, 16, 32, 1, 4, 2)),),
}
DECODE_GATE_UP: dict[str, Table] = {
    "sm_90a": (
        (16, (GemmConfig(16, 64, 128, 1, 4, 4), GemmConfig(16, 32, 128, 1, 4, 4))),
        (32, (GemmConfig(32, 64, 128, 1, 4, 4), GemmConfig(32, 32, 128, 1, 4, 4))),
    ),
    "interpreter": ((64, GemmConfig(16, 16, 32, 1, 4, 2)),),
}
# The interpreter's threshold keeps the CPU tests' small weights on the portable kernels; tests of the
# decode path lower it.
# Real models' weights: the bound of the decode rule and the split rows, and cuda/paths.LARGE_WEIGHT_BYTES
# (tests/cuda/test_embed.py keeps the backends' bounds and rows equal).
LARGE_WEIGHT_BYTES = 16 << 20
DECODE_MIN_WEIGHT_BYTES: dict[str, int] = {"sm_90a": LARGE_WEIGHT_BYTES, "interpreter": 1 << 40}


def decode_config(
    role: str, arch: str, rows: int, weight_bytes: int, element_size: int = 2, cols: int | None = None,
    sms: int | None = None,
) -> GemmConfig | None:  # fmt: skip
    """The decode config for a forward `role` ("linear" or "gate_up") of `rows` rows reading `weight_bytes`
    of weights into `cols` output columns on `sms` SMs of `arch`, or None (not a decode call there). A row's
    alternatives are picked by last-wave fill, as the Hopper rows' are (`pick_alternative`)."""
    if weight_bytes < DECODE_MIN_WEIGHT_BYTES.get(arch, 1 << 62):
        return None
    for bound, cfg in (DECODE_LINEAR if role == "linear" else DECODE_GATE_UP).get(arch, ()):
        if rows <= bound:
            return fit_element_size(pick_alternative(alternatives(cfg), rows, cols, sms), element_size)
    return None


# Programmatic dependent launch (sm_90+): a GEMM of at most this many rows starts while the previous
# kernel drains (its grid fits one wave, so early-resident programs steal no slots from that kernel).
PDL_MAX_ROWS = 1024
PDL_ENABLED = constants.pdl_enabled()


# A pointer-kernel GEMM launched with PDL can ask L2 for its weight tile before it waits on the previous
# kernel (weights never depend on it, so their DRAM latency would overlap that kernel's tail). Off: with
# L2-resident weights it cost more than it gained (bench/BENCHMARKS.md); the tile sweep's `--only chain`
# (`git show 1aded6b^:bench/tune_gemm.py`) measures the case it is for (32 layers with their own weights).
PDL_PREFETCH = False


def uses_pdl(arch: str, rows: int) -> bool:
    """Whether GEMMs of `rows` rows on `arch` launch with programmatic dependent launch."""
    return PDL_ENABLED and at_least(arch, (9, 0)) and rows <= PDL_MAX_ROWS


# Forward GEMMs of the `linear` role with activation none or relu (every layer of a relu mlp, the gated down
# projection) that run on cuBLAS (torch's mm / addmm / _addmm_activation: cuBLASLt with the bias + relu
# epilogue) instead of a Triton kernel when called through this backend: above this many rows. The CUDA
# backend's graph table makes the same choice from the same kernels' GPU times (cuda/paths.py GRAPH_PATHS:
# Triton only at 1 row, where PDL hides its launch); here the host agrees too, since a Python-level Triton
# launch costs more host time than an aten call (bench/BENCHMARKS.md). gelu, gelu_tanh and silu keep the fused
# Triton epilogue (cuBLAS would need a second pass; not measured against it here). Archs without an entry were not measured: Triton.
# FUSED_MLP_CUBLAS=0 keeps every such GEMM on Triton (as the tile sweep, `git show 1aded6b^:bench/tune_gemm.py`, ran).
CUBLAS_LINEAR_ABOVE: dict[str, int] = {"sm_90a": 1}
CUBLAS_ENABLED = constants.cublas_enabled()


# gate_up as two cuBLAS GEMMs and act_and_mul (the CUDA backend's `split`, cuda/paths.py) for rows in (lo, hi]
# against gate + up weights of at least `min_bytes`: on real models' widths the portable kernel loses there
# (bench/BENCHMARKS.md "Ops, real-model widths"); the project's smaller weights keep it. Forward only: training
# stores (g, u), and this backend's portable branch writes them with the same two GEMMs already.
GATE_UP_SPLIT: dict[str, tuple[int, int, int]] = {"sm_90a": (64, 256, LARGE_WEIGHT_BYTES)}


def split_gate_up(arch: str, rows: int, weight_bytes: int) -> bool:
    """Whether a forward gate_up of `rows` rows over `weight_bytes` of gate + up weights runs as split."""
    lo, hi, min_bytes = GATE_UP_SPLIT.get(arch, (0, 0, 0))
    return CUBLAS_ENABLED and lo < rows <= hi and weight_bytes >= min_bytes


def cublas_linear(arch: str, rows: int, activation: str) -> bool:
    """Whether a `linear`-role GEMM of `rows` rows with `activation` runs on cuBLAS on `arch`."""
    bound = CUBLAS_LINEAR_ABOVE.get(arch)
    return CUBLAS_ENABLED and bound is not None and rows > bound and activation in ("none", "relu")


# A Hopper row may list alternative tiles, best first: a launch takes the first whose output tiles fill
# at least WAVE_FILL of the last wave of SMs (tiles / (ceil(tiles / SMs) * SMs)), else the fullest one.
# 128x256 wins on N = 1024, 2048, 4096 but leaves a 73% last wave on N = 768, where 128x128 wins.
WAVE_FILL = 0.9


def alternatives(cfg: TmaConfig | tuple[TmaConfig, ...] | None) -> tuple[TmaConfig, ...]:
    """The configs a Hopper table row lists (one, several, or none)."""
    return () if cfg is None else cfg if isinstance(cfg, tuple) else (cfg,)


def cdiv(a: int, b: int) -> int:
    """ceil(a / b) for host code: triton.cdiv is a constexpr_function whose Python wrapper costs more than
    the division, several times per launch on the fallback's host-bound path."""
    return -(-a // b)


def wave_fill(cfg: TmaConfig, rows: int, cols: int, sms: int) -> float:
    """Share of the SMs busy over the waves a persistent grid needs for a rows x cols output."""
    tiles = cdiv(rows, cfg.BM) * cdiv(cols, cfg.BN)
    return tiles / (cdiv(tiles, sms) * sms)


def pick_alternative(options: tuple, rows: int, cols: int | None, sms: int | None):
    """The first of a row's alternative tiles whose output fills WAVE_FILL of the last wave, else the fullest
    (the first alone without cols and sms)."""
    if cols is None or sms is None or len(options) == 1:
        return options[0]
    fits = [c for c in options if wave_fill(c, rows, cols, sms) >= WAVE_FILL]
    return fits[0] if fits else max(options, key=lambda c: wave_fill(c, rows, cols, sms))


def tma_config(
    role: str, arch: str, rows: int, element_size: int = 2, cols: int | None = None, sms: int | None = None
) -> TmaConfig | None:
    """The Hopper config for `role` at `rows` rows (output `cols` columns, on `sms` SMs) on `arch`, or
    None (use the portable kernel / cuBLAS). Without cols and sms a row's first alternative."""
    for bound, cfg in TMA_ROLES[role].get(arch, ()):
        if bound is None or rows <= bound:
            options = alternatives(cfg)
            return (
                fit_element_size(pick_alternative(options, rows, cols, sms), element_size)
                if options
                else None
            )
    return None


def table_rows(tables: dict[str, Table], arch: str) -> Table:
    """The (bound, config) rows that `arch` uses."""
    return _table_for(tables, arch)


def _table_for(tables: dict, arch: str):
    return tables.get(arch, tables["default"])


def gemm_config(tables: dict[str, Table], arch: str, rows: int, element_size: int = 2) -> GemmConfig:
    """The config of the first row whose bound admits `rows`, fitted to the element size."""
    for bound, cfg in _table_for(tables, arch):
        if bound is None or rows <= bound:
            return fit_element_size(cfg, element_size)
    raise ValueError(f"config table for {arch} has no catch-all row (bound None)")


@cache  # configs are frozen dataclasses; the fp32 path called replace() per launch
def fit_element_size(cfg: GemmConfig | TmaConfig, element_size: int) -> GemmConfig | TmaConfig:
    """Tables are sized for 2-byte operands; fp32 tiles take twice the shared memory per stage, so
    halve BK and keep at most 3 stages (the sm_90a gated config needs 245 KB otherwise, > 227 KB). Hopper
    tiles also stage their epilogue stores in shared memory (three with the gated (g, u) store): BN ≤ 64."""
    if element_size <= 2:
        return cfg
    cfg = replace(cfg, BK=max(16, cfg.BK // 2), num_stages=min(cfg.num_stages, 3))
    return replace(cfg, BN=min(cfg.BN, 64)) if isinstance(cfg, TmaConfig) else cfg


def elementwise_config(arch: str) -> ElementwiseConfig:
    return _table_for(ELEMENTWISE, arch)
