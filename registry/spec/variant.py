"""A build variant's `metadata.json` as a typed dataclass, its canonical bytes, and the paths of a variant.

`kernels` requires `id`, `name`, `version`, `license`, `python-depends` and `backend`; we add `archs`,
`triton`, `torch_stable_abi`, `api`, `checks`, `build`, `digest` and `provenance` (docs/CONTRACTS.md).
The builder writes it, the publisher sets `version` and signs the exact bytes, the loader and the
matrix read what fits where. Readers that must tolerate any bytes (a hub page, a refusal reason) use
`arch_targets` on the raw mapping; `VariantMetadata.from_json` is strict.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from registry.errors import KernelHubError

from .arch import SM_PATTERN, Arch, parse_arch

BUILD_DIR = "build"  # a version's variants are the folders build/<variant>/ of its commit
METADATA = "metadata.json"
SIGNATURE = "metadata.json.sig"
SIGSTORE = "metadata.json.sigstore"


# AOT cubins of one (Triton version, GPU arch): a bundle `<pkg>/triton/cubins/<triton>/<arch>.zip` (flat members
# `<kernel>-<hash>.cubin` + `.json`), or loose files `.../cubins/<triton>/<arch>/<file>` of older builds.
_CUBIN_FILE = re.compile(rf"(?:.+/)?cubins/(?P<triton>[^/]+)/(?P<arch>{SM_PATTERN})(?:\.zip|/[^/]+)")


def cubin_target(relpath: str) -> tuple[str, str] | None:
    """(Triton version, arch folder) of a variant file that holds AOT cubins of one arch, else None."""
    m = _CUBIN_FILE.fullmatch(relpath)
    return (m["triton"], m["arch"]) if m else None


# Build inputs a variant may ship for provenance (the CUDA variant's csrc/): compiled into its extension,
# never read at run time, so a loader need not download them (their digests stay in the signed list).
BUILD_SOURCE_SUFFIXES = (".c", ".cc", ".cpp", ".cu", ".cuh", ".h", ".hpp")


def build_source(relpath: str) -> bool:
    """Whether a variant file is C/C++/CUDA source: shipped, signed, not needed to run."""
    return relpath.endswith(BUILD_SOURCE_SUFFIXES)


class MetadataError(KernelHubError, ValueError):
    """A metadata.json that is not JSON or lacks / mangles a key; the message names it."""


def metadata_path(variant: str) -> str:
    """Repo path of a variant's metadata: `build/<variant>/metadata.json`."""
    return f"{BUILD_DIR}/{variant}/{METADATA}"


def variant_of(path: str) -> str | None:
    """The variant whose metadata.json `path` is (`build/<v>/metadata.json`), else None."""
    parts = path.split("/")
    return parts[1] if len(parts) == 3 and parts[0] == BUILD_DIR and parts[2] == METADATA else None


def metadata_bytes(meta: Mapping) -> bytes:
    """Canonical serialisation (sorted keys, fixed indent, trailing newline): same metadata, same bytes."""
    return (json.dumps(meta, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()


@dataclass(frozen=True)
class ArchEntry:
    """One entry of our `archs` key: the arch whose SASS the variant ships, and whether PTX too."""

    arch: str
    sass: bool = True
    ptx: bool = False


@dataclass(frozen=True)
class VariantMetadata:
    """metadata.json of one variant; `extra` keeps keys this version of kernel-hub does not know."""

    id: str
    name: str
    version: int
    backend: Mapping  # {"type": "cuda"|"cpu", "archs": ["9.0a", "8.0+PTX"]} in kernels' notation
    license: str = "apache-2.0"
    python_depends: tuple[str, ...] = ()
    archs: tuple[ArchEntry, ...] = ()
    triton: tuple[str, ...] | None = None  # Triton versions of shipped AOT cubins (Triton variants only)
    torch_stable_abi: str | None = None  # CUDA C++ variants only
    api: Mapping = field(default_factory=dict)  # {"__all__": [...], "signatures": {name: str}}
    checks: tuple = ()
    build: Mapping = field(default_factory=dict)  # {"variant", "kind", "notes"}
    digest: Mapping = field(default_factory=dict)  # {"algorithm": "sha256", "files": {relpath: base64}}
    provenance: Mapping = field(default_factory=dict)
    extra: Mapping = field(default_factory=dict)

    def to_json(self) -> dict:
        meta: dict = {
            **self.extra,
            "id": self.id,
            "name": self.name,
            "version": self.version,
            "license": self.license,
            "python-depends": list(self.python_depends),
            "backend": dict(self.backend),
            "archs": [{"arch": a.arch, "sass": a.sass, "ptx": a.ptx} for a in self.archs],
        }
        if self.triton is not None:
            meta["triton"] = list(self.triton)
        if self.torch_stable_abi is not None:
            meta["torch_stable_abi"] = self.torch_stable_abi
        meta.update(
            api=dict(self.api),
            checks=list(self.checks),
            build=dict(self.build),
            digest=dict(self.digest),
        )
        if self.provenance:  # kernels requires `kernel-builder` inside a `provenance` that is present
            meta["provenance"] = dict(self.provenance)
        return meta

    def to_bytes(self) -> bytes:
        return metadata_bytes(self.to_json())

    def write(self, variant_dir: Path) -> None:
        (Path(variant_dir) / METADATA).write_bytes(self.to_bytes())

    def with_version(self, version: int) -> VariantMetadata:
        return replace(self, version=version)

    @classmethod
    def from_json(cls, data: Mapping) -> VariantMetadata:
        """Strict: MetadataError naming the first missing or malformed key."""
        if not isinstance(data, Mapping):
            raise MetadataError(f"metadata.json must be a JSON object, not {type(data).__name__}")
        missing = [k for k in ("id", "name", "version", "backend") if k not in data]
        if missing:
            raise MetadataError(
                f"metadata.json lacks {', '.join(missing)}: rebuild it with `kernel-hub build`"
            )
        try:
            archs = tuple(
                ArchEntry(a["arch"], bool(a.get("sass", True)), bool(a.get("ptx", False)))
                for a in data.get("archs") or []
            )
        except (KeyError, TypeError, AttributeError) as e:
            raise MetadataError(f"metadata.json `archs` is malformed ({e!r})") from None
        known = {f for f in cls.__dataclass_fields__} | {"python-depends"}
        triton = data.get("triton")
        return cls(
            id=data["id"],
            name=data["name"],
            version=data["version"],
            backend=dict(data["backend"]),
            license=data.get("license", "apache-2.0"),
            python_depends=tuple(data.get("python-depends") or ()),
            archs=archs,
            triton=None if triton is None else tuple(triton),
            torch_stable_abi=data.get("torch_stable_abi"),
            api=dict(data.get("api") or {}),
            checks=tuple(data.get("checks") or ()),
            build=dict(data.get("build") or {}),
            digest=dict(data.get("digest") or {}),
            provenance=dict(data.get("provenance") or {}),
            extra={k: v for k, v in data.items() if k not in known},
        )

    @classmethod
    def read(cls, variant_dir: Path) -> VariantMetadata:
        """The metadata.json in `variant_dir`; MetadataError when it is not valid JSON or malformed."""
        path = Path(variant_dir) / METADATA
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as e:
            raise MetadataError(f"{path} is not JSON ({e})") from None
        return cls.from_json(data)


@dataclass(frozen=True)
class ArchTarget:
    """Which code a build holds for one arch: both arch keys of metadata.json merged."""

    arch: Arch
    sass: bool
    ptx: bool


def arch_targets(metadata: Mapping) -> list[ArchTarget]:
    """Our `archs` ([{"arch", "sass", "ptx"}]) merged with kernels' `backend.archs` ("9.0a", "8.0+PTX").

    Raises ValueError, KeyError or TypeError on malformed entries (the caller names the variant).
    """
    merged: dict[Arch, tuple[bool, bool]] = {}

    def add(arch: Arch, sass: bool, ptx: bool) -> None:
        old_sass, old_ptx = merged.get(arch, (False, False))
        merged[arch] = (old_sass or sass, old_ptx or ptx)

    for entry in metadata.get("archs") or []:
        add(parse_arch(entry["arch"]), bool(entry.get("sass", True)), bool(entry.get("ptx", False)))
    for text in (metadata.get("backend") or {}).get("archs") or []:
        name, plus, tail = text.partition("+")
        if plus and tail.upper() != "PTX":
            raise ValueError(f"backend arch {text!r}: only a '+PTX' suffix is understood")
        add(parse_arch(name), True, bool(plus))
    return [ArchTarget(arch, sass, ptx) for arch, (sass, ptx) in sorted(merged.items())]
