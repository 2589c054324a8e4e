"""Metadata schema and engine: SQLAlchemy Core tables, SQLite (WAL) by default, or PostgreSQL (`--db URL`).

Only portable Core constructs are used, so one schema serves both. The tables are created and upgraded by the
Alembic history in `migrations/` (schema.py); a change here needs a new revision there
(tests/fleet/test_backends.py holds both equal). The SQLite tweaks (WAL, busy timeout, `BEGIN IMMEDIATE` for
write transactions) and the PostgreSQL pool settings live in `connect`.
"""

from __future__ import annotations

import importlib.util
import re
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Engine,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    create_engine,
    event,
)

from registry.errors import UsageError

metadata = MetaData()

repos = Table(
    "repos",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("type", String(16), nullable=False),
    Column("namespace", String(96), nullable=False),
    Column("name", String(96), nullable=False),
    Column("private", Boolean, nullable=False, default=False),
    Column("created_at", Float, nullable=False),
    UniqueConstraint("type", "namespace", "name"),
    sqlite_autoincrement=True,  # never reuse the id of a deleted repo (manifest caches key on it)
)

commits = Table(
    "commits",
    metadata,
    Column("repo_id", Integer, ForeignKey("repos.id"), primary_key=True),
    Column("id", String(40), primary_key=True),
    Column("parent", String(40)),
    Column("title", Text, nullable=False),
    Column("message", Text, nullable=False),
    Column("author", String(96), nullable=False),
    Column("created_at", Float, nullable=False),
)

# The full manifest of every commit: one row per file (commits are immutable).
files = Table(
    "files",
    metadata,
    Column("repo_id", Integer, primary_key=True),
    Column("commit_id", String(40), primary_key=True),
    Column("path", String(1024), primary_key=True),
    Column("sha256", String(64), nullable=False),
    Column("size", BigInteger, nullable=False),
    Column("oid", String(64), nullable=False),  # git blob sha1 (regular) or sha256 (LFS): the ETag
    Column("lfs", Boolean, nullable=False),
    Index("ix_files_sha256", "sha256"),  # gc asks whether any commit references a blob
)

refs = Table(
    "refs",
    metadata,
    Column("repo_id", Integer, ForeignKey("repos.id"), primary_key=True),
    Column("kind", String(8), primary_key=True),  # "branch" | "tag"
    Column("name", String(200), primary_key=True),
    Column("commit_id", String(40), nullable=False),
)

# LFS objects a repo may reference (uploaded to it through the batch API, or already committed).
lfs_objects = Table(
    "lfs_objects",
    metadata,
    Column("repo_id", Integer, primary_key=True),
    Column("oid", String(64), primary_key=True),
    Column("size", BigInteger, nullable=False),
    Index("ix_lfs_objects_oid", "oid"),
)

tokens = Table(
    "tokens",
    metadata,
    Column("hash", String(64), primary_key=True),  # sha256 of the token; the token itself is never stored
    Column("user", String(96), nullable=False),
    Column("write_namespaces", Text, nullable=False),  # JSON list
    Column("created_at", Float, nullable=False),
)

orgs = Table(
    "orgs",
    metadata,
    Column("name", String(96), primary_key=True),
    Column("trusted", Boolean, nullable=False),
    Column("created_at", Float, nullable=False),
)

org_members = Table(
    "org_members",
    metadata,
    Column("org", String(96), primary_key=True),
    Column("user", String(96), primary_key=True),
)

keys = Table(
    "keys",
    metadata,
    Column("namespace", String(96), primary_key=True),
    Column("key_id", String(16), primary_key=True),
    Column("public_key", Text, nullable=False),
    Column("created_at", Float, nullable=False),
    # A key added by rotation: the current key that signed it in, and that signature (spec/signing.py).
    Column("endorsed_by", String(16)),
    Column("endorsement", Text),
)

# Writers lease a blob before they store or rely on it; gc deletes only unleased ones (leases.py).
blob_leases = Table(
    "blob_leases",
    metadata,
    Column("sha256", String(64), primary_key=True),
    Column("taken_at", Float, nullable=False),
)

settings = Table(
    "settings",
    metadata,
    Column("key", String(64), primary_key=True),
    Column("value", Text, nullable=False),
)


DB_FILE = "hub.sqlite3"  # the SQLite database inside a data directory


def connect(url_or_dir: str | Path, prepare: bool = True) -> Engine:
    """An engine for a database URL, or for `<dir>/hub.sqlite3` when given a data directory.

    With `prepare`, the schema is made ready (schema.prepare: created when empty, SQLite upgraded, an older
    PostgreSQL schema refused with the `kernel-hub db upgrade` advice).
    """
    url = str(url_or_dir)
    if "://" not in url:
        Path(url).mkdir(parents=True, exist_ok=True)
        url = f"sqlite:///{Path(url).resolve() / DB_FILE}"
    url = re.sub(r"^postgres(ql)?://", "postgresql+psycopg://", url)  # the driver kernel-hub installs
    if url.startswith("sqlite"):
        engine = create_engine(url)
        _tune_sqlite(engine)
    else:
        # A replica outlives database restarts: stale pooled connections are detected before use, and an
        # unreachable server fails the request within seconds (a 503) instead of hanging it.
        if url.startswith("postgresql+psycopg:") and importlib.util.find_spec("psycopg") is None:
            raise UsageError("a PostgreSQL --db needs psycopg: pip install 'kernel-hub[fleet]'")
        engine = create_engine(
            url, pool_pre_ping=True, pool_size=10, max_overflow=30, pool_timeout=10,
            connect_args={"connect_timeout": 3} if url.startswith("postgresql+psycopg:") else {},
        )  # fmt: skip
    if prepare:
        from .schema import prepare as prepare_schema

        prepare_schema(engine)
    return engine


def _tune_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _record):
        dbapi_conn.isolation_level = None  # SQLAlchemy's begin event below emits BEGIN itself
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=FULL")
        cur.execute("PRAGMA busy_timeout=15000")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn):
        # Write transactions take the write lock up front, so they wait (busy_timeout) instead of
        # failing with SQLITE_BUSY when another writer (e.g. the admin CLI) is active.
        conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get("write") else "BEGIN")


@contextmanager
def write_tx(engine: Engine):
    """One write transaction (committed on success, rolled back on any exception)."""
    with engine.connect() as conn:
        conn.execution_options(write=True)
        with conn.begin():
            yield conn


# The read transaction of a `reading()` block, per engine: read_tx inside it reuses that one.
_reading: ContextVar[dict | None] = ContextVar("kernel_hub_reading", default=None)


@contextmanager
def read_tx(engine: Engine):
    shared = (_reading.get() or {}).get(id(engine))
    if shared is not None:
        yield shared
        return
    with engine.connect() as conn, conn.begin():
        yield conn


@contextmanager
def reading(engine: Engine):
    """Every read_tx inside shares one connection and one transaction: a request that only reads (a download:
    repo, then ref) takes one pooled connection and commits once instead of once per lookup. Not for requests
    that write: their own later reads would not see what they wrote."""
    if (_reading.get() or {}).get(id(engine)) is not None:
        yield
        return
    with engine.connect() as conn, conn.begin():
        token = _reading.set({**(_reading.get() or {}), id(engine): conn})
        try:
            yield
        finally:
            _reading.reset(token)
