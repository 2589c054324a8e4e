"""Writing a file so that readers see the old content or the whole new one, never a part."""

from __future__ import annotations

import os
import tempfile
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
