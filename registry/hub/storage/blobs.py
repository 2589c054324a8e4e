"""Content-addressed blob store on disk: `<root>/sha256/<aa>/<hex>`.

Writes go to a temp file under `<root>/tmp`, are fsynced and renamed into place, so a blob path
either holds the complete bytes or does not exist. Callers stage blobs while validating a request
and `promote` them only once the request is accepted, so a refused request stores nothing.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO


def git_blob_sha1(data: bytes) -> str:
    """The id git (and the Hub's ETag) gives a regular file: sha1 of `blob <len>\\0` + bytes.

    The same function as huggingface_hub's `utils.sha.git_hash` (tests/hub/test_units.py holds them equal);
    written here because the server never imports huggingface_hub.
    """
    return hashlib.sha1(b"blob %d\x00" % len(data) + data).hexdigest()


@dataclass(frozen=True)
class StagedBlob:
    tmp_path: Path
    sha256: str
    sha1: str | None  # git blob sha1, computed for inline (regular) content only
    size: int


class BlobStore:
    def __init__(self, root: Path):
        self.root = Path(root)
        self.tmp = self.root / "tmp"
        self.tmp.mkdir(parents=True, exist_ok=True)

    def path(self, sha256: str) -> Path:
        return self.root / "sha256" / sha256[:2] / sha256

    def exists(self, sha256: str) -> bool:
        return self.path(sha256).is_file()

    def open(self, sha256: str) -> BinaryIO:
        return open(self.path(sha256), "rb")

    def stage_bytes(self, data: bytes) -> StagedBlob:
        """Write inline content to a temp file; returns its ids (sha256 and git blob sha1)."""
        fd, name = tempfile.mkstemp(dir=self.tmp)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        return StagedBlob(Path(name), hashlib.sha256(data).hexdigest(), git_blob_sha1(data), len(data))

    def new_writer(self) -> BlobWriter:
        return BlobWriter(self.tmp)

    def promote(self, staged: StagedBlob) -> None:
        """Move a staged blob to its content address (a no-op if that content is already stored)."""
        dest = self.path(staged.sha256)
        if dest.is_file():
            staged.tmp_path.unlink(missing_ok=True)
            return
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(staged.tmp_path, dest)
        _fsync_dir(dest.parent)

    def discard(self, staged: StagedBlob) -> None:
        staged.tmp_path.unlink(missing_ok=True)


class BlobWriter:
    """Streams bytes of unknown content into a temp file, hashing them on the way (LFS uploads)."""

    def __init__(self, tmp_dir: Path):
        fd, name = tempfile.mkstemp(dir=tmp_dir)
        self._file = os.fdopen(fd, "wb")
        self._path = Path(name)
        self._hash = hashlib.sha256()
        self.size = 0

    def write(self, chunk: bytes) -> None:
        self._file.write(chunk)
        self._hash.update(chunk)
        self.size += len(chunk)

    def finish(self) -> StagedBlob:
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        return StagedBlob(self._path, self._hash.hexdigest(), None, self.size)

    def abort(self) -> None:
        self._file.close()
        self._path.unlink(missing_ok=True)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
