"""`kernel-hub token | org | key`: the hub's admin commands (create, list, revoke), and the storage options
every command that opens a hub takes (`serve`, `gc`, `fsck` too).

They open the same database as a running server (SQLite WAL, or the fleet's PostgreSQL), so they work live.
A `--data` (or `--db`) that holds no hub is refused (a mistyped path would otherwise get a fresh database and a
token no server accepts); `--init` on a create command starts a new hub there. `open_store` / `open_storage`
are the one place that turns the command line into the hub's store.
"""

from __future__ import annotations

import argparse
import base64
import datetime
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from registry import constants
from registry.errors import UsageError
from registry.hub import validate
from registry.hub.errors import HubError

from .output import json_arg, print_json

if TYPE_CHECKING:
    from registry.hub.storage import Storage
    from registry.hub.storage.accounts import Accounts

log = logging.getLogger(__name__)

DATA_HELP = (
    "the hub's data directory: SQLite hub.sqlite3 + blobs/ (what `kernel-hub serve --data` uses; default: "
    "$KERNEL_HUB_DATA)"
)
DB_HELP = (
    "database instead of DATA/hub.sqlite3, e.g. postgresql+psycopg://USER:PASS@HOST:PORT/DB (default: "
    "$KERNEL_HUB_DB, which keeps the password out of the process list)"
)
BLOBS_HELP = (
    "blob store instead of DATA/blobs: a directory or s3://BUCKET/PREFIX (endpoint and credentials from "
    "AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION; default: $KERNEL_HUB_BLOBS)"
)
INIT_HELP = "start a new hub in --data (or --db) if it holds none (default: refuse, the path may be mistyped)"


def store_args(p: argparse.ArgumentParser, *, init: bool) -> None:
    """The options that say which hub store a command opens: `--data DIR`, or a fleet's `--db URL --blobs …`."""
    data = constants.hub_data() if not constants.hub_db() else None  # --db in the environment: a fleet
    p.add_argument("--data", type=Path, metavar="DIR", default=Path(data) if data else None, help=DATA_HELP)
    p.add_argument("--db", metavar="URL", default=constants.hub_db(), help=DB_HELP)
    p.add_argument(
        "--blobs",
        metavar="DIR|s3://BUCKET/PREFIX",
        default=constants.hub_blobs(),
        help=BLOBS_HELP,
    )
    if init:
        p.add_argument("--init", action="store_true", help=INIT_HELP)


def register(subparsers) -> None:
    tok = subparsers.add_parser(
        "token", help="manage access tokens", description="Create, list and revoke the hub's access tokens."
    ).add_subparsers(dest="token_cmd", required=True, metavar="ACTION")
    t = tok.add_parser("create", help="create a token and print it (only its hash is stored)")
    t.add_argument("--user", required=True, help="the user the token acts as (writes its own namespace)")
    t.add_argument(
        "--write", nargs="*", default=[], metavar="NAMESPACE", help="extra namespaces it may write"
    )
    store_args(t, init=True)
    t.set_defaults(func=_token_create)
    t = tok.add_parser("list", help="list tokens: id (hash prefix), user, extra namespaces, created")
    store_args(t, init=False)
    json_arg(t, "the tokens")
    t.set_defaults(func=_token_list)
    t = tok.add_parser("revoke", help="delete a token: it stops working at once")
    t.add_argument(
        "token", metavar="ID_OR_TOKEN", help="the token itself, or 8+ hex digits of its id (`token list`)"
    )
    store_args(t, init=False)
    t.set_defaults(func=_token_revoke)

    org = subparsers.add_parser(
        "org", help="manage orgs", description="Create orgs, list them, list and change their members."
    ).add_subparsers(dest="org_cmd", required=True, metavar="ACTION")
    o = org.add_parser("create", help="create an org, or update its trusted flag and add members")
    o.add_argument("name", help="org name (a namespace)")
    o.add_argument(
        "--trusted", action="store_true", help="mark it trustedKernelPublisher (kernels trusts its code)"
    )
    o.add_argument("--member", action="append", default=[], metavar="USER", help="add this user (repeatable)")
    store_args(o, init=True)
    o.set_defaults(func=_org_create)
    o = org.add_parser("list", help="list orgs: name, trusted flag, number of members")
    store_args(o, init=False)
    json_arg(o, "the orgs")
    o.set_defaults(func=_org_list)
    o = org.add_parser("members", help="list an org's members (after --add/--remove)")
    o.add_argument("name", help="org name")
    o.add_argument(
        "--add", action="append", default=[], metavar="USER", help="add this user first (repeatable)"
    )
    o.add_argument(
        "--remove", action="append", default=[], metavar="USER", help="remove this user first (repeatable)"
    )
    store_args(o, init=False)
    json_arg(o, "the members")
    o.set_defaults(func=_org_members)

    key = subparsers.add_parser(
        "key",
        help="manage publisher signing keys",
        description="Register, list and revoke publisher keys on the hub (add/list/revoke, admin); share and "
        "rotate a team's key (export/import/rotate).",
    ).add_subparsers(dest="key_cmd", required=True, metavar="ACTION")
    k = key.add_parser(
        "add", help="register an ed25519 public key for a namespace on purpose (as the hub's admin)"
    )
    k.add_argument("namespace", help="the namespace whose versions the key signs")
    k.add_argument(
        "--public-key", type=Path, required=True, help="raw 32 bytes, base64 of them, or a PEM file"
    )
    store_args(k, init=True)
    k.set_defaults(func=_key_add)
    k = key.add_parser("list", help="list publisher keys: namespace, key id, registered")
    k.add_argument("namespace", nargs="?", help="only this namespace's keys")
    store_args(k, init=False)
    json_arg(k, "the keys (with rotation endorsements)")
    k.set_defaults(func=_key_list)
    k = key.add_parser("revoke", help="remove a publisher key: loaders stop accepting what only it signs")
    k.add_argument("namespace", help="the key's namespace")
    k.add_argument("key_id", help="its id (`key list`)")
    store_args(k, init=False)
    k.set_defaults(func=_key_revoke)
    from . import team_keys  # export / import / rotate: the local key file and the hub's key route

    team_keys.register(key)


def hub_exists(args: argparse.Namespace) -> bool:
    """Whether the database the options name holds a hub (a SQLite file, or a database with the hub's schema)."""
    from registry.hub.storage import db, schema

    if args.db:
        engine = db.connect(args.db, prepare=False)
        try:
            with engine.connect() as conn:
                return schema.current(conn) is not None
        finally:
            engine.dispose()
    if args.data:
        return (args.data / db.DB_FILE).is_file()
    raise UsageError("give --data DIR (or set KERNEL_HUB_DATA), or --db URL (or set KERNEL_HUB_DB)")


def _require_hub(args: argparse.Namespace, create: bool) -> None:
    """Refuse a store without a hub unless this command may start one (`serve`, or a create command's --init)."""
    from registry.hub.storage import db

    if create or hub_exists(args):
        return
    where = f"--db {_safe_url(args.db)}" if args.db else f"--data {args.data}"
    if not getattr(args, "init", False):
        hint = "pass --init to start a new hub there" if hasattr(args, "init") else "check the path"
        what = "an empty database" if args.db else f"no {db.DB_FILE}"
        raise UsageError(f"{where} holds no hub ({what}); {hint}")
    log.info("starting a new hub in %s", _safe_url(args.db) if args.db else args.data)


def _safe_url(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)  # hub_exists has parsed it already


def open_store(args: argparse.Namespace) -> Accounts:
    """The hub's accounts store named by the command line (`--data` or `--db`); refuses a store without a hub
    unless --init. Blobs are not opened: accounts live in the database only."""
    from registry.hub.storage import db
    from registry.hub.storage.accounts import Accounts

    _require_hub(args, create=False)
    return Accounts(db.connect(args.db or args.data))


def open_storage(args: argparse.Namespace, *, create: bool = False) -> Storage:
    """The hub's whole storage (database + blob store) named by the command line: `serve` (`create`: a new
    hub may start there), `gc`, `fsck`. Refuses a store without a hub unless `create`."""
    from registry.hub.storage import open_storage as open_hub_storage

    if args.data is None and not (args.db and args.blobs):
        raise UsageError("give --data DIR, or both --db URL and --blobs DIR|s3://BUCKET/PREFIX")
    _require_hub(args, create)
    return open_hub_storage(args.data, args.db, args.blobs)


def _when(epoch: float) -> str:
    return datetime.datetime.fromtimestamp(epoch, datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")


def _table(rows: list[list[str]], header: list[str], as_json: bool = False) -> None:
    """Aligned columns on stdout (nothing but the header when there are no rows); `as_json`: a JSON list of
    objects keyed by the header's words."""
    if as_json:
        keys = [h.lower().replace(" ", "_") for h in header]
        print_json([dict(zip(keys, r, strict=True)) for r in rows])
        return
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for r in [header, *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip())


def _token_create(args: argparse.Namespace) -> int:
    for name in (args.user, *args.write):
        validate.namespace(name)
    print(open_store(args).create_token(args.user, args.write))
    return 0


def _token_list(args: argparse.Namespace) -> int:
    rows = [
        [t["id"], t["user"], ",".join(t["write"]) or "-", _when(t["created_at"])]
        for t in open_store(args).tokens()
    ]
    _table(rows, ["ID", "USER", "ALSO WRITES", "CREATED"], args.json)
    return 0


def _token_revoke(args: argparse.Namespace) -> int:
    gone = open_store(args).revoke_token(args.token)
    log.info("token %s of %s revoked", gone["id"], gone["user"])
    return 0


def _org_create(args: argparse.Namespace) -> int:
    for name in (args.name, *args.member):
        validate.namespace(name)
    open_store(args).create_org(args.name, args.trusted, args.member)
    log.info(
        "org %s: trusted=%s, members added: %s", args.name, args.trusted, ", ".join(args.member) or "none"
    )
    return 0


def _org_list(args: argparse.Namespace) -> int:
    rows = [[o["name"], "yes" if o["trusted"] else "no", str(o["members"])] for o in open_store(args).orgs()]
    _table(rows, ["ORG", "TRUSTED", "MEMBERS"], args.json)
    return 0


def _org_members(args: argparse.Namespace) -> int:
    store = open_store(args)
    org = store.org(args.name)
    if org is None:
        raise HubError(
            "NotFound", f"no org {args.name!r} on this hub; create it with `kernel-hub org create`"
        )
    for user in args.add:
        validate.namespace(user)
    if args.add:
        store.create_org(args.name, org["trusted"], args.add)
    if args.remove:
        missing = sorted(set(args.remove) - set(store.remove_members(args.name, args.remove)))
        if missing:
            log.warning("not members of %s: %s", args.name, ", ".join(missing))
    members = store.org(args.name)["members"]
    if args.json:
        print_json(members)
        return 0
    for user in members:
        print(user)
    return 0


def _read_public_key(path: Path) -> str:
    """Base64 of the raw 32-byte key from a raw, base64 or PEM (SubjectPublicKeyInfo) file."""
    data = path.read_bytes()
    if len(data) == 32:
        return base64.b64encode(data).decode()
    if b"BEGIN PUBLIC KEY" in data:
        from cryptography.hazmat.primitives import serialization

        key = serialization.load_pem_public_key(data)
        raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        return base64.b64encode(raw).decode()
    return data.decode().strip()


def _key_add(args: argparse.Namespace) -> int:
    validate.namespace(args.namespace)
    store = open_store(args)
    try:
        key_id = store.add_key(args.namespace, _read_public_key(args.public_key), on_purpose=True)
    except HubError as e:
        raise HubError(e.kind, f"{args.public_key}: {e.message}") from None
    print(key_id)
    return 0


def _key_list(args: argparse.Namespace) -> int:
    keys = [k for k in open_store(args).all_keys() if args.namespace in (None, k["namespace"])]
    if args.json:
        print_json([{**k, "registered": _when(k["created_at"])} for k in keys])
        return 0
    _table(
        [[k["namespace"], k["id"], _when(k["created_at"])] for k in keys],
        ["NAMESPACE", "KEY ID", "REGISTERED"],
    )
    return 0


def _key_revoke(args: argparse.Namespace) -> int:
    if not open_store(args).revoke_key(args.namespace, args.key_id):
        raise HubError(
            "NotFound", f"no key {args.key_id} registered for {args.namespace}; see `kernel-hub key list`"
        )
    log.info("key %s of %s revoked", args.key_id, args.namespace)
    return 0
