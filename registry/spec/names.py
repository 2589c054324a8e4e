"""Names every part must spell alike: the repo type, version branches, commit ids.

A kernel version N is the branch `vN`. `kernels` reads `int(name[1:])` of branches starting with `v`,
so only the canonical `v(0|[1-9][0-9]*)` counts: `v01` would collide with `v1` and `v1_0` mean 10
(docs/HUB_PROTOCOL.md). The hub refuses other version-like branches; readers ignore them.
"""

from __future__ import annotations

import re

KERNEL_REPO_TYPE = "kernel"
VERSION_BRANCH = re.compile(r"v(0|[1-9][0-9]*)")
# A branch that looks like a version (`v` + digit) must be a canonical one.
VERSION_LIKE = re.compile(r"v[0-9].*")
COMMIT = re.compile(r"[0-9a-f]{40}")
COMPAT_BRANCH = "compat"  # recorded real checks of the compatibility matrix live on this branch


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


def versions(branches: dict[str, str]) -> dict[int, str]:
    """N -> commit for every canonical `vN` among `branches` (name -> commit)."""
    return {n: commit for name, commit in branches.items() if (n := version_of(name)) is not None}
