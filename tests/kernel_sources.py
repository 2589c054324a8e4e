"""Copies of kernel_src/fused_mlp with a change, for tests that publish builds of one kernel that differ (a plain
module, as hub_process.py: several test folders import it by name)."""

from __future__ import annotations

import shutil
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[1] / "kernel_src" / "fused_mlp"
EXTRA_OP = "\n\ndef extra(x):\n    return x\n\n\n__all__ = [*__all__, 'extra']\n"  # a changed public API


def changed_source(tmp: Path, name: str, append: str = "") -> Path:
    """`tmp/name/fused_mlp`: the kernel with `append` added to its __init__.py (EXTRA_OP: one more op, listed
    in build.toml too, as the builder requires)."""
    src = tmp / name / "fused_mlp"
    shutil.copytree(SOURCE, src, ignore=shutil.ignore_patterns("__pycache__"))
    with open(src / "__init__.py", "a") as f:
        f.write(append)
    if "'extra'" in append:
        toml = src / "build.toml"
        toml.write_text(toml.read_text().replace('ops = ["act_and_mul",', 'ops = ["act_and_mul", "extra",'))
    return src
