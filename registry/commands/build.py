"""`kernel-hub build [PATH]`: the Hub layout dist/<kernel>/build/<variant>/ from a kernel package's sources."""

from __future__ import annotations

import argparse
from pathlib import Path

from .output import json_arg, output_arg, print_json


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "build",
        help="build every variant of the kernel into the Hub layout",
        description="Build build/<variant>/ dirs (package + metadata.json with digests) for every variant "
        "of the package's build.toml (or the build/matrix.toml it names) plus torch-cpu and torch-universal.",
    )
    p.add_argument(
        "path",
        nargs="?",
        type=Path,
        help="kernel package folder with a build.toml (default: --source, else this folder when it has a "
        "build.toml, else kernel_src/fused_mlp)",
    )
    p.add_argument("--source", type=Path, help="the same as PATH (kept for older scripts)")
    output_arg(p, "dist directory, replaced (default: dist/<kernel name>)")
    json_arg(p, "the variants built (status, path, notes)")
    p.add_argument(
        "--matrix", type=Path, help="build matrix (default: build/matrix.toml here or in a parent folder)"
    )
    p.add_argument(
        "--variant",
        action="append",
        dest="variants",
        metavar="NAME",
        help="build only this variant (repeatable)",
    )
    p.add_argument(
        "--no-aot", action="store_true", help="skip Triton AOT cubins (Triton JIT-compiles at run time)"
    )
    p.add_argument(
        "--arch",
        action="append",
        dest="archs",
        metavar="SM",
        help="AOT-compile only this arch of the matrix (repeatable; default: all)",
    )
    p.add_argument(
        "--require-cuda",
        action="store_true",
        help="fail instead of skipping when the CUDA variant cannot be built here",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from registry.errors import UsageError
    from registry.publisher.build import build, kernel_name
    from registry.spec.package import BUILD_TOML

    if args.path and args.source and args.path != args.source:
        raise UsageError(f"two packages given ({args.path} and --source {args.source}): pass one")
    here = Path(".") if Path(BUILD_TOML).is_file() else None  # run inside a package: build it
    source = args.path or args.source or here or Path("kernel_src/fused_mlp")
    result = build(
        source,
        args.output or Path("dist") / kernel_name(source, args.matrix),
        args.matrix,
        only=args.variants,
        aot=not args.no_aot,
        aot_archs=tuple(args.archs) if args.archs else None,
        require_cuda=args.require_cuda,
    )
    if args.json:
        print_json(
            {
                "out": str(result.out),
                "variants": [
                    {"name": v.name, "status": v.status, "path": v.path, "notes": list(v.notes)}
                    for v in result.variants
                ],
            }
        )
        return 0
    for v in result.variants:
        where = f"  {v.path}" if v.path else ""
        print(f"{v.status:8} {v.name}{where}")
        for note in v.notes:
            print(f"         {note}")
    return 0
