"""Backend choice (docs/CONTRACTS.md): a present and available `cuda` backend wins over `triton`; an
unavailable or incomplete one is skipped with its reason recorded."""

import importlib
import shutil
import sys
from pathlib import Path

import fused_mlp
import pytest

PKG = Path(fused_mlp.__file__).parent


def _import_copy(tmp_path: Path, name: str, cuda_init: str | None):
    """Import a copy of the package under `name`, with a cuda/ backend whose __init__ is `cuda_init`."""
    dst = tmp_path / name
    shutil.copytree(PKG, dst, ignore=shutil.ignore_patterns("cuda", "__pycache__", "cubins"))
    if cuda_init is not None:
        (dst / "cuda").mkdir()
        (dst / "cuda" / "__init__.py").write_text(cuda_init)
        (dst / "cuda" / "ops.py").write_text("from ..reference import linear, mlp, gated_mlp, act_and_mul\n")
    sys.path.insert(0, str(tmp_path))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(tmp_path))
        for mod in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
            del sys.modules[mod]


def test_available_cuda_backend_takes_precedence(tmp_path):
    pkg = _import_copy(tmp_path, "fused_mlp_sel_a", "def available():\n    return True, ''\n")
    assert pkg.BACKEND == "cuda"
    assert pkg._GPU_OPS.__name__ == "fused_mlp_sel_a.cuda.ops"


def test_unavailable_cuda_backend_is_skipped_with_reason(tmp_path):
    pkg = _import_copy(
        tmp_path, "fused_mlp_sel_b", "def available():\n    return False, 'no sm_90 GPU here'\n"
    )
    assert pkg.BACKEND_SKIPPED["cuda"] == "no sm_90 GPU here"
    assert pkg.BACKEND in ("triton", "reference")


def test_missing_cuda_backend_falls_through(tmp_path):
    pkg = _import_copy(tmp_path, "fused_mlp_sel_c", None)
    assert "cuda" in pkg.BACKEND_SKIPPED and pkg.BACKEND != "cuda"


@pytest.mark.parametrize("name", fused_mlp.__all__)
def test_public_api_matches_reference_signatures(name):
    import inspect

    assert inspect.signature(getattr(fused_mlp, name)) == inspect.signature(
        getattr(fused_mlp.reference, name)
    )
