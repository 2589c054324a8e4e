"""Blob leases: what makes gc safe while any number of processes publish (docs/CONTRACTS.md "Blob store").

A writer takes a lease on a blob (a `blob_leases` row dated now) before it looks at the store, and gc deletes a
blob only in `sweep`, under the lock of that row, after re-checking that nothing references it and that neither
the lease nor the stored copy is younger than the grace period. Either the writer's lease comes first (gc skips
the blob) or gc's delete does (the writer then finds the blob absent and uploads it).
"""

from __future__ import annotations

import time

from sqlalchemy import Engine, delete, exists, select
from sqlalchemy.dialects import postgresql, sqlite

from . import db


class Leases:
    def __init__(self, engine: Engine):
        self.engine = engine
        self._insert = postgresql.insert if engine.dialect.name == "postgresql" else sqlite.insert

    def take(self, shas: list[str]) -> None:
        """Lease these blobs for the grace period (one transaction; sorted, so two writers never deadlock)."""
        if not shas:
            return
        now = time.time()
        stmt = self._insert(db.blob_leases)
        stmt = stmt.on_conflict_do_update(
            index_elements=["sha256"], set_={"taken_at": stmt.excluded.taken_at}
        )
        with db.write_tx(self.engine) as c:
            c.execute(stmt, [{"sha256": s, "taken_at": now} for s in sorted(set(shas))])

    def sweep(self, store, sha256: str, grace_s: float) -> bool:
        """Delete one unreferenced blob older than the grace period from `store`; False if it must stay."""
        cutoff = time.time() - grace_s
        # Claim the lease row (insert it, or take over an expired one) - this row lock is what writers wait on.
        stmt = self._insert(db.blob_leases).values(sha256=sha256, taken_at=0.0)
        stmt = stmt.on_conflict_do_update(
            index_elements=["sha256"], set_={"taken_at": 0.0}, where=db.blob_leases.c.taken_at < cutoff
        ).returning(db.blob_leases.c.sha256)  # a row back = claimed (rowcount is not portable for upserts)
        try:
            with db.write_tx(self.engine) as c:
                if c.execute(stmt).first() is None:
                    raise _Keep  # leased by a writer within the grace period
                if c.execute(select(referenced(sha256))).scalar():
                    raise _Keep
                st = store.stat(sha256)
                if st is not None and st.mtime >= cutoff:
                    raise _Keep
                if st is not None:
                    store.delete(sha256)
                c.execute(delete(db.blob_leases).where(db.blob_leases.c.sha256 == sha256))
        except _Keep:
            return False  # the transaction rolled back: the lease row is as it was
        return st is not None

    def expire(self, grace_s: float) -> int:
        """Drop leases older than the grace period (gc's last step); returns how many."""
        with db.write_tx(self.engine) as c:
            return c.execute(
                delete(db.blob_leases).where(db.blob_leases.c.taken_at < time.time() - grace_s)
            ).rowcount


class _Keep(Exception):
    """Raised inside `sweep`'s transaction to roll it back: the blob stays."""


def referenced(sha256: str):
    """SQL: whether any commit's file or any LFS grant names this blob."""
    return exists().where(db.files.c.sha256 == sha256) | exists().where(db.lfs_objects.c.oid == sha256)
