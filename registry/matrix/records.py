"""Recorded real checks: what `kernel-hub matrix --check` stores on a repo's `compat` branch.

One JSON file per (commit, environment fingerprint) at `checks/<commit>/<fingerprint>.json`, so a
check belongs to exactly the commit it ran against and a re-run on the same machine replaces its
own file. Pure: building, naming, parsing and matching records; the hub I/O lives in `store.py`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from registry.client.resolve import Env, fingerprint
from registry.errors import KernelHubError

from .config import MatrixEnv

SCHEMA = 1
CHECKS_DIR = "checks"


def record_path(commit: str, fp: str) -> str:
    return f"{CHECKS_DIR}/{commit}/{fp}.json"


def commit_dir(commit: str) -> str:
    return f"{CHECKS_DIR}/{commit}"


def _minor(version: str | None) -> str | None:
    """ "2.11.0+cu130" -> "2.11"; None stays None."""
    if not version:
        return None
    return ".".join(version.split("+")[0].split(".")[:2])


@dataclass(frozen=True)
class CheckRecord:
    """One real check: which path the loader took on a machine and whether it matched eager PyTorch."""

    env: Env
    repo: str
    version: int
    commit: str
    variant: str | None  # None when the loader fell back
    source: str  # "hub" | "fallback-compile" | "fallback-eager"
    reason: str | None  # why the loader fell back (None on the hub path)
    passed: bool
    max_error: Mapping[str, float]  # op/dtype -> relative error; empty when nothing ran
    detail: str  # what the check says in one line (failures: the error)
    checked_at: str  # ISO-8601 UTC
    duration_s: float

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.env)

    def to_json(self) -> dict:
        data = dataclasses.asdict(self)
        data["schema"] = SCHEMA
        data["fingerprint"] = self.fingerprint
        return data

    def matches(self, env: MatrixEnv) -> bool:
        """Whether this machine is an instance of the promised environment (versions by major.minor)."""
        e = self.env
        return (
            e.gpu_arch == env.gpu_arch
            and _minor(e.torch) == env.torch
            and _minor(e.cuda) == env.cuda
            and e.python == env.python
            and e.cpu == env.cpu
            and e.os == env.os
        )

    def matrix_env(self) -> MatrixEnv | None:
        """The MatrixEnv this machine would be, or None without a GPU/torch/CUDA (a CPU runner)."""
        e = self.env
        if not (e.gpu_arch and e.torch and e.cuda):
            return None
        return MatrixEnv(e.gpu_arch, _minor(e.torch), _minor(e.cuda), e.python, e.cpu, e.os)


class RecordError(KernelHubError, ValueError):
    """A file on the compat branch is not a check record this version understands."""

    exit_code = 2  # `kernel-hub matrix`: a source error


def parse_record(data: Mapping) -> CheckRecord:
    """CheckRecord from its JSON; raises RecordError saying which key is wrong."""
    if data.get("schema") != SCHEMA:
        raise RecordError(
            f"check record schema {data.get('schema')!r} is not {SCHEMA}; re-run `kernel-hub matrix --check`"
        )
    try:
        env = Env(**data["env"])
        return CheckRecord(
            env=env,
            repo=str(data["repo"]),
            version=int(data["version"]),
            commit=str(data["commit"]),
            variant=data["variant"],
            source=str(data["source"]),
            reason=data.get("reason"),
            passed=bool(data["passed"]),
            max_error={str(k): float(v) for k, v in (data.get("max_error") or {}).items()},
            detail=str(data.get("detail", "")),
            checked_at=str(data["checked_at"]),
            duration_s=float(data["duration_s"]),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise RecordError(f"check record is malformed ({type(e).__name__}: {e})") from None
