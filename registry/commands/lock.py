"""`kernel-hub lock [PROJECT]`: write the project's `kernels.lock` (stock `kernels` reads it, and so does get_kernel)."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from registry.errors import KernelHubError, UsageError

from .output import output_arg


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "lock",
        help="pin the project's kernels to the commits their vN branches are at now (kernels.lock)",
        description="Resolve each kernel dependency (pyproject.toml [tool.kernels.dependencies], or --kernel) "
        "to the commit of its branch vN and write kernels.lock in the format of `kernels lock`.",
    )
    p.add_argument("project", type=Path, nargs="?", default=Path("."), help="project folder (default: .)")
    p.add_argument(
        "--kernel",
        action="append",
        metavar="REPO=N",
        help="lock this kernel at version N instead of reading pyproject.toml (repeatable)",
    )
    output_arg(p, "where to write (default: PROJECT/kernels.lock)")
    p.add_argument("--endpoint", help="hub URL (default: $HF_ENDPOINT, else the Hugging Face Hub)")
    p.add_argument("--token", help="read token for private repos (default: $HF_TOKEN or the saved token)")
    p.add_argument(
        "--offline",
        action="store_true",
        help="lock the commits this machine last resolved (the HF cache's refs/vN) without asking the hub; "
        "without it, a hub that does not answer writes nothing",
    )
    p.set_defaults(func=run)


def _kernel_args(items: list[str]) -> dict[str, int]:
    deps = {}
    for item in items:
        repo, eq, version = item.partition("=")
        if not eq or not repo or not version.isdigit():
            raise UsageError(f"--kernel {item!r}: use REPO=N, e.g. --kernel org/fused-mlp=1")
        deps[repo] = int(version)
    return deps


def run(args: argparse.Namespace) -> int:
    from registry.client.fetch import Hub
    from registry.client.lock import LOCK_FILE, lock_text, project_dependencies

    deps = _kernel_args(args.kernel) if args.kernel else project_dependencies(args.project)
    hub = Hub.from_env(args.endpoint, args.token)
    if args.offline:
        hub = dataclasses.replace(hub, offline_env=True)
    text = lock_text(hub, deps)
    if hub.unreachable is not None:  # the pins came from the cache: maybe not what vN is at now
        raise KernelHubError(
            f"{hub.endpoint} is unreachable ({hub.unreachable}), so the commits vN is at now are unknown; "
            f"nothing written: retry when it answers, or pass --offline to lock the cached commits"
        )
    out = args.output or args.project / LOCK_FILE
    out.write_text(text)
    print(out)
    return 0
