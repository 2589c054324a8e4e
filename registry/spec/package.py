"""A kernel package's `build.toml`: kernel-builder's format where it applies, plus what kernel-hub's build adds.

kernel-builder's keys: `[general]` name, backends, python-depends; `[torch]` src (the C++ op bindings);
`[kernel.<name>]` backend, src, cuda-capabilities, depends (paths relative to the folder of build.toml).
kernel-hub's, under `[kernel-hub]`: `ops` (the public API the check compares, the package's `__all__`),
`reference` (the module of eager implementations: the check's oracle and the fallback), `package` (the
Python package's folder), `license`, `matrix` (take the variants from a build/matrix.toml instead),
`torch-target` / `cuda` (the stable-ABI extension's torch and CUDA), and `[kernel-hub.triton]`: `aot` (the
package module whose `compile_all(out, arch, triton_version)` writes cubins per arch), `archs`, `versions`.
Without `matrix`, the variants follow from the file: `torch-cuda` (Triton, AOT cubins per arch) when it has
`[kernel-hub.triton]`, the stable-ABI CUDA variant when a `[kernel.*]` has backend "cuda", and always
`torch-cpu` / `torch-universal` (added by the builder). docs/CONTRACTS.md "build.toml".
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .arch import parse_arch, parse_sm
from .build_matrix import MatrixConfigError, VariantSpec
from .names import is_module_name, python_name

BUILD_TOML = "build.toml"
TRITON_VARIANT = "torch-cuda"
DEFAULT_TORCH_TARGET = "2.11"
DEFAULT_CUDA = "13.0"
_NAME = re.compile(r"[a-z][a-z0-9-]*")


class PackageConfigError(MatrixConfigError):
    """build.toml is missing, not TOML, or has a malformed entry; the message names the key and the fix."""


@dataclass(frozen=True)
class CudaKernel:
    """One `[kernel.<name>]` table: the sources of one backend and the archs they are compiled for."""

    name: str
    backend: str
    src: tuple[str, ...]
    capabilities: tuple[str, ...] = ()  # kernels' notation, "9.0a", "12.0+PTX"
    depends: tuple[str, ...] = ()


@dataclass(frozen=True)
class KernelPackage:
    """A parsed build.toml and where its files are."""

    root: Path  # the folder of build.toml (kernel-builder's source paths are relative to it)
    package_dir: Path  # the Python package that ships in every variant
    name: str
    backends: tuple[str, ...]
    python_depends: tuple[str, ...] = ()
    license: str = "apache-2.0"
    torch_src: tuple[str, ...] = ()
    kernels: tuple[CudaKernel, ...] = ()
    ops: tuple[str, ...] = ()
    reference: str = "reference"
    matrix: str | None = None
    torch_target: str = DEFAULT_TORCH_TARGET
    cuda: str = DEFAULT_CUDA
    triton: Mapping = field(default_factory=dict)  # [kernel-hub.triton]: aot, archs, versions

    @property
    def python_name(self) -> str:
        return python_name(self.name)

    @property
    def cuda_kernels(self) -> tuple[CudaKernel, ...]:
        return tuple(k for k in self.kernels if k.backend == "cuda")

    @property
    def cuda_sources(self) -> list[Path]:
        """Every C++/CUDA source of the extension (torch bindings first), as absolute paths."""
        rels = [*self.torch_src, *(s for k in self.cuda_kernels for s in k.src)]
        return [self.root / r for r in rels]

    @property
    def aot_module(self) -> str | None:
        return self.triton.get("aot")

    @property
    def stable_abi_variant(self) -> str:
        """kernels' name of a torch stable-ABI build: `torch-stable-abi211-cu130-x86_64-linux`."""
        target = self.torch_target.replace(".", "")
        return f"torch-stable-abi{target}-cu{self.cuda.replace('.', '')}-x86_64-linux"

    def variants(self) -> list[VariantSpec]:
        """The GPU variants the file implies (the builder adds torch-cpu and torch-universal)."""
        out = []
        if self.triton:
            out.append(
                VariantSpec(
                    name=TRITON_VARIANT,
                    kind="triton",
                    backend="cuda",
                    archs=tuple(self.triton.get("archs", ())),
                    triton=tuple(self.triton.get("versions", ())),
                )
            )
        if self.cuda_kernels:
            caps = [c for k in self.cuda_kernels for c in k.capabilities]
            archs = list(dict.fromkeys(capability_arch(c)[0] for c in caps))
            ptx = list(dict.fromkeys(a for a, p in map(capability_arch, caps) if p))
            out.append(
                VariantSpec(
                    name=self.stable_abi_variant,
                    kind="cuda",
                    backend="cuda",
                    archs=tuple(archs),
                    ptx=tuple(ptx),
                    torch_target=self.torch_target,
                    table={"cuda": self.cuda, "torch_target": self.torch_target},
                )
            )
        return out


def capability_arch(capability: str) -> tuple[str, bool]:
    """("sm_90a", ptx?) for kernel-builder's cuda-capabilities entry "9.0a" ("12.0+PTX" -> ("sm_120", True))."""
    dotted, plus, rest = capability.partition("+")
    try:
        arch = parse_arch(dotted)
    except ValueError:
        arch = None
    if arch is None or arch.dotted() != dotted or (plus and rest != "PTX"):
        raise PackageConfigError(
            f"cuda-capabilities entry {capability!r} is not like '8.0', '9.0a' or '12.0+PTX'"
        )
    return arch.name, bool(plus)


def _strings(table: Mapping, key: str, where: str) -> tuple[str, ...]:
    value = table.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise PackageConfigError(f"{where}: `{key}` must be a list of strings, not {value!r}")
    return tuple(value)


def _reference(hub: Mapping, where: str) -> str:
    """`[kernel-hub] reference`: a module name the loader can import (spelled as `import` takes it)."""
    name = hub.get("reference", "reference")
    if not is_module_name(name):
        raise PackageConfigError(
            f"{where}: [kernel-hub] reference must be a module of the package, e.g. 'reference', not {name!r}"
        )
    return name


def _module_file(package_dir: Path, module: str) -> bool:
    """Whether `module` (dotted, relative to the package) is a .py file or a package folder in `package_dir`."""
    path = package_dir.joinpath(*module.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def find_package_dir(root: Path, package: str, declared: str | None) -> Path:
    """The Python package: `[kernel-hub] package`, else `<root>/<package>/` (the python name), else `root` itself."""
    candidates = [root / declared] if declared else [root / package, root]
    for cand in candidates:
        if (cand / "__init__.py").is_file():
            return cand
    raise PackageConfigError(
        f"{root / BUILD_TOML}: no Python package for {package!r} (looked for __init__.py in "
        f"{', '.join(str(c) for c in candidates)}); set [kernel-hub] package = 'FOLDER'"
    )


def read_package(path: Path) -> KernelPackage:
    """Parse `path`/build.toml (or `path` itself when it is the file); PackageConfigError says what is wrong."""
    path = Path(path)
    toml = path if path.name == BUILD_TOML else path / BUILD_TOML
    try:
        data = tomllib.loads(toml.read_text())
    except FileNotFoundError:
        raise PackageConfigError(
            f"{toml} does not exist: a kernel package needs one (`kernel-hub init NAME` writes an example)"
        ) from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise PackageConfigError(f"{toml}: {e}") from None
    return parse_package(data, toml.parent.resolve(), str(toml))


def parse_package(data: Mapping, root: Path, where: str = BUILD_TOML) -> KernelPackage:
    """KernelPackage from parsed TOML; PackageConfigError names the first bad key."""
    general, torch, hub = data.get("general") or {}, data.get("torch") or {}, data.get("kernel-hub") or {}
    name = general.get("name")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise PackageConfigError(
            f"{where}: [general] name must be lower-case letters, digits and '-' (e.g. 'my-kernel'), not {name!r}"
        )
    kernels = []
    for kname, table in sorted((data.get("kernel") or {}).items()):
        kw = f"{where}: [kernel.{kname}]"
        backend = table.get("backend", "cuda")
        caps = _strings(table, "cuda-capabilities", kw)
        if backend == "cuda" and not caps and not hub.get("matrix"):
            raise PackageConfigError(f"{kw}: a CUDA kernel needs cuda-capabilities, e.g. ['8.0', '9.0a']")
        for cap in caps:
            capability_arch(cap)
        src = _strings(table, "src", kw)
        if not src:
            raise PackageConfigError(f"{kw}: `src` lists no source file")
        kernels.append(CudaKernel(kname, backend, src, caps, _strings(table, "depends", kw)))
    triton = hub.get("triton") or {}
    if not isinstance(triton, Mapping):
        raise PackageConfigError(
            f"{where}: [kernel-hub] triton must be a table ([kernel-hub.triton]), not {triton!r}"
        )
    triton = dict(triton)
    _strings(triton, "versions", f"{where}: [kernel-hub.triton]")
    for arch in _strings(triton, "archs", f"{where}: [kernel-hub.triton]"):
        try:
            parse_sm(arch)
        except ValueError as e:
            raise PackageConfigError(f"{where}: [kernel-hub.triton] archs: {e}") from None
    pkg = KernelPackage(
        root=root,
        package_dir=find_package_dir(root, python_name(name), hub.get("package")),
        name=name,
        backends=_strings(general, "backends", f"{where}: [general]"),
        python_depends=_strings(general, "python-depends", f"{where}: [general]"),
        license=hub.get("license", general.get("license", "apache-2.0")),
        torch_src=_strings(torch, "src", f"{where}: [torch]"),
        kernels=tuple(kernels),
        ops=_strings(hub, "ops", f"{where}: [kernel-hub]"),
        reference=_reference(hub, where),
        matrix=hub.get("matrix"),
        torch_target=str(hub.get("torch-target", DEFAULT_TORCH_TARGET)),
        cuda=str(hub.get("cuda", DEFAULT_CUDA)),
        triton=triton,
    )
    if "reference" in hub and not _module_file(pkg.package_dir, pkg.reference):
        raise PackageConfigError(
            f"{where}: [kernel-hub] reference {pkg.reference!r} is no module of {pkg.package_dir}: name the "
            "module of the package's eager ops (e.g. 'reference' for reference.py)"
        )
    missing = [str(p) for p in pkg.cuda_sources if not p.is_file()]
    if missing:
        raise PackageConfigError(f"{where}: source file(s) {', '.join(missing)} do not exist")
    if pkg.triton and not pkg.aot_module and pkg.triton.get("archs"):
        raise PackageConfigError(
            f"{where}: [kernel-hub.triton] lists archs but no `aot` module to compile them"
        )
    return pkg
