"""What serving checks before it sends a blob (issue #11): never a 200 with wrong, short or no bytes.

- The size, on every read, compared with the committed size before any header goes out. Missing or a
  different size -> 410 `X-Error-Code: BlobDamaged` and a log line (and a wrong-size copy is quarantined).
  Local files: a stat. Object stores: the size the ranged GET itself answers (`open`), so a download costs one
  request to the store, not a HEAD and then a GET; a HEAD request still asks the store for the size (`stat`).
- The sha256, on the first read of each blob by this process (and again if its file changed: size,
  mtime or inode), for blobs up to `verify_max_bytes` that have a local file. That costs one hash per
  blob per process start (~1 ms per MiB), paid once, while a cold `get_kernel` makes over a thousand
  requests for small files; above the limit (seconds before the first byte) and for object stores
  (written only under the hash the replica computed) the full hash is `kernel-hub fsck`'s job.
  A mismatch quarantines the blob; a publisher's re-upload of the same bytes stores it again.
"""

from __future__ import annotations

import hashlib
import logging
import threading

from .errors import HubError
from .storage.blobs import BlobMissing, BlobReader, BlobStat, BlobStore

log = logging.getLogger(__name__)

HASH_CHUNK = 1024 * 1024
VERIFY_MAX_BYTES = 256 * 1024 * 1024


def sha256_of(blobs: BlobStore, sha256: str) -> str:
    """The sha256 of a stored blob's bytes, read in chunks."""
    h = hashlib.sha256()
    with blobs.open(sha256) as f:
        while chunk := f.read(HASH_CHUNK):
            h.update(chunk)
    return h.hexdigest()


class BlobCheck:
    """The per-process record of blobs whose bytes were hashed and found right."""

    def __init__(self, blobs: BlobStore, verify_max_bytes: int = VERIFY_MAX_BYTES):
        self.blobs = blobs
        self.verify_max_bytes = verify_max_bytes
        self._verified: dict[str, tuple[int, int, int]] = {}  # sha256 -> (size, mtime_ns, inode)
        self._etags: dict[str, str] = {}  # sha256 -> the object store's ETag, after a size check
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def stat(self, sha256: str, size: int) -> BlobStat:
        """The blob's stat once it passed the checks above; BlobDamaged otherwise. Runs in a worker thread."""
        st = self.blobs.stat(sha256)
        if st is None:
            raise _damaged(sha256, "is missing")
        if st.size != size:
            self.blobs.quarantine(sha256, f"size {st.size} differs from the committed {size}")
            raise _damaged(sha256, f"has {st.size} bytes instead of {size}")
        if st.path is not None and size <= self.verify_max_bytes:
            self._hash_once(st)
        return st

    def open(self, sha256: str, size: int, start: int = 0, end: int | None = None) -> BlobReader:
        """Bytes `start..end` of a blob committed with `size` bytes, read from a store without local files: the
        read's own answer carries the stored size, checked as `stat` does; BlobDamaged otherwise."""
        try:
            reader = self.blobs.open(sha256, start, end)
        except BlobMissing:  # absent, or shorter than the range: the stat says which (and quarantines)
            self.stat(sha256, size)
            raise _damaged(sha256, "changed while it was read; retry") from None
        if reader.size != size:
            reader.close()
            self.blobs.quarantine(sha256, f"size {reader.size} differs from the committed {size}")
            raise _damaged(sha256, f"has {reader.size} bytes instead of {size}")
        return reader

    def store_etag(self, sha256: str, size: int) -> str | None:
        """The object store's ETag of a blob whose stored size this process checked once (a stat, BlobDamaged
        as above); None if the store has none. nginx fetches the blob with `If-Match: <it>` (`--accel-redirect`
        on S3): the store itself then refuses (412) any object that is not the one checked, on every read, and
        a refusal falls back to a read through `open`. So a stale entry costs a slow read, never wrong bytes."""
        etag = self._etags.get(sha256)
        if etag is None:
            etag = self.stat(sha256, size).etag
            if etag:
                self._etags[sha256] = etag
        return etag

    def forget(self, sha256: str) -> None:
        """Drop what this process recorded of a blob (a read through nginx was refused by the store)."""
        self._etags.pop(sha256, None)

    def _hash_once(self, st: BlobStat) -> None:
        fs = st.path.stat()
        key = (fs.st_size, fs.st_mtime_ns, fs.st_ino)
        if self._verified.get(st.sha256) == key:
            return
        with self._guard:
            lock = self._locks.setdefault(st.sha256, threading.Lock())
        with lock:  # concurrent first reads of one blob hash it once
            if self._verified.get(st.sha256) == key:
                return
            actual = sha256_of(self.blobs, st.sha256)
            if actual != st.sha256:
                self.blobs.quarantine(st.sha256, f"its bytes hash to {actual}")
                raise _damaged(st.sha256, "does not match its sha256")
            self._verified[st.sha256] = key


def _damaged(sha256: str, what: str) -> HubError:
    log.error("blob %s %s: answering BlobDamaged; run `kernel-hub fsck`", sha256, what)
    return HubError(
        "BlobDamaged",
        f"the stored copy of blob {sha256} {what}; the hub operator must restore it (see `kernel-hub fsck`)",
    )
