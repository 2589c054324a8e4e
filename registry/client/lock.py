"""`kernels.lock`: the commit each kernel dependency of a project is pinned to, in stock `kernels`' format.

The file is what `kernels lock` writes and `kernels.get_locked_kernel` / `load_kernel` / `kernels download`
read (a JSON list of `{"dependency": {"repo-id", "version"}, "lock": {"commit"}}`); both directions go
through kernels' own `KernelLocks`, so the two tools accept each other's files. `get_kernel(...,
lockfile=PATH)` takes the commit from it and asks the hub nothing about versions.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from registry.errors import KernelHubError

from .fetch import Hub, resolve_commit

if TYPE_CHECKING:
    from kernels._rust import KernelVersion

LOCK_FILE = "kernels.lock"


class LockError(KernelHubError, ValueError):
    """A lock file that is missing, malformed, or does not lock the kernel asked for; the message says which."""


def project_dependencies(project_dir: Path) -> dict[str, int]:
    """`[tool.kernels.dependencies]` of `project_dir/pyproject.toml` (repo id -> version), as `kernels lock` reads it."""
    path = Path(project_dir) / "pyproject.toml"
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise LockError(f"{path} does not exist: name the kernels with --kernel REPO=N instead") from None
    except tomllib.TOMLDecodeError as e:
        raise LockError(f"{path} is not valid TOML: {e}") from None
    deps = data.get("tool", {}).get("kernels", {}).get("dependencies")
    if not isinstance(deps, dict) or not deps:
        raise LockError(
            f'{path} has no [tool.kernels.dependencies] (e.g. "org/fused-mlp" = 1): add it, or name the '
            "kernels with --kernel REPO=N"
        )
    bad = [f"{k} = {v!r}" for k, v in deps.items() if not isinstance(v, int) or isinstance(v, bool) or v < 0]
    if bad:
        raise LockError(
            f"{path}: each kernel dependency needs a version number N (branch vN): {', '.join(bad)}"
        )
    return dict(deps)


def lock_text(hub: Hub, dependencies: Mapping[str, int]) -> str:
    """The `kernels.lock` text pinning each `repo id -> version` to the commit its branch vN is at now."""
    from kernels._rust import KernelDependency, KernelLock, KernelLocks, KernelVersion  # 0.2 s: on use only

    locks = {
        KernelDependency(repo_id=repo, version=KernelVersion.Version(version)): KernelLock(
            commit=resolve_commit(hub, repo, version, None)
        )
        for repo, version in sorted(dependencies.items())
    }
    return KernelLocks(locks=locks).to_json() + "\n"


def locked_commit(lockfile: Path, repo_id: str, version: int | None = None) -> str:
    """The commit `lockfile` pins `repo_id` to; LockError when it is not locked there (or for another version)."""
    from kernels._rust import (  # importing kernels costs 0.2 s: only with a lockfile
        KernelLocks,
        KernelVersion,
    )

    path = Path(lockfile)
    try:
        locks = KernelLocks.from_json(path.read_text())
    except OSError as e:
        raise LockError(f"cannot read lock file {path}: {e}") from None
    except ValueError as e:
        raise LockError(f"{path} is not a kernels.lock file: {e}") from None
    found = [(dep, lock) for dep, lock in locks.items() if dep.repo_id == repo_id]
    if not found:
        locked = ", ".join(sorted(dep.repo_id for dep in locks)) or "nothing"
        raise LockError(
            f"{repo_id} is not locked in {path} (it locks {locked}): add it to the project's "
            "[tool.kernels.dependencies] and run `kernel-hub lock` again"
        )
    dep, lock = found[0]
    pinned = dep.version.version if isinstance(dep.version, KernelVersion.Version) else None
    if version is not None and pinned != version:
        raise LockError(
            f"{path} locks {repo_id} at {_spec(dep.version)}, not version {version}: ask for the locked "
            "version or lock the project again"
        )
    return lock.commit


def _spec(version: KernelVersion) -> str:
    from kernels._rust import KernelVersion

    if isinstance(version, KernelVersion.Version):
        return f"version {version.version}"
    return f"revision {version.revision}"
