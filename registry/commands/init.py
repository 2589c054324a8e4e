"""`kernel-hub init NAME`: scaffold a kernel package (Triton op, eager reference, build.toml, test, README)."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "init",
        help="scaffold a new kernel package that builds, publishes and loads as it stands",
        description="Write NAME/ with a Triton op, its eager reference (the check's oracle and the fallback), "
        "build.toml, a test and a README. Then: kernel-hub build NAME; kernel-hub publish ORG/NAME dist/NAME.",
    )
    p.add_argument("name", help="kernel name: lower-case letters, digits and '-', e.g. my-kernel")
    p.add_argument("--dir", type=Path, default=Path("."), help="folder to create NAME/ in (default: here)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from registry.publisher.scaffold import init_package

    dest = init_package(args.name, args.dir)
    print(dest)
    print(f"  next: kernel-hub build {dest} --output dist/{args.name}")
    return 0
