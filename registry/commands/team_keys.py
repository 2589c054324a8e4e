"""`kernel-hub key export | import | rotate`: a team's publisher key on its publishers' machines and CI.

Registered into the `key` group of `admin.py` (whose `add`, `list`, `revoke` work on the hub's own store);
these work on the local key file and, for `rotate`, the hub's key route.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

log = logging.getLogger(__name__)

KEY_HELP = "the publisher key file (default: $KERNEL_HUB_KEY or ~/.config/kernel-hub/keys/<ns>.pem)"


def register(key_actions) -> None:
    k = key_actions.add_parser(
        "export",
        help="print the namespace's private publisher key (PEM) to share it with the team or CI",
        description="Print the publisher key as PEM (or write it with --output, mode 0600). Keep it secret: "
        "store it as a CI secret and `kernel-hub key import NAMESPACE -` it there.",
    )
    k.add_argument("namespace", help="the namespace (org) whose publisher key it is")
    k.add_argument("--key", type=Path, help=KEY_HELP)
    k.add_argument("-o", "--output", type=Path, help="write it to this file instead of stdout")
    k.set_defaults(func=_export)

    k = key_actions.add_parser(
        "import",
        help="install a shared publisher key (PEM file, or - for stdin) for a namespace",
        description="Install the team's publisher key where `publish` looks for it. A different key already "
        "there is refused unless --force.",
    )
    k.add_argument("namespace", help="the namespace (org) whose publisher key it is")
    k.add_argument("file", help="the PEM `key export` wrote, or - to read it from stdin")
    k.add_argument("--key", type=Path, help="install it here instead (default: where `publish` looks)")
    k.add_argument("--force", action="store_true", help="replace a different key already there")
    k.set_defaults(func=_import)

    k = key_actions.add_parser(
        "rotate",
        help="add a new publisher key, signed in by the current one (pinned loaders follow it)",
        description="Register a new publisher key for NAMESPACE on the hub, endorsed by the current key. "
        "Without --new-key a fresh key replaces the current key file, the old one kept as "
        "<file>.retired-<id>.",
    )
    k.add_argument("namespace", help="the namespace (org) whose publisher key it is")
    k.add_argument("--key", type=Path, help="the current key: " + KEY_HELP)
    k.add_argument("--new-key", type=Path, help="endorse this key file instead (created when missing)")
    k.add_argument("--endpoint", help="hub URL (default: $HF_ENDPOINT)")
    k.add_argument("--token", help="write token of the namespace (default: $HF_TOKEN or the saved token)")
    k.set_defaults(func=_rotate)


def _export(args: argparse.Namespace) -> int:
    from registry.atomic import write_atomic
    from registry.publisher.team_keys import export_key

    pem, kid = export_key(args.namespace, args.key)
    if args.output:
        write_atomic(args.output, pem)
        log.info("publisher key %s of %s written to %s (keep it secret)", kid, args.namespace, args.output)
    else:
        sys.stdout.write(pem.decode())
    return 0


def _import(args: argparse.Namespace) -> int:
    from registry.publisher.team_keys import import_key

    path, kid = import_key(args.namespace, args.file, args.key, force=args.force)
    print(f"{args.namespace}: publisher key {kid} at {path}")
    return 0


def _rotate(args: argparse.Namespace) -> int:
    from registry.publisher.team_keys import rotate_key

    r = rotate_key(
        args.namespace, endpoint=args.endpoint, token=args.token, key_path=args.key, new_key_path=args.new_key
    )
    where = "" if r.registered else " (this hub has no key route: the next publish ships the endorsement)"
    print(
        f"{r.namespace}: key {r.new_id} added, endorsed by {r.old_id}; publish signs with {r.new_path}{where}"
    )
    return 0
