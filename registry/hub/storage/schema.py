"""Schema creation and upgrades through the Alembic history in `migrations/` (`kernel-hub db upgrade`).

One history serves SQLite and PostgreSQL. Upgrades run in one transaction that first takes a lock (SQLite:
`BEGIN IMMEDIATE`; PostgreSQL: an advisory lock), so replicas starting together never migrate twice. Databases
made by round 1's `create_all` (tables, no `alembic_version`) are stamped at the baseline revision first.
"""

from __future__ import annotations

import logging
from pathlib import Path

from sqlalchemy import Connection, Engine, inspect, text

from registry.errors import KernelHubError

log = logging.getLogger(__name__)

MIGRATIONS = Path(__file__).with_name("migrations")
BASELINE = "0001"  # the round-1 schema
LOCK_KEY = 0x6B68_7562  # PostgreSQL advisory lock id of schema upgrades ("khub")


class SchemaError(KernelHubError):
    """The database schema does not match this kernel-hub and must be upgraded first."""


def _config(conn: Connection):
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["connection"] = conn
    return cfg


def head() -> str:
    from alembic.script import ScriptDirectory

    return ScriptDirectory(str(MIGRATIONS)).get_current_head()


def _known() -> set[str]:
    from alembic.script import ScriptDirectory

    return {s.revision for s in ScriptDirectory(str(MIGRATIONS)).walk_revisions()}


def current(conn: Connection) -> str | None:
    """The database's revision; BASELINE for an unstamped round-1 database; None when it is empty."""
    from alembic.runtime.migration import MigrationContext

    rev = MigrationContext.configure(conn).get_current_revision()
    if rev is None and inspect(conn).has_table("repos"):
        return BASELINE
    return rev


def upgrade(engine: Engine) -> tuple[str | None, str]:
    """Move the database to the newest revision; returns (revision before, revision after)."""
    from alembic import command

    with engine.connect() as conn:
        conn.execution_options(write=True)  # SQLite: BEGIN IMMEDIATE, the writers' lock
        with conn.begin():
            if conn.dialect.name == "postgresql":
                conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": LOCK_KEY})
            before = current(conn)
            cfg = _config(conn)
            if before == BASELINE and not inspect(conn).has_table("alembic_version"):
                command.stamp(cfg, BASELINE)
            command.upgrade(cfg, "head")
            after = current(conn)
    if before is not None and before != after:  # a new hub's schema is no news: its command says "new hub"
        log.info("database schema upgraded from %s to %s", before, after)
    return before, after


def prepare(engine: Engine) -> None:
    """Make the schema ready to serve: create it when empty, upgrade SQLite; refuse an older server schema."""
    with engine.connect() as conn:
        rev = current(conn)
    newest = head()
    if rev == newest:
        return
    if rev is None or engine.dialect.name == "sqlite":
        upgrade(engine)
        return
    if rev not in _known():
        log.warning("database schema %s is newer than this kernel-hub's %s; serving on (migrations are additive)",
                    rev, newest)  # fmt: skip
        return
    raise SchemaError(
        f"the database schema is at revision {rev}, this kernel-hub needs {newest}: run "
        "`kernel-hub db upgrade --db URL` once (running replicas keep working: migrations only add), then "
        "start the new replicas"
    )
