"""`kernel-hub serve | token create | org create | key add`: the server and its admin commands.

Admin commands open the same database as a running server (SQLite WAL), so they work live.
"""

from __future__ import annotations

import argparse
import base64
import sys
from pathlib import Path

from . import validate
from .errors import HubError


def register(subparsers) -> None:
    p = subparsers.add_parser("serve", help="run the hub HTTP server")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--data", type=Path, required=True, help="data directory (SQLite DB + blobs)")
    p.add_argument("--public-url", help="absolute base URL clients use (default: from the request Host)")
    p.add_argument("--page-size", type=int, default=1000, help="entries per tree/commits page")
    p.add_argument(
        "--lfs-threshold",
        type=int,
        default=None,
        metavar="BYTES",
        help="answer uploadMode=lfs for files of at least BYTES (publishers must then set "
        "HF_HUB_DISABLE_XET=1); default: every file is uploaded inline",
    )
    p.add_argument("--max-commit-bytes", type=int, default=512 * 1024 * 1024)
    p.add_argument("--log-level", default="warning")
    p.set_defaults(func=_serve)

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
    from .storage import db
    from .storage.accounts import Accounts

    return Accounts(db.connect(data))


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from .app import create_app
    from .web import HubConfig

    config = HubConfig(
        public_url=args.public_url,
        page_size=args.page_size,
        lfs_threshold=args.lfs_threshold,
        max_commit_bytes=args.max_commit_bytes,
    )
    app = create_app(args.data, config=config)
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, access_log=False)
    return 0


def _checked(fn, *values) -> None:
    try:
        for v in values:
            fn(v)
    except HubError as e:
        raise SystemExit(f"kernel-hub: {e.message}") from None


def _token_create(args: argparse.Namespace) -> int:
    _checked(validate.namespace, args.user, *args.write)
    print(_accounts(args.data).create_token(args.user, args.write))
    return 0


def _org_create(args: argparse.Namespace) -> int:
    _checked(validate.namespace, args.name, *args.member)
    _accounts(args.data).create_org(args.name, args.trusted, args.member)
    print(
        f"org {args.name}: trusted={args.trusted}, members added: {', '.join(args.member) or 'none'}",
        file=sys.stderr,
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
    _checked(validate.namespace, args.namespace)
    try:
        key_id = _accounts(args.data).add_key(args.namespace, _read_public_key(args.public_key))
    except HubError as e:
        raise SystemExit(f"kernel-hub: {args.public_key}: {e.message}") from None
    print(key_id)
    return 0
