"""Content-addressed blob store on disk: `<root>/sha256/<aa>/<hex>`.

Writes go to a temp file in this process's own folder under `<root>/tmp`, are fsynced and renamed
into place, so a blob path either holds the complete bytes or does not exist. Callers stage blobs
while validating a request and `promote` them only once the request is accepted, so a refused
request stores nothing.

Several processes (workers, replicas, `kernel-hub gc`) may share one root; the rules that keep them
safe are in docs/CONTRACTS.md "Blob store":
- each process writes temps in `tmp/<id>/`, holding an flock on `tmp/<id>/.lock` while it lives; at
  start a process removes the temp folders whose lock is free (their owner died: kill -9 included);
- `promote` refreshes the blob's mtime even when the content is already stored, and `remove_unused`
  (gc) deletes only blobs untouched since its cutoff, re-checked after moving them aside;
- reads check the size always and the sha256 once per process (`checked_stat`); a damaged blob is
  moved to `<root>/quarantine/` and answered as BlobDamaged.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from ..errors import HubError

log = logging.getLogger(__name__)

HASH_CHUNK = 1024 * 1024
# Blobs up to this size are re-hashed on their first read by a process; larger ones (seconds of
# hashing before the first byte) get the size check only and are covered by `kernel-hub fsck`.
VERIFY_MAX_BYTES = 256 * 1024 * 1024


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


@dataclass(frozen=True)
class BlobInfo:
    sha256: str
    size: int
    mtime: float  # last write or promote: gc's clock


class BlobStore:
    def __init__(self, root: Path, verify_max_bytes: int = VERIFY_MAX_BYTES):
        self.root = Path(root)
        self.verify_max_bytes = verify_max_bytes
        self.tmp_root = self.root / "tmp"
        self.tmp_root.mkdir(parents=True, exist_ok=True)
        self._verified: dict[str, tuple[int, int, int]] = {}  # sha256 -> (size, mtime_ns, inode) hashed ok
        self._verify_locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()
        self.removed_at_start = self.recover()
        self.tmp, self._tmp_lock = self._claim_tmp_dir()

    # --- layout --------------------------------------------------------------------------------
    def path(self, sha256: str) -> Path:
        return self.root / self.relative_path(sha256)

    @staticmethod
    def relative_path(sha256: str) -> str:
        """Where a blob lives under the root (`sha256/aa/<hex>`): nginx's internal location maps it."""
        return f"sha256/{sha256[:2]}/{sha256}"

    def exists(self, sha256: str) -> bool:
        return self.path(sha256).is_file()

    def open(self, sha256: str) -> BinaryIO:
        return open(self.path(sha256), "rb")

    # --- temp files and start-up recovery --------------------------------------------------------
    def _claim_tmp_dir(self) -> tuple[Path, int]:
        """This process's temp folder, locked for its lifetime (the kernel drops the lock at exit)."""
        with _flocked(self.tmp_root / ".claim.lock"):
            path = Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=self.tmp_root))
            fd = os.open(path / ".lock", os.O_CREAT | os.O_RDWR, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return path, fd

    def recover(self) -> int:
        """Remove temp files left by dead processes (their folder's lock is free); returns how many."""
        removed = 0
        with _flocked(self.tmp_root / ".claim.lock"):
            for entry in self.tmp_root.iterdir():
                if entry.name.startswith("."):
                    continue
                if entry.is_dir():
                    if _lock_is_free(entry / ".lock"):
                        removed += sum(1 for p in entry.iterdir() if p.name != ".lock")
                        shutil.rmtree(entry, ignore_errors=True)
                else:  # a flat temp file of the layout before per-process folders
                    entry.unlink(missing_ok=True)
                    removed += 1
        if removed:
            log.warning("removed %d temp files left by a crashed process in %s", removed, self.tmp_root)
        return removed

    # --- writes --------------------------------------------------------------------------------
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
        """Move a staged blob to its content address; if that content is already stored, refresh its
        mtime instead, so a concurrent gc (which spares blobs touched after its cutoff) keeps it."""
        dest = self.path(staged.sha256)
        try:
            os.utime(dest)
            staged.tmp_path.unlink(missing_ok=True)
            return
        except FileNotFoundError:
            pass  # not stored (or gc just moved it aside): ours becomes the blob
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(staged.tmp_path, dest)
        _fsync_dir(dest.parent)

    def discard(self, staged: StagedBlob) -> None:
        staged.tmp_path.unlink(missing_ok=True)

    # --- checked reads -------------------------------------------------------------------------
    def checked_stat(self, sha256: str, size: int) -> os.stat_result:
        """The blob's stat, after checking its size (always) and its sha256 (first read by this
        process, up to `verify_max_bytes`); BlobDamaged (and quarantine) otherwise."""
        try:
            st = os.stat(self.path(sha256))
        except FileNotFoundError:
            raise self._damaged(sha256, "is missing") from None
        if st.st_size != size:
            self.quarantine(sha256, f"size {st.st_size} differs from the committed {size}")
            raise self._damaged(sha256, f"has {st.st_size} bytes instead of {size}")
        if size <= self.verify_max_bytes:
            self._verify_once(sha256, st)
        return st

    def _verify_once(self, sha256: str, st: os.stat_result) -> None:
        key = (st.st_size, st.st_mtime_ns, st.st_ino)
        if self._verified.get(sha256) == key:
            return
        with self._lock:
            lock = self._verify_locks.setdefault(sha256, threading.Lock())
        with lock:  # concurrent first reads of one blob hash it once
            if self._verified.get(sha256) == key:
                return
            actual = self.hash_file(sha256)
            if actual != sha256:
                self.quarantine(sha256, f"its bytes hash to {actual}")
                raise self._damaged(sha256, "does not match its sha256")
            self._verified[sha256] = key

    def hash_file(self, sha256: str) -> str:
        h = hashlib.sha256()
        with self.open(sha256) as f:
            while chunk := f.read(HASH_CHUNK):
                h.update(chunk)
        return h.hexdigest()

    def _damaged(self, sha256: str, what: str) -> HubError:
        log.error("blob %s %s: answering BlobDamaged; run `kernel-hub fsck`", sha256, what)
        return HubError(
            "BlobDamaged",
            f"the stored copy of blob {sha256} {what}; the hub operator must restore it (kernel-hub fsck)",
        )

    # --- maintenance (kernel-hub gc / fsck) ------------------------------------------------------
    def iter_blobs(self) -> Iterator[BlobInfo]:
        for path in (self.root / "sha256").glob("*/*"):
            try:
                st = path.stat()
            except FileNotFoundError:
                continue
            yield BlobInfo(path.name, st.st_size, st.st_mtime)

    def remove_unused(self, sha256: str, cutoff: float) -> bool:
        """Delete a blob gc found unreferenced, unless it was written or promoted after `cutoff`.

        It is first moved aside and its mtime re-read there: a `promote` that refreshed it in
        between puts it back, so a blob a request is about to commit is never lost.
        """
        src = self.path(sha256)
        trash = self.root / "trash"
        trash.mkdir(exist_ok=True)
        aside = trash / f"{sha256}.{os.getpid()}"
        try:
            os.rename(src, aside)
        except FileNotFoundError:
            return False
        if os.stat(aside).st_mtime >= cutoff:
            os.replace(aside, src)
            return False
        aside.unlink()
        self._verified.pop(sha256, None)
        return True

    def quarantine(self, sha256: str, reason: str) -> Path | None:
        """Move a damaged blob to `<root>/quarantine/` (with a note why); None if it is gone already."""
        qdir = self.root / "quarantine"
        qdir.mkdir(exist_ok=True)
        dest = qdir / f"{sha256}.{int(time.time())}"
        try:
            os.rename(self.path(sha256), dest)
        except FileNotFoundError:
            return None
        dest.with_suffix(dest.suffix + ".why").write_text(reason + "\n")
        self._verified.pop(sha256, None)
        log.error("blob %s quarantined to %s: %s", sha256, dest, reason)
        return dest


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


class _flocked:
    """An exclusive flock on `path` for the `with` block (serialises temp-folder claims and recovery)."""

    def __init__(self, path: Path):
        self.path = path

    def __enter__(self) -> None:
        self.fd = os.open(self.path, os.O_CREAT | os.O_RDWR, 0o600)
        fcntl.flock(self.fd, fcntl.LOCK_EX)

    def __exit__(self, *exc) -> None:
        os.close(self.fd)


def _lock_is_free(path: Path) -> bool:
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return True  # a folder whose owner died before taking its lock
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
