"""`kernel-hub build`: the Hub layout dist/<kernel>/build/<variant>/ from the kernel sources."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "build",
        help="build every variant of the kernel into the Hub layout",
        description="Build build/<variant>/ dirs (package + metadata.json with digests) for every variant "
        "in build/matrix.toml plus torch-cpu and torch-universal.",
    )
    p.add_argument(
        "--source", type=Path, default=Path("kernel_src/fused_mlp"), help="kernel package directory"
    )
    p.add_argument("--out", type=Path, default=Path("dist/fused-mlp"), help="dist directory (replaced)")
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
    from registry.publisher.build import build

    result = build(
        args.source,
        args.out,
        args.matrix,
        only=args.variants,
        aot=not args.no_aot,
        aot_archs=tuple(args.archs) if args.archs else None,
        require_cuda=args.require_cuda,
    )
    for v in result.variants:
        where = f"  {v.path}" if v.path else ""
        print(f"{v.status:8} {v.name}{where}")
        for note in v.notes:
            print(f"         {note}")
    return 0
