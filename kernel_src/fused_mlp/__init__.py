"""fused_mlp: fused MLP ops (Triton or CUDA backend) with an eager reference of the same API.

Backend choice (docs/CONTRACTS.md): the `cuda` subpackage when present and available, else `triton`,
else `reference`, made when torch starts CUDA (not at import: asking the device starts CUDA). CPU
tensors go to `reference`, except under TRITON_INTERPRET=1, where the Triton kernels run on them through
the interpreter (how CI tests the kernels). Each public function picks the
module by its first tensor's device inline: it is the only Python frame between a caller and the backend.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from types import ModuleType

import torch

from . import constants, reference
from ._build_info import BUILD_ID as BUILD_ID
from ._build_info import OPS_NAMESPACE as OPS_NAMESPACE

__all__ = ["act_and_mul", "gated_mlp", "linear", "mlp"]

_BACKEND_ORDER = ("cuda", "triton")


def _load_backend(name: str) -> tuple[ModuleType | None, str]:
    """Import backend subpackage `name` and return (its ops module, "") or (None, why not)."""
    try:
        pkg = importlib.import_module(f".{name}", __name__)
    except ImportError as exc:
        return None, f"not importable: {exc}"
    if not hasattr(pkg, "available"):
        return None, "incomplete: its package has no available()"
    ok, why = pkg.available()
    if not ok:
        return None, why
    return importlib.import_module(f".{name}.ops", __name__), ""


def _select_backend() -> tuple[str, ModuleType, dict[str, str]]:
    """First available backend in _BACKEND_ORDER, else reference; plus why each skipped one was skipped."""
    skipped: dict[str, str] = {}
    for name in _BACKEND_ORDER:
        ops, why = _load_backend(name)
        if ops is not None:
            return name, ops, skipped
        skipped[name] = why
    return "reference", reference, skipped


def _choose_gpu_backend() -> None:
    """Bind BACKEND, BACKEND_SKIPPED and the GPU ops module. Never raises: it may run inside torch's CUDA
    start-up, where an exception would break the caller's first CUDA call."""
    global BACKEND, BACKEND_SKIPPED, _GPU_OPS
    try:
        BACKEND, _GPU_OPS, BACKEND_SKIPPED = _select_backend()
    except Exception as exc:  # noqa: BLE001 - reported in BACKEND_SKIPPED; eager reference ops still run
        BACKEND, _GPU_OPS, BACKEND_SKIPPED = "reference", reference, {"all": f"{type(exc).__name__}: {exc}"}


class _GpuOpsPending:
    """The GPU ops module until CUDA has started. Choosing a backend asks the device (capability), which
    starts CUDA (~0.3 s on an H200): importing the package must not pay that, so the choice runs as part
    of torch's CUDA start-up (torch.cuda._lazy_call), before any CUDA tensor exists. Only a CUDA tensor
    that torch made without starting CUDA could meet this stand-in: it chooses then."""

    def __getattr__(self, name: str):
        _choose_now()
        return getattr(_GPU_OPS, name)


def _choose_now() -> None:
    """Choose at once (BACKEND read before CUDA started, or a CUDA tensor torch made without starting it)."""
    if isinstance(_GPU_OPS, _GpuOpsPending):
        if torch.cuda.is_available():
            torch.cuda.init()  # runs the queued choice
        if isinstance(_GPU_OPS, _GpuOpsPending):
            _choose_gpu_backend()


def __getattr__(name: str):
    if name in ("BACKEND", "BACKEND_SKIPPED"):
        _choose_now()
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_GPU_OPS: ModuleType | _GpuOpsPending = _GpuOpsPending()
_lazy_call = getattr(torch.cuda, "_lazy_call", None)  # private torch API: without it, choose at import
if torch.version.cuda is None or torch.cuda.is_initialized() or _lazy_call is None:
    _choose_gpu_backend()  # nothing to defer: no CUDA build, or CUDA is up already
else:
    _lazy_call(_choose_gpu_backend)
INTERPRET = constants.interpret()
_CPU_OPS: ModuleType = reference
if INTERPRET:
    _interp, _why = _load_backend("triton")
    if _interp is None:
        raise ImportError(f"TRITON_INTERPRET=1 but the Triton backend cannot run: {_why}")
    _CPU_OPS = _interp


def linear(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, activation: str = "none"
) -> torch.Tensor:
    """act(x @ weight.T + bias) as one GEMM with a fused bias + activation epilogue."""
    return (_GPU_OPS if x.is_cuda else _CPU_OPS).linear(x, weight, bias, activation)


def mlp(
    x: torch.Tensor,
    weights: Sequence[torch.Tensor],
    biases: Sequence[torch.Tensor | None] | None = None,
    activation: str = "relu",
) -> torch.Tensor:
    """Chain of fused linears, `activation` after every layer but the last; one host call per forward."""
    return (_GPU_OPS if x.is_cuda else _CPU_OPS).mlp(x, weights, biases, activation)


def gated_mlp(
    x: torch.Tensor,
    w_gate: torch.Tensor,
    w_up: torch.Tensor,
    w_down: torch.Tensor,
    activation: str = "gelu_tanh",
) -> torch.Tensor:
    """down(act(gate(x)) * up(x)); gate and up run as one GEMM whose epilogue writes act(g)*u."""
    return (_GPU_OPS if x.is_cuda else _CPU_OPS).gated_mlp(x, w_gate, w_up, w_down, activation)


def act_and_mul(gate: torch.Tensor, up: torch.Tensor, activation: str) -> torch.Tensor:
    """act(gate) * up, elementwise in one kernel."""
    return (_GPU_OPS if gate.is_cuda else _CPU_OPS).act_and_mul(gate, up, activation)


from . import layers  # noqa: F401  (layers calls the ops defined above)
