"""`kernel-hub mirror REPO --from URL`: copy a kernel repo's versions from any Hub-API server into ours."""

from __future__ import annotations

import argparse


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "mirror",
        help="copy every vN of a kernel repo from another Hub-API server, signatures kept",
        description="Download each version branch of REPO from --from (e.g. the Hugging Face Hub) and upload it "
        "unchanged as the same branch of --to-repo on this hub; the publisher's signatures and keys go along. A "
        "target vN that holds another build is left, and nothing mirrored, unless --update.",
    )
    p.add_argument("repo", help="source kernel repo id, e.g. kernels-community/activation")
    p.add_argument(
        "--from", dest="source_endpoint", required=True, help="source hub URL, e.g. the Hugging Face Hub's"
    )
    p.add_argument("--from-token", help="read token for the source hub (default: none)")
    p.add_argument("--to-repo", help="target repo id (default: the same as REPO)")
    p.add_argument("--endpoint", help="target hub URL (default: $HF_ENDPOINT)")
    p.add_argument("--token", help="write token for the target hub (default: $HF_TOKEN or the saved token)")
    p.add_argument(
        "--update",
        action="store_true",
        help="move a target vN that holds another build to the source's (without it nothing is mirrored then)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from registry.publisher.mirror import mirror

    result = mirror(
        args.repo,
        args.to_repo,
        source_endpoint=args.source_endpoint,
        source_token=args.from_token,
        endpoint=args.endpoint,
        token=args.token,
        update=args.update,
    )
    for n, commit in sorted(result.versions.items()):
        same = " (unchanged)" if n in result.unchanged else ""
        print(f"{result.target} v{n} -> {commit}{same}")
    for note in result.notes:
        print(f"  {note}")
    return 0
