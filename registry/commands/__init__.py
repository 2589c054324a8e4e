"""Sub-commands of `kernel-hub`: one module each (serve, token/org/key, init, build, publish, variants, demo, matrix,
lock, bench).

This is the layer that wires the parts together (e.g. `serve` hands the matrix page section to the hub).
"""

from __future__ import annotations

import importlib

# One module per sub-command (or family), each with `register(subparsers)`.
_MODULES: list[str] = [
    "serve",
    "admin",
    "maintenance",
    "db",
    "init",
    "build",
    "publish",
    "mirror",
    "matrix",
    "bench",
    "variants",
    "releases",
    "demo",
    "lock",
]


def register(subparsers) -> None:
    for name in _MODULES:
        importlib.import_module(f"{__name__}.{name}").register(subparsers)
