"""`kernel-hub variants REPO --version N`: which variant this machine would load, and why each other is refused."""

from __future__ import annotations

import argparse
import json


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "variants",
        help="print the accept/reject trace of every build variant for this machine",
        description="Resolve a version, read every variant's metadata.json and decide each one for this "
        "machine (torch, CUDA, GPU arch, driver, Triton): the same decision get_kernel makes, without "
        "downloading any kernel.",
    )
    p.add_argument("repo", help="kernel repo id, e.g. org/fused-mlp")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--version", type=int, help="N: the vN branch")
    which.add_argument("--revision", help="branch, tag or 40-hex commit")
    p.add_argument("--endpoint", help="hub URL (default: $HF_ENDPOINT, else the Hugging Face Hub)")
    p.add_argument("--token", help="read token for private repos (default: $HF_TOKEN or the saved token)")
    p.add_argument(
        "--backend", choices=["cpu"], help="consider CPU builds as the kernel (as kernels' backend='cpu')"
    )
    p.add_argument("--json", action="store_true", help="print the environment and verdicts as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from registry.client.fetch import Hub, resolve_commit, variant_metadata
    from registry.client.resolve import current_env, resolve_variant, trace_lines

    hub = Hub.from_env(args.endpoint, args.token)
    commit = resolve_commit(hub, args.repo, args.version, args.revision)
    metas = variant_metadata(hub, args.repo, commit)
    env = current_env()
    res = resolve_variant(metas, env, backend=args.backend)
    if args.json:
        out = {
            "repo": args.repo,
            "commit": commit,
            "env": asdict(env),
            "chosen": res.chosen,
            "fallback_reason": res.fallback_reason,
            "verdicts": [asdict(v) for v in res.verdicts],
        }
        print(json.dumps(out, indent=2))
        return 0
    print(f"{args.repo}@{commit}")
    print("this machine: " + ", ".join(f"{k}={v}" for k, v in asdict(env).items()))
    for line in trace_lines(res, []):
        print(line)
    print(f"chosen: {res.chosen}" if res.chosen else f"fallback: {res.fallback_reason}")
    return 0
