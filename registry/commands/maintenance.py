"""`kernel-hub gc` and `kernel-hub fsck`: maintenance of a hub's storage (`--data`, or `--db`/`--blobs` of a
fleet), safe while it serves."""

from __future__ import annotations

import argparse
import dataclasses
import logging

from registry.commands.admin import open_storage, store_args
from registry.spec import names

from .output import json_arg, print_json

log = logging.getLogger(__name__)


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "gc", help="remove crashed uploads' temp files, stale publish/* branches and unreferenced blobs"
    )
    store_args(p, init=False)
    p.add_argument(
        "--grace",
        type=float,
        default=3600.0,
        metavar="S",
        help="keep unreferenced blobs written or re-uploaded within S seconds (longer than any request)",
    )
    p.add_argument(
        "--publish-max-age",
        type=float,
        default=names.STALE_PUBLISH_S,
        metavar="S",
        help="delete the temporary branches (publish/<start>-<rand>) of publishes that started over S seconds ago "
        f"(interrupted ones; default {names.STALE_PUBLISH_S:g}, the publisher's own rule)",
    )
    p.add_argument("--dry-run", action="store_true", help="report what would go, change nothing")
    json_arg(p, "the report")
    p.set_defaults(func=_gc)

    f = subparsers.add_parser("fsck", help="re-hash every blob; quarantine damaged ones, report missing ones")
    store_args(f, init=False)
    f.add_argument("--no-quarantine", action="store_true", help="only report damaged blobs")
    json_arg(f, "the report")
    f.set_defaults(func=_fsck)


def _open(args: argparse.Namespace):
    """The storage of a hub that exists: never creates an empty one (a typo would look like a clean hub)."""
    from registry.hub.storage.repos import RepoStore

    storage = open_storage(args)
    return RepoStore(storage.engine), storage.blobs


def _gc(args: argparse.Namespace) -> int:
    from registry.hub.maintenance import gc

    store, blobs = _open(args)
    r = gc(store, blobs, grace_s=args.grace, publish_max_age_s=args.publish_max_age, dry_run=args.dry_run)
    if args.json:
        print_json({"dry_run": args.dry_run, **dataclasses.asdict(r)})
        return 0
    verb = "would remove" if args.dry_run else "removed"
    print(
        f"{verb}: {r.temp_files} temp files, {len(r.branches)} publish branches, "
        f"{r.blobs} unreferenced blobs ({r.blob_bytes} bytes); kept {r.kept_recent} younger than the grace"
    )
    for b in r.branches:
        print(f"  branch {b}")
    if r.kept_branches:
        print(
            f"kept {len(r.kept_branches)} publish branches younger than {args.publish_max_age:g} s (maybe a "
            "publish still running; --publish-max-age 0 removes them too):"
        )
        for b in r.kept_branches:
            print(f"  branch {b}")
    return 0


def _fsck(args: argparse.Namespace) -> int:
    from registry.hub.maintenance import fsck

    store, blobs = _open(args)
    r = fsck(store, blobs, quarantine=not args.no_quarantine)
    if args.json:
        print_json({"ok": r.ok, **dataclasses.asdict(r)})
        return 0 if r.ok else 1
    print(f"checked {r.checked} blobs: {len(r.damaged)} damaged, {len(r.missing)} referenced but missing")
    for line in r.damaged:
        print(f"  damaged {line}")
    for sha in r.missing:
        print(f"  missing {sha}")
    if not r.ok:
        log.warning(
            "fsck found problems: restore the blobs from a backup, or have their publishers re-upload them"
        )
    return 0 if r.ok else 1
