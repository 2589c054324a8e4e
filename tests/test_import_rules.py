"""Who may import whom (docs/ARCHITECTURE.md), read from the source with `ast`: nothing is imported or run.

A module "uses" every name it imports anywhere (a lazy import inside a function still runs when it is
called); what a module pulls in when it is imported follows its module-level imports, the packages
above each imported module included. The rules hold for both: the direct imports of every file of a
part, and everything its module-level imports pull in.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "triton", "kernels", "huggingface_hub")


def _module_name(path: Path, base: Path) -> str:
    parts = list(path.relative_to(base).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def _modules(package: str, base: Path = ROOT) -> dict[str, Path]:
    """Dotted name -> file of every module of `package` (a folder under `base`)."""
    return {_module_name(p, base): p for p in sorted((base / package.replace(".", "/")).rglob("*.py"))}


def _imports(path: Path, module: str, top_level_only: bool) -> set[str]:
    """Absolute dotted names `path` imports (relative imports resolved; `from a import b` gives a and a.b)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    is_package = path.name == "__init__.py"
    package = module if is_package else module.rpartition(".")[0]
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    if top_level_only:  # module level includes `if`/`try` blocks, never function or class bodies
        stack, nodes = list(tree.body), []
        while stack:
            node = stack.pop()
            nodes.append(node)
            if isinstance(node, ast.If | ast.Try | ast.With):
                stack.extend(ast.iter_child_nodes(node))
    names: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1])
                source = f"{base}.{node.module}" if node.module else base
            else:
                source = node.module or ""
            names.add(source)
            names.update(f"{source}.{alias.name}" for alias in node.names)
    return names


def _within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _registry_targets(names: set[str]) -> set[str]:
    """The registry modules (with the packages above them) that importing `names` executes."""
    known = _modules("registry")
    out = set()
    for name in names:
        parts = name.split(".")
        for i in range(1, len(parts) + 1):
            if ".".join(parts[:i]) in known:
                out.add(".".join(parts[:i]))
    return out


def _pulled_in(start: str) -> set[str]:
    """Every registry module that importing the registry modules under `start` executes, and what they import."""
    known = _modules("registry")
    todo = [m for m in known if _within(m, (start,))]
    seen: set[str] = set()
    names: set[str] = set()
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        imported = _imports(known[module], module, top_level_only=True)
        names |= imported
        todo.extend(_registry_targets(imported | {module}) - seen)
    return names | seen


def _direct(start: str) -> dict[str, set[str]]:
    known = _modules("registry")
    return {m: _imports(p, m, top_level_only=False) for m, p in known.items() if _within(m, (start,))}


PARTS = (
    "registry.client",
    "registry.publisher",
    "registry.hub",
    "registry.spec",
    "registry.matrix",
    "registry.commands",
    "registry.wire",
)
# part -> what neither its files nor anything its module-level imports pull in may import
RULES = {
    "registry.hub": (
        *HEAVY,
        "registry.client",
        "registry.publisher",
        "registry.matrix",
        "registry.commands",
        "registry.wire",
    ),
    "registry.spec": (
        *HEAVY,
        "registry.client",
        "registry.publisher",
        "registry.hub",
        "registry.matrix",
        "registry.wire",
    ),
    # the one hub wire client of the consumer, the publisher and the matrix: huggingface_hub, spec, nothing above
    "registry.wire": (
        "torch",
        "triton",
        "kernels",
        "registry.client",
        "registry.publisher",
        "registry.hub",
        "registry.matrix",
        "registry.commands",
    ),
    # leaves: importing them runs registry/__init__.py (which imports errors), nothing else
    "registry.errors": PARTS,
    "registry.atomic": PARTS,
    "registry.constants": PARTS,
    "registry.client": ("registry.hub", "registry.publisher", "registry.matrix", "registry.commands"),
    "registry.publisher": ("registry.hub", "registry.client", "registry.matrix", "registry.commands"),
    "registry.matrix": ("registry.hub", "registry.publisher", "registry.commands"),
}


@pytest.mark.parametrize("part", sorted(RULES))
def test_part_imports_only_what_the_layout_allows(part):
    forbidden = RULES[part]
    direct = {
        f"{m} imports {n}" for m, names in _direct(part).items() for n in names if _within(n, forbidden)
    }
    assert not direct, sorted(direct)
    pulled = sorted(n for n in _pulled_in(part) if _within(n, forbidden))
    assert not pulled, f"importing {part} pulls in {pulled}"


def test_kernel_package_imports_nothing_from_registry():
    """kernel_src/fused_mlp ships inside every variant: it must run where kernel-hub is not installed."""
    base = ROOT / "kernel_src"
    found = {
        f"{m} imports {n}"
        for m, p in _modules("fused_mlp", base).items()
        for n in _imports(p, m, top_level_only=False)
        if _within(n, ("registry",))
    }
    assert not found, sorted(found)


def test_the_rules_see_relative_and_lazy_imports():
    """The reader itself: it must resolve `..errors` and find imports inside functions."""
    hub_web = _modules("registry")["registry.hub.web"]
    assert "registry.hub.errors.HubError" in _imports(hub_web, "registry.hub.web", top_level_only=True)
    serve = _modules("registry")["registry.commands.serve"]
    assert "registry.hub.app" in _imports(serve, "registry.commands.serve", top_level_only=False)
    assert "registry.hub.app" not in _imports(serve, "registry.commands.serve", top_level_only=True)
