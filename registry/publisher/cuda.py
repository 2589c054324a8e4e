"""The CUDA C++ variant's extension, built by the kernel project's own recipe `build/cuda/build_variant.py`.

The recipe is the kernel project's code, not kernel-hub's: it lives in `build/cuda/` beside the build
matrix and is imported as the module `build_variant` with that folder on `sys.path` (its helper
`abi_check` imports the same way; docs/CONTRACTS.md). It runs without kernel-hub installed.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType

from .errors import BuildError

RECIPE_MODULE = "build_variant"


def cuda_recipe(recipe_dir: Path) -> ModuleType | str:
    """The recipe module of `recipe_dir` (build/cuda beside the matrix), or why it cannot be used."""
    recipe_dir = Path(recipe_dir).resolve()
    path = recipe_dir / f"{RECIPE_MODULE}.py"
    if not path.is_file():
        return f"the CUDA build recipe {path} is missing"
    loaded = sys.modules.get(RECIPE_MODULE)
    if loaded is not None and Path(loaded.__file__).resolve() != path:
        raise BuildError(f"another CUDA build recipe ({loaded.__file__}) is already imported in this process")
    if str(recipe_dir) not in sys.path:
        sys.path.insert(0, str(recipe_dir))
    import build_variant

    return build_variant


def build_cuda(
    recipe: ModuleType,
    vdir: Path,
    package: str,
    matrix: Mapping,
    scratch: Path,
    archs: list[str],
    triton: bool,
    opts,
    cubins: Path | None,
) -> list[str]:
    """Compile the CUDA extension into the staged package (after its OPS_NAMESPACE is fixed); return notes.

    archs: the SASS archs to build; triton: embed the recipe's Triton cubins, compiled with `opts.python`'s
    Triton (dtypes from `opts.aot_kwargs`), reusing `cubins` (the Triton variant's of this build) where they
    already hold them; else the extension runs its cuBLASLt/CUDA fallbacks only.
    """
    aot = None
    if triton:
        dtypes = tuple(opts.aot_kwargs.get("dtypes", ("bf16", "fp16")))
        aot = recipe.TritonAot(python=opts.python, reuse=cubins, dtypes=dtypes)
    try:
        so = recipe.build_cuda_variant(
            vdir / package, scratch, dict(matrix), None, triton=aot, archs=tuple(archs)
        )
    except (recipe.CudaBuildUnavailable, recipe.CudaBuildError) as e:
        raise BuildError(f"CUDA extension build failed: {e}") from None
    record = json.loads((Path(so).parent / "build.json").read_text())
    checks = record.get("checks", [])
    note = (
        f"CUDA extension {Path(so).name} for {', '.join(record.get('archs', []))} "
        f"(PTX: {', '.join(record.get('ptx', [])) or 'none'}); "
        f"{sum(c['ok'] for c in checks)}/{len(checks)} ABI/arch checks passed"
    )
    return [note, record["triton"]["note"]] if record.get("triton") else [note]
