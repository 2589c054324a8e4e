"""Names every part must spell alike: the repo type, version branches, commit ids.

A kernel version N is the branch `vN`. `kernels` reads `int(name[1:])` of branches starting with `v`,
so only the canonical `v(0|[1-9][0-9]*)` counts: `v01` would collide with `v1` and `v1_0` mean 10
(docs/HUB_PROTOCOL.md). The hub refuses other version-like branches; readers ignore them.
"""

from __future__ import annotations

import calendar
import re
import time

KERNEL_REPO_TYPE = "kernel"
VERSION_BRANCH = re.compile(r"v(0|[1-9][0-9]*)")
# A branch that looks like a version (`v` + digit) must be a canonical one.
VERSION_LIKE = re.compile(r"v[0-9].*")
COMMIT = re.compile(r"[0-9a-f]{40}")  # a full commit id, as git and the HF API write it
COMPAT_BRANCH = "compat"  # recorded real checks of the compatibility matrix live on this branch


def is_commit(value: str) -> bool:
    """True for a full 40-hex commit id (lowercase); False for an abbreviation, a branch, a trailing newline."""
    return COMMIT.fullmatch(value) is not None


def is_version_branch(name: str) -> bool:
    """True for `v0`, `v1`, `v12`; False for `v01`, `v1_0`, `main`."""
    return VERSION_BRANCH.fullmatch(name) is not None


def version_of(branch: str) -> int | None:
    """N of a canonical version branch `vN`, None for any other branch name."""
    return int(branch[1:]) if is_version_branch(branch) else None


def version_branch(version: int) -> str:
    """The branch `kernels` resolves `version=N` to; ValueError for anything but an int >= 0."""
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
        raise ValueError(f"version must be a non-negative integer, got {version!r}")
    return f"v{version}"


def python_name(kernel_name: str) -> str:
    """The package a kernel's variants ship and `kernels` imports: metadata `name` with '-' -> '_'."""
    return kernel_name.replace("-", "_")


def is_module_name(name: object) -> bool:
    """True for a module path `import` takes (`reference`, `ops.eager`); metadata `api.reference` must be one."""
    return isinstance(name, str) and all(part.isidentifier() for part in name.split("."))


def versions(branches: dict[str, str]) -> dict[int, str]:
    """N -> commit for every canonical `vN` among `branches` (name -> commit)."""
    return {n: commit for name, commit in branches.items() if (n := version_of(name)) is not None}


# A publish uploads to a temporary branch `publish/<UTC start time>-<random>`, then moves vN to it and deletes
# it. An interrupted publish may leave it behind: the next publish, and `kernel-hub gc`, delete those older
# than STALE_PUBLISH_S (a live publish of another user must keep its own).
PUBLISH_BRANCH_PREFIX = "publish/"
STALE_PUBLISH_S = 3600.0
_PUBLISH_TIME = "%Y%m%dT%H%M%SZ"


def publish_branch(started: float, token: str) -> str:
    """The temporary branch of a publish started at `started` (epoch seconds); `token` makes it unique."""
    return f"{PUBLISH_BRANCH_PREFIX}{time.strftime(_PUBLISH_TIME, time.gmtime(started))}-{token}"


def publish_branch_started(branch: str) -> float | None:
    """When the publish that made `branch` started (epoch seconds); None for a branch that is no publish's.

    Names without a time (`publish/<hex>`, kernel-hub before 2026-12) count as started at 0: stale.
    """
    if not branch.startswith(PUBLISH_BRANCH_PREFIX):
        return None
    stamp = branch[len(PUBLISH_BRANCH_PREFIX) :].split("-", 1)[0]
    try:
        return float(calendar.timegm(time.strptime(stamp, _PUBLISH_TIME)))
    except ValueError:
        return 0.0
