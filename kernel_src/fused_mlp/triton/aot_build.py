"""Ahead-of-time cubins at build time: compile every shipped kernel specialization for an arch on a
machine without a GPU (the builder's entry point is `compile_all`). The run-time side is `aot`.

Output layout and metadata: `aot` and docs/CONTRACTS.md ("Kernel families").
"""

from __future__ import annotations

import itertools
import json
import multiprocessing
import os
import shlex
import sys
import tempfile
from collections.abc import Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import triton

from .. import constants
from ..arch import is_arch, parse_arch
from .configs import (
    DECODE_GATE_UP,
    DECODE_LINEAR,
    GATE_UP,
    LINEAR,
    MIN_CC,
    PDL_PREFETCH,
    TMA_ROLES,
    alternatives,
    elementwise_config,
    table_rows,
    uses_pdl,
)
from .specs import AotSpec, KernelDef, ast_source

DEFAULT_DTYPES = ("bf16", "fp16")
_ACTS = (0, 1, 2, 3, 4)
_GATED_ACTS = (1, 2, 3, 4)


def kernel_defs() -> dict[str, KernelDef]:
    """Kernel name -> KernelDef of every family (the elementwise backward kernels ship no cubins today)."""
    from .act_and_mul import ACT_AND_MUL, ACT_AND_MUL_BACKWARD
    from .decode import GEMV_GATE_UP, GEMV_LINEAR
    from .gated import GATE_UP as GATE_UP_KERNEL
    from .hopper import TMA_GATE_UP, TMA_GEMM
    from .linear import ACTIVATION_BACKWARD
    from .linear import LINEAR as LINEAR_KERNEL

    families = (LINEAR_KERNEL, GATE_UP_KERNEL, ACT_AND_MUL, ACT_AND_MUL_BACKWARD, ACTIVATION_BACKWARD, TMA_GEMM,
                TMA_GATE_UP, GEMV_LINEAR, GEMV_GATE_UP)  # fmt: skip
    return {k.name: k for k in families}


_ANY = (1 << 31) - 1  # the row count "any" stands for


def _row_ranges(rows) -> list[tuple[int, int, object]]:
    """(first row count, last row count, config) per table row (the last row ends at _ANY)."""
    out, lo = [], 1
    for bound, cfg in rows:
        hi = _ANY if bound is None else bound
        out.append((lo, hi, cfg))
        lo = hi + 1
    return out


def _pdls(arch: str, lo: int, hi: int) -> list[bool]:
    """The PDL flags launches of lo..hi rows use (a row range may straddle configs.PDL_MAX_ROWS)."""
    return sorted({uses_pdl(arch, lo), uses_pdl(arch, hi)})


@dataclass(frozen=True)
class ShippedRow:
    """One shipped spec as a launcher selects it: the config-table row it serves (min_rows <= M <= max_rows;
    max_rows None = any), its activation code and bias flag, and the role (`linear`, `gate_up`,
    `act_and_mul`, or a Hopper role of `configs.TMA_ROLES`: `tma_linear`, `tma_gate_up`, ...). A Hopper row
    with alternatives ships one row per alternative (same range): pick by `configs.tma_config`'s rule.
    The CUDA variant's build compiles these into its cubin table."""

    spec: AotSpec
    max_rows: int | None
    act: int
    has_bias: bool
    role: str = ""
    min_rows: int = 1


def _hopper_rows(arch: str, dtype: str) -> list[ShippedRow]:
    """The Hopper kernels' rows: inference forward (every activation, bias or not), the gated forward with
    and without the (g, u) store (training), and the backward roles where the arch's row has a config."""
    from .hopper import EPI_ACT, EPI_ACT_GRAD, EPI_GATED_GRAD, gate_up_consts, gemm_consts

    rows = []

    def add(kernel: str, role: str, make) -> None:
        for lo, hi, row in _row_ranges(TMA_ROLES[role].get(arch, ())):
            for cfg in alternatives(row):
                for pdl in _pdls(arch, lo, hi):
                    for consts, act, bias in make(cfg, pdl):
                        spec = AotSpec(kernel, dtype, consts, cfg.num_warps, cfg.num_stages)
                        rows.append(
                            ShippedRow(spec, None if hi >= _ANY else hi, act, bias, f"tma_{role}", lo)
                        )

    add("tma_gemm_kernel", "linear", lambda cfg, pdl: [
        (gemm_consts(cfg, has_bias=bias, act=act, pdl=pdl), act, bias) for act in _ACTS for bias in (True, False)])  # fmt: skip
    add("tma_gate_up_kernel", "gate_up", lambda cfg, pdl: [
        (gate_up_consts(cfg, act=act, store_gu=store, pdl=pdl, up_first=up_first), act, False)
        for act in _GATED_ACTS for store in (False, True) for up_first in (False, True)])  # fmt: skip
    add("tma_gemm_kernel", "dgrad", lambda cfg, pdl: [
        (gemm_consts(cfg, b_t=True, act=act, epi=EPI_ACT if act == 0 else EPI_ACT_GRAD, pdl=pdl), act, False)
        for act in _ACTS])  # fmt: skip
    add("tma_gemm_kernel", "gated_dgrad", lambda cfg, pdl: [
        (gemm_consts(cfg, b_t=True, act=act, epi=EPI_GATED_GRAD, pdl=pdl), act, False) for act in _GATED_ACTS])  # fmt: skip
    add(
        "tma_gemm_kernel",
        "wgrad",
        lambda cfg, pdl: [(gemm_consts(cfg, a_t=True, b_t=True, pdl=pdl), 0, False)],
    )
    add(
        "tma_gemm_kernel",
        "dual",
        lambda cfg, pdl: [(gemm_consts(cfg, b_t=True, dual=True, pdl=pdl), 0, False)],
    )
    return rows


def shipped_rows(arch: str, dtypes: Iterable[str] = DEFAULT_DTYPES) -> list[ShippedRow]:
    """Every specialization we ship for `arch`, per config-table row: each config of the arch's tables, each
    activation, with/without bias; portable kernels with K a multiple of BK (EVEN_K); the Hopper kernels
    where the arch has tables (`_hopper_rows`). Anything else (fp32, other K, the elementwise backward
    kernels) JITs."""
    from .gated import gate_up_consts
    from .linear import linear_consts

    rows = []
    for dtype in dtypes:
        for lo, hi, cfg in _row_ranges(table_rows(LINEAR, arch)):
            for pdl in _pdls(arch, lo, hi):
                for act in _ACTS:
                    for has_bias in (True, False):
                        consts = linear_consts(cfg, has_bias=has_bias, act=act, even_k=True, pdl=pdl,
                                               prefetch=pdl and PDL_PREFETCH)  # fmt: skip
                        spec = AotSpec("linear_kernel", dtype, consts, cfg.num_warps, cfg.num_stages)
                        rows.append(ShippedRow(spec, None if hi >= _ANY else hi, act, has_bias, "linear", lo))
        for lo, hi, cfg in _row_ranges(table_rows(GATE_UP, arch)):
            for pdl in _pdls(arch, lo, hi):
                for act in _GATED_ACTS:
                    consts = gate_up_consts(cfg, act=act, even_k=True, pdl=pdl, prefetch=pdl and PDL_PREFETCH)
                    spec = AotSpec("gate_up_kernel", dtype, consts, cfg.num_warps, cfg.num_stages)
                    rows.append(ShippedRow(spec, None if hi >= _ANY else hi, act, False, "gate_up", lo))
        ew = elementwise_config(arch)
        for act in _ACTS:
            spec = AotSpec("act_and_mul_kernel", dtype, (act, ew.BLOCK), ew.num_warps, 1)
            rows.append(ShippedRow(spec, None, act, False, "act_and_mul"))
        rows.extend(_hopper_rows(arch, dtype))
        rows.extend(_decode_rows(arch, dtype))
    return rows


def _decode_rows(arch: str, dtype: str) -> list[ShippedRow]:
    """The decode kernels' rows (configs.DECODE_LINEAR / DECODE_GATE_UP of the arch; none where it has no
    table): every activation, the linear with and without bias, K a multiple of BK."""
    from .gated import gate_up_consts
    from .linear import linear_consts

    rows = []
    for table, kernel, role in ((DECODE_LINEAR, "gemv_linear_kernel", "gemv_linear"),
                                (DECODE_GATE_UP, "gemv_gate_up_kernel", "gemv_gate_up")):  # fmt: skip
        for lo, hi, row in _row_ranges(table.get(arch, ())):
            for cfg, pdl in itertools.product(alternatives(row), _pdls(arch, lo, hi)):
                for act in _ACTS if role == "gemv_linear" else _GATED_ACTS:
                    for bias in (True, False) if role == "gemv_linear" else (False,):
                        consts = (
                            linear_consts(cfg, has_bias=bias, act=act, even_k=True, pdl=pdl, prefetch=False)
                            if role == "gemv_linear"
                            else gate_up_consts(cfg, act=act, even_k=True, pdl=pdl, prefetch=False)
                        )
                        spec = AotSpec(kernel, dtype, consts, cfg.num_warps, cfg.num_stages)
                        rows.append(ShippedRow(spec, hi, act, bias, role, lo))
    return rows


def shipped_specs(arch: str, dtypes: Iterable[str] = DEFAULT_DTYPES) -> list[AotSpec]:
    """The distinct specs of `shipped_rows` (what compile_all compiles)."""
    return list(dict.fromkeys(row.spec for row in shipped_rows(arch, dtypes)))


def triton_target(arch: str) -> int:
    """Triton's GPUTarget arch for a build arch (sm_90a -> 90, sm_100a -> 100); ValueError for one the kernels
    cannot run on. The archs themselves come from the builder (build/matrix.toml), never from a list here."""
    if not is_arch(arch) or parse_arch(arch).cc < MIN_CC:
        raise ValueError(
            f"no AOT target for arch {arch!r}: name a GPU arch sm_XY[a] of compute capability "
            f"{MIN_CC[0]}.{MIN_CC[1]} or newer (the archs build/matrix.toml lists for the Triton variant)"
        )
    return parse_arch(arch).number


def compile_spec(spec: AotSpec, arch: str, folder: Path) -> list[Path]:
    """Compile one spec for `arch` into `folder`; returns the .cubin and .json it wrote."""
    from triton.backends.compiler import GPUTarget

    kdef = kernel_defs()[spec.kernel]
    compiled = triton.compile(
        ast_source(kdef, spec),
        target=GPUTarget("cuda", triton_target(arch), 32),
        options={
            "num_warps": spec.num_warps,
            "num_stages": spec.num_stages,
            "launch_pdl": bool(dict(zip(kdef.constexprs, spec.consts)).get("PDL", False)),
        },
    )
    meta = json.loads(json.dumps(compiled.metadata._asdict(), default=vars))
    # The libdevice path is where the build machine's Triton lives; it is not needed to launch a cubin, and
    # keeping only the file name makes the build reproducible across machines (same source, same digests).
    meta["extern_libs"] = [[name, os.path.basename(path)] for name, path in meta.get("extern_libs") or []]
    meta["fused_mlp_spec"] = {"kernel": spec.kernel, "dtype": spec.dtype, "consts": list(spec.consts),
                              "num_warps": spec.num_warps, "num_stages": spec.num_stages,
                              "params": [list(p) for p in kdef.params]}  # fmt: skip
    stem = Path(folder) / spec.file_stem()
    stem.with_suffix(".cubin").write_bytes(compiled.asm["cubin"])
    stem.with_suffix(".json").write_text(json.dumps(meta, sort_keys=True))
    return [stem.with_suffix(".cubin"), stem.with_suffix(".json")]


def _compile_job(args: tuple[AotSpec, str, str]) -> list[Path]:
    """Process-pool entry point of compile_spec."""
    spec, arch, folder = args
    return compile_spec(spec, arch, Path(folder))


@contextmanager
def reproducible_compile() -> Iterator[None]:
    """While inside, Triton compiles the same source to the same bytes (also in spawned workers).

    - Line info off (`TRITON_DISABLE_LINE_INFO=1`): it embeds the absolute source path, i.e. the staging dir.
    - Both of Triton's ptxas (`TRITON_PTXAS_PATH`, `TRITON_PTXAS_BLACKWELL_PATH`) go through shims that call
      the one Triton would have used via `ptxas_pin` (why: its docstring).
    The environment is restored on exit.
    """
    from triton import knobs

    from . import ptxas_pin

    tools = {"TRITON_PTXAS_PATH": knobs.nvidia.ptxas.path, "TRITON_PTXAS_BLACKWELL_PATH": knobs.nvidia.ptxas_blackwell.path}  # fmt: skip
    saved = {key: os.environ.get(key) for key in (*tools, "TRITON_DISABLE_LINE_INFO")}
    os.environ["TRITON_DISABLE_LINE_INFO"] = "1"
    with tempfile.TemporaryDirectory(prefix="fused-mlp-ptxas-") as shims:
        for key, real in tools.items():
            shim = Path(shims) / key.lower()
            argv = " ".join(shlex.quote(a) for a in (sys.executable, ptxas_pin.__file__, real))
            shim.write_text(f'#!/bin/sh\nexec {argv} "$@"\n')
            shim.chmod(0o755)
            os.environ[key] = str(shim)
        try:
            yield
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


def compile_specs(specs: Iterable[AotSpec], arch: str, folder: Path, jobs: int | None = None) -> list[Path]:
    """Compile `specs` for `arch` into `folder` with `jobs` worker processes (default: all cores).

    Reproducible: the same specs give the same bytes on every run (`reproducible_compile`).
    """
    folder.mkdir(parents=True, exist_ok=True)
    work = [(spec, arch, str(folder)) for spec in specs]
    jobs = jobs or os.cpu_count() or 1
    with reproducible_compile():
        if jobs == 1:
            written = [_compile_job(w) for w in work]
        else:  # spawned workers: safe in a process that has initialised CUDA (the tuning script's)
            with ProcessPoolExecutor(
                max_workers=jobs, mp_context=multiprocessing.get_context("spawn")
            ) as pool:
                written = list(pool.map(_compile_job, work))
    return [p for pair in written for p in pair]


def compile_all(
    out_dir: Path,
    arch: str,
    triton_version: str | None = None,
    *,
    dtypes: Iterable[str] = DEFAULT_DTYPES,
    kernels: Iterable[str] | None = None,
    jobs: int | None = None,
) -> list[Path]:
    """Compile every shipped spec for `arch` into out_dir/<triton version>/<arch>/; returns the files.

    out_dir is the variant's `fused_mlp/triton/cubins`; `kernels` limits it to those kernel names
    (default: all); `jobs` worker processes (default: all cores). Needs no GPU. Raises when `triton_version` is
    given and differs from the installed Triton (a cubin is only valid for the Triton that built it).
    """
    triton_target(arch)
    if triton_version is not None and triton_version != triton.__version__:
        raise RuntimeError(
            f"asked for cubins of Triton {triton_version} but Triton {triton.__version__} is installed; "
            f"run the build in an environment with triton=={triton_version}"
        )
    if constants.interpret():
        raise RuntimeError(
            "compile_all cannot run with TRITON_INTERPRET=1 (kernels are interpreted); unset it"
        )
    wanted = None if kernels is None else set(kernels)
    specs = [s for s in shipped_specs(arch, dtypes) if wanted is None or s.kernel in wanted]
    return compile_specs(specs, arch, Path(out_dir) / triton.__version__ / arch, jobs)
