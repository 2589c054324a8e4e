"""The blob store protocol (docs/CONTRACTS.md "Blob store") and what both backends share.

Blobs are content-addressed by sha256 and immutable. A backend stages incoming bytes invisibly while hashing
them, and `promote` makes them visible under their sha256 atomically, after the caller has compared the hash
with the client's claim. Backends: `blobs_file.FileBlobStore` (the embedded default) and `blobs_s3.S3BlobStore`.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import BinaryIO, Protocol, Self

from registry.errors import KernelHubError

CHUNK = 1024 * 1024  # bytes per read when streaming a blob


class BlobMissing(KernelHubError):
    """A blob that should be stored is absent (or shorter than the range asked for)."""


def git_blob_sha1(data: bytes) -> str:
    """The id git (and the Hub's ETag) gives a regular file: sha1 of `blob <len>\\0` + bytes.

    The same function as huggingface_hub's `utils.sha.git_hash` (tests/hub/test_units.py holds them equal);
    written here because the server never imports huggingface_hub.
    """
    h = hashlib.sha1(b"blob %d\x00" % len(data))
    h.update(data)  # not `header + data`: no copy of a large file, and hashlib lets go of the GIL
    return h.hexdigest()


@dataclass(frozen=True)
class StagedBlob:
    """Bytes received and hashed but not visible yet. `file`/`path` are the backend's staging copy."""

    sha256: str
    sha1: str | None  # git blob sha1, computed for inline (regular) content only
    size: int
    file: BinaryIO | None = None  # an open staging file (closed by promote/discard)
    path: Path | None = None  # a named staging file (renamed by promote, removed by discard)


@dataclass(frozen=True)
class BlobStat:
    sha256: str
    size: int
    mtime: float  # when it was stored (epoch seconds; the object store's clock for S3)
    path: Path | None = None  # the local file, when the backend has one (sendfile / X-Accel fast path)
    etag: str | None = None  # the object store's ETag (its If-Match value), when the backend has one


class BlobReader(Protocol):
    """Bytes `start..end` of one blob, read in chunks; `size` is the whole blob's size."""

    size: int

    def read(self, n: int = -1) -> bytes: ...
    def close(self) -> None: ...
    def __iter__(self) -> Iterator[bytes]: ...
    def __enter__(self) -> Self: ...
    def __exit__(self, *exc) -> None: ...


class BlobStore(Protocol):
    """What routes and commands may ask of a blob store (docs/CONTRACTS.md "Blob store")."""

    # True: `stat().path` names a local file (sendfile / X-Accel fast path). False (an object store): a download
    # is one ranged `open`, whose reader's `size` is the check, with no `stat` round trip before it.
    local_files: bool

    def stage_bytes(self, data: bytes) -> StagedBlob: ...
    def new_writer(self) -> BlobWriter: ...
    def promote(self, *staged: StagedBlob) -> None: ...
    def discard(self, staged: StagedBlob) -> None: ...
    def stat(self, sha256: str) -> BlobStat | None: ...
    def exists(self, sha256: str) -> bool: ...
    def open(self, sha256: str, start: int = 0, end: int | None = None) -> BlobReader: ...
    def presign(self, sha256: str, ttl_s: int, method: str = "GET") -> str | None: ...
    def iter_blobs(self) -> Iterator[BlobStat]: ...
    def delete(self, sha256: str) -> None: ...
    def quarantine(self, sha256: str, reason: str) -> str: ...
    def clean_staging(self, older_than_s: float, dry_run: bool = False) -> int: ...
    def describe(self) -> str: ...


class BlobWriter:
    """Streams bytes of unknown content into a staging file, hashing them on the way."""

    def __init__(self, file: BinaryIO, path: Path | None = None, durable: bool = False):
        self._file, self._path, self._durable = file, path, durable
        self._hash = hashlib.sha256()
        self.size = 0

    def write(self, chunk: bytes) -> None:
        self._file.write(chunk)
        self._hash.update(chunk)
        self.size += len(chunk)

    def finish(self) -> StagedBlob:
        self._file.flush()
        if self._durable:  # the file store renames this file into place: its bytes must be on disk first
            os.fsync(self._file.fileno())
        if self._path is not None:
            self._file.close()
            return StagedBlob(self._hash.hexdigest(), None, self.size, path=self._path)
        self._file.seek(0)
        return StagedBlob(self._hash.hexdigest(), None, self.size, file=self._file)

    def abort(self) -> None:
        try:
            self._file.close()  # flushes what is buffered: on a full disk that fails too
        except OSError:
            pass
        finally:
            if self._path is not None:
                self._path.unlink(missing_ok=True)


def stage(writer: BlobWriter, data: bytes) -> StagedBlob:
    """Stage inline content through `writer`; its git blob sha1 (the regular-file ETag) comes along.
    A failed write (a full disk) leaves no temp file."""
    try:
        writer.write(data)
        staged = writer.finish()
    except BaseException:
        writer.abort()
        raise
    return replace(staged, sha1=git_blob_sha1(data))


def release(staged: StagedBlob) -> None:
    """Drop a staged blob's staging copy (whatever is left of it)."""
    if staged.file is not None:
        staged.file.close()
    if staged.path is not None:
        staged.path.unlink(missing_ok=True)
