"""The options every command spells the same way: `-o/--output FILE` (the older `--out` still works, hidden)
and `--json` (a listing or result as JSON on stdout instead of text)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def output_arg(p: argparse.ArgumentParser, help: str) -> None:
    """`-o/--output PATH` into `args.output`; `--out` is kept as a hidden alias for older scripts."""
    p.add_argument("-o", "--output", type=Path, help=help)
    p.add_argument("--out", dest="output", type=Path, help=argparse.SUPPRESS)


def json_arg(p: argparse.ArgumentParser, what: str = "the result") -> None:
    p.add_argument("--json", action="store_true", help=f"print {what} as JSON")


def print_json(value) -> None:
    print(json.dumps(value, indent=1, default=str))
