"""Import of a verified variant as `kernels` does (its package under the unique module name `metadata.id`), and of
the package's own eager `reference.py` on its own (the oracle of the check and the fallback's code).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from pathlib import Path

from registry.spec.names import is_module_name, python_name

from .fallback import ACTIVATION_ARGS
from .plan import Load, Refused
from .verify import fetch_verified


def load_variant(load: Load, name: str) -> tuple[types.ModuleType, dict]:
    """Download, verify and import `build/<name>` (no check); Refused says why not."""
    path, verification = fetch_verified(load, name)
    try:
        module = import_variant(path, load.metas[name])
    except Refused:
        raise
    except Exception as e:  # any import-time failure of foreign code refuses the variant
        raise Refused(f"import failed: {type(e).__name__}: {e}") from e
    return module, verification


_imported: dict[Path, types.ModuleType] = {}  # variant folder -> its module, as kernels keeps them


def import_variant(path: Path, metadata: dict) -> types.ModuleType:
    """Import `build/<v>` as kernels does: its __init__.py under the module name `metadata.id` (unique per build,
    so two versions coexist), once per folder per process. Our own few lines instead of kernels.importer:
    importing kernels costs ~0.2 s, most of a warm load (the module is not in kernels.get_loaded_kernels())."""
    if path in _imported:
        return _imported[path]
    name = metadata.get("id")
    if not isinstance(name, str) or not name:
        raise Refused(
            f"metadata.json of build/{path.name} has no `id` (the module name kernels uses): {name!r}"
        )
    spec = importlib.util.spec_from_file_location(name, _package_init(path, metadata))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)  # a later try imports from scratch
        raise
    _imported[path] = module
    return module


def _package_init(path: Path, metadata: dict) -> Path:
    """`build/<v>/__init__.py` or `build/<v>/<python name>/__init__.py`, as kernels looks for it."""
    flat = path / "__init__.py"
    if flat.is_file():
        return flat
    nested = path / python_name(str(metadata.get("name", ""))) / "__init__.py"
    if nested.is_file():
        return nested
    raise Refused(f"build/{path.name} has no __init__.py (checked {flat} and {nested})")


def reference_of(module: types.ModuleType, metadata: dict) -> tuple[types.ModuleType, list[str]]:
    """The loaded variant's own reference module and public API."""
    return _reference(module, metadata, Path(module.__file__))


def reference_in(path: Path, metadata: dict) -> tuple[types.ModuleType, list[str]]:
    """The reference module and API of the variant in folder `path`, its kernel not imported (the fallback's code)."""
    return _reference(None, metadata, _package_init(path, metadata))


def reference_module(metadata: dict) -> str:
    """The module of the package's eager ops, as its build recorded it (build.toml's `reference`)."""
    name = (metadata.get("api") or {}).get("reference") or "reference"
    if not is_module_name(name):
        raise Refused(f"metadata api.reference {name!r} is not a module name: rebuild the kernel")
    return name


def _reference(
    module: types.ModuleType | None, metadata: dict, init_file: Path
) -> tuple[types.ModuleType, list[str]]:
    """The package's reference.py, imported on its own (the kernel's __init__ and backends never run), plus the API.

    A stand-in parent package with the real `__path__` lets reference.py use relative imports.
    """
    parent_name = f"{metadata.get('id') or 'kernel'}_reference_pkg"
    if parent_name not in sys.modules:
        parent = types.ModuleType(parent_name)
        parent.__path__ = [str(init_file.parent)]
        sys.modules[parent_name] = parent
    try:
        reference = importlib.import_module(f"{parent_name}.{reference_module(metadata)}")
    except Exception as e:
        raise Refused(f"reference.py cannot be imported: {type(e).__name__}: {e}") from e
    api = list(
        (metadata.get("api") or {}).get("__all__") or getattr(module, "__all__", None) or ACTIVATION_ARGS
    )
    return reference, api
