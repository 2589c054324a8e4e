"""The environments `build/matrix.toml` promises to serve: parsed once, expanded into `MatrixEnv`s.

Pure: `parse_config` takes the parsed TOML mapping; only `load_config` reads a file. The axes of
`[environments]` (gpu_arch, torch, cuda, python, cpu, os) form a cartesian product, minus every
`[[environments.exclude]]` entry whose listed axes all match (each entry says why).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from registry.client.resolve import Env
from registry.spec.build_matrix import PROMISE_KEY, MatrixConfigError, read_toml

__all__ = [
    "AXES",
    "CPU_ROW",
    "MatrixConfig",
    "MatrixConfigError",
    "MatrixEnv",
    "load_config",
    "parse_config",
    "promised_config",
]

AXES = ("gpu_arch", "torch", "cuda", "python", "cpu", "os")
UNKNOWN_TRITON = "unknown"


@dataclass(frozen=True, order=True)
class MatrixEnv:
    """One promised environment: the axes of `[environments]` (major.minor versions)."""

    gpu_arch: str
    torch: str
    cuda: str
    python: str
    cpu: str
    os: str

    def to_env(self, triton: str) -> Env:
        """The loader's `Env` for this environment (driver assumed new enough for `cuda`)."""
        return Env(self.os, self.cpu, self.python, self.torch, self.cuda, self.gpu_arch, triton)


@dataclass(frozen=True)
class Exclude:
    """Environments left out of the promise: every listed axis must match one of its values."""

    match: Mapping[str, tuple[str, ...]]
    reason: str

    def covers(self, env: MatrixEnv) -> bool:
        return all(getattr(env, axis) in values for axis, values in self.match.items())


CPU_ROW = "cpu"  # gpu_arch of a CPU row: a machine without a CUDA device, served by the CPU build
NO_CUDA = "-"


@dataclass(frozen=True)
class MatrixConfig:
    axes: Mapping[str, tuple[str, ...]]
    excludes: tuple[Exclude, ...]
    triton_for_torch: Mapping[str, str]
    gpu: bool = True  # the GPU product of the axes is promised
    cpu_rows: bool = False  # machines without a GPU are promised too (torch x python x cpu x os)

    def triton_for(self, torch: str) -> str:
        """Triton version the torch minor pins, or "unknown" (then only JIT, never an AOT cubin, fits)."""
        return self.triton_for_torch.get(torch, UNKNOWN_TRITON)

    def environments(self) -> list[MatrixEnv]:
        """Every promised environment, sorted: the product of the axes minus the excludes."""
        envs = (MatrixEnv(*combo) for combo in itertools.product(*(self.axes[a] for a in AXES)))
        out = sorted(e for e in envs if not any(x.covers(e) for x in self.excludes)) if self.gpu else []
        if self.cpu_rows:
            a = self.axes
            out += sorted(
                MatrixEnv(CPU_ROW, t, NO_CUDA, py, cpu, os_)
                for t, py, cpu, os_ in itertools.product(a["torch"], a["python"], a["cpu"], a["os"])
            )
        return out

    def excluded_by(self, env: MatrixEnv) -> str | None:
        """Reason of the first exclude that covers `env`, None when `env` is promised."""
        return next((x.reason for x in self.excludes if x.covers(env)), None)


def _strings(value: object, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise MatrixConfigError(
            f"build/matrix.toml: {where} must be a non-empty list of strings, got {value!r}"
        )
    return tuple(value)


def parse_config(data: Mapping) -> MatrixConfig:
    """MatrixConfig from the parsed TOML of build/matrix.toml; raises MatrixConfigError naming the bad key."""
    envs = data.get("environments")
    if not isinstance(envs, Mapping):
        raise MatrixConfigError(
            "build/matrix.toml has no [environments] table; add one with the axes " + ", ".join(AXES)
        )
    missing = [a for a in AXES if a not in envs]
    if missing:
        raise MatrixConfigError(
            f"build/matrix.toml: [environments] lacks {', '.join(missing)}; every axis needs a list"
        )
    axes = {a: _strings(envs[a], f"[environments].{a}") for a in AXES}
    excludes = []
    for i, entry in enumerate(envs.get("exclude", [])):
        where = f"[[environments.exclude]] #{i + 1}"
        reason = entry.get("reason")
        if not isinstance(reason, str) or not reason:
            raise MatrixConfigError(
                f"build/matrix.toml: {where} needs a `reason` saying why it is not served"
            )
        unknown = set(entry) - set(AXES) - {"reason"}
        if unknown:
            raise MatrixConfigError(
                f"build/matrix.toml: {where} has unknown keys {sorted(unknown)}; use {AXES}"
            )
        match = {a: _strings(v, f"{where}.{a}") for a, v in entry.items() if a != "reason"}
        excludes.append(Exclude(match, reason))
    triton = dict(envs.get("triton_for_torch", {}))
    return MatrixConfig(axes, tuple(excludes), triton)


def promised_config(variants: Mapping[str, Mapping]) -> MatrixConfig | None:
    """The environments a published version promises (`promise` in its metadata.json, written by
    `kernel-hub build`), None for a version built before builds recorded it (then build/matrix.toml says)."""
    types = {(m.get("backend") or {}).get("type") for m in variants.values() if isinstance(m, Mapping)}
    for meta in variants.values():
        promise = meta.get(PROMISE_KEY) if isinstance(meta, Mapping) else None
        if isinstance(promise, Mapping) and isinstance(promise.get("environments"), Mapping):
            config = parse_config({"environments": promise["environments"]})
            # GPU rows where the version has a CUDA build, CPU rows where it has a CPU one
            return dataclasses.replace(
                config, gpu="cuda" in types, cpu_rows=bool(types & {"cpu", "universal"})
            )
    return None


def load_config(path: Path | None = None) -> MatrixConfig:
    """Read and parse build/matrix.toml (`path`, else the one `registry.spec.build_matrix.find_matrix` finds)."""
    return parse_config(read_toml(path)[1])
