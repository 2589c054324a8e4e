"""`kernel-hub matrix REPO --version N`: the compatibility matrix of a published version.

Prints markdown (CI job summaries), JSON or HTML; `--check` first runs `get_kernel` on this machine,
checks it against eager PyTorch and records the result on the repo's `compat` branch, so this and
later renders show it. Exits 1 when a promised environment has no passing path, 2 on usage/source errors.
`kernel-hub matrix-plan build|compat` prints the job lists the GitHub workflows fan out to.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from .output import output_arg

log = logging.getLogger(__name__)

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
        "--json", dest="format", action="store_const", const="json", help="the same as --format json"
    )
    p.add_argument(
        "--check",
        action="store_true",
        help="load the kernel here, check it against eager PyTorch, record the result on `compat`",
    )
    p.add_argument("--endpoint", help="hub URL (default: $HF_ENDPOINT, else the Hugging Face Hub)")
    p.add_argument(
        "--token", help="token (default: $HF_TOKEN or the saved token); --check needs write access"
    )
    p.add_argument(
        "--matrix",
        type=Path,
        help="build/matrix.toml to read the environments from (default: what the version promises in its "
        "metadata; for versions built without that, the matrix file here or in a parent folder)",
    )
    output_arg(p, "write the rendering here instead of stdout")
    p.set_defaults(func=run)

    plan = subparsers.add_parser(
        "matrix-plan",
        help="CI job list from build/matrix.toml (JSON for a workflow's strategy.matrix)",
        description='Print {"include": [...]} for `fromJSON` in .github/workflows: build jobs per variant '
        "(and CPU), or compat jobs per promised GPU arch with a runner.",
    )
    plan.add_argument(
        "which",
        choices=("build", "compat"),
        help="build: a job per variant; compat: a job per GPU arch with a runner",
    )
    plan.add_argument(
        "--matrix", type=Path, help="build/matrix.toml (default: the one here or in a parent folder)"
    )
    plan.set_defaults(func=run_plan)


def run_plan(args: argparse.Namespace) -> int:
    from registry.matrix.plan import build_jobs, compat_jobs
    from registry.spec.build_matrix import read_toml

    _, data = read_toml(args.matrix)
    jobs = build_jobs(data) if args.which == "build" else compat_jobs(data)
    print(json.dumps({"include": jobs}, separators=(",", ":")))
    return 0


def run(args: argparse.Namespace) -> int:
    from huggingface_hub.errors import HfHubHTTPError

    from registry.client.fetch import said
    from registry.errors import UsageError
    from registry.matrix import build_matrix, load_config, render_html_page, render_json, render_markdown
    from registry.matrix.config import promised_config
    from registry.matrix.store import (
        MatrixSourceError,
        check_records,
        speed_records,
        variant_metadata,
        version_commit,
    )
    from registry.wire import HubClient

    client = HubClient.at(args.endpoint, args.token)

    def config_for(variants):
        """--matrix when given, else what the version promises, else build/matrix.toml here (older builds)."""
        if args.matrix:
            return load_config(args.matrix)
        return promised_config(variants) or load_config(None)

    try:
        if args.version is None:
            if args.check:
                raise UsageError("--check needs --version N (the version to load)")
            targets = sorted(client.version_heads(args.repo).items())
        else:
            targets = [(args.version, version_commit(client, args.repo, args.version))]
        if args.check:
            from registry.matrix.probe import probe
            from registry.matrix.store import write_record

            record = probe(args.repo, args.version, targets[0][1], endpoint=args.endpoint, token=args.token)
            url = write_record(client, args.repo, record)
            verdict = "passed" if record.passed else "FAILED"
            log.info(
                "kernel-hub matrix: check %s on %s (%s); recorded: %s",
                verdict,
                record.fingerprint,
                record.variant or record.source,
                url,
            )
        matrices = []
        for n, commit in targets:
            variants = variant_metadata(client, args.repo, commit)
            matrices.append(
                build_matrix(
                    config_for(variants),
                    repo=args.repo,
                    version=n,
                    commit=commit,
                    variants=variants,
                    records=check_records(client, args.repo, commit),
                    speed=speed_records(client, args.repo, commit),
                )
            )
    except HfHubHTTPError as e:  # the hub refused a request: a source error like a missing version
        raise MatrixSourceError(f"{args.repo} on {client.endpoint}: {said(e)}") from e
    if not matrices:
        raise MatrixSourceError(f"{args.repo} has no version branches (vN); publish one first")
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
    if problems:  # one line; the report lists them grouped by reason, -v each one here
        log.warning(
            "kernel-hub matrix: %d broken promise(s), listed by reason in the report; -v lists each",
            len(problems),
        )
    for p in problems:
        log.debug("kernel-hub matrix: broken promise: %s", p)
    return 1 if problems else 0
