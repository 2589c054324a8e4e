"""A replaced module whose kernel wins at some row counts and loses at others: each call picks, by its row count,
our layer's forward (kernelize's) or the module's own, from the speed check's verdict per row bucket.

A call of r rows (all dims of its input but the last) takes the verdict of the smallest timed bucket >= r, else of
the largest: rows between two timed buckets follow the upper one. The choice is a Python comparison per call, so
torch.compile traces it into guards on the row count, as it does for any shape-dependent branch.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MethodType

from torch import nn

ATTR = "kernel_hub_rows"  # on the dispatching forward: its Dispatch


@dataclass(frozen=True)
class Dispatch:
    kernel: MethodType  # the layer forward that kernelize bound to the module
    own_at: frozenset[int]  # the timed row buckets where the module's own forward runs
    buckets: tuple[int, ...]  # every timed bucket, ascending

    def runs_own(self, rows: int) -> bool:
        return bucket_of(rows, self.buckets) in self.own_at


def bucket_of(rows: int, buckets: tuple[int, ...]) -> int:
    """The timed bucket whose verdict a call of `rows` rows follows (module docstring)."""
    return next((b for b in buckets if rows <= b), buckets[-1])


def rows_of(x) -> int:
    """A call's row count: all dims of its input but the last."""
    return x.numel() // x.shape[-1] if x.dim() else 1


def kernel_forward(module: nn.Module) -> MethodType | None:
    """The layer forward behind `module`'s dispatching forward, or None when it has none."""
    fwd = module.__dict__.get("forward")
    d = getattr(fwd, ATTR, None)
    return d.kernel if isinstance(d, Dispatch) else None


def install(module: nn.Module, own_at: frozenset[int], buckets: tuple[int, ...]) -> None:
    """Make `module` run its own forward at the buckets `own_at` and kernelize's layer forward at the others."""
    kernel = kernel_forward(module) or module.__dict__["forward"]
    d = Dispatch(kernel, frozenset(own_at), tuple(sorted(buckets)))
    own = MethodType(type(module).forward, module)

    def forward(x, *args, **kwargs):
        return (own if d.runs_own(rows_of(x)) else d.kernel)(x, *args, **kwargs)

    setattr(forward, ATTR, d)
    module.forward = forward
