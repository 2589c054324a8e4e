"""The eager check: every public op of a loaded kernel against the package's `reference` in float64.

Fresh random inputs each run (odd sizes, leading batch dims, never zeros), each dtype the device
supports, forward and backward. The error measure is ||out - ref|| / ||ref|| against the float64
reference; the tolerance per dtype is the larger of a floor (what a correct kernel in that dtype may
differ by: rounding, TF32 inputs to fp32 dots) and 4x the error of the eager reference run in that dtype
itself. NaN never passes. Passes are cached per (commit, variant, device, torch) in a JSON file, so a
second process does not re-run them.
"""

from __future__ import annotations

import json
import math
import os
import time
import types
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from registry.atomic import locked, write_atomic
from registry.errors import KernelHubError
from registry.spec.arch import Arch

from .gpu import current_gpu

# A correct kernel stays below these; a wrong epilogue, bias or scale lands orders of magnitude above.
FLOOR = {torch.float32: 5e-3, torch.float16: 5e-3, torch.bfloat16: 3e-2}
EAGER_FACTOR = 4.0
CHECK_MODES = ("once", "always")


@dataclass(frozen=True)
class CaseResult:
    op: str
    case: str
    dtype: str
    direction: str  # "forward" or "backward" (max over all input gradients)
    error: float
    tolerance: float
    passed: bool


@dataclass(frozen=True)
class CheckResult:
    passed: bool
    cases: tuple[CaseResult, ...]
    unchecked: tuple[str, ...]  # public names the check has no inputs for (e.g. classes)
    device: str
    seconds: float
    cached: bool = False

    def summary(self) -> str:
        """One line: pass/fail, how many comparisons, the worst one."""
        if not self.cases:
            return "no op was checked"
        worst = max(self.cases, key=lambda c: c.error / c.tolerance if c.error == c.error else math.inf)
        verdict = "passed" if self.passed else "FAILED"
        failed = [c for c in self.cases if not c.passed]
        where = failed[0] if failed else worst
        return (
            f"{verdict}: {len(self.cases) - len(failed)}/{len(self.cases)} comparisons within tolerance on "
            f"{self.device}{' (cached)' if self.cached else ''}; "
            f"{'first failure' if failed else 'worst'}: {where.op}[{where.case}] {where.dtype} {where.direction} "
            f"error {where.error:.2e} (tolerance {where.tolerance:.2e})"
        )

    def to_dict(self) -> dict:
        """JSON-ready (lists, not tuples), with the one-line summary."""
        d = asdict(self)
        return {**d, "cases": list(d["cases"]), "unchecked": list(d["unchecked"]), "summary": self.summary()}


def _randn(shape, gen: torch.Generator, device: str, scale: float = 1.0) -> torch.Tensor:
    return torch.randn(shape, generator=gen, dtype=torch.float64, device=device) * scale


@dataclass(frozen=True)
class Case:
    """One op call to compare: float64 inputs, plus where the output gradient is left out (see `relu_ties`)."""

    op: str
    name: str
    args: tuple
    kwargs: dict
    ties: torch.Tensor | None = None  # True where d(act)/dz jumps within rounding reach of the pre-activation


RELU_TIE = 0.05  # |pre-activation| below which fp16/bf16/TF32 rounding can flip relu's mask


def relu_ties(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """Outputs whose relu pre-activation is so close to 0 that any rounding may flip the mask.

    A flipped mask moves a whole row of the input gradient, so eager PyTorch in fp16 already differs
    from float64 by percents there; the check zeroes the output gradient at these few positions (~4%)
    so the backward comparison stays sharp instead of loosening its tolerance.
    """
    return torch.nn.functional.linear(x, weight, bias).abs() < RELU_TIE


def make_cases(gen: torch.Generator, device: str) -> list[Case]:
    """Odd sizes, leading batch dims, every activation once.

    relu sits on a single linear (with its ties masked out of the backward); chained layers use smooth
    activations, whose gradients rounding cannot flip.
    """
    k, n, inter = 96, 80, 112

    def w(o, i):  # ~unit-variance outputs
        return _randn((o, i), gen, device, i**-0.5)

    relu_args = (_randn((3, 37, k), gen, device), w(n, k), _randn(n, gen, device))
    return [
        Case("linear", "3x37x96 bias relu", relu_args, {"activation": "relu"}, relu_ties(*relu_args)),
        Case(
            "linear",
            "37x96 no-bias none",
            (_randn((37, k), gen, device), w(n, k), None),
            {"activation": "none"},
        ),
        Case(
            "mlp",
            "2x19x96 3 layers gelu",
            (
                _randn((2, 19, k), gen, device),
                [w(n, k), w(48, n), w(24, 48)],
                [_randn(s, gen, device) for s in (n, 48, 24)],
            ),
            {"activation": "gelu"},
        ),
        Case(
            "gated_mlp",
            "2x19x96 silu",
            (_randn((2, 19, k), gen, device), w(inter, k), w(inter, k), w(72, inter)),
            {"activation": "silu"},
        ),
        Case(
            "act_and_mul",
            "3x37x80 gelu_tanh",
            (_randn((3, 37, n), gen, device), _randn((3, 37, n), gen, device)),
            {"activation": "gelu_tanh"},
        ),
    ]


def package_cases(reference: types.ModuleType, gen: torch.Generator, device: str) -> list[Case]:
    """The cases the package's reference declares (`check_cases(gen, device)`), else the fused-MLP ones.

    Each declared case is a mapping: `op`, `name`, `args` (float64 tensors from `gen` on `device`, or lists of
    them), optional `kwargs`, and optional `grad_mask` (True where the output gradient is left out, as
    `relu_ties`). A package without `check_cases` is taken to have the fused-MLP API (`make_cases`).
    """
    declared = getattr(reference, "check_cases", None)
    if declared is None:
        return make_cases(gen, device)
    try:
        return [
            Case(c["op"], c["name"], tuple(c["args"]), dict(c.get("kwargs") or {}), c.get("grad_mask"))
            for c in declared(gen, device)
        ]
    except Exception as e:  # the package's own code: a broken declaration fails the check, with why
        raise CheckCrashed(f"reference.check_cases: {type(e).__name__}: {e}") from e


def _cast(arg, dtype: torch.dtype, grad: bool):
    if isinstance(arg, torch.Tensor):
        return arg.detach().to(dtype).requires_grad_(grad)
    if isinstance(arg, (list, tuple)):
        return type(arg)(_cast(a, dtype, grad) for a in arg)
    return arg


def _leaves(arg) -> list[torch.Tensor]:
    if isinstance(arg, torch.Tensor):
        return [arg]
    if isinstance(arg, (list, tuple)):
        return [t for a in arg for t in _leaves(a)]
    return []


def rel_error(out: torch.Tensor | None, ref: torch.Tensor | None) -> float:
    """‖out − ref‖ / ‖ref‖ with `ref` in float64 (inf for a missing side or another shape; NaN stays NaN)."""
    if out is None or ref is None:
        return math.inf if (out is None) != (ref is None) else 0.0
    if out.shape != ref.shape:
        return math.inf
    diff = torch.linalg.vector_norm(out.detach().double() - ref)
    return float(diff / torch.linalg.vector_norm(ref).clamp_min(1e-30))


def _run(fn: Callable, args: tuple, kwargs: dict, dtype: torch.dtype, grad_out: torch.Tensor):
    """Forward in `dtype` plus gradients of <out, grad_out> w.r.t. every tensor input (as float64)."""
    cast = tuple(_cast(a, dtype, True) for a in args)
    out = fn(*cast, **kwargs)
    leaves = [t for a in cast for t in _leaves(a)]
    grads = torch.autograd.grad(out, leaves, grad_out.to(dtype), allow_unused=True)
    return out.detach().double(), [None if gr is None else gr.double() for gr in grads]


def compare(case: Case, fn: Callable, ref_fn: Callable, dtype: torch.dtype, gen, device) -> list[CaseResult]:
    """Forward and backward errors of `fn` in `dtype` against `ref_fn` in float64."""
    op, args, kwargs = case.op, case.args, case.kwargs
    with torch.no_grad():
        shape = ref_fn(*args, **kwargs).shape
    g = _randn(shape, gen, device)
    if case.ties is not None:
        g = g.masked_fill(case.ties, 0.0)
    ref_out, ref_grads = _run(ref_fn, args, kwargs, torch.float64, g)
    eager_out, eager_grads = _run(ref_fn, args, kwargs, dtype, g)
    out, grads = _run(fn, args, kwargs, dtype, g)
    floor = FLOOR[dtype]
    name = str(dtype).removeprefix("torch.")
    results = []
    fwd_err = rel_error(out, ref_out)
    fwd_tol = max(floor, EAGER_FACTOR * rel_error(eager_out, ref_out))
    results.append(CaseResult(op, case.name, name, "forward", fwd_err, fwd_tol, fwd_err <= fwd_tol))
    bwd = [(rel_error(a, r), rel_error(e, r)) for a, e, r in zip(grads, eager_grads, ref_grads)]
    bwd_err = max((a for a, _ in bwd), default=0.0)
    bwd_tol = max(floor, EAGER_FACTOR * max((e for _, e in bwd), default=0.0))
    results.append(CaseResult(op, case.name, name, "backward", bwd_err, bwd_tol, bwd_err <= bwd_tol))
    return results


def check_dtypes(device: str) -> list[torch.dtype]:
    """Every dtype the device runs natively: fp32/fp16 (+bf16 where supported) on CUDA; fp32/fp16 on CPU."""
    if device == "cuda":
        return [torch.float32, torch.float16] + ([torch.bfloat16] if torch.cuda.is_bf16_supported() else [])
    return [torch.float32, torch.float16]


def run_check(
    module: types.ModuleType, reference: types.ModuleType, api: list[str], device: str
) -> CheckResult:
    """Compare every op of `api` that has generated inputs, in every dtype of `device`, on fresh inputs."""
    start = time.perf_counter()
    gen = torch.Generator(device=device)
    gen.manual_seed(int.from_bytes(os.urandom(8), "little") >> 1)
    cases = [c for c in package_cases(reference, gen, device) if c.op in api]
    checked = {c.op for c in cases}
    results: list[CaseResult] = []
    for dtype in check_dtypes(device):
        for case in cases:
            try:
                results += compare(
                    case, getattr(module, case.op), getattr(reference, case.op), dtype, gen, device
                )
            except Exception as e:  # a crashing kernel fails the check; the reason names the op and error
                raise CheckCrashed(f"{case.op}[{case.name}] {dtype}: {type(e).__name__}: {e}") from e
    passed = bool(results) and all(r.passed for r in results)
    return CheckResult(
        passed,
        tuple(results),
        tuple(n for n in api if n not in checked),
        device_label(device),
        time.perf_counter() - start,
    )


class CheckCrashed(KernelHubError, RuntimeError):
    """An op raised while being checked."""


def device_label(device: str) -> str:
    """The GPU name and arch, or "cpu": part of the cache key (a pass on one GPU says nothing of another)."""
    gpu = current_gpu() if device == "cuda" else None
    if gpu is not None:
        return f"{gpu[0]} {Arch(gpu[1], gpu[2]).name}"
    return "cpu"


def cache_key(commit: str, variant: str, device: str) -> str:
    return f"{commit}|{variant}|{device_label(device)}|torch {torch.__version__}"


class JsonCache:
    """Results by key in `<cache>/kernel-hub/<name>` (a JSON object), shared by every process using the cache.

    Writers hold `<name>.lock` across read-modify-write, so no entry is lost; the file is replaced
    atomically, so readers never take a lock.
    """

    def __init__(self, cache_dir: Path, name: str):
        self.path = Path(cache_dir) / "kernel-hub" / name

    def _read(self) -> dict:
        try:
            return json.loads(self.path.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return {}

    def get_raw(self, key: str) -> dict | None:
        entry = self._read().get(key)
        return entry if isinstance(entry, dict) and entry else None

    def put_raw(self, key: str, entry: dict) -> None:
        with locked(self.path):
            data = self._read()
            data[key] = entry
            write_atomic(self.path, json.dumps(data, indent=1).encode())


class CheckCache(JsonCache):
    """Passed checks in `<cache>/kernel-hub/checks.json`."""

    def __init__(self, cache_dir: Path):
        super().__init__(cache_dir, "checks.json")

    def get(self, key: str) -> CheckResult | None:
        entry = self.get_raw(key)
        if not entry:
            return None
        cases = tuple(CaseResult(**c) for c in entry["cases"])
        return CheckResult(
            entry["passed"], cases, tuple(entry["unchecked"]), entry["device"], entry["seconds"], True
        )

    def put(self, key: str, result: CheckResult) -> None:
        self.put_raw(key, {k: v for k, v in result.to_dict().items() if k not in ("summary", "cached")})


def checked(
    module, reference, api, *, device: str, key: str, mode: str | None, cache: CheckCache
) -> CheckResult | None:
    """Run (or reuse) the check per `mode`: "once" reuses a cached pass, "always" re-runs, None skips."""
    if mode is None:
        return None
    if mode not in CHECK_MODES:
        raise ValueError(f"check={mode!r} is not one of {CHECK_MODES} or None")
    if mode == "once" and (hit := cache.get(key)) is not None and hit.passed:
        return hit
    result = run_check(module, reference, api, device)
    if result.passed:
        cache.put(key, result)
    return result
