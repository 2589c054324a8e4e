"""Triton AOT cubins for a variant: the build interpreter, compiling per arch, and what the cubins really hold.

The kernel package compiles its own kernels (`<package>.triton.aot_build.compile_all`, no GPU needed); this
module runs it in a subprocess of the build interpreter (so build-time imports never leak into the
caller), decides whether the installed Triton may ship cubins at all, and reads each folder's SASS arch
back with Triton's bundled cuobjdump (Triton emits `sm_120a` for `sm_120`).
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import time
import zipfile
from collections.abc import Mapping
from pathlib import Path

from registry.spec.arch import SM_PATTERN, parse_sm
from registry.spec.build_matrix import VariantSpec

from .errors import BuildError

log = logging.getLogger(__name__)

_SUBPROCESS_TIMEOUT_S = 1800


def aot_decision(
    plan: VariantSpec, installed_triton: str | None, enabled: bool, archs: list[str]
) -> tuple[bool, str]:
    """Whether to compile AOT cubins for `archs` of a Triton variant, and the sentence recorded either way."""
    if not enabled:
        return False, "AOT cubins disabled (--no-aot): Triton JIT-compiles on first use"
    if installed_triton is None:
        return False, "triton is not installed here: no AOT cubins, Triton JIT-compiles on first use"
    if installed_triton not in plan.triton:
        return False, (
            f"installed triton {installed_triton} is not one of the matrix's {list(plan.triton)}: "
            "no AOT cubins (install a listed version to build them); Triton JIT-compiles on first use"
        )
    return True, f"AOT cubins for triton {installed_triton}: {', '.join(archs)}"


def selected_archs(plan: VariantSpec, wanted: tuple[str, ...] | None) -> list[str]:
    """The matrix archs of `plan`, narrowed to `wanted` (an arch outside the matrix is an error)."""
    if wanted is None:
        return list(plan.archs)
    unknown = [a for a in wanted if a not in plan.archs]
    if unknown:
        raise BuildError(
            f"arch(s) {unknown} are not in build/matrix.toml for {plan.name}: {list(plan.archs)}"
        )
    return [a for a in plan.archs if a in wanted]


def parse_elf_arch(listing: str) -> str | None:
    """The SASS arch in `cuobjdump --list-elf` output ("ELF file 1: x.sm_120a.cubin" -> "sm_120a")."""
    archs = {"sm_" + "".join(groups) for groups in re.findall(rf"\.{SM_PATTERN}\.cubin", listing)}
    return archs.pop() if len(archs) == 1 else None


def installed_triton_version(python: str) -> str | None:
    """`triton.__version__` in the interpreter that will compile, or None when it has no triton."""
    proc = subprocess.run(
        [python, "-c", "import triton; print(triton.__version__)"],
        capture_output=True,
        text=True,
        check=False,
    )
    return proc.stdout.strip() if proc.returncode == 0 else None


def triton_cuobjdump(python: str) -> Path | None:
    """The cuobjdump that Triton bundles in the build interpreter, or None when it has none."""
    code = "import os, triton; print(os.path.dirname(triton.__file__))"
    proc = subprocess.run([python, "-c", code], capture_output=True, text=True, check=False)
    tool = Path(proc.stdout.strip()) / "backends" / "nvidia" / "bin" / "cuobjdump"
    return tool if proc.returncode == 0 and tool.is_file() else None


def shipped_arch(cubin_dir: Path, requested: str, cuobjdump: Path | None) -> tuple[str, str | None]:
    """(arch the cubins really target, note): Triton emits arch-specific SASS (sm_120 -> sm_120a) for cc >= 9.0.

    Reads one cubin's ELF with cuobjdump; without the tool the requested arch is kept and the note says so.
    """
    cubins = sorted(cubin_dir.glob("*.cubin"))
    if cuobjdump is None or not cubins:
        return requested, f"{requested}: ELF arch not verified (no cuobjdump in the build's Triton)"
    listing = subprocess.run(
        [str(cuobjdump), "--list-elf", str(cubins[0])], capture_output=True, text=True, check=False
    ).stdout
    actual = parse_elf_arch(listing)
    if actual is None:
        raise BuildError(f"cuobjdump --list-elf {cubins[0]} names no single SASS arch:\n{listing}")
    if not parse_sm(actual).same_cc(parse_sm(requested)):
        raise BuildError(f"cubins for {requested} hold SASS for {actual}: the AOT target is wrong")
    return actual, (
        None if actual == requested else f"{requested}: Triton emits {actual} SASS (runs only there)"
    )


def build_env(triton_cache: Path) -> dict[str, str]:
    """Environment for build subprocesses: real compilation (not the Triton interpreter), a private cache.

    (Reproducible cubins are compile_all's own job: `aot_build.reproducible_compile`.)
    """
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(triton_cache)
    return env


def run_python(python: str, code: str, cwd: Path, what: str, env: Mapping[str, str]) -> str:
    """Run `code` with the variant directory on sys.path; return its stdout or raise BuildError with stderr."""
    try:
        proc = subprocess.run(
            [python, "-c", code],
            check=False,
            cwd=cwd,
            env=dict(env),
            capture_output=True,
            text=True,
            timeout=_SUBPROCESS_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        raise BuildError(f"{what} did not finish within {_SUBPROCESS_TIMEOUT_S} s") from None
    if proc.returncode != 0:
        raise BuildError(f"{what} failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    return proc.stdout


_AOT_SCRIPT = """
import importlib, json, sys
sys.path.insert(0, ".")
aot_build = importlib.import_module("{pkg}.{module}")
written = aot_build.compile_all({out!r}, {arch!r}, {triton!r}, **{kwargs!r})
print(json.dumps(len(written)))
"""


def compile_cubins(
    variant_dir: Path,
    package: str,
    archs: list[str],
    triton_version: str,
    python: str,
    env: Mapping[str, str],
    loose_root: Path,
    module: str,
    aot_kwargs: Mapping | None = None,
) -> tuple[list[str], list[str]]:
    """AOT-compile the package's Triton kernels per arch via `<package>.<module>.compile_all` (no GPU needed).

    compile_all writes loose files under `loose_root` (kept for the CUDA variant of the same build, which
    embeds some of them); the variant ships one bundle per arch (`bundle_cubins`) in `cubins/` beside the
    module (fused_mlp: `triton/cubins/`), where the package's run-time finder looks. Returns (the SASS arch
    each folder really holds, notes). `aot_kwargs` go to compile_all as is (e.g. `dtypes`, `kernels`,
    `jobs`: narrower builds for tests).
    """
    shipped, notes = [], []
    cuobjdump = triton_cuobjdump(python)
    for i, arch in enumerate(archs, 1):
        log.info(
            "  %s: compiling AOT cubins (arch %d of %d, about a minute each on 2 cores)", arch, i, len(archs)
        )
        started = time.monotonic()
        code = _AOT_SCRIPT.format(
            pkg=package,
            module=module,
            out=str(loose_root),
            arch=arch,
            triton=triton_version,
            kwargs=dict(aot_kwargs or {}),
        )
        n = json.loads(
            run_python(python, code, variant_dir, f"AOT compile for {arch}", env).strip().splitlines()[-1]
        )
        if not n:
            raise BuildError(
                f"aot_build.compile_all wrote no cubins for {arch}: the kernel package ships no AOT specs"
            )
        actual, note = shipped_arch(loose_root / triton_version / arch, arch, cuobjdump)
        shipped.append(actual)
        notes += [note] if note else []
        log.info("  %s: %d files (%s SASS) in %.0f s", arch, n, actual, time.monotonic() - started)
        cubin_root = Path(variant_dir, package, *module.split(".")[:-1], "cubins")
        bundle_cubins(loose_root / triton_version / arch, cubin_root)
    return shipped, notes


_ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)  # fixed member times: the same cubins make the same bytes


def bundle_cubins(arch_dir: Path, cubin_root: Path) -> Path:
    """Pack compile_all's `<triton>/<arch>/` folder into `cubin_root/<triton>/<arch>.zip` (flat, sorted, deflated).

    One file per (Triton version, arch) instead of a few hundred: a loader fetches only its GPU's
    (registry.spec.variant.cubin_target), and the kernel's run-time finder reads it (`triton/aot.py`).
    """
    bundle = cubin_root / arch_dir.parent.name / f"{arch_dir.name}.zip"
    bundle.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(bundle, "w") as z:
        for path in sorted(p for p in arch_dir.iterdir() if p.is_file()):
            info = zipfile.ZipInfo(path.name, date_time=_ZIP_EPOCH)
            info.external_attr = 0o644 << 16
            info.create_system = 3
            z.writestr(info, path.read_bytes(), compress_type=zipfile.ZIP_DEFLATED, compresslevel=9)
    return bundle
