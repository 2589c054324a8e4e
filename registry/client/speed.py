"""The speed check: a loaded kernel against the fallback it would otherwise be, on a few representative shapes.

The bar is the package's eager `reference` (what `fallback="eager"` returns; the compiled fallback is
usually as fast or faster, but compiling it costs seconds per shape, more than the whole check may take).
Each shape of `workloads.speed_workloads(device)` runs both, interleaved, in batches of calls: on a GPU
timed by CUDA events around a stream of calls (what a host loop gets: launch cost included), on a CPU by
the wall clock on one thread (see `timing_threads`): what a user waits for, so an op that sleeps, waits
on I/O or on another process is timed too (process CPU time did not see those). A kernel whose time ratio
(`speed_case`: GPU the median of paired ratios, CPU the fastest batches', a failing CPU shape timed twice)
exceeds 1 + `MARGIN[device]` on any shape is slower than its fallback and not served. Results — passes and failures alike, since a speed verdict
does not flip between runs the way a flaky failure might — are cached per (commit, variant, device,
torch) next to the check's, so a warm load does not time again.
"""

from __future__ import annotations

import contextlib
import functools
import statistics
import time
import types
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass

import torch

from registry.errors import KernelHubError

from .check import JsonCache, device_label, rel_error
from .speed_records import BASELINE, MARGIN
from .workloads import Workload, api_forward, as_call, make_inputs, speed_workloads

ROUNDS_BATCH = {"cuda": (7, 10), "cpu": (5, 3)}
DECISIVE = 3.0  # a round where the kernel takes this many times the fallback's time ends the timing
SPEED_MODES = ("once", "always")


class SpeedCheckCrashed(KernelHubError, RuntimeError):
    """An op raised while being timed, or gave a wrong result at a timed shape."""


# The speed check's shapes are the real ones (thousands of rows), the check's are small: a kernel whose
# large-shape path is broken (NaN from a bad tile config, found on the H200) passes the check and must fail
# here. Kernel and fallback run in the same low precision, so the bound is loose: it catches garbage and
# non-finite values, the check proper catches subtle errors against float64.
RESULT_BOUND = {torch.float32: 1e-3, torch.float16: 5e-2, torch.bfloat16: 5e-2}


def result_problem(got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype) -> str | None:
    """Why `got` (the kernel's output) is not the fallback's `want` at a timed shape, or None."""
    if got.shape != want.shape:
        return f"output shape {tuple(got.shape)}, expected {tuple(want.shape)}"
    bad = int((~torch.isfinite(got) & torch.isfinite(want)).sum())
    if bad:
        return f"{bad} of {got.numel()} outputs are NaN or infinite (the fallback's are finite)"
    err = rel_error(got, want.detach().double())
    if not err <= RESULT_BOUND[dtype]:
        return f"relative error {err:.2e} against the fallback (bound {RESULT_BOUND[dtype]:.0e})"
    return None


def time_calls(
    calls: Mapping[str, Callable[[], object]],
    device: str,
    *,
    rounds: int,
    batch: int,
    warmup: int = 2,
    stop: Callable[[dict[str, list[float]]], bool] | None = None,
) -> dict[str, list[float]]:
    """µs per call of each callable: `rounds` samples of `batch` calls, interleaved and in alternating order.

    Interleaving makes drift (clocks, other processes) hit every callable alike. GPU: CUDA events around
    the batch on the current stream, started with an idle queue; CPU: the wall clock. `stop(samples)`,
    asked after every round, ends the timing early once the answer is clear.
    """
    for fn in calls.values():
        for _ in range(warmup):
            fn()
    if device == "cuda":
        torch.cuda.synchronize()
    names = list(calls)
    samples: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            samples[name].append(_batch_us(calls[name], device, batch))
        if stop is not None and stop(samples):
            break
    return samples


def _batch_us(fn: Callable[[], object], device: str, batch: int) -> float:
    if device == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        for _ in range(batch):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1e3 / batch
    t0 = time.perf_counter()
    for _ in range(batch):
        fn()
    return (time.perf_counter() - t0) * 1e6 / batch


def speed_case(label: str, samples: dict[str, list[float]], device: str, margin: float) -> SpeedCase:
    """The verdict of one timed shape. GPU: the median of paired kernel/fallback ratios. CPU (wall clock on a
    shared machine, where other processes only ever add time): the ratio of the fastest batches."""
    k, f = samples["kernel"], samples["fallback"]
    if device == "cpu":
        k_us, f_us = min(k), min(f)
        ratio = k_us / f_us
    else:
        ratio = statistics.median(a / b for a, b in zip(k, f))
        k_us, f_us = statistics.median(k), statistics.median(f)
    return SpeedCase(label, round(k_us, 2), round(f_us, 2), round(ratio, 4), ratio <= 1 + margin)


def confirmed_case(
    label: str, timed: Callable[[], dict[str, list[float]]], device: str, margin: float
) -> SpeedCase:
    """speed_case of `timed()`; on a CPU a failing shape is timed once more and the better verdict kept: a
    slow kernel is slow both times, a burst of other processes on a shared machine rarely hits twice."""
    case = speed_case(label, timed(), device, margin)
    if device == "cpu" and not case.passed:
        again = speed_case(label, timed(), device, margin)
        case = min(case, again, key=lambda c: c.ratio)
    return case


def _us(x: float) -> str:
    return f"{x:.0f} µs" if x >= 100 else f"{x:.1f} µs"


@dataclass(frozen=True)
class SpeedCase:
    workload: str  # short label, e.g. "gated_mlp M=8192"
    kernel_us: float
    fallback_us: float
    ratio: float  # median of paired kernel/fallback times
    passed: bool


@dataclass(frozen=True)
class SpeedResult:
    passed: bool
    cases: tuple[SpeedCase, ...]
    device: str
    dtype: str
    margin: float
    seconds: float
    baseline: str = BASELINE
    cached: bool = False

    def reason(self) -> str:
        """Why the kernel is not served (`slower than eager on <GPU> <arch>: <op> M=<rows> <kernel µs> vs <fallback µs>`)."""
        slow = [c for c in self.cases if not c.passed]
        return f"slower than {self.baseline} on {self.device}: " + "; ".join(
            f"{c.workload} {_us(c.kernel_us)} vs {_us(c.fallback_us)}" for c in slow
        )

    def summary(self) -> str:
        if not self.passed:
            return self.reason()
        if not self.cases:
            return "no workload was timed"
        worst = max(self.cases, key=lambda c: c.ratio)
        return (
            f"not slower than {self.baseline} on {self.device} ({self.dtype}){' (cached)' if self.cached else ''}: "
            f"worst {worst.workload} {_us(worst.kernel_us)} vs {_us(worst.fallback_us)}"
        )

    def to_dict(self) -> dict:
        d = asdict(self)
        return {**d, "cases": list(d["cases"]), "summary": self.summary()}

    @classmethod
    def from_dict(cls, d: Mapping, cached: bool = False) -> SpeedResult:
        fields = {k: d[k] for k in ("passed", "device", "dtype", "margin", "seconds", "baseline")}
        return cls(**fields, cases=tuple(SpeedCase(**c) for c in d["cases"]), cached=cached)


def speed_dtype(device: str) -> torch.dtype:
    """What the shapes run in: bf16 where the GPU has it (fp16 before Ampere), fp32 on the CPU."""
    if device == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.float32


def time_workload(
    w: Workload, impls: Mapping[str, types.ModuleType], device: str, dtype: torch.dtype, **timing
) -> dict[str, list[float]]:
    """µs samples per implementation (a module with the package API) on fresh inputs for `w` (`timing`: time_calls')."""
    a = make_inputs(w, dtype, device)
    calls = {name: as_call(w, a, lambda m=m: api_forward(w, a, m)) for name, m in impls.items()}
    return time_calls(calls, device, **timing)


def _compare(w: Workload, module, reference, device: str, dtype: torch.dtype) -> str | None:
    """One forward of kernel and fallback on the same fresh inputs of `w`; why they disagree, or None."""
    a = make_inputs(w, dtype, device)
    with torch.no_grad():
        return result_problem(api_forward(w, a, module), api_forward(w, a, reference), dtype)


def decided(samples: dict[str, list[float]]) -> bool:
    return samples["kernel"][-1] > DECISIVE * samples["fallback"][-1]


@contextlib.contextmanager
def timing_threads(device: str) -> Iterator[None]:
    """On a CPU, time on one intra-op thread (restored afterwards): kernel and fallback then compete for one
    core each round, and the interleaved rounds let other processes on a shared machine hit both alike.
    Nothing changes on a GPU."""
    threads = torch.get_num_threads()
    if device == "cpu":
        torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def run_speed_check(
    module: types.ModuleType, reference: types.ModuleType, api: list[str], device: str
) -> SpeedResult:
    """Time `module` against `reference` on the shapes the reference declares (`speed_cases`), else on
    `speed_workloads(device)` (ops outside `api` are left out)."""
    with timing_threads(device):
        return _run_speed_check(module, reference, api, device)


def declared_case(
    case: Mapping, module, reference, device: str, dtype: torch.dtype, margin: float, rounds: int, batch: int
) -> SpeedCase:
    """Time one shape the package's reference declares (`speed_cases`), and compare the two results there."""
    op, args, kwargs = case["op"], tuple(case["args"]), dict(case.get("kwargs") or {})
    label = f"{op} {case['name']}"

    def call(m):
        fn = getattr(m, op)

        def run():
            with torch.no_grad():
                return fn(*args, **kwargs)

        return run

    calls = {"kernel": call(module), "fallback": call(reference)}
    try:
        timed = functools.partial(time_calls, calls, device, rounds=rounds, batch=batch,
                                  warmup=2 if device == "cuda" else 1, stop=decided)  # fmt: skip
        timed_case = confirmed_case(label, timed, device, margin)
        problem = result_problem(calls["kernel"](), calls["fallback"](), dtype)
    except Exception as e:  # a crashing kernel is refused; the reason names the shape and the error
        raise SpeedCheckCrashed(f"{label}: raised {type(e).__name__}: {e}") from e
    if problem is not None:
        raise SpeedCheckCrashed(f"{label}: wrong result: {problem}")
    return timed_case


def _declared(reference, api: list[str], device: str, dtype: torch.dtype) -> list[Mapping] | None:
    """The shapes the package's reference declares for this device (`speed_cases(device, dtype)`: mappings with
    `op`, `name`, `args` already on `device` in `dtype`, optional `kwargs`), or None: the fused-MLP workloads."""
    declared = getattr(reference, "speed_cases", None)
    if declared is None:
        return None
    try:
        return [c for c in declared(device, dtype) if c["op"] in api]
    except Exception as e:  # the package's own code: a broken declaration refuses the kernel, with why
        raise SpeedCheckCrashed(f"reference.speed_cases: {type(e).__name__}: {e}") from e


def _run_speed_check(module, reference, api: list[str], device: str) -> SpeedResult:
    start = time.perf_counter()
    dtype, margin = speed_dtype(device), MARGIN[device]
    rounds, batch = ROUNDS_BATCH[device]
    declared = _declared(reference, api, device, dtype)
    cases = [
        declared_case(c, module, reference, device, dtype, margin, rounds, batch) for c in declared or ()
    ]
    for w in speed_workloads(device) if declared is None else ():
        if w.op not in api:
            continue
        calls = {"kernel": module, "fallback": reference}
        try:
            timed = functools.partial(time_workload, w, calls, device, dtype, rounds=rounds, batch=batch,
                                      warmup=2 if device == "cuda" else 1, stop=decided)  # fmt: skip
            case = confirmed_case(w.label, timed, device, margin)
            problem = _compare(w, module, reference, device, dtype)
        except Exception as e:  # a crashing kernel is refused; the reason names the shape and the error
            raise SpeedCheckCrashed(f"{w.label}: raised {type(e).__name__}: {e}") from e
        if problem is not None:
            raise SpeedCheckCrashed(f"{w.label}: wrong result: {problem}")
        cases.append(case)
    return SpeedResult(
        all(c.passed for c in cases),
        tuple(cases),
        device_label(device),
        str(dtype).removeprefix("torch."),
        margin,
        round(time.perf_counter() - start, 3),
    )


class SpeedCache(JsonCache):
    """Speed verdicts (passes and failures) in `<cache>/kernel-hub/speed.json`, keyed like the check cache."""

    def __init__(self, cache_dir):
        super().__init__(cache_dir, "speed.json")

    def get(self, key: str) -> SpeedResult | None:
        entry = self.get_raw(key)
        try:
            return SpeedResult.from_dict(entry, cached=True) if entry else None
        except (KeyError, TypeError):  # written by another version of kernel-hub: time again
            return None

    def put(self, key: str, result: SpeedResult) -> None:
        self.put_raw(key, {k: v for k, v in result.to_dict().items() if k not in ("summary", "cached")})


def speed_checked(
    module, reference, api, *, device: str, key: str, mode: str | None, cache: SpeedCache
) -> SpeedResult | None:
    """Run (or reuse) the speed check per `mode`: "once" reuses a cached verdict, "always" re-runs, None skips."""
    if mode is None:
        return None
    if mode not in SPEED_MODES:
        raise ValueError(f"speed_check={mode!r} is not one of {SPEED_MODES} or None")
    if mode == "once" and (hit := cache.get(key)) is not None:
        return hit
    result = run_speed_check(module, reference, api, device)
    cache.put(key, result)
    return result
