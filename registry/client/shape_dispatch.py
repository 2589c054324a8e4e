"""The kernel get_kernel serves when the user's shapes were timed and it lost at some of their row buckets: a copy of
the package module whose public ops send the calls of those (shape, row bucket) pairs to the fallback (the
package's eager reference) and every other call to the kernel. So what `shapes` names is never slower than the
fallback, and the kernel still serves the buckets and shapes where it wins, instead of the whole kernel being
refused for one losing bucket.

A call matches a timed shape by op, feature sizes, activation, dtype, biases and weight layout; its rows (all
dims of the input but the last) take the verdict of the smallest timed bucket at or above them, else of the
largest (`row_dispatch.bucket_of`). A call of any other shape goes to the kernel. Only the ops whose shapes lost
are wrapped; the cost is building a small tuple and one dict lookup per call of those ops.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable, Mapping

import torch

from .row_dispatch import bucket_of, rows_of
from .shape_speed import Shape, ShapeVerdict, case_rows

Key = tuple  # (dims, activation, dtype, bias, kmajor): a Shape's fields but its op


def _dtype(x: torch.Tensor) -> str:
    return str(x.dtype).removeprefix("torch.")


def _kmajor(w: torch.Tensor) -> bool:
    return w.dim() == 2 and w.stride(0) == 1 and not w.is_contiguous()


def shape_key(s: Shape) -> Key:
    return (s.dims, s.activation, s.dtype, s.bias, s.kmajor)


def losing_buckets(verdicts: Mapping[Shape, ShapeVerdict]) -> dict[str, dict[Key, tuple[frozenset, tuple]]]:
    """op -> shape key -> (the buckets where the kernel lost, every timed bucket), for the shapes it lost at."""
    out: dict[str, dict[Key, tuple[frozenset, tuple]]] = {}
    for s, v in verdicts.items():
        rows = [case_rows(c) for c in v.cases]
        lost = frozenset(r for r, c in zip(rows, v.cases) if not c.passed)
        if lost:
            out.setdefault(s.op, {})[shape_key(s)] = (lost, tuple(sorted(rows)))
    return out


def _wrap(kernel_op: Callable, fallback_op: Callable, table: dict, key_of: Callable) -> Callable:
    def op(*args, **kwargs):
        x, key = key_of(*args, **kwargs)
        hit = table.get(key)
        use = fallback_op if hit is not None and bucket_of(rows_of(x), hit[1]) in hit[0] else kernel_op
        return use(*args, **kwargs)

    op.__name__, op.__doc__, op.__wrapped__ = kernel_op.__name__, kernel_op.__doc__, kernel_op
    return op


def _key_makers(module) -> dict[str, Callable]:
    """op -> a function of the op's arguments giving (its input, its shape key), with the op's own defaults."""
    act = {
        name: inspect.signature(getattr(module, name)).parameters["activation"].default
        for name in ("gated_mlp", "mlp", "linear")
        if hasattr(module, name)
    }
    gated_act, mlp_act, linear_act = act.get("gated_mlp"), act.get("mlp"), act.get("linear")

    def gated(x, w_gate, w_up, w_down, activation=gated_act):
        return x, ((x.shape[-1], w_gate.shape[0]), activation, _dtype(x), False, False)

    def mlp(x, weights, biases=None, activation=mlp_act):
        dims = (x.shape[-1], *(w.shape[0] for w in weights))
        bias = biases is not None and all(b is not None for b in biases)
        return x, (dims, activation, _dtype(x), bias, bool(weights) and _kmajor(weights[0]))

    def linear(x, weight, bias=None, activation=linear_act):
        key = ((x.shape[-1], weight.shape[0]), activation, _dtype(x), bias is not None, _kmajor(weight))
        return x, key

    return {"gated_mlp": gated, "mlp": mlp, "linear": linear}


def serve(module: types.ModuleType, reference, lost: dict[str, dict[Key, tuple]]) -> types.ModuleType:
    """A copy of `module` whose ops in `lost` run `reference`'s op at their losing (shape, bucket) pairs."""
    served = types.ModuleType(module.__name__, module.__doc__)
    served.__dict__.update(module.__dict__)
    keys = _key_makers(module)
    for op, table in lost.items():
        setattr(served, op, _wrap(getattr(module, op), getattr(reference, op), table, keys[op]))
    return served


def describe(lost: dict[str, dict[Key, tuple]]) -> list[str]:
    """One line per (op, shape) that runs the fallback at some buckets, for `__kernel_info__`."""
    return [
        f"{Shape(op, *key).key}: the fallback at M=" + ", M=".join(map(str, sorted(lost_at)))
        for op, table in lost.items()
        for key, (lost_at, _) in table.items()
    ]
