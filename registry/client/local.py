"""`LOCAL_KERNELS`: load a repo from a folder on this machine instead of the hub, as stock `kernels` does.

`LOCAL_KERNELS="org/fused-mlp=/path/to/dist:org/other=/elsewhere"` (kernels' syntax). The folder is a dist
(`build/<variant>/`), a folder of variants, or one variant (it has `metadata.json`), looked for in that
order as kernels does. The variants are decided and checked as hub ones; being the user's own files they
need no publisher trust and no signature (as in kernels).
"""

from __future__ import annotations

import json
from pathlib import Path

from registry import constants
from registry.errors import KernelLoadError
from registry.spec.variant import BUILD_DIR, METADATA


def local_override(repo_id: str) -> Path | None:
    """The folder `$LOCAL_KERNELS` maps `repo_id` to, else None; KernelLoadError for a malformed variable."""
    value = constants.local_kernels()
    if not value:
        return None
    found = None
    for entry in value.split(":"):
        repo, eq, path = entry.partition("=")
        if not eq or not repo or not path:
            raise KernelLoadError(
                f"{constants.LOCAL_KERNELS} entry {entry!r} is not repo_id=path (expected "
                f"{constants.LOCAL_KERNELS}=org/name=/path/to/dist:org/other=/path)"
            )
        if repo == repo_id:
            found = Path(path).expanduser()
    return found


def local_variants(path: Path) -> dict[str, Path]:
    """variant name -> folder of every variant under `path` (a dist, a folder of variants, or one variant)."""
    for base in (path / BUILD_DIR, path):
        found = {meta.parent.name: meta.parent for meta in sorted(base.glob(f"*/{METADATA}"))}
        if found:
            return found
    if (path / METADATA).is_file():
        return {path.name: path}
    raise KernelLoadError(
        f"{constants.LOCAL_KERNELS} points at {path}, which has no variant (no {BUILD_DIR}/<variant>/{METADATA}, "
        f"<variant>/{METADATA} or {METADATA}): point it at a dist written by `kernel-hub build`"
    )


def local_metadata(variants: dict[str, Path]) -> dict[str, dict]:
    """variant -> its metadata.json ({} when unreadable: the resolver refuses it with the reason)."""
    metas = {}
    for name, folder in variants.items():
        try:
            data = json.loads((folder / METADATA).read_text())
        except (OSError, json.JSONDecodeError):
            data = {}
        metas[name] = data if isinstance(data, dict) else {}
    return metas
