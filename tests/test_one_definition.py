"""Names defined once (issue 42): the CUDA variant's name is build/matrix.toml's alone. Code reads it from
there (the CUDA recipe's `VARIANT`, bench/run_gpu.sh, the tests' `variant_names`); no other source, script,
workflow or config spells it out. Prose (docstrings, comments, Markdown) may name it, and so may a test that
pins what a naming rule gives (an expected value, not a definition). Reads files; imports only the recipe, as the builder does."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from variant_names import CUDA_VARIANT, MATRIX_FILE

from registry.publisher.cuda import cuda_recipe

ROOT = Path(__file__).resolve().parents[1]
TREES = ("registry", "kernel_src", "build", ".github", "bench")
TEXT_SUFFIXES = {".toml", ".yml", ".yaml", ".sh", ".cfg", ".ini", ".json"}


def _code_strings(source: str) -> list[tuple[int, str]]:
    """(line, value) of every string constant of a Python file that is not a docstring."""
    tree = ast.parse(source)
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


def spelled_out(name: str, path: Path) -> list[int]:
    """Lines of `path` whose code (not prose) spells `name` out."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".py":
        return [line for line, value in _code_strings(text) if name in value]
    lines = text.splitlines()
    return [n for n, line in enumerate(lines, 1) if name in line.split("#", 1)[0]]


def _files() -> list[Path]:
    return sorted(
        p
        for tree in TREES
        for p in (ROOT / tree).rglob("*")
        if p.is_file() and (p.suffix == ".py" or p.suffix in TEXT_SUFFIXES) and "__pycache__" not in p.parts
    )


def test_the_cuda_variant_name_is_spelled_out_only_in_the_matrix():
    found = {p.relative_to(ROOT).as_posix(): spelled_out(CUDA_VARIANT, p) for p in _files()}
    found = {path: lines for path, lines in found.items() if lines}
    assert found == {"build/matrix.toml": found.get("build/matrix.toml")} and found["build/matrix.toml"], (
        found
    )


def test_the_recipe_reads_the_name_from_the_matrix():
    module = cuda_recipe(ROOT / "build" / "cuda")  # the recipe as the builder imports it
    assert module.VARIANT == CUDA_VARIANT and MATRIX_FILE == ROOT / "build" / "matrix.toml"
    matrix = {"variants": {"a": {"kind": "triton"}, "b": {"kind": "cuda"}, "c": {"kind": "cuda"}}}
    with pytest.raises(module.CudaBuildError, match="one variant of kind"):
        module.cuda_variant_name(matrix)


def test_the_check_sees_code_not_prose(tmp_path):
    py = tmp_path / "m.py"
    py.write_text(f'"""About {CUDA_VARIANT}."""\n# {CUDA_VARIANT}\nNAME = "{CUDA_VARIANT}"\n')
    sh = tmp_path / "run.sh"
    sh.write_text(f"# uses {CUDA_VARIANT}\nV={CUDA_VARIANT}\n")
    assert spelled_out(CUDA_VARIANT, py) == [3] and spelled_out(CUDA_VARIANT, sh) == [2]
