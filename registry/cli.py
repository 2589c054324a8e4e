"""The `kernel-hub` command: one argparse tree; each sub-command lives in the module that owns it."""

from __future__ import annotations

import argparse
import importlib
import sys

# Modules that add sub-commands: each defines `register(subparsers)`, and each parser it adds sets
# `func=<callable(args) -> int>`. Imported lazily per run so `kernel-hub serve` never imports torch.
COMMAND_MODULES = [
    "registry.hub.commands",  # serve, token, org, key
    "registry.commands",  # build, publish, variants, demo, matrix
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kernel-hub", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
