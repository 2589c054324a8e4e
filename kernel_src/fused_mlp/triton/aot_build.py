"""Ahead-of-time cubins at build time: compile every shipped kernel specialization for an arch on a
machine without a GPU (the builder's entry point is `compile_all`). The run-time side is `aot`.

Output layout and metadata: `aot` and docs/CONTRACTS.md ("Kernel families").
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import triton

from .configs import AOT_ARCHS, GATE_UP, LINEAR, elementwise_config, table_rows, uses_pdl
from .specs import AotSpec, KernelDef, ast_source

DEFAULT_DTYPES = ("bf16", "fp16")
_ACTS = (0, 1, 2, 3, 4)
_GATED_ACTS = (1, 2, 3, 4)


def kernel_defs() -> dict[str, KernelDef]:
    """Kernel name -> KernelDef of every family that ships cubins."""
    from .act_and_mul import ACT_AND_MUL
    from .gated import GATE_UP as GATE_UP_KERNEL
    from .linear import LINEAR as LINEAR_KERNEL

    return {k.name: k for k in (LINEAR_KERNEL, GATE_UP_KERNEL, ACT_AND_MUL)}


@dataclass(frozen=True)
class ShippedRow:
    """One shipped spec as a launcher selects it: the config-table row it serves (M <= max_rows; None =
    any), its activation code and bias flag. The CUDA variant's build compiles these into its cubin table."""

    spec: AotSpec
    max_rows: int | None
    act: int
    has_bias: bool


def shipped_rows(arch: str, dtypes: Iterable[str] = DEFAULT_DTYPES) -> list[ShippedRow]:
    """Every inference-forward specialization we ship for `arch`, per config-table row: each config of the
    arch's tables, each activation, with/without bias, K a multiple of BK (EVEN_K). Backward kernels JIT."""
    rows = []
    for dtype in dtypes:
        for bound, cfg in table_rows(LINEAR, arch):
            pdl = uses_pdl(arch, bound or 1 << 30)
            for act in _ACTS:
                for has_bias in (True, False):
                    consts = (has_bias, act, True, False, "tf32", pdl, cfg.BM, cfg.BN, cfg.BK, cfg.GROUP_M)
                    spec = AotSpec("linear_kernel", dtype, consts, cfg.num_warps, cfg.num_stages)
                    rows.append(ShippedRow(spec, bound, act, has_bias))
        for bound, cfg in table_rows(GATE_UP, arch):
            pdl = uses_pdl(arch, bound or 1 << 30)
            for act in _GATED_ACTS:
                consts = (act, True, False, "tf32", pdl, cfg.BM, cfg.BN, cfg.BK, cfg.GROUP_M)
                spec = AotSpec("gate_up_kernel", dtype, consts, cfg.num_warps, cfg.num_stages)
                rows.append(ShippedRow(spec, bound, act, False))
        ew = elementwise_config(arch)
        for act in _ACTS:
            spec = AotSpec("act_and_mul_kernel", dtype, (act, ew.BLOCK), ew.num_warps, 1)
            rows.append(ShippedRow(spec, None, act, False))
    return rows


def shipped_specs(arch: str, dtypes: Iterable[str] = DEFAULT_DTYPES) -> list[AotSpec]:
    """The distinct specs of `shipped_rows` (what compile_all compiles)."""
    return list(dict.fromkeys(row.spec for row in shipped_rows(arch, dtypes)))


def compile_spec(spec: AotSpec, arch: str, folder: Path) -> list[Path]:
    """Compile one spec for `arch` into `folder`; returns the .cubin and .json it wrote."""
    from triton.backends.compiler import GPUTarget

    kdef = kernel_defs()[spec.kernel]
    compiled = triton.compile(
        ast_source(kdef, spec),
        target=GPUTarget("cuda", AOT_ARCHS[arch], 32),
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


def compile_specs(specs: Iterable[AotSpec], arch: str, folder: Path, jobs: int | None = None) -> list[Path]:
    """Compile `specs` for `arch` into `folder` with `jobs` worker processes (default: all cores)."""
    folder.mkdir(parents=True, exist_ok=True)
    work = [(spec, arch, str(folder)) for spec in specs]
    jobs = jobs or os.cpu_count() or 1
    if jobs == 1:
        written = [_compile_job(w) for w in work]
    else:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
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
    if arch not in AOT_ARCHS:
        raise ValueError(f"no AOT target for arch {arch!r}; choose one of {', '.join(AOT_ARCHS)}")
    if triton_version is not None and triton_version != triton.__version__:
        raise RuntimeError(
            f"asked for cubins of Triton {triton_version} but Triton {triton.__version__} is installed; "
            f"run the build in an environment with triton=={triton_version}"
        )
    if os.environ.get("TRITON_INTERPRET") == "1":
        raise RuntimeError(
            "compile_all cannot run with TRITON_INTERPRET=1 (kernels are interpreted); unset it"
        )
    wanted = None if kernels is None else set(kernels)
    specs = [s for s in shipped_specs(arch, dtypes) if wanted is None or s.kernel in wanted]
    return compile_specs(specs, arch, Path(out_dir) / triton.__version__ / arch, jobs)
