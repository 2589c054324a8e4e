"""Storage of the hub: SQL metadata (SQLAlchemy Core; SQLite or PostgreSQL) and content-addressed blobs (files or
S3). `open_storage` turns the `--data`/`--db`/`--blobs` options into both (docs/CONTRACTS.md "Blob store").
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import Engine

from registry.errors import UsageError

from .blobs import BlobStore


@dataclass
class Storage:
    engine: Engine
    blobs: BlobStore

    def describe(self) -> str:
        """One line for logs: where the metadata and the blobs live (no credentials)."""
        return (
            f"database {self.engine.url.render_as_string(hide_password=True)}, blobs {self.blobs.describe()}"
        )


def open_storage(
    data: Path | None = None, db: str | None = None, blobs: str | None = None, prepare: bool = True
) -> Storage:
    """The embedded default under `data` (`hub.sqlite3` + `blobs/`), each half replaceable by `db` / `blobs`."""
    if data is None and (db is None or blobs is None):
        raise UsageError("give --data DIR, or both --db URL and --blobs PATH|s3://BUCKET/PREFIX")
    from . import db as dbmod
    from .leases import Leases

    engine = dbmod.connect(db or data, prepare=prepare)
    return Storage(engine, open_blobs(blobs or Path(data) / "blobs", Leases(engine)))


def open_blobs(spec: str | Path, leases) -> BlobStore:
    """A blob store from `--blobs`: `s3://BUCKET/PREFIX` or a directory."""
    if str(spec).startswith("s3://"):
        try:
            import boto3  # noqa: F401
        except ImportError:
            raise UsageError(f"--blobs {spec}: S3 needs boto3: pip install 'kernel-hub[fleet]'") from None
        from .blobs_s3 import S3BlobStore

        return S3BlobStore(str(spec), leases)
    if "://" in str(spec):
        raise UsageError(f"--blobs {spec!r}: use a directory or s3://BUCKET/PREFIX")
    from .blobs_file import FileBlobStore

    return FileBlobStore(Path(spec), leases)
