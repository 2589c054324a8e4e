"""`kernel-hub versions REPO` (each vN and the builds it pointed at: commit, date, signer) and
`kernel-hub info REPO` (a repo's summary: versions, the newest one's variants and signer, trust, keys)."""

from __future__ import annotations

import argparse
import json


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("repo", help="kernel repo id, e.g. org/fused-mlp")
    p.add_argument("--endpoint", help="hub URL (default: $HF_ENDPOINT, else the Hugging Face Hub)")
    p.add_argument("--token", help="read token for private repos (default: $HF_TOKEN or the saved token)")
    p.add_argument("--json", action="store_true", help="print JSON")


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "versions",
        help="list each vN of a kernel repo with its history (commit, date, signer)",
        description="Each version branch vN, newest first, with every build it pointed at (newest first): "
        "commit, date, title and the key that signed it. Read from the hub; no checkout needed.",
    )
    _common(p)
    p.add_argument("--version", type=int, metavar="N", help="only vN")
    p.set_defaults(func=_versions)
    p = subparsers.add_parser(
        "info",
        help="summary of a kernel repo: versions, newest variants, signer, trust, keys",
        description="What the hub knows of a kernel repo: its versions, the newest one's variants and "
        "signing key, whether its namespace is a trusted kernel publisher, and the namespace's keys.",
    )
    _common(p)
    p.set_defaults(func=_info)


def _versions(args: argparse.Namespace) -> int:
    from registry.client.fetch import Hub
    from registry.client.releases import history_rows, version_history

    found = version_history(Hub.from_env(args.endpoint, args.token), args.repo, args.version)
    if args.json:
        print(json.dumps(history_rows(found), indent=1))
        return 0
    if not found:
        print(f"{args.repo}: no versions published yet")
    for v in found:
        print(f"v{v.number}  {v.head}")
        for r in v.history:
            signer = f"key {r.signer}" if r.signer else "unsigned"
            mark = "*" if r.commit == v.head else " "
            print(f"  {mark} {r.commit[:12]}  {r.date}  {signer}  {r.title}")
    return 0


def _info(args: argparse.Namespace) -> int:
    from registry.client.fetch import Hub
    from registry.client.releases import repo_info

    info = repo_info(Hub.from_env(args.endpoint, args.token), args.repo)
    if args.json:
        print(json.dumps(info, indent=1))
        return 0
    print(f"{info['repo']} on {info['endpoint']}")
    print(f"  trusted publisher: {'yes' if info['trusted_publisher'] else 'no'}")
    keys = info["keys"]
    print("  publisher keys: " + ("(no key route: keys ship in the repo)" if keys is None else ", ".join(
        k["id"] + (f" (rotation endorsed by {k['endorsed_by']})" if k.get("endorsed_by") else "") for k in keys
    ) or "none"))  # fmt: skip
    vs = ", ".join(f"v{v['version']} ({v['commit'][:12]}, {v['date']})" for v in info["versions"])
    print(f"  versions: {vs or 'none'}")
    latest = info["latest"]
    if latest:
        print(
            f"  latest: v{latest['version']} signed by {('key ' + latest['signer']) if latest['signer'] else 'nobody'}"
        )
        for name, backend in latest["variants"].items():
            print(f"    {name}  {backend}")
    return 0
