"""Sub-commands of `kernel-hub` that are not the hub server: build, publish, variants, demo, matrix."""

from __future__ import annotations

import importlib

# One module per sub-command, each with `register(subparsers)`.
_MODULES: list[str] = ["build", "publish", "matrix", "variants", "demo"]


def register(subparsers) -> None:
    for name in _MODULES:
        importlib.import_module(f"{__name__}.{name}").register(subparsers)
