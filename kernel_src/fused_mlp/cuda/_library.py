"""Loads `_C.abi3.so` into torch.ops.<OPS_NAMESPACE> and registers its fake kernels and autograd.

The C++ side defines the ops (`cuda_linear`, `cuda_mlp`, ..., their `*_infer` inference forms, the `*_train`
forwards of eager training and the `*_backward` helpers) through the torch stable ABI; this module adds what
torch.compile and autograd need in Python. The `*_infer` and `*_train` ops get fakes but no autograd, so
their calls never enter Python autograd kernels (eager training wraps them in autograd.Functions,
_autograd.py). The gated MLP keeps its pre-activations (g, u) from the forward; the MLP's backward recomputes
pre-activations other than relu's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from .._build_info import OPS_NAMESPACE
from ..arch import Arch, ptx_runs_on, sass_runs_on

HERE = Path(__file__).parent
EXTENSION = HERE / "_C.abi3.so"
BUILD_JSON = HERE / "build.json"  # written by build/cuda/build_variant.py: archs, ptx, torch target, checks
MIN_TORCH = (2, 11)

_ops: Any = None
_load_error: str | None = None


def _torch_version() -> tuple[int, int]:
    major, minor = torch.__version__.split("+")[0].split(".")[:2]
    return int(major), int(minor)


def arch_runs(build_arch: str, ptx: bool, device_cc: tuple[int, int]) -> bool:
    """Whether code built for `build_arch` ("sm_90a", as SASS or as PTX) runs on a device of compute
    capability `device_cc` (the rules: fused_mlp.arch)."""
    return (ptx_runs_on if ptx else sass_runs_on)(build_arch, device_cc)


def _build_record() -> dict:
    return json.loads(BUILD_JSON.read_text()) if BUILD_JSON.exists() else {}


def availability() -> tuple[bool, str]:
    """(True, "") or (False, the first reason this backend cannot run here)."""
    if not EXTENSION.exists():
        return False, (
            f"no compiled extension at {EXTENSION}: this is an unbuilt source tree; "
            "build it with `kernel-hub build` or build/cuda/build_variant.py"
        )
    if _torch_version() < MIN_TORCH:
        return False, f"torch {torch.__version__} is older than 2.11, the stable ABI this build targets"
    if torch.version.cuda is None or not torch.version.cuda.startswith("13."):
        return (
            False,
            f"needs a CUDA 13 build of torch; this torch is built for {torch.version.cuda or 'CPU only'}",
        )
    if not torch.cuda.is_available():
        return False, "needs a CUDA device; torch sees none"
    cc = torch.cuda.get_device_capability()
    record = _build_record()
    archs, ptx = record.get("archs", []), record.get("ptx", [])
    if (
        archs
        and not any(arch_runs(a, False, cc) for a in archs)
        and not any(arch_runs(a, True, cc) for a in ptx)
    ):
        return (
            False,
            f"built for {', '.join(archs)} (PTX {', '.join(ptx) or 'none'}); this GPU is {Arch(*cc).name}",
        )
    try:
        load()
    except RuntimeError as exc:
        return False, str(exc)
    return True, ""


def load():
    """torch.ops.<OPS_NAMESPACE> with the extension's ops loaded and registered; RuntimeError when it cannot load."""
    global _ops, _load_error
    if _ops is not None:
        return _ops
    if _load_error is not None:
        raise RuntimeError(_load_error)
    try:
        torch.ops.load_library(str(EXTENSION))
    except OSError as exc:
        _load_error = f"cannot load {EXTENSION.name}: {exc}"
        raise RuntimeError(_load_error) from exc
    ns = getattr(torch.ops, OPS_NAMESPACE)
    _register(ns)
    _ops = ns
    return ns


def _register(ns) -> None:
    """Fake kernels and autograd for every forward op; once per process and namespace."""
    from . import _autograd, _fakes

    for name, fake in _fakes.FAKES.items():
        try:
            torch.library.register_fake(f"{OPS_NAMESPACE}::{name}")(fake)
        except RuntimeError as exc:  # the same build imported twice under another module name
            if "already has" not in str(exc) and "already registered" not in str(exc):
                raise
    for name, (backward, setup) in _autograd.formulas(ns).items():
        torch.library.register_autograd(f"{OPS_NAMESPACE}::{name}", backward, setup_context=setup)
