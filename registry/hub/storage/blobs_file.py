"""The embedded default blob store: files under `<data>/blobs/sha256/<aa>/<hex>`.

Writes go to a temp file in this process's own folder under `<root>/tmp`, are fsynced and renamed into place,
so a blob path either holds the complete bytes or does not exist.

Several processes (workers, replicas on a shared disk, `kernel-hub gc`) may share one root: each writes its
temps in its own `tmp/<pid>-<random>/`, holding an flock on `.lock` in it while it lives, so `clean_staging`
(run at start and by gc) removes exactly the temps of dead processes (kill -9 included) and never a live
upload, however long it runs. gc deletes only through `Leases.sweep` (leases.py); `promote` also refreshes the
mtime of content it finds stored, so the store's own age check agrees with the lease.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Self

from .blobs import CHUNK, BlobMissing, BlobStat, BlobWriter, StagedBlob, release, stage
from .leases import Leases

log = logging.getLogger(__name__)


class FileBlobStore:
    """`BlobStore` on a local (or shared POSIX) directory."""

    local_files = True

    def __init__(self, root: Path, leases: Leases):
        self.root = Path(root)
        self.leases = leases
        self.tmp_root = self.root / "tmp"
        self.tmp_root.mkdir(parents=True, exist_ok=True)
        self.tmp, self._tmp_lock = self._claim_tmp_dir()

    def path(self, sha256: str) -> Path:
        return self.root / "sha256" / sha256[:2] / sha256

    # --- writing ---------------------------------------------------------------------------------
    def new_writer(self) -> BlobWriter:
        fd, name = _mkstemp(self.tmp)
        return BlobWriter(os.fdopen(fd, "wb"), Path(name), durable=True)

    def stage_bytes(self, data: bytes) -> StagedBlob:
        return stage(self.new_writer(), data)

    def promote(self, *staged: StagedBlob) -> None:
        """Move staged blobs to their content address; content already stored is kept (its mtime refreshed)
        and the staged copy dropped."""
        self.leases.take([s.sha256 for s in staged])  # before looking: gc may be deleting an old copy
        for s in staged:
            dest = self.path(s.sha256)
            try:
                os.utime(dest)
                release(s)
                continue
            except FileNotFoundError:
                pass  # not stored (or gc just deleted it): ours becomes the blob
            if s.path is None:
                continue
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.replace(s.path, dest)
            _fsync_dir(dest.parent)

    def discard(self, staged: StagedBlob) -> None:
        release(staged)

    # --- reading ---------------------------------------------------------------------------------
    def stat(self, sha256: str) -> BlobStat | None:
        p = self.path(sha256)
        try:
            st = p.stat()
        except FileNotFoundError:
            return None
        return BlobStat(sha256, st.st_size, st.st_mtime, p)

    def exists(self, sha256: str) -> bool:
        return self.path(sha256).is_file()

    def open(self, sha256: str, start: int = 0, end: int | None = None) -> FileReader:
        try:
            f = open(self.path(sha256), "rb")  # noqa: SIM115 (the reader owns and closes it)
        except FileNotFoundError:
            raise BlobMissing(f"blob {sha256} is not in {self.root}") from None
        reader = FileReader(f, start, end)
        if start and start >= reader.size:
            reader.close()
            raise BlobMissing(f"blob {sha256} in {self.root} is shorter than byte {start}")
        return reader

    def presign(self, sha256: str, ttl_s: int, method: str = "GET") -> str | None:
        return None  # served from `stat().path` instead

    # --- temp files and start-up recovery --------------------------------------------------------
    def _claim_tmp_dir(self) -> tuple[Path, int]:
        """This process's temp folder, locked for its lifetime (the kernel drops the lock at exit)."""
        with _flocked(self.tmp_root / ".claim.lock"):
            path = Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=self.tmp_root))
            fd = os.open(path / ".lock", os.O_CREAT | os.O_RDWR, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return path, fd

    def clean_staging(self, older_than_s: float, dry_run: bool = False) -> int:
        """Remove temp files of dead processes (their folder's lock is free), whatever their age, and
        flat temp files of the old layout older than `older_than_s`; returns how many (`dry_run`: only counts)."""
        removed, cutoff = 0, time.time() - older_than_s
        with _flocked(self.tmp_root / ".claim.lock"):
            for entry in self.tmp_root.iterdir():
                if entry.name.startswith("."):
                    continue
                if entry.is_dir():
                    if _lock_is_free(entry / ".lock"):
                        removed += sum(1 for p in entry.iterdir() if p.name != ".lock")
                        if not dry_run:
                            shutil.rmtree(entry, ignore_errors=True)
                elif entry.stat().st_mtime < cutoff:  # a temp file of the layout before per-process folders
                    if not dry_run:
                        entry.unlink(missing_ok=True)
                    removed += 1
        if removed and not dry_run:
            log.warning("removed %d temp files left by crashed processes in %s", removed, self.tmp_root)
        return removed

    # --- maintenance (kernel-hub gc / fsck) ----------------------------------------------------------
    def iter_blobs(self) -> Iterator[BlobStat]:
        for path in sorted((self.root / "sha256").glob("??/*")):
            try:
                st = path.stat()
            except FileNotFoundError:
                continue  # deleted meanwhile
            yield BlobStat(path.name, st.st_size, st.st_mtime, path)

    def delete(self, sha256: str) -> None:
        self.path(sha256).unlink(missing_ok=True)

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


class FileReader:
    """Bytes `start..end` (inclusive) of a blob file; `size` is the whole file's size."""

    def __init__(self, f, start: int, end: int | None):
        self._f = f
        self.size = os.fstat(f.fileno()).st_size
        last = self.size - 1 if end is None else end
        if start > 0:
            f.seek(start)
        self._left = max(last - start + 1, 0)

    def fileno(self) -> int:
        return self._f.fileno()

    def read(self, n: int = -1) -> bytes:
        n = self._left if n < 0 else min(n, self._left)
        data = self._f.read(n)
        self._left -= len(data)
        return data

    def __iter__(self) -> Iterator[bytes]:
        while chunk := self.read(CHUNK):
            yield chunk

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


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
