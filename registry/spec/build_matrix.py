"""`build/matrix.toml`, read once: what we build (`[variants]`) and the rest of the file for its owners.

The file is the one source of truth for the variants (kind, archs, PTX, Triton versions, torch target),
the promised environments (`[environments]`, read by `registry.matrix.config`) and the CI runners.
Where it is: `--matrix PATH`, else `build/matrix.toml` in the working directory or the nearest parent
that has one (a checkout, run from any of its folders). Never relative to where kernel-hub is installed.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from registry.errors import KernelHubError

from .arch import parse_sm

MATRIX_FILE = Path("build") / "matrix.toml"
VARIANT_KINDS = ("triton", "cuda")


class MatrixConfigError(KernelHubError, ValueError):
    """build/matrix.toml is missing, not TOML, or has a malformed entry; the message names it."""

    exit_code = 2  # a usage error, like a bad command line


@dataclass(frozen=True)
class VariantSpec:
    """What to build for one variant: a `[variants.NAME]` table (or implied, for the CPU variants)."""

    name: str
    kind: str  # "triton" | "cuda" | "reference" (the implied CPU builds)
    backend: str  # metadata backend.type: "cuda" | "cpu"
    archs: tuple[str, ...] = ()  # sm_XY[a|f]
    ptx: tuple[str, ...] = ()  # archs that also ship PTX
    triton: tuple[str, ...] = ()  # Triton versions AOT cubins are built for
    torch_target: str | None = None  # torch stable-ABI target of a CUDA build ("2.11")
    table: Mapping = field(default_factory=dict, compare=False)  # the table as written (e.g. `cuda`)


@dataclass(frozen=True)
class BuildMatrix:
    """The parsed file: its `[kernel]`, its variants, and the whole TOML for the sections others own."""

    path: Path | None
    kernel: Mapping
    variants: tuple[VariantSpec, ...]
    data: Mapping

    def variant(self, name: str) -> VariantSpec:
        for v in self.variants:
            if v.name == name:
                return v
        raise MatrixConfigError(
            f"{self.where}: no [variants.{name}]; known: {[v.name for v in self.variants]}"
        )

    @property
    def where(self) -> str:
        return str(self.path) if self.path else "build/matrix.toml"


def find_matrix(path: Path | None = None) -> Path:
    """`path` when given, else ./build/matrix.toml or the nearest parent folder's; MatrixConfigError if none."""
    if path is not None:
        return Path(path)
    cwd = Path.cwd()
    for folder in (cwd, *cwd.parents):
        if (folder / MATRIX_FILE).is_file():
            return folder / MATRIX_FILE
    raise MatrixConfigError(
        f"no {MATRIX_FILE} in {cwd} or its parent folders; pass --matrix PATH to build/matrix.toml"
    )


def read_toml(path: Path | None = None) -> tuple[Path, dict]:
    """(where, parsed TOML) of the matrix file that `find_matrix(path)` names."""
    where = find_matrix(path)
    try:
        with open(where, "rb") as f:
            return where, tomllib.load(f)
    except FileNotFoundError:
        raise MatrixConfigError(
            f"matrix file {where} does not exist; pass --matrix PATH to build/matrix.toml"
        ) from None
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise MatrixConfigError(f"matrix file {where}: {e}") from None


def read_matrix(path: Path | None = None) -> BuildMatrix:
    """Find, read and parse the matrix file (see `find_matrix`)."""
    where, data = read_toml(path)
    return parse_matrix(data, where)


def parse_matrix(data: Mapping, path: Path | None = None) -> BuildMatrix:
    """BuildMatrix from parsed TOML; MatrixConfigError names a variant of unknown kind or a bad arch."""
    where = str(path) if path else "build/matrix.toml"
    variants = []
    for name, table in sorted((data.get("variants") or {}).items()):
        kind = table.get("kind")
        if kind not in VARIANT_KINDS:
            raise MatrixConfigError(f"{where}: variant {name!r} has kind {kind!r}; use 'triton' or 'cuda'")
        archs, ptx = tuple(table.get("archs", ())), tuple(table.get("ptx", ()))
        for arch in archs + ptx:
            try:
                parse_sm(arch)
            except ValueError as e:
                raise MatrixConfigError(f"{where}: [variants.{name}]: {e}") from None
        variants.append(
            VariantSpec(
                name=name,
                kind=kind,
                backend=table.get("backend", "cuda"),
                archs=archs,
                ptx=ptx,
                triton=tuple(table.get("triton", ())),
                torch_target=table.get("torch_target"),
                table=dict(table),
            )
        )
    kernel = data.get("kernel") or {}
    return BuildMatrix(path, kernel, tuple(variants), data)


PROMISE_KEY = "promise"  # metadata.json key: the environments the version was built to serve


def promise_of(data: Mapping) -> dict | None:
    """What a build promises, for every variant's metadata.json: the matrix file's `[environments]`; None
    without one. The same bytes whichever variants one build makes (builds are reproducible per variant):
    readers promise the GPU rows when the version has a CUDA variant, the CPU rows when it has a CPU one.

    `kernel-hub matrix` and the hub's pages read it from the published version, so they need no checkout.
    """
    envs = data.get("environments")
    if not isinstance(envs, Mapping):
        return None
    return {"environments": json.loads(json.dumps(envs))}
