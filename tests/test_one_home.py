"""One home per concept (issue 42): every environment variable is read in registry/constants.py (the kernel
package's in kernel_src/fused_mlp/constants.py), and the commit id, the key id, the hub wire client and
version -> commit are each defined in one file and imported everywhere else. Read from the source as tests/test_import_rules.py reads imports (environment reads with
`ast`, definitions by a pattern over the code without its comments); nothing is imported or run.
"""

from __future__ import annotations

import ast
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
REGISTRY = ROOT / "registry"
# concept -> (how its definition reads in the source, the one file that may hold it)
DEFINED_ONCE = {
    "full commit id": (r"\{40\}", "registry/spec/names.py"),
    "publisher key id": (r"hexdigest\(\)\[:16\]", "registry/spec/signing.py"),
    "hub wire client": (
        r"HfApi\(|get_session\(\)|hf_hub_(download|url)\(|snapshot_download\(|list_repo_(tree|refs)\(",
        "registry/wire.py",
    ),
    "version -> commit": (r"VersionNotFound\(repo", "registry/wire.py"),
}


def _code(path: Path) -> str:
    """The file's text without its comments (a comment may name what it does not define)."""
    with path.open("rb") as f:
        tokens = [t for t in tokenize.tokenize(f.readline) if t.type != tokenize.COMMENT]
    return tokenize.untokenize(tokens).decode()


def _registry_files() -> dict[str, ast.Module]:
    return {
        str(p.relative_to(ROOT)): ast.parse(p.read_text(), filename=str(p)) for p in REGISTRY.rglob("*.py")
    }


def _is_environ(node: ast.AST) -> bool:
    """`os.environ` or a bare `environ`."""
    return (isinstance(node, ast.Attribute) and node.attr == "environ") or (
        isinstance(node, ast.Name) and node.id == "environ"
    )


def _reads_one_variable(node: ast.AST) -> bool:
    """getenv(...), environ.get(...), environ[...] or `in environ`; setting a variable for a child process, or
    handing the whole environment on, is not a read."""
    if isinstance(node, ast.Call):
        f = node.func
        name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
        return name == "getenv" or (name == "get" and isinstance(f, ast.Attribute) and _is_environ(f.value))
    if isinstance(node, ast.Subscript):
        return isinstance(node.ctx, ast.Load) and _is_environ(node.value)
    return isinstance(node, ast.Compare) and any(_is_environ(c) for c in node.comparators)


def _env_reads(tree: ast.Module) -> list[int]:
    return [node.lineno for node in ast.walk(tree) if _reads_one_variable(node)]


def test_every_environment_variable_is_read_in_registry_constants():
    found = {
        f"{path}:{line}"
        for path, tree in _registry_files().items()
        if path != "registry/constants.py"
        for line in _env_reads(tree)
    }
    assert not found, f"read the variable through registry/constants.py instead: {sorted(found)}"


def test_the_kernel_package_reads_its_environment_in_fused_mlp_constants():
    """The kernel package ships without kernel-hub, so it has its own constants module. Exempt: the AOT
    build's scoped override of Triton's own variables (saved, set for the compiler, restored)."""
    package = ROOT / "kernel_src" / "fused_mlp"
    found = set()
    for path in package.rglob("*.py"):
        if path.name == "constants.py" and path.parent == package:
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        exempt = {
            line
            for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef) and node.name == "reproducible_compile"
            for line in range(node.lineno, node.end_lineno + 1)
        }
        found |= {f"{path.relative_to(ROOT)}:{line}" for line in _env_reads(tree) if line not in exempt}
    assert not found, f"read the variable through kernel_src/fused_mlp/constants.py instead: {sorted(found)}"


def test_the_environment_reader_sees_every_form_of_read():
    reads = _env_reads(
        ast.parse(
            "import os\nfrom os import environ, getenv\n"
            "a = os.environ.get('A')\nb = os.getenv('B')\nc = os.environ['C']\nd = 'D' in os.environ\n"
            "e = environ.get('E')\nf = getenv('F')\nos.environ['G'] = '1'\nenv = dict(os.environ.items())\n"
        )
    )
    assert sorted(reads) == [3, 4, 5, 6, 7, 8]  # not the write (9) nor the copy for a child (10)


@pytest.mark.parametrize("concept", sorted(DEFINED_ONCE))
def test_each_concept_is_defined_in_one_file(concept):
    pattern, home = DEFINED_ONCE[concept]
    found = sorted(str(p.relative_to(ROOT)) for p in REGISTRY.rglob("*.py") if re.search(pattern, _code(p)))
    assert found == [home], f"{concept}: defined in {found}; import it from {home} instead"
