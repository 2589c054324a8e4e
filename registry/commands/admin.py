"""`kernel-hub token create | org create | key add`: the hub's admin commands.

They open the same database as a running server (SQLite WAL), so they work live.
"""

from __future__ import annotations

import argparse
import base64
import logging
from pathlib import Path

from registry.hub import validate
from registry.hub.errors import HubError

log = logging.getLogger(__name__)


def register(subparsers) -> None:
    tok = subparsers.add_parser("token", help="manage access tokens").add_subparsers(
        dest="token_cmd", required=True
    )
    t = tok.add_parser("create", help="create a token and print it (only its hash is stored)")
    t.add_argument("--user", required=True)
    t.add_argument(
        "--write", nargs="*", default=[], metavar="NAMESPACE", help="extra namespaces it may write"
    )
    t.add_argument("--data", type=Path, required=True)
    t.set_defaults(func=_token_create)

    org = subparsers.add_parser("org", help="manage orgs").add_subparsers(dest="org_cmd", required=True)
    o = org.add_parser("create", help="create (or update) an org")
    o.add_argument("name")
    o.add_argument("--trusted", action="store_true", help="mark as trustedKernelPublisher")
    o.add_argument("--member", action="append", default=[], metavar="USER")
    o.add_argument("--data", type=Path, required=True)
    o.set_defaults(func=_org_create)

    key = subparsers.add_parser("key", help="manage publisher signing keys").add_subparsers(
        dest="key_cmd", required=True
    )
    k = key.add_parser("add", help="register an ed25519 public key for a namespace")
    k.add_argument("namespace")
    k.add_argument(
        "--public-key", type=Path, required=True, help="raw 32 bytes, base64 of them, or a PEM file"
    )
    k.add_argument("--data", type=Path, required=True)
    k.set_defaults(func=_key_add)


def _accounts(data: Path):
    from registry.hub.storage import db
    from registry.hub.storage.accounts import Accounts

    return Accounts(db.connect(data))


def _token_create(args: argparse.Namespace) -> int:
    for name in (args.user, *args.write):
        validate.namespace(name)
    print(_accounts(args.data).create_token(args.user, args.write))
    return 0


def _org_create(args: argparse.Namespace) -> int:
    for name in (args.name, *args.member):
        validate.namespace(name)
    _accounts(args.data).create_org(args.name, args.trusted, args.member)
    log.info(
        "org %s: trusted=%s, members added: %s", args.name, args.trusted, ", ".join(args.member) or "none"
    )
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
    try:
        key_id = _accounts(args.data).add_key(args.namespace, _read_public_key(args.public_key))
    except HubError as e:
        raise HubError(e.kind, f"{args.public_key}: {e.message}") from None
    print(key_id)
    return 0
