"""The fallback: the package's own eager `reference` functions, as `torch.compile`d or plain callables.

It has the same public API as every variant (docs/CONTRACTS.md, Kernel package), so user code does not change when no
kernel fits. Compiled functions mark every dim but the last of their activation inputs dynamic, so a
new batch size or sequence length reuses the compiled graph instead of recompiling.
"""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Callable, Sequence

import torch

FALLBACK_MODES = ("compile", "eager")

# Arguments that carry the batch (all dims but the feature dim vary between calls); others are weights.
ACTIVATION_ARGS = {"linear": ("x",), "mlp": ("x",), "gated_mlp": ("x",), "act_and_mul": ("gate", "up")}


def _mark_batch_dims_dynamic(t: object) -> None:
    if isinstance(t, torch.Tensor):
        for dim in range(t.dim() - 1):
            # maybe_: a dim of size 0/1 stays specialised instead of raising.
            torch._dynamo.maybe_mark_dynamic(t, dim)


def compile_op(name: str, fn: Callable) -> Callable:
    """torch.compile(fn) whose activation inputs get dynamic batch dims before every call."""
    compiled = torch.compile(fn)
    signature = inspect.signature(fn)
    dynamic_args = ACTIVATION_ARGS.get(name) or tuple(signature.parameters)[:1]

    @functools.wraps(fn)
    def op(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        for arg in dynamic_args:
            _mark_batch_dims_dynamic(bound.arguments.get(arg))
        return compiled(*args, **kwargs)

    op.__wrapped_compiled__ = compiled
    return op


def build_fallback(
    reference: types.ModuleType, api: Sequence[str], mode: str, module_name: str
) -> types.ModuleType:
    """A module exposing `api` from `reference`, compiled (`mode="compile"`) or as is (`"eager"`)."""
    if mode not in FALLBACK_MODES:
        raise ValueError(f"fallback mode {mode!r} is not one of {FALLBACK_MODES} (or None to raise instead)")
    missing = [name for name in api if not callable(getattr(reference, name, None))]
    if missing:
        raise AttributeError(
            f"the package's reference.py lacks public op(s) {', '.join(missing)}; the fallback cannot offer "
            "the same API — republish the kernel with a complete reference.py"
        )
    module = types.ModuleType(module_name, f"fused-MLP fallback ({mode}) built from {reference.__name__}")
    for name in api:
        fn = getattr(reference, name)
        setattr(module, name, compile_op(name, fn) if mode == "compile" else fn)
    module.__all__ = list(api)
    module.reference = reference
    module.BACKEND = f"fallback-{mode}"
    return module
