"""Paths and names the loader tests share (a plain module: `from conftest import` is ambiguous
when several test directories have a conftest.py)."""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
SOURCE = REPO_ROOT / "kernel_src" / "fused_mlp"
MATRIX = REPO_ROOT / "build" / "matrix.toml"
NAMESPACE = "loaderorg"
# Noarch variants only: they build in seconds on CPU (the CUDA extension is tested by its own part).
FAST_VARIANTS = ["torch-cuda", "torch-cpu", "torch-universal"]
