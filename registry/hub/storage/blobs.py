"""Content-addressed blob store on disk: `<root>/sha256/<aa>/<hex>`.

Writes go to a temp file in this process's own folder under `<root>/tmp`, are fsynced and renamed
into place, so a blob path either holds the complete bytes or does not exist. Callers stage blobs
while validating a request and `promote` them only once the request is accepted, so a refused
request stores nothing.

Several processes (workers, `kernel-hub gc`) may share one root (docs/CONTRACTS.md "Blob store"):
each writes its temps in its own `tmp/<pid>-<random>/`, holding an flock on `.lock` in it while it
lives, so `clean_staging` (run at start and by gc) removes exactly the temps of dead processes (kill -9
included) and never a live upload, however long it runs. `promote` refreshes the mtime of content it
finds stored, and gc removes only blobs untouched for its grace period (`remove_unused`). The read checks (size, sha256) are the hub's
policy: `registry/hub/blobcheck.py`.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

log = logging.getLogger(__name__)


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
    tmp_path: Path
    sha256: str
    sha1: str | None  # git blob sha1, computed for inline (regular) content only
    size: int


@dataclass(frozen=True)
class BlobStat:
    sha256: str
    size: int
    mtime: float  # when it was stored (epoch seconds)
    path: Path | None = None  # the local file (FileResponse / X-Accel-Redirect fast path)


class BlobStore:
    def __init__(self, root: Path):
        self.root = Path(root)
        self.tmp_root = self.root / "tmp"
        self.tmp_root.mkdir(parents=True, exist_ok=True)
        self.tmp, self._tmp_lock = self._claim_tmp_dir()

    def path(self, sha256: str) -> Path:
        return self.root / "sha256" / sha256[:2] / sha256

    def stat(self, sha256: str) -> BlobStat | None:
        try:
            st = os.stat(self.path(sha256))
        except FileNotFoundError:
            return None
        return BlobStat(sha256, st.st_size, st.st_mtime, self.path(sha256))

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

    def clean_staging(self, older_than_s: float) -> int:
        """Remove temp files of dead processes (their folder's lock is free), whatever their age, and
        flat temp files of the old layout older than `older_than_s`; returns how many."""
        removed, cutoff = 0, time.time() - older_than_s
        with _flocked(self.tmp_root / ".claim.lock"):
            for entry in self.tmp_root.iterdir():
                if entry.name.startswith("."):
                    continue
                if entry.is_dir():
                    if _lock_is_free(entry / ".lock"):
                        removed += sum(1 for p in entry.iterdir() if p.name != ".lock")
                        shutil.rmtree(entry, ignore_errors=True)
                elif entry.stat().st_mtime < cutoff:  # a temp file of the layout before per-process folders
                    entry.unlink(missing_ok=True)
                    removed += 1
        if removed:
            log.warning("removed %d temp files left by crashed processes in %s", removed, self.tmp_root)
        return removed

    # --- writes --------------------------------------------------------------------------------
    def stage_bytes(self, data: bytes) -> StagedBlob:
        """Write inline content to a temp file; returns its ids (sha256 and git blob sha1)."""
        fd, name = _mkstemp(self.tmp)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        return StagedBlob(Path(name), hashlib.sha256(data).hexdigest(), git_blob_sha1(data), len(data))

    def new_writer(self) -> BlobWriter:
        return BlobWriter(self.tmp)

    def promote(self, staged: StagedBlob) -> None:
        """Move a staged blob to its content address; if that content is already stored, refresh its
        mtime instead: gc spares blobs touched within its grace period (`remove_unused`)."""
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

    # --- maintenance (start-up, kernel-hub gc / fsck) ----------------------------------------------
    def iter_blobs(self) -> Iterator[BlobStat]:
        for path in sorted((self.root / "sha256").glob("??/*")):
            try:
                st = path.stat()
            except FileNotFoundError:
                continue  # deleted meanwhile
            yield BlobStat(path.name, st.st_size, st.st_mtime, path)

    def delete(self, sha256: str) -> None:
        self.path(sha256).unlink(missing_ok=True)

    def remove_unused(self, sha256: str, cutoff: float) -> bool:
        """gc's delete of a blob it found unreferenced: only if not written or promoted since `cutoff`.

        The blob is moved aside first and its mtime read there: a `promote` that refreshed it before the
        move puts it back; one after the move finds it absent and stores its own copy. So a request
        that is about to commit a blob never loses it. (Replaced by the database leases of
        docs/CONTRACTS.md "Blob store" when those land: `Leases.sweep`.)
        """
        aside = self.root / "trash" / f"{sha256}.{os.getpid()}"
        aside.parent.mkdir(exist_ok=True)
        try:
            os.rename(self.path(sha256), aside)
        except FileNotFoundError:
            return False
        if os.stat(aside).st_mtime >= cutoff:
            os.replace(aside, self.path(sha256))
            return False
        aside.unlink()
        return True

    def quarantine(self, sha256: str, reason: str) -> str:
        """Move a damaged blob to `<root>/quarantine/` with a note why; returns where ('' if gone already)."""
        dest = self.root / "quarantine" / f"{sha256}.{int(time.time())}"
        dest.parent.mkdir(exist_ok=True)
        try:
            os.rename(self.path(sha256), dest)
        except FileNotFoundError:
            return ""
        dest.with_suffix(dest.suffix + ".why").write_text(reason + "\n")
        log.error("blob %s quarantined to %s: %s", sha256, dest, reason)
        return str(dest)

    def describe(self) -> str:
        return f"files under {self.root}"


class BlobWriter:
    """Streams bytes of unknown content into a temp file, hashing them on the way (LFS uploads)."""

    def __init__(self, tmp_dir: Path):
        fd, name = _mkstemp(tmp_dir)
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


def _mkstemp(folder: Path) -> tuple[int, str]:
    """A temp file that becomes a blob: readable by all (nginx's workers serve blobs under another user)."""
    fd, name = tempfile.mkstemp(dir=folder)
    os.fchmod(fd, 0o644)
    return fd, name


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
