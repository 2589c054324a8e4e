"""The speed check at the user's own shapes: is a loaded kernel at least as fast as its fallback on *these*
widths? The standard check (`speed.py`) times the package's benchmark shapes; a model's layers have others.

Stable API (the transformers integration calls it once per replaced module):

    from registry.client.shape_speed import Shape, kernel_wins, shape_verdicts

    Shape(op, dims, activation, dtype="bfloat16", bias=False, kmajor=False)
        op "gated_mlp": dims (hidden, intermediate); "mlp": (in, h1, ..., out); "linear": (in, out).
        kmajor: the weights are the transposes of [in, out] tensors (transformers' Conv1D, as in GPT-2), so the
        check times the layout the model's layers pass, whose paths differ from row-major weights'.
        Wherever a shape is taken, a preset of registry.spec.presets or its name ("llama-3-8b") works too.
    kernel_wins(kernel, shape) -> bool
        True when the loaded `kernel` (a module get_kernel returned) is not slower than its fallback (the
        package's eager reference) at every row bucket of `ROWS[device]` for `shape` on this GPU, within the
        speed check's margin; False for a fallback module (it is the baseline) or a slower kernel. A module
        whose shape loses keeps its own forward.
    shape_verdicts(kernel, shapes, mode="once") -> {Shape: ShapeVerdict}
        The verdicts with their timings (`cases`); what get_kernel(..., shapes=...) records in
        `__kernel_info__["speed"]["shapes"]`.

Verdicts are cached per (commit, variant, device, torch, shape) in the speed cache, so each shape is timed once
per GPU. Timing is `speed.time_calls`: interleaved batches of calls on fresh random inputs, launch cost included.
"""

from __future__ import annotations

import functools
import itertools
import types
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, replace

import torch

from registry.spec import presets
from registry.spec.presets import Preset

from .check import JsonCache, cache_key
from .speed import (
    ROUNDS_BATCH,
    SpeedCase,
    confirmed_case,
    decided,
    result_problem,
    time_calls,
    timing_threads,
)
from .speed_records import MARGIN

OPS = ("gated_mlp", "mlp", "linear")
# Row buckets timed per shape: decode, small batch, prefill (GPU); a CPU times only small batches.
ROWS = {"cuda": (1, 16, 256, 2048), "cpu": (1, 16)}
REFERENCE_ATTR = "__kernel_reference__"  # set by the loader on a served module: its package's eager reference


@dataclass(frozen=True)
class Shape:
    """One layer shape a model runs: the op, its feature sizes, activation, dtype, biases."""

    op: str
    dims: tuple[int, ...]
    activation: str
    dtype: str = "bfloat16"
    bias: bool = False
    kmajor: bool = False

    def __post_init__(self):
        if self.op not in OPS:
            raise ValueError(f"Shape op {self.op!r}: use one of {OPS}")
        object.__setattr__(self, "dims", tuple(int(d) for d in self.dims))
        want = {"gated_mlp": 2, "linear": 2}.get(self.op)
        if (want is not None and len(self.dims) != want) or len(self.dims) < 2 or min(self.dims) < 1:
            raise ValueError(
                f"Shape {self.op} dims {self.dims}: gated_mlp takes (hidden, intermediate), linear (in, out), "
                "mlp (in, hidden..., out), all positive"
            )
        presets.check_activation(f"Shape {self.op} {'x'.join(map(str, self.dims))}", self.activation)
        if self.dtype not in ("float16", "bfloat16", "float32"):
            raise TypeError(f"Shape dtype {self.dtype!r}: use float16, bfloat16 or float32")
        if self.kmajor and self.op == "gated_mlp":
            raise ValueError("Shape kmajor: gated_mlp takes row-major [out, in] weights only")

    @property
    def key(self) -> str:
        b = "+bias" if self.bias else ""
        layout = " kmajor" if self.kmajor else ""
        return f"{self.op} {'x'.join(map(str, self.dims))} {self.activation}{b} {self.dtype}{layout}"


def as_shape(s: Shape | Preset | str | Mapping | tuple, dtype: str = "bfloat16") -> Shape:
    """A Shape from a Shape, a preset of registry.spec.presets or its name ("llama-3-8b", in `dtype`), a shape
    spec ("gated_mlp:5120x14336:silu", presets.get), a dict of Shape's fields, or a tuple (op, dims, activation[,
    dtype[, bias]])."""
    if isinstance(s, Shape):
        return s
    if isinstance(s, str):
        s = presets.get(s)
    if isinstance(s, Preset):
        return Shape(s.op, s.widths, s.activation, dtype, s.bias)
    if isinstance(s, Mapping):
        return Shape(**s)
    return Shape(*s)


@dataclass(frozen=True)
class ShapeVerdict:
    shape: Shape
    faster: bool  # not slower than the fallback at any timed row bucket
    cases: tuple[SpeedCase, ...]
    device: str
    cached: bool = False

    def to_dict(self) -> dict:
        return {"shape": self.shape.key, "faster": self.faster, "cached": self.cached,
                "cases": [asdict(c) for c in self.cases], "device": self.device}  # fmt: skip


def shape_inputs(shape: Shape, rows: int, device: str) -> dict:
    """Fresh random inputs of `shape` at `rows` rows (never zeros; weights scaled by fan-in^-0.5)."""
    dtype = getattr(torch, shape.dtype)

    def rnd(*size, scale=1.0):
        return (torch.randn(*size, device=device) * scale).to(dtype)

    d = shape.dims
    if shape.op == "gated_mlp":
        h, i = d
        return {"x": rnd(rows, h), "wg": rnd(i, h, scale=h**-0.5), "wu": rnd(i, h, scale=h**-0.5),
                "wd": rnd(h, i, scale=i**-0.5)}  # fmt: skip
    if shape.kmajor:  # [out, in] views of [in, out] tensors, as a Conv1D layer passes its weights
        ws = [rnd(k, o, scale=k**-0.5).t() for k, o in itertools.pairwise(d)]
    else:
        ws = [rnd(o, k, scale=k**-0.5) for k, o in itertools.pairwise(d)]
    bs = [rnd(o) if shape.bias else None for o in d[1:]]
    return {"x": rnd(rows, d[0]), "ws": ws, "bs": bs}


def shape_forward(shape: Shape, a: dict, m) -> torch.Tensor:
    """`shape`'s op on inputs `a` through `m` (a module with the package API)."""
    if shape.op == "gated_mlp":
        return m.gated_mlp(a["x"], a["wg"], a["wu"], a["wd"], shape.activation)
    if shape.op == "linear":
        return m.linear(a["x"], a["ws"][0], a["bs"][0], shape.activation)
    return m.mlp(a["x"], a["ws"], a["bs"], shape.activation)


def time_shape(kernel, reference, shape: Shape, device: str) -> ShapeVerdict:
    """Time `kernel` against `reference` at every row bucket of `shape`; raises on a wrong result."""
    rounds, batch = ROUNDS_BATCH[device]
    margin = MARGIN[device]
    cases = []
    with timing_threads(device), torch.no_grad():
        for rows in ROWS[device]:
            a = shape_inputs(shape, rows, device)
            calls = {
                "kernel": lambda a=a: shape_forward(shape, a, kernel),
                "fallback": lambda a=a: shape_forward(shape, a, reference),
            }
            problem = result_problem(calls["kernel"](), calls["fallback"](), getattr(torch, shape.dtype))
            if problem is not None:
                raise ValueError(f"{shape.key} M={rows}: wrong result: {problem}")
            timed = functools.partial(time_calls, calls, device, rounds=rounds, batch=batch, stop=decided)
            cases.append(confirmed_case(f"{shape.op} M={rows}", timed, device, margin))
    return ShapeVerdict(shape, all(c.passed for c in cases), tuple(cases), device)


def case_rows(case: SpeedCase) -> int:
    """The row count a case of `time_shape` timed (its workload is "<op> M=<rows>")."""
    return int(case.workload.rpartition("M=")[2])


class ShapeCache(JsonCache):
    """Per-shape verdicts in `<cache>/kernel-hub/shape_speed.json`, keyed by the speed check's key + shape."""

    def __init__(self, cache_dir):
        super().__init__(cache_dir, "shape_speed.json")

    def get(self, key: str, shape: Shape) -> ShapeVerdict | None:
        e = self.get_raw(key)
        try:
            return ShapeVerdict(
                shape, e["faster"], tuple(SpeedCase(**c) for c in e["cases"]), e["device"], True
            )
        except (KeyError, TypeError):
            return None

    def put(self, key: str, v: ShapeVerdict) -> None:
        self.put_raw(key, {k: val for k, val in v.to_dict().items() if k != "cached"})


_MEMORY: dict[str, ShapeVerdict] = {}  # this process's verdicts (kernel_wins is asked per module)


def _kernel_device(kernel: types.ModuleType) -> str:
    info = getattr(kernel, "__kernel_info__", {}) or {}
    speed = info.get("speed") or {}
    return "cpu" if speed.get("device") == "cpu" or not torch.cuda.is_available() else "cuda"


def shape_verdicts(
    kernel: types.ModuleType, shapes: Iterable[Shape | Mapping | tuple], mode: str = "once", cache_dir=None
) -> dict[Shape, ShapeVerdict]:
    """The verdict for every shape (see the module docstring); mode "once" reuses cached ones, "always" re-times."""
    info = getattr(kernel, "__kernel_info__", None) or {}
    reference = getattr(kernel, REFERENCE_ATTR, None)
    device = _kernel_device(kernel)
    shapes = [as_shape(s) for s in shapes]
    if info.get("variant") is None or reference is None:  # a fallback (or foreign module): it is the baseline
        return {s: ShapeVerdict(s, False, (), device) for s in shapes}
    key = cache_key(info["commit"], info["variant"], device)
    return timed_verdicts(kernel, reference, shapes, key=key, device=device, mode=mode, cache_dir=cache_dir)


def timed_verdicts(
    kernel, reference, shapes: Iterable[Shape], *, key: str, device: str, mode: str = "once", cache_dir=None
) -> dict[Shape, ShapeVerdict]:
    """Each shape's verdict for `kernel` against `reference`, cached under `key` (the speed check's) + the shape."""
    cache = ShapeCache(cache_dir or _cache_dir())
    out = {}
    for s in shapes:
        k = f"{key}|{s.key}"
        hit = None if mode == "always" else _MEMORY.get(k) or cache.get(k, s)
        if hit is None:
            hit = time_shape(kernel, reference, s, device)
            cache.put(k, hit)
        _MEMORY[k] = replace(hit, cached=True)
        out[s] = hit
    return out


def kernel_wins(kernel: types.ModuleType, shape: Shape | Mapping | tuple) -> bool:
    """Whether a module of `shape` should call `kernel` (True) or keep its own forward (False)."""
    return next(iter(shape_verdicts(kernel, [shape]).values())).faster


def _cache_dir():
    from .fetch import Hub

    return Hub.from_env(None, None).cache
