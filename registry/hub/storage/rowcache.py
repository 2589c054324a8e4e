"""Per-process caches of hot rows (repo by name, ref by name, token -> principal) that stay exact.

A download asks the database for the repo, then for the ref: on this 2-core machine each SQLAlchemy round
trip costs more than the rest of the request. SQLite numbers every commit made through any other
connection, in any process (`PRAGMA data_version`): a cache read first compares that number (one raw
query, far cheaper than an ORM round trip) and drops everything when it moved, so no answer is ever staler than the database.
Databases without such a number (PostgreSQL) get no caching: `current()` is None.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import TypeVar

from sqlalchemy import Engine

T = TypeVar("T")
MAX_ENTRIES = 10_000


class RowCache:
    def __init__(self, engine: Engine):
        self._conn = engine.raw_connection() if engine.dialect.name == "sqlite" else None
        self._lock = threading.Lock()
        self._entries: dict[Hashable, object] = {}
        self._version: int | None = None

    def current(self) -> int | None:
        """The database's commit counter as this connection sees it; None: not available here."""
        if self._conn is None:
            return None
        with self._lock:
            cur = self._conn.cursor()
            try:
                cur.execute("PRAGMA data_version")
                return cur.fetchone()[0]
            finally:
                cur.close()

    def get(self, key: Hashable, load: Callable[[], T]) -> T:
        """The cached value of `key`, or `load()` (cached while no commit happens anywhere)."""
        version = self.current()
        if version is None:
            return load()
        with self._lock:
            if version != self._version or len(self._entries) > MAX_ENTRIES:
                self._entries.clear()
                self._version = version
            if key in self._entries:
                return self._entries[key]  # type: ignore[return-value]
        value = load()
        with self._lock:
            if self._version == version:
                self._entries[key] = value
        return value
