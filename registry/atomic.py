"""Writing a file so that readers see the old content or the whole new one, never a part; and the lock that
keeps two read-modify-write updates of one file from losing each other's change."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def write_atomic(path: Path, data: bytes, *, replace: bool = True) -> None:
    """Write `data` to `path` through a private temp file (mode 0600) in the same folder, fsynced first.

    `replace=True` renames it over `path`; `replace=False` hard-links it to `path`, so an existing file is
    never overwritten (FileExistsError) and two concurrent creators cannot both win.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if replace:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold `<path>.lock` (an inter-process file lock) around a read-modify-write of `path`. Readers need no
    lock (write_atomic), so filelock is imported here, on a write: a warm load only reads."""
    from filelock import FileLock

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(path.with_name(path.name + ".lock")):
        yield
