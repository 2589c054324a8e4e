"""Variant names as build/matrix.toml defines them, for tests to import: the matrix is their one definition
(tests/test_one_definition.py checks nothing else spells one out)."""

from __future__ import annotations

from pathlib import Path

from registry.spec.build_matrix import read_matrix

MATRIX_FILE = Path(__file__).resolve().parents[1] / "build" / "matrix.toml"
# The CUDA C++ variant on the torch stable ABI: the matrix's one `kind = "cuda"` variant.
CUDA_VARIANT = next(v.name for v in read_matrix(MATRIX_FILE).variants if v.kind == "cuda")
