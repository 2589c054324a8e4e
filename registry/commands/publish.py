"""`kernel-hub publish REPO DIST --version N`: upload a built dist and move vN to it atomically."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from .output import json_arg, print_json


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "publish",
        help="publish a built dist as version N of a kernel repo",
        description="Sign, upload to a temporary branch, then move vN there in one compare-and-swap. "
        "Refuses a changed public API on an existing vN (publish it as vN+1).",
    )
    p.add_argument("repo", help="kernel repo id, e.g. org/fused-mlp")
    p.add_argument("dist", type=Path, help="dist directory written by `kernel-hub build`")
    p.add_argument("--version", type=int, required=True, help="N >= 1: publishes branch vN")
    p.add_argument("--endpoint", help="hub URL (default: $HF_ENDPOINT, else the Hugging Face Hub)")
    p.add_argument("--token", help="write token (default: $HF_TOKEN or the saved token)")
    p.add_argument(
        "--key",
        type=Path,
        help="ed25519 publisher key (default: $KERNEL_HUB_KEY or ~/.config/kernel-hub/keys/<ns>.pem)",
    )
    p.add_argument(
        "--allow-dropping-variants",
        action="store_true",
        help="let vN lose variants its current head has (default: refused)",
    )
    p.add_argument(
        "--update",
        action="store_true",
        help="move an existing vN that holds another build to this one (same API; default: refused)",
    )
    p.add_argument("--private", action="store_true", help="create the repo as private if it does not exist")
    p.add_argument(
        "--sigstore",
        action="store_true",
        help="also sign keyless (metadata.json.sigstore) with this CI job's OIDC identity "
        "(GitHub Actions with `permissions: id-token: write`)",
    )
    json_arg(p, "the result (repo, version, commit, previous head, variants, key id, notes)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from registry.publisher.publish import publish

    result = publish(
        args.repo,
        args.dist,
        args.version,
        endpoint=args.endpoint,
        token=args.token,
        key_path=args.key,
        private=args.private,
        allow_dropping_variants=args.allow_dropping_variants,
        sigstore=args.sigstore,
        update=args.update,
    )
    if args.json:
        print_json({**dataclasses.asdict(result), "unchanged": result.unchanged})
    else:
        print(result.summary())
    return 0
