"""Pure operations on a commit manifest (`{path: FileEntry}`): applying commit operations and
listing a folder as tree entries in the JSON shape of the tree endpoint (docs/HUB_PROTOCOL.md §2).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from .errors import HubError


@dataclass(frozen=True)
class FileEntry:
    sha256: str
    size: int
    oid: str  # ETag: git blob sha1 for regular files, sha256 for LFS files
    lfs: bool


@dataclass(frozen=True)
class Op:
    kind: str  # "file" | "deletedFile" | "deletedFolder"
    path: str
    entry: FileEntry | None = None


Manifest = dict[str, FileEntry]


def apply_ops(manifest: Manifest, ops: list[Op]) -> Manifest:
    """The manifest after `ops`, in order; refuses deletions of missing paths and file/folder clashes."""
    out = dict(manifest)
    for op in ops:
        if op.kind == "file":
            _check_no_clash(out, op.path)
            out[op.path] = op.entry
        elif op.kind == "deletedFile":
            if op.path not in out:
                raise HubError(
                    "EntryNotFound",
                    f"A file with this name doesn't exist: {op.path!r} (to delete a folder, use deletedFolder)",
                )
            del out[op.path]
        elif op.kind == "deletedFolder":
            prefix = op.path + "/" if op.path else ""
            doomed = [p for p in out if p.startswith(prefix)]
            if not doomed:
                raise HubError("EntryNotFound", f"A folder with this name doesn't exist: {op.path!r}")
            for p in doomed:
                del out[p]
        else:
            raise ValueError(f"unknown op kind {op.kind!r}")
    return out


def _check_no_clash(manifest: Manifest, path: str) -> None:
    parts = path.split("/")
    for i in range(1, len(parts)):
        parent = "/".join(parts[:i])
        if parent in manifest:
            raise HubError(
                "PathConflict",
                f"cannot add {path!r}: {parent!r} is a file; delete it first or pick another path",
            )
    if any(p.startswith(path + "/") for p in manifest):
        raise HubError(
            "PathConflict", f"cannot add file {path!r}: a folder with that name exists; delete it first"
        )


def is_folder(manifest: Manifest, folder: str) -> bool:
    return folder == "" or any(p.startswith(folder + "/") for p in manifest)


def file_json(path: str, e: FileEntry) -> dict:
    out = {"type": "file", "path": path, "size": e.size, "oid": e.oid}
    if e.lfs:
        out["lfs"] = {"oid": e.sha256, "size": e.size, "pointerSize": pointer_size(e)}
    return out


def folder_json(manifest: Manifest, folder: str) -> dict:
    return {"type": "directory", "path": folder, "oid": folder_oid(manifest, folder)}


def folder_oid(manifest: Manifest, folder: str) -> str:
    """A stable id for a folder's content (sha1 over its sorted (path, oid) pairs)."""
    h = hashlib.sha1()
    prefix = folder + "/"
    for p in sorted(p for p in manifest if p.startswith(prefix)):
        h.update(f"{p}\0{manifest[p].oid}\n".encode())
    return h.hexdigest()


def tree(manifest: Manifest, folder: str, recursive: bool) -> list[dict]:
    """Entries under `folder` ('' = root): direct children, or everything below when recursive.

    Raises EntryNotFound when `folder` is not a folder of this manifest.
    """
    if not is_folder(manifest, folder):
        raise HubError("EntryNotFound", f"folder {folder!r} does not exist at this revision")
    prefix = folder + "/" if folder else ""
    files_out: list[tuple[str, dict]] = []
    folders: set[str] = set()
    for path, entry in manifest.items():
        if not path.startswith(prefix):
            continue
        rest = path[len(prefix) :].split("/")
        if recursive:
            files_out.append((path, file_json(path, entry)))
            for i in range(1, len(rest)):
                folders.add(prefix + "/".join(rest[:i]))
        elif len(rest) == 1:
            files_out.append((path, file_json(path, entry)))
        else:
            folders.add(prefix + rest[0])
    entries = files_out + [(f, folder_json(manifest, f)) for f in folders]
    return [e for _, e in sorted(entries, key=lambda pe: pe[0])]


def entry_json(manifest: Manifest, path: str) -> dict | None:
    """The tree entry of one path (file or folder), or None when absent (paths-info)."""
    if path in manifest:
        return file_json(path, manifest[path])
    if path and is_folder(manifest, path):
        return folder_json(manifest, path)
    return None


def pointer_size(e: FileEntry) -> int:
    """Size of the git-lfs pointer file that would stand for this blob."""
    text = f"version https://git-lfs.github.com/spec/v1\noid sha256:{e.sha256}\nsize {e.size}\n"
    return len(text.encode())
