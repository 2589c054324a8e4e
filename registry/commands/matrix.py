"""`kernel-hub matrix REPO --version N`: the compatibility matrix of a published version.

Prints markdown (CI job summaries), JSON or HTML; `--check` first runs `get_kernel` on this machine,
checks it against eager PyTorch and records the result on the repo's `compat` branch, so this and
later renders show it. Exits 1 when a promised environment has no passing path, 2 on usage/source errors.
`kernel-hub matrix-plan build|compat` prints the job lists the GitHub workflows fan out to.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

FORMATS = ("md", "json", "html")


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "matrix",
        help="compatibility matrix of a kernel version (which variant each environment gets)",
        description=__doc__.split("\n\n")[0],
    )
    p.add_argument("repo", help="kernel repo id, e.g. org/fused-mlp")
    p.add_argument("--version", type=int, help="N (branch vN); default: every version")
    p.add_argument("--format", choices=FORMATS, default="md", help="output format (default: md)")
    p.add_argument(
        "--check",
        action="store_true",
        help="load the kernel here, check it against eager PyTorch, record the result on `compat`",
    )
    p.add_argument("--endpoint", help="hub URL (default: $HF_ENDPOINT, else the Hugging Face Hub)")
    p.add_argument(
        "--token", help="token (default: $HF_TOKEN or the saved token); --check needs write access"
    )
    p.add_argument("--matrix", type=Path, help="build/matrix.toml to read the environments from")
    p.add_argument("--output", type=Path, help="write the rendering here instead of stdout")
    p.set_defaults(func=run)

    plan = subparsers.add_parser(
        "matrix-plan",
        help="CI job list from build/matrix.toml (JSON for a workflow's strategy.matrix)",
        description='Print {"include": [...]} for `fromJSON` in .github/workflows: build jobs per variant '
        "(and CPU), or compat jobs per promised GPU arch with a runner.",
    )
    plan.add_argument("which", choices=("build", "compat"))
    plan.add_argument("--matrix", type=Path, help="build/matrix.toml (default: the repository's)")
    plan.set_defaults(func=run_plan)


def run_plan(args: argparse.Namespace) -> int:
    import tomllib

    from registry.matrix.config import DEFAULT_CONFIG, MatrixConfigError
    from registry.matrix.plan import build_jobs, compat_jobs

    path = args.matrix or DEFAULT_CONFIG
    try:
        data = tomllib.loads(path.read_text())
        jobs = build_jobs(data) if args.which == "build" else compat_jobs(data)
    except (OSError, tomllib.TOMLDecodeError, MatrixConfigError) as e:
        print(f"kernel-hub matrix-plan: {path}: {e}", file=sys.stderr)
        return 2
    print(json.dumps({"include": jobs}, separators=(",", ":")))
    return 0


def run(args: argparse.Namespace) -> int:
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError

    from registry.matrix import build_matrix, load_config, render_html_page, render_json, render_markdown
    from registry.matrix.config import MatrixConfigError
    from registry.matrix.records import RecordError
    from registry.matrix.store import (
        MatrixSourceError,
        check_records,
        variant_metadata,
        version_commit,
        versions,
    )

    api = HfApi(endpoint=args.endpoint, token=args.token)
    try:
        config = load_config(args.matrix)
        if args.version is None:
            if args.check:
                print("kernel-hub matrix: --check needs --version N (the version to load)", file=sys.stderr)
                return 2
            targets = sorted(versions(api, args.repo).items())
        else:
            targets = [(args.version, version_commit(api, args.repo, args.version))]
        if args.check:
            from registry.matrix.probe import probe
            from registry.matrix.store import write_record

            record = probe(args.repo, args.version, targets[0][1], endpoint=args.endpoint, token=args.token)
            url = write_record(api, args.repo, record)
            verdict = "passed" if record.passed else "FAILED"
            print(
                f"kernel-hub matrix: check {verdict} on {record.fingerprint} "
                f"({record.variant or record.source}); recorded: {url}",
                file=sys.stderr,
            )
        matrices = [
            build_matrix(
                config,
                repo=args.repo,
                version=n,
                commit=commit,
                variants=variant_metadata(api, args.repo, commit),
                records=check_records(api, args.repo, commit),
            )
            for n, commit in targets
        ]
    except (MatrixConfigError, MatrixSourceError, RecordError, HfHubHTTPError) as e:
        print(f"kernel-hub matrix: {e}", file=sys.stderr)
        return 2
    if not matrices:
        print(
            f"kernel-hub matrix: {args.repo} has no version branches (vN); publish one first", file=sys.stderr
        )
        return 2
    if args.format == "md":
        text = "\n".join(render_markdown(m) for m in matrices)
    elif args.format == "json":
        text = (
            render_json(matrices[0])
            if len(matrices) == 1
            else "[" + ",".join(render_json(m) for m in matrices) + "]\n"
        )
    else:
        text = render_html_page(matrices, f"{args.repo}: compatibility matrix")
    if args.output:
        args.output.write_text(text)
    else:
        sys.stdout.write(text)
    problems = [p for m in matrices for p in m.problems()]
    for p in problems:
        print(f"kernel-hub matrix: broken promise: {p}", file=sys.stderr)
    return 1 if problems else 0
