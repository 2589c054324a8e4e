"""`kernel-hub db upgrade`: move the hub's database schema to this kernel-hub's newest revision (Alembic).

Run it once per database before starting replicas of a newer kernel-hub; the replicas already running keep
working (migrations only add). The embedded SQLite database is also upgraded by `serve` itself.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from registry import constants


def register(subparsers) -> None:
    db = subparsers.add_parser("db", help="manage the hub's database schema").add_subparsers(
        dest="db_cmd", required=True
    )
    up = db.add_parser("upgrade", help="create or upgrade the schema to the newest revision")
    up.add_argument("--data", type=Path, help="data directory of the embedded SQLite database")
    up.add_argument("--db", metavar="URL", default=constants.hub_db(), help="database URL")
    up.set_defaults(func=_upgrade)


def _upgrade(args: argparse.Namespace) -> int:
    from registry.errors import UsageError
    from registry.hub.storage import db, schema

    if not (args.data or args.db):
        raise UsageError("give --data DIR or --db URL (or set KERNEL_HUB_DB)")
    before, after = schema.upgrade(db.connect(args.db or args.data, prepare=False))
    print(f"schema {after}" + (f" (was {before or 'empty'})" if before != after else " (already newest)"))
    return 0
