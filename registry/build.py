"""`kernel-hub build`: turn kernel_src/fused_mlp into the Hub layout `<out>/build/<variant>/`.

Every variant directory holds the kernel package as `fused_mlp/` (the `<python name>/__init__.py`
layout that `kernels` and older clients import), and `metadata.json` with what `kernels` requires plus
our keys (archs, triton, api, digest; docs/CONTRACTS.md). Variants come from build/matrix.toml, plus
`torch-cpu` and `torch-universal`, which let stock `kernels` load the reference path on any machine.

Output is reproducible: the content hash that names a build (`id`, OPS_NAMESPACE) is computed from
the staged sources and the build parameters alone, files are written in sorted order, cubins carry no
paths (no line info), and metadata.json holds no timestamps.
The decisions (plans, hashes, metadata) are pure functions; I/O sits in `build()` and the helpers
that run a subprocess (API extraction, AOT compile) so build-time imports never leak into the caller.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import tomllib

from . import digest

KERNEL_HUB_VERSION = "0.1.0"
# Triton JIT needs Ampere (bf16 tl.dot, cp.async); the torch-cuda variant runs on any cc >= this.
TRITON_JIT_MIN_ARCH = "sm_80"
NOARCH_CPU_VARIANTS = ("torch-cpu", "torch-universal")
# Sources never copied into a variant: bytecode, editor/OS junk, and the CUDA sources for variants
# that do not compile them (they would be dead weight a loader could never use).
_SKIP_PARTS = {"__pycache__", ".pytest_cache", ".mypy_cache"}
_SKIP_SUFFIXES = (".pyc", ".pyo", ".so", "~")
_SUBPROCESS_TIMEOUT_S = 1800

Log = Callable[[str], None]


class BuildError(RuntimeError):
    """A variant could not be built; the message says which and what to do."""


@dataclass(frozen=True)
class VariantPlan:
    """What to build for one variant, read from build/matrix.toml (or implied, for the CPU variants)."""

    name: str
    kind: str  # "triton" | "cuda" | "reference"
    backend: str  # metadata backend.type: "cuda" | "cpu"
    archs: tuple[str, ...] = ()
    ptx: tuple[str, ...] = ()
    triton: tuple[str, ...] = ()
    torch_target: str | None = None


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


def load_matrix(path: Path) -> dict:
    """Parse build/matrix.toml."""
    with open(path, "rb") as f:
        return tomllib.load(f)


def plan_variants(matrix: Mapping) -> list[VariantPlan]:
    """Variants to build: every `[variants.*]` of the matrix, then the two noarch CPU variants."""
    plans = []
    for name, spec in sorted(matrix.get("variants", {}).items()):
        kind = spec.get("kind")
        if kind not in ("triton", "cuda"):
            raise BuildError(f"build/matrix.toml: variant {name!r} has kind {kind!r}; use 'triton' or 'cuda'")
        plans.append(
            VariantPlan(
                name=name,
                kind=kind,
                backend=spec.get("backend", "cuda"),
                archs=tuple(spec.get("archs", ())),
                ptx=tuple(spec.get("ptx", ())),
                triton=tuple(spec.get("triton", ())),
                torch_target=spec.get("torch_target"),
            )
        )
    plans += [VariantPlan(name=n, kind="reference", backend="cpu") for n in NOARCH_CPU_VARIANTS]
    return plans


def python_name(kernel_name: str) -> str:
    """Package directory name that `kernels` imports: metadata `name` with '-' -> '_'."""
    return kernel_name.replace("-", "_")


def kernels_arch(arch: str, ptx: bool = False) -> str:
    """Our `sm_90a` as the compute capability `kernels` reads in backend.archs: `9.0a` (`+PTX` for PTX)."""
    m = re.fullmatch(r"sm_(\d+?)(\d)([af]?)", arch)
    if not m:
        raise BuildError(f"GPU arch {arch!r} is not of the form sm_<major><minor>[a|f] (e.g. sm_90a)")
    return f"{m.group(1)}.{m.group(2)}{m.group(3)}" + ("+PTX" if ptx else "")


def wants_file(relpath: str, include_cuda: bool) -> bool:
    """Whether a package file (path relative to the package root) is copied into a variant."""
    parts = relpath.split("/")
    if any(p in _SKIP_PARTS for p in parts) or parts[-1].endswith(_SKIP_SUFFIXES):
        return False
    return include_cuda or parts[0] != "cuda"


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


def arch_entries(plan: VariantPlan, sass_archs: list[str]) -> list[dict]:
    """Our `archs` key: one entry per arch with SASS shipped, PTX marked where the matrix asks for it."""
    return [{"arch": a, "sass": True, "ptx": a in plan.ptx} for a in sass_archs]


def backend_archs(plan: VariantPlan, sass_archs: list[str]) -> list[str]:
    """backend.archs in kernels' notation. The Triton variant JITs on anything >= sm_80, said as 8.0+PTX."""
    archs = [kernels_arch(a, ptx=a in plan.ptx) for a in sass_archs]
    if plan.kind == "triton":
        archs.append(kernels_arch(TRITON_JIT_MIN_ARCH, ptx=True))
    return archs


def make_metadata(
    *,
    plan: VariantPlan,
    kernel: Mapping,
    ident: str,
    files: Mapping[str, str],
    api: Mapping,
    sass_archs: list[str],
    triton_versions: list[str],
    notes: list[str],
    provenance: Mapping,
    version: int,
) -> dict:
    """metadata.json for one variant: kernels' required keys plus ours (docs/CONTRACTS.md)."""
    meta: dict = {
        "id": ident,
        "name": kernel["name"],
        "version": version,
        "license": kernel.get("license", "apache-2.0"),
        "python-depends": [],
        "backend": {"type": plan.backend},
    }
    if plan.backend == "cuda":
        meta["backend"]["archs"] = backend_archs(plan, sass_archs)
    meta["archs"] = arch_entries(plan, sass_archs)
    if plan.kind == "triton":
        meta["triton"] = triton_versions
    if plan.kind == "cuda" and plan.torch_target:
        meta["torch_stable_abi"] = plan.torch_target
    meta["api"] = dict(api)
    meta["checks"] = []
    meta["build"] = {"variant": plan.name, "kind": plan.kind, "notes": list(notes)}
    meta["digest"] = {"algorithm": digest.ALGORITHM, "files": dict(files)}
    meta["provenance"] = dict(provenance)
    return meta


def metadata_bytes(meta: Mapping) -> bytes:
    """Canonical serialisation (sorted keys, fixed indent, trailing newline): same metadata, same bytes."""
    return (json.dumps(meta, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()


def provenance(commit: str | None, dirty: bool) -> dict:
    """kernels requires `kernel-builder` whenever `provenance` is present, and a 40-hex commit in `kernel`."""
    prov: dict = {"kernel-builder": {"version": f"kernel-hub {KERNEL_HUB_VERSION}"}}
    if commit:
        prov["kernel"] = {"commit": commit, "dirty": dirty}
    prov["kernel-hub"] = {"version": KERNEL_HUB_VERSION}
    return prov


def aot_decision(
    plan: VariantPlan, installed_triton: str | None, enabled: bool, archs: list[str]
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


def selected_archs(plan: VariantPlan, wanted: tuple[str, ...] | None) -> list[str]:
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
    archs = set(re.findall(r"\.(sm_\d+[af]?)\.cubin", listing))
    return archs.pop() if len(archs) == 1 else None


# ----------------------------------------------------------------------------------------------- I/O


def copy_package(source: Path, dest: Path, include_cuda: bool) -> None:
    """Copy the kernel package into `dest`, in sorted order, without bytecode/junk (and cuda/ unless asked)."""
    files = sorted(p for p in source.rglob("*") if p.is_file())
    for path in files:
        rel = path.relative_to(source).as_posix()
        if wants_file(rel, include_cuda):
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)


def git_state(path: Path) -> tuple[str | None, bool]:
    """(HEAD commit, whether `path` has uncommitted changes); (None, False) outside a git checkout."""
    try:
        commit = subprocess.run(
            ["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        status = subprocess.run(
            ["git", "-C", str(path), "status", "--porcelain", "--", "."],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None, False
    return (commit if re.fullmatch(r"[0-9a-f]{40}", commit) else None), bool(status.strip())


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
    if actual.rstrip("af") != requested.rstrip("af"):
        raise BuildError(f"cubins for {requested} hold SASS for {actual}: the AOT target is wrong")
    return actual, (
        None if actual == requested else f"{requested}: Triton emits {actual} SASS (runs only there)"
    )


def build_env(triton_cache: Path) -> dict[str, str]:
    """Environment for build subprocesses: real compilation (not the Triton interpreter), a private cache.

    Line info is off because it embeds the absolute source path (our random staging dir) into every
    cubin, which would make two builds of the same source differ.
    """
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_DISABLE_LINE_INFO"] = "1"
    env["TRITON_CACHE_DIR"] = str(triton_cache)
    return env


def _run_python(python: str, code: str, cwd: Path, what: str, env: Mapping[str, str]) -> str:
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
    out = _run_python(python, code, variant_dir, f"importing {package} to read its API", env)
    return json.loads(out.strip().splitlines()[-1])


_AOT_SCRIPT = """
import json, sys
sys.path.insert(0, ".")
from {pkg}.triton import aot
written = aot.compile_all({out!r}, {arch!r}, {triton!r}, **{kwargs!r})
print(json.dumps(len(written)))
"""


def compile_cubins(
    variant_dir: Path,
    package: str,
    archs: list[str],
    triton_version: str,
    python: str,
    env: Mapping[str, str],
    log: Log,
    aot_kwargs: Mapping | None = None,
) -> tuple[list[str], list[str]]:
    """AOT-compile the package's Triton kernels per arch via `<package>.triton.aot.compile_all` (no GPU needed).

    Returns (the SASS arch each folder really holds, notes). `aot_kwargs` go to compile_all as is (e.g.
    `dtypes`, `kernels`, `jobs`: narrower builds for tests).
    """
    out_dir = variant_dir / package / "triton" / "cubins"
    shipped, notes = [], []
    cuobjdump = triton_cuobjdump(python)
    for arch in archs:
        code = _AOT_SCRIPT.format(
            pkg=package, out=str(out_dir), arch=arch, triton=triton_version, kwargs=dict(aot_kwargs or {})
        )
        n = json.loads(
            _run_python(python, code, variant_dir, f"AOT compile for {arch}", env).strip().splitlines()[-1]
        )
        if not n:
            raise BuildError(
                f"aot.compile_all wrote no cubins for {arch}: the kernel package ships no AOT specs"
            )
        actual, note = shipped_arch(out_dir / triton_version / arch, arch, cuobjdump)
        shipped.append(actual)
        notes += [note] if note else []
        log(f"  {arch}: {n} files ({actual} SASS)")
    return shipped, notes


@dataclass(frozen=True)
class BuildOptions:
    """How to build (as opposed to what: that is the matrix)."""

    aot: bool = True
    aot_archs: tuple[str, ...] | None = None  # None: every arch of the matrix
    aot_kwargs: Mapping = field(default_factory=dict)  # forwarded to compile_all (dtypes, kernels, jobs)
    require_cuda: bool = False
    version: int = 1
    python: str = sys.executable
    log: Log = print


def build(
    source: Path,
    out: Path,
    matrix_path: Path,
    *,
    only: list[str] | None = None,
    options: BuildOptions | None = None,
    **option_values,
) -> BuildResult:
    """Build every planned variant of `source` into `out/build/<variant>/`, replacing `out` atomically.

    Options come as a BuildOptions or as its fields by keyword (`aot=False`, `log=...`).
    """
    opts = options or BuildOptions(**option_values)
    source, out = Path(source).resolve(), Path(out).resolve()
    if not (source / "__init__.py").is_file():
        raise BuildError(
            f"{source} is not a Python package (no __init__.py): pass --source kernel_src/fused_mlp"
        )
    matrix = load_matrix(matrix_path)
    kernel = matrix.get("kernel", {"name": source.name.replace("_", "-")})
    package = python_name(kernel["name"])
    if source.name != package:
        raise BuildError(
            f"source directory {source.name!r} must be named after the kernel ({package!r}), "
            "because variants ship it under that name"
        )
    plans = plan_variants(matrix)
    if only:
        unknown = set(only) - {p.name for p in plans}
        if unknown:
            raise BuildError(f"unknown variant(s) {sorted(unknown)}; known: {[p.name for p in plans]}")
        plans = [p for p in plans if p.name in only]
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.building-", dir=out.parent))
    try:
        with tempfile.TemporaryDirectory(prefix="kernel-hub-triton-cache-") as cache:
            ctx = _Context(
                source,
                kernel,
                package,
                provenance(*git_state(source)),
                opts,
                build_env(Path(cache)),
                matrix,
                Path(matrix_path),
            )
            results = [_build_variant(plan, staging / "build" / plan.name, ctx) for plan in plans]
        if out.exists():
            shutil.rmtree(out)
        staging.rename(out)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    for r in results:
        r.path = out / "build" / r.name if r.status == "built" else None
    return BuildResult(out=out, variants=results)


@dataclass
class _Context:
    source: Path
    kernel: Mapping
    package: str
    provenance: Mapping
    opts: BuildOptions
    env: dict[str, str]
    matrix: Mapping
    matrix_path: Path
    api: dict | None = None  # read once, from the first variant built: every variant ships the same API


def _build_variant(plan: VariantPlan, vdir: Path, ctx: _Context) -> VariantResult:
    """Stage the package, fix the build identity from its content, compile what the kind needs, write metadata."""
    opts, log = ctx.opts, ctx.opts.log
    notes: list[str] = []
    params: dict = {"archs": list(plan.archs), "ptx": list(plan.ptx), "torch_target": plan.torch_target}
    aot_archs: list[str] = []
    installed = None
    recipe: ModuleType | str | None = None
    if plan.kind == "cuda":
        recipe = cuda_recipe(ctx.matrix_path)
        unavailable = recipe if isinstance(recipe, str) else recipe.cuda_unavailable_reason(None)
        if unavailable:
            if opts.require_cuda:
                raise BuildError(f"[{plan.name}] cannot build the CUDA variant: {unavailable}")
            log(f"[{plan.name}] skipped: {unavailable}")
            return VariantResult(plan.name, None, "skipped", [unavailable])
    if plan.kind == "triton":
        installed = installed_triton_version(opts.python)
        wanted = selected_archs(plan, opts.aot_archs)
        do_aot, why = aot_decision(plan, installed, opts.aot, wanted)
        aot_archs = wanted if do_aot else []
        notes.append(why)
        log(f"[{plan.name}] {why}")
        params["aot"] = {"triton": installed, "archs": aot_archs, **dict(opts.aot_kwargs)} if do_aot else None

    copy_package(ctx.source, vdir / ctx.package, include_cuda=plan.kind == "cuda")
    chash = content_hash(
        plan.name, {**digest.hash_variant(vdir), "<params>": json.dumps(params, sort_keys=True)}
    )
    ident, ops_ns = build_identity(ctx.kernel["name"], plan.name, chash)
    info = vdir / ctx.package / "_build_info.py"
    info.write_text(rewrite_build_info(info.read_text(), ops_ns, ident))

    sass_archs: list[str] = []
    triton_versions: list[str] = []
    if plan.kind == "cuda":
        log(f"[{plan.name}] compiling the CUDA extension for {', '.join(plan.archs)} (takes minutes)")
        notes += build_cuda(recipe, vdir, ctx.package, ctx.matrix, ctx.matrix_path.parent / "_work" / "cuda")
        sass_archs = list(plan.archs)
    if aot_archs:
        sass_archs, arch_notes = compile_cubins(
            vdir, ctx.package, aot_archs, installed, opts.python, ctx.env, log, opts.aot_kwargs
        )
        triton_versions = [installed]
        cubins = list((vdir / ctx.package / "triton" / "cubins").rglob("*.cubin"))
        notes += [f"{len(cubins)} AOT cubins for triton {installed}", *arch_notes]
    if ctx.api is None:
        ctx.api = read_api(vdir, ctx.package, opts.python, ctx.env)
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
    (vdir / "metadata.json").write_bytes(metadata_bytes(meta))
    log(f"[{plan.name}] built {ident}: {len(files)} files")
    return VariantResult(plan.name, vdir, "built", notes)


def cuda_recipe(matrix_path: Path) -> ModuleType | str:
    """The CUDA build recipe `build/cuda/build_variant.py` beside the matrix, or why it cannot be used."""
    path = Path(matrix_path).resolve().parent / "cuda" / "build_variant.py"
    if not path.is_file():
        return f"the CUDA build recipe {path} is missing"
    spec = importlib.util.spec_from_file_location("kernel_hub_cuda_build_variant", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses in the recipe look their module up there
    spec.loader.exec_module(module)
    return module


def build_cuda(recipe: ModuleType, vdir: Path, package: str, matrix: Mapping, scratch: Path) -> list[str]:
    """Compile the CUDA extension into the staged package (after its OPS_NAMESPACE is fixed); return notes."""
    try:
        so = recipe.build_cuda_variant(vdir / package, scratch, dict(matrix), None)
    except (recipe.CudaBuildUnavailable, recipe.CudaBuildError) as e:
        raise BuildError(f"CUDA extension build failed: {e}") from None
    record = json.loads((Path(so).parent / "build.json").read_text())
    checks = record.get("checks", [])
    note = (
        f"CUDA extension {Path(so).name} for {', '.join(record.get('archs', []))} "
        f"(PTX: {', '.join(record.get('ptx', [])) or 'none'}); "
        f"{sum(c['ok'] for c in checks)}/{len(checks)} ABI/arch checks passed"
    )
    return [note]
