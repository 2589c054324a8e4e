"""Tile configs per GPU arch, kept beside the kernels; chosen by measurement, no runtime autotuning.

Tables map a row count bound (M <= bound; None = any) to a config; the first matching row wins.
sm_90a rows were measured on an H200 with `bench/bench_mlp.py --tune` (see bench/RESULTS.md); other archs
use the conservative Ampere-style rows until measured there. "interpreter" keeps the CPU interpreter fast.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class GemmConfig:
    BM: int
    BN: int
    BK: int
    GROUP_M: int
    num_warps: int
    num_stages: int


@dataclass(frozen=True)
class ElementwiseConfig:
    BLOCK: int
    num_warps: int


Table = tuple[tuple[int | None, GemmConfig], ...]

LINEAR: dict[str, Table] = {
    # H200, bf16, GPU µs per candidate summed over (M,N,K) = (16|64|1024|8192, 1024, 1024) and (.., 768, 3072);
    # bench/RESULTS.md lists every candidate.
    "sm_90a": (
        (16, GemmConfig(16, 16, 256, 8, 4, 4)),
        (64, GemmConfig(32, 32, 128, 8, 4, 4)),
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
    # H200, bf16, (M, I, H) = (16|1024|8192, 3072, 768).
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

ELEMENTWISE: dict[str, ElementwiseConfig] = {
    "sm_90a": ElementwiseConfig(BLOCK=8192, num_warps=16),  # H200: 37.1 µs on [8192, 3072] bf16
    "default": ElementwiseConfig(BLOCK=1024, num_warps=4),
    "interpreter": ElementwiseConfig(BLOCK=1024, num_warps=4),
}

# Programmatic dependent launch (sm_90+): a GEMM of at most this many rows starts while the previous
# kernel drains (its grid fits one wave, so early-resident programs steal no slots from that kernel).
PDL_MAX_ROWS = 1024
PDL_ENABLED = os.environ.get("FUSED_MLP_PDL", "1") != "0"


def uses_pdl(arch: str, rows: int) -> bool:
    """Whether GEMMs of `rows` rows on `arch` launch with programmatic dependent launch."""
    return PDL_ENABLED and arch.startswith("sm_") and int(arch[3:5]) >= 90 and rows <= PDL_MAX_ROWS


def table_rows(tables: dict[str, Table], arch: str) -> Table:
    """The (bound, config) rows that `arch` uses."""
    return _table_for(tables, arch)


# Archs that get AOT cubins (build/matrix.toml) and the Triton target each compiles for.
AOT_ARCHS = {"sm_80": 80, "sm_89": 89, "sm_90a": 90, "sm_100a": 100, "sm_120": 120}


def arch_of(capability: tuple[int, int] | None) -> str:
    """Our arch name for a device capability (None = the CPU interpreter)."""
    if capability is None:
        return "interpreter"
    major, minor = capability
    suffix = "a" if (major, minor) in ((9, 0), (10, 0)) else ""
    return f"sm_{major}{minor}{suffix}"


def _table_for(tables: dict, arch: str):
    return tables.get(arch, tables["default"])


def gemm_config(tables: dict[str, Table], arch: str, rows: int, element_size: int = 2) -> GemmConfig:
    """The config of the first row whose bound admits `rows`, fitted to the element size."""
    for bound, cfg in _table_for(tables, arch):
        if bound is None or rows <= bound:
            return fit_element_size(cfg, element_size)
    raise ValueError(f"config table for {arch} has no catch-all row (bound None)")


def fit_element_size(cfg: GemmConfig, element_size: int) -> GemmConfig:
    """Tables are sized for 2-byte operands; fp32 tiles take twice the shared memory per stage, so
    halve BK and keep at most 3 stages (the sm_90a gated config needs 245 KB otherwise, > 227 KB)."""
    if element_size <= 2:
        return cfg
    return replace(cfg, BK=max(16, cfg.BK // 2), num_stages=min(cfg.num_stages, 3))


def elementwise_config(arch: str) -> ElementwiseConfig:
    return _table_for(ELEMENTWISE, arch)
