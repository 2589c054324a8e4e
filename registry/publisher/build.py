"""`kernel-hub build`: turn a kernel package (default kernel_src/fused_mlp) into the Hub layout `<out>/build/<variant>/`.

Every variant directory holds the kernel package under its Python name (the `<python name>/__init__.py`
layout that `kernels` and older clients import), and `metadata.json` with what `kernels` requires plus
our keys (archs, triton, api, digest; docs/CONTRACTS.md). Variants come from the package's build.toml
(`spec.package`) or the build/matrix.toml it names, plus `torch-cpu` and `torch-universal`, which let stock
`kernels` load the reference path on any machine.

Output is reproducible: the content hash that names a build (`id`, OPS_NAMESPACE) is computed from
the staged sources and the build parameters alone, files are written in sorted order, cubins carry no
paths (no line info), and metadata.json holds no timestamps.
The decisions (plans, hashes, metadata) are pure functions; I/O sits in `build()` and the helpers
that run a subprocess (API extraction, AOT compile) so build-time imports never leak into the caller.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from registry.errors import KernelHubError
from registry.spec import digest
from registry.spec.arch import parse_sm
from registry.spec.build_matrix import PROMISE_KEY, BuildMatrix, VariantSpec, promise_of, read_matrix
from registry.spec.names import is_commit, python_name
from registry.spec.package import BUILD_TOML, KernelPackage, read_package
from registry.spec.variant import ArchEntry, VariantMetadata

from .aot import aot_decision, build_env, compile_cubins, installed_triton_version, run_python, selected_archs
from .cuda import build_cuda, cuda_recipe
from .cuda_ext import build_extension
from .cuda_ext import unavailable_reason as cuda_ext_unavailable
from .errors import BuildError
from .out_dir import MARKER, check_out_dir, marker_text

log = logging.getLogger(__name__)

KERNEL_HUB_VERSION = "0.1.0"
# Triton JIT needs Ampere (bf16 tl.dot, cp.async); the torch-cuda variant runs on any cc >= this.
TRITON_JIT_MIN_ARCH = "sm_80"
NOARCH_CPU_VARIANTS = ("torch-cpu", "torch-universal")
# Sources never copied into a variant: bytecode, editor/OS junk, build.toml (a build input), and the CUDA
# sources for variants that do not compile them (dead weight a loader could never use).
_SKIP_PARTS = {"__pycache__", ".pytest_cache", ".mypy_cache"}
_SKIP_SUFFIXES = (".pyc", ".pyo", ".so", "~")
DEFAULT_AOT_MODULE = "triton.aot_build"  # a package without build.toml: fused_mlp's layout


@dataclass
class VariantResult:
    name: str
    path: Path | None
    status: str  # "built" | "skipped"
    notes: list[str] = field(default_factory=list)


@dataclass
class BuildResult:
    out: Path
    variants: list[VariantResult]

    @property
    def built(self) -> list[str]:
        return [v.name for v in self.variants if v.status == "built"]


# ---------------------------------------------------------------------------------------------- pure


def plan_variants(matrix: BuildMatrix) -> list[VariantSpec]:
    """Variants to build: every `[variants.*]` of the matrix, then the two noarch CPU variants."""
    return [
        *matrix.variants,
        *(VariantSpec(name=n, kind="reference", backend="cpu") for n in NOARCH_CPU_VARIANTS),
    ]


def wants_file(relpath: str, include_cuda: bool, cuda_only: frozenset[str] = frozenset()) -> bool:
    """Whether a package file (path relative to the package root) is copied into a variant.

    `cuda_only`: files the CUDA variant alone ships (a build.toml package's C++/CUDA sources inside it);
    the folder `cuda/` is always one of them.
    """
    parts = relpath.split("/")
    if any(p in _SKIP_PARTS for p in parts) or parts[-1].endswith(_SKIP_SUFFIXES) or relpath == BUILD_TOML:
        return False
    return include_cuda or (parts[0] != "cuda" and relpath not in cuda_only)


def content_hash(variant: str, files: Mapping[str, str]) -> str:
    """sha256 hex naming one variant build: its name plus every (path, digest) of its files."""
    h = hashlib.sha256(variant.encode())
    for rel in sorted(files):
        h.update(b"\0" + rel.encode() + b"\0" + files[rel].encode())
    return h.hexdigest()


def build_identity(kernel_name: str, variant: str, chash: str) -> tuple[str, str]:
    """(metadata id, OPS_NAMESPACE) for one variant build, both unique per content hash."""
    pyname = python_name(kernel_name)
    return f"_{pyname}_{variant.replace('-', '_')}_{chash[:8]}", f"{pyname}_{chash[:8]}"


def rewrite_build_info(text: str, ops_namespace: str, build_id: str) -> str:
    """`_build_info.py` with OPS_NAMESPACE and BUILD_ID replaced, everything else (docstring) kept."""
    out = text
    for name, value in (("OPS_NAMESPACE", ops_namespace), ("BUILD_ID", build_id)):
        out, n = re.subn(rf"^{name}\s*=.*$", f"{name} = {value!r}", out, count=1, flags=re.MULTILINE)
        if n != 1:
            raise BuildError(
                f"_build_info.py has no line `{name} = ...`; the builder rewrites it per variant"
            )
    return out


def arch_entries(plan: VariantSpec, sass_archs: list[str]) -> tuple[ArchEntry, ...]:
    """Our `archs` key: one entry per arch with SASS shipped, PTX marked where the matrix asks for it."""
    return tuple(ArchEntry(a, sass=True, ptx=a in plan.ptx) for a in sass_archs)


def backend_archs(plan: VariantSpec, sass_archs: list[str]) -> list[str]:
    """backend.archs in kernels' notation. The Triton variant JITs on anything >= sm_80, said as 8.0+PTX."""
    archs = [parse_sm(a).dotted(ptx=a in plan.ptx) for a in sass_archs]
    if plan.kind == "triton":
        archs.append(parse_sm(TRITON_JIT_MIN_ARCH).dotted(ptx=True))
    return archs


def make_metadata(
    *,
    plan: VariantSpec,
    kernel: Mapping,
    ident: str,
    files: Mapping[str, str],
    api: Mapping,
    sass_archs: list[str],
    triton_versions: list[str],
    notes: list[str],
    provenance: Mapping,
    version: int,
) -> VariantMetadata:
    """metadata.json for one variant: kernels' required keys plus ours (docs/CONTRACTS.md)."""
    backend: dict = {"type": plan.backend}
    if plan.backend == "cuda":
        backend["archs"] = backend_archs(plan, sass_archs)
    return VariantMetadata(
        id=ident,
        name=kernel["name"],
        version=version,
        backend=backend,
        license=kernel.get("license", "apache-2.0"),
        python_depends=tuple(kernel.get("python-depends", ())),
        archs=arch_entries(plan, sass_archs),
        triton=tuple(triton_versions) if plan.kind == "triton" else None,
        torch_stable_abi=plan.torch_target if plan.kind == "cuda" and plan.torch_target else None,
        api=dict(api),
        build={"variant": plan.name, "kind": plan.kind, "notes": list(notes)},
        digest={"algorithm": digest.ALGORITHM, "files": dict(files)},
        provenance=dict(provenance),
    )


def provenance(commit: str | None, dirty: bool) -> dict:
    """kernels requires `kernel-builder` whenever `provenance` is present, and a 40-hex commit in `kernel`."""
    prov: dict = {"kernel-builder": {"version": f"kernel-hub {KERNEL_HUB_VERSION}"}}
    if commit:
        prov["kernel"] = {"commit": commit, "dirty": dirty}
    prov["kernel-hub"] = {"version": KERNEL_HUB_VERSION}
    return prov


# ----------------------------------------------------------------------------------------------- I/O


def copy_package(
    source: Path, dest: Path, include_cuda: bool, cuda_only: frozenset[str] = frozenset()
) -> None:
    """Copy the kernel package into `dest`, in sorted order, without bytecode/junk (and CUDA sources unless asked)."""
    files = sorted(p for p in source.rglob("*") if p.is_file())
    for path in files:
        rel = path.relative_to(source).as_posix()
        if wants_file(rel, include_cuda, cuda_only):
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)


def git_state(path: Path) -> tuple[str | None, bool]:
    """(the last commit that changed `path`, whether `path` has uncommitted changes); (None, False) outside git.

    The last commit of the sources, not HEAD: a commit elsewhere in the repository must not change the
    build (and so move a published version on an otherwise unchanged republish).
    """
    try:
        commit = subprocess.run(
            ["git", "-C", str(path), "log", "-1", "--format=%H", "--", "."],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        status = subprocess.run(
            ["git", "-C", str(path), "status", "--porcelain", "--", "."],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None, False
    return (commit if is_commit(commit) else None), bool(status.strip())


_API_SCRIPT = """
import inspect, json, sys, types
sys.path.insert(0, ".")
import {pkg} as m
names = list(getattr(m, "__all__", []))
sigs = {{}}
for n in names:
    obj = getattr(m, n)
    if isinstance(obj, types.ModuleType):
        sigs[n] = "module"
        continue
    try:
        sigs[n] = str(inspect.signature(obj))
    except (TypeError, ValueError):
        sigs[n] = type(obj).__name__
print(json.dumps({{"__all__": names, "signatures": sigs}}))
"""


def read_api(variant_dir: Path, package: str, python: str, env: Mapping[str, str]) -> dict:
    """`{"__all__", "signatures"}` of the package as built, read by importing it in a fresh interpreter."""
    code = _API_SCRIPT.format(pkg=package)
    out = run_python(python, code, variant_dir, f"importing {package} to read its API", env)
    return json.loads(out.strip().splitlines()[-1])


def declared_api(pkg: KernelPackage | None, api: dict) -> dict:
    """The package's API record, checked against the build.toml's `ops` and naming its reference module."""
    if pkg is None:
        return api
    if pkg.ops and sorted(pkg.ops) != sorted(api["__all__"]):
        raise BuildError(
            f"{pkg.root / BUILD_TOML} [kernel-hub] ops {sorted(pkg.ops)} differ from the package's __all__ "
            f"{sorted(api['__all__'])}: make them the same (the check compares exactly these ops)"
        )
    return {**api, "reference": pkg.reference}


@dataclass(frozen=True)
class BuildOptions:
    """How to build (as opposed to what: that is the matrix)."""

    aot: bool = True
    aot_archs: tuple[str, ...] | None = None  # None: every arch of the matrix
    aot_kwargs: Mapping = field(default_factory=dict)  # forwarded to compile_all (dtypes, kernels, jobs)
    require_cuda: bool = False
    version: int = 1
    python: str = sys.executable


def build(
    source: Path,
    out: Path,
    matrix_path: Path | None = None,
    *,
    only: list[str] | None = None,
    options: BuildOptions | None = None,
    **option_values,
) -> BuildResult:
    """Build every planned variant of `source` into `out/build/<variant>/`, replacing `out` atomically.

    `source`: a folder with a build.toml (`spec.package`: the package is in it or is it), or a bare Python
    package whose variants come from the matrix. `out` must be a directory a build may replace
    (`out_dir.check_out_dir`: not the sources, no tracked files, empty or written by an earlier build); it
    gets the `out_dir.MARKER` file.

    `matrix_path` None: the build.toml's variants, or the matrix it names, or (no build.toml)
    build/matrix.toml of the working directory or a parent (`spec.build_matrix`).
    Options come as a BuildOptions or as its fields by keyword (`aot=False`, `require_cuda=True`).
    Progress goes to this module's logger.
    """
    opts = options or BuildOptions(**option_values)
    source, out = Path(source).resolve(), Path(out).resolve()
    if not source.is_dir():
        raise BuildError(
            f"{source} is not a folder: pass a kernel package folder (`kernel-hub init NAME` makes one)"
        )
    pkg = read_package(source) if (source / BUILD_TOML).is_file() else None
    if pkg is None and not (source / "__init__.py").is_file():
        raise BuildError(
            f"{source} has no {BUILD_TOML} and is not a Python package (no __init__.py): pass a kernel "
            "package folder (`kernel-hub init NAME` makes one)"
        )
    matrix = matrix_for(pkg, matrix_path)
    if pkg is not None:
        kernel = {"name": pkg.name, "license": pkg.license, "python-depends": list(pkg.python_depends)}
        package_dir = pkg.package_dir
    else:
        kernel = matrix.kernel or {"name": source.name.replace("_", "-")}
        package_dir = source
    package = python_name(kernel["name"])
    if package_dir.name != package:
        raise BuildError(
            f"package directory {package_dir.name!r} must be named after the kernel ({package!r}), "
            "because variants ship it under that name"
        )
    plans = plan_variants(matrix)
    if only:
        unknown = set(only) - {p.name for p in plans}
        if unknown:
            raise BuildError(f"unknown variant(s) {sorted(unknown)}; known: {[p.name for p in plans]}")
        plans = [p for p in plans if p.name in only]
    check_out_dir(out, source)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.building-", dir=out.parent))
    try:
        with tempfile.TemporaryDirectory(prefix="kernel-hub-build-") as cache:
            ctx = _Context(
                package_dir,
                kernel,
                package,
                provenance(*git_state(source)),
                opts,
                build_env(Path(cache) / "triton"),
                matrix,
                scratch=Path(cache),
                pkg=pkg,
                promise=promise_of(matrix.data),
            )
            results = [_build_variant(plan, staging / "build" / plan.name, ctx) for plan in plans]
        (staging / MARKER).write_text(marker_text(package_dir))
        check_out_dir(out, source)  # again: it may have changed during a build of minutes
        if out.exists():
            shutil.rmtree(out)
        staging.rename(out)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    for r in results:
        r.path = out / "build" / r.name if r.status == "built" else None
    return BuildResult(out=out, variants=results)


def kernel_name(source: Path, matrix_path: Path | None = None) -> str:
    """The kernel's name (`fused-mlp`): its build.toml's, else the matrix's, else the folder's."""
    source = Path(source)
    if (source / BUILD_TOML).is_file():
        return read_package(source).name
    try:
        return read_matrix(matrix_path).kernel["name"]
    except (KernelHubError, KeyError):
        return source.resolve().name.replace("_", "-")


def matrix_for(pkg: KernelPackage | None, matrix_path: Path | None) -> BuildMatrix:
    """What to build: `matrix_path`, else the matrix the build.toml names (found beside it or in a parent
    folder), else the build.toml's own variants; without a build.toml, build/matrix.toml as `read_matrix` finds it."""
    if matrix_path is not None or pkg is None:
        return read_matrix(matrix_path)
    if pkg.matrix:
        for folder in (pkg.root, *pkg.root.parents):
            if (folder / pkg.matrix).is_file():
                return read_matrix(folder / pkg.matrix)
        raise BuildError(
            f"{pkg.root / BUILD_TOML} takes its variants from {pkg.matrix!r}, which is neither there nor in "
            "a parent folder: pass --matrix PATH"
        )
    return BuildMatrix(None, {"name": pkg.name}, tuple(pkg.variants()), {})


@dataclass
class _Context:
    source: Path
    kernel: Mapping
    package: str
    provenance: Mapping
    opts: BuildOptions
    env: dict[str, str]
    matrix: BuildMatrix
    api: dict | None = None  # read once, from the first variant built: every variant ships the same API
    scratch: Path | None = None  # build-private scratch, gone after the build
    # The Triton variant's loose AOT cubins of this build (the CUDA variant reuses them).
    cubins: Path | None = None
    pkg: KernelPackage | None = None  # the build.toml, when the package has one
    # the environments this build serves, in every metadata.json (spec.build_matrix)
    promise: dict | None = None

    @property
    def own_cuda(self) -> bool:
        """Whether the CUDA variant compiles the build.toml's sources (else: the matrix's recipe, build/cuda/)."""
        return self.pkg is not None and self.matrix.path is None

    @property
    def aot_module(self) -> str:
        return (self.pkg.aot_module if self.pkg else None) or DEFAULT_AOT_MODULE

    @property
    def cuda_only(self) -> frozenset[str]:
        """The build.toml's C++/CUDA sources that lie inside the package (relative to it)."""
        if self.pkg is None:
            return frozenset()
        inside = [p.resolve() for p in self.pkg.cuda_sources if self.source in p.resolve().parents]
        return frozenset(p.relative_to(self.source).as_posix() for p in inside)


def _build_variant(plan: VariantSpec, vdir: Path, ctx: _Context) -> VariantResult:
    """Stage the package, fix the build identity from its content, compile what the kind needs, write metadata."""
    opts = ctx.opts
    notes: list[str] = []
    params: dict = {"archs": list(plan.archs), "ptx": list(plan.ptx), "torch_target": plan.torch_target}
    aot_archs: list[str] = []
    installed = None
    recipe: ModuleType | str | None = None
    cuda_archs: list[str] = []
    if plan.kind == "cuda":
        if ctx.own_cuda:
            recipe, unavailable = None, cuda_ext_unavailable(ctx.pkg.cuda)
        else:
            recipe = cuda_recipe(ctx.matrix.path.resolve().parent / "cuda")
            unavailable = recipe if isinstance(recipe, str) else recipe.cuda_unavailable_reason(None)
        if unavailable:
            if opts.require_cuda:
                raise BuildError(f"[{plan.name}] cannot build the CUDA variant: {unavailable}")
            log.warning("[%s] skipped: %s", plan.name, unavailable)
            return VariantResult(plan.name, None, "skipped", [unavailable])
        # --arch narrows the extension's SASS too (a small .so for one GPU); the Triton kernels it embeds are
        # compiled with this build's Triton (reusing the Triton variant's cubins) unless AOT is off.
        cuda_archs = [a for a in plan.archs if opts.aot_archs is None or a in opts.aot_archs] or list(
            plan.archs
        )
        params["cuda_archs"] = cuda_archs
        if ctx.own_cuda:  # sources outside the package are not staged: their bytes must name the build too
            params["cuda_sources"] = {
                p.relative_to(ctx.pkg.root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
                for p in ctx.pkg.cuda_sources
            }
        params["cuda_triton"] = (
            {"triton": installed_triton_version(opts.python), **dict(opts.aot_kwargs)}
            if opts.aot and not ctx.own_cuda
            else None
        )
    if plan.kind == "triton":
        installed = installed_triton_version(opts.python)
        wanted = selected_archs(plan, opts.aot_archs)
        do_aot, why = aot_decision(plan, installed, opts.aot, wanted)
        aot_archs = wanted if do_aot else []
        notes.append(why)
        log.info("[%s] %s", plan.name, why)
        params["aot"] = {"triton": installed, "archs": aot_archs, **dict(opts.aot_kwargs)} if do_aot else None

    copy_package(ctx.source, vdir / ctx.package, include_cuda=plan.kind == "cuda", cuda_only=ctx.cuda_only)
    chash = content_hash(
        plan.name, {**digest.hash_variant(vdir), "<params>": json.dumps(params, sort_keys=True)}
    )
    ident, ops_ns = build_identity(ctx.kernel["name"], plan.name, chash)
    info = vdir / ctx.package / "_build_info.py"
    info.write_text(rewrite_build_info(info.read_text(), ops_ns, ident))

    sass_archs: list[str] = []
    triton_versions: list[str] = []
    if plan.kind == "cuda":
        log.info("[%s] compiling the CUDA extension for %s (takes minutes)", plan.name, ", ".join(cuda_archs))
        if ctx.own_cuda:
            ptx = [a for a in plan.ptx if a in cuda_archs]
            notes.append(build_extension(ctx.pkg, vdir / ctx.package, ops_ns, cuda_archs, ptx, ctx.scratch))
        else:
            scratch = ctx.scratch / "cuda"  # the build's own temporary folder, not beside the sources
            triton = params["cuda_triton"] is not None
            notes += build_cuda(
                recipe, vdir, ctx.package, ctx.matrix.data, scratch, cuda_archs, triton, opts, ctx.cubins
            )
        sass_archs = cuda_archs
    if aot_archs:
        loose = ctx.scratch / "cubins" / plan.name
        sass_archs, arch_notes = compile_cubins(
            vdir,
            ctx.package,
            aot_archs,
            installed,
            opts.python,
            ctx.env,
            loose,
            ctx.aot_module,
            opts.aot_kwargs,
        )
        triton_versions = [installed]
        ctx.cubins = loose
        cubins = list(ctx.cubins.rglob("*.cubin"))
        notes += [f"{len(cubins)} AOT cubins for triton {installed}", *arch_notes]
    if ctx.api is None:
        ctx.api = declared_api(ctx.pkg, read_api(vdir, ctx.package, opts.python, ctx.env))
    files = digest.hash_variant(vdir)
    meta = make_metadata(
        plan=plan,
        kernel=ctx.kernel,
        ident=ident,
        files=files,
        api=ctx.api,
        sass_archs=sass_archs,
        triton_versions=triton_versions,
        notes=notes,
        provenance=ctx.provenance,
        version=opts.version,
    )
    if ctx.promise is not None:
        meta = dataclasses.replace(meta, extra={**meta.extra, PROMISE_KEY: ctx.promise})
    meta.write(vdir)
    log.info("[%s] built %s: %d files", plan.name, ident, len(files))
    return VariantResult(plan.name, vdir, "built", notes)
