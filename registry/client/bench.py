"""`kernel-hub bench`: time every variant of a version that fits this machine, the compiled fallback and eager
PyTorch on the kernel's standard workloads, as one speed record.

Each accepted variant is loaded as `get_kernel` would load it (trust, signature, digests, import; no check,
no speed check: every one is timed, the slow ones too), eager = the package's own `reference`, and the
compiled fallback = `torch.compile` of it. All implementations of a workload run interleaved on the same
fresh inputs (`speed.time_calls`): on a GPU CUDA events around batches of calls in a stream, on a CPU
the wall clock on one thread. The record goes to the repo's `compat` branch (registry/matrix/store.py)
where `get_kernel` orders variants by it and the hub page charts it.
"""

from __future__ import annotations

import datetime
import json
import logging
import statistics
import types
from collections.abc import Callable, Sequence
from dataclasses import replace

import torch

from registry.errors import KernelLoadError

from .check import device_label
from .fallback import build_fallback
from .fetch import keep_speed_record
from .importer import load_variant, reference_of
from .plan import Refused, plan_load
from .shape_speed import as_shape, shape_forward, shape_inputs
from .speed import BASELINE, ROUNDS_BATCH, speed_dtype, time_calls, timing_threads
from .speed_records import FALLBACK_COMPILE, SpeedRecord, Timing, speed_record_path
from .workloads import api_forward, as_call, bench_workloads, make_inputs

log = logging.getLogger(__name__)

METHOD = {
    "cuda": "median µs per call of {rounds} batches of {batch} calls in a stream (CUDA events, launch cost "
    "included), implementations interleaved on the same fresh random inputs, {dtype}",
    "cpu": "median wall µs per call of {rounds} batches of {batch} calls on one thread, implementations "
    "interleaved on the same fresh random inputs, {dtype}",
}


# Row counts of a preset's workloads: decode, a small batch, a prefill chunk (GPU); a CPU times the first two.
PRESET_ROWS = {"cuda": (1, 16, 512), "cpu": (1, 16)}


def _no_grad(forward: Callable[[], object]) -> Callable[[], object]:
    def call():
        with torch.no_grad():
            return forward()

    return call


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def bench_version(
    repo_id: str,
    version: int,
    *,
    backend: str | None = None,
    compile_fallback: bool = True,
    rounds: int | None = None,
    endpoint: str | None = None,
    token: str | None = None,
    trust_remote_code: bool | list[str] = False,
    publisher_keys: list[str] | None = None,
    progress: Callable[[SpeedRecord], None] | None = None,
    presets: Sequence[str] = (),
) -> SpeedRecord:
    """Time every accepted variant of `repo_id` v`version` here; `progress` gets the record after each workload.
    `presets` (names of registry.spec.presets) add those models' MLP shapes at `PRESET_ROWS[device]` rows,
    forward, as workloads named `<preset> M=<rows>`."""
    shapes = [as_shape(name) for name in presets]  # a typo fails before anything is loaded
    load = plan_load(
        repo_id,
        version,
        None,
        check=None,
        speed_check=None,
        trust_remote_code=trust_remote_code,
        publisher_keys=publisher_keys,
        endpoint=endpoint,
        token=token,
        backend=backend,
    )
    device = load.device
    impls: dict[str, types.ModuleType] = {}
    failed: dict[str, str] = {}
    reference = api = None
    for name in load.resolution.accepted:
        try:
            module, _ = load_variant(load, name)
            impls[name] = module
            if reference is None:
                reference, api = reference_of(module, load.metas[name])
        except Refused as e:
            failed[name] = str(e)
            log.warning("bench: %s refused: %s", name, e)
    if reference is None:
        why = "; ".join(f"{k}: {v}" for k, v in failed.items()) or load.resolution.fallback_reason
        raise KernelLoadError(f"{repo_id} v{version}: no variant of it runs here, nothing to time: {why}")
    if compile_fallback:
        impls[FALLBACK_COMPILE] = build_fallback(reference, api, "compile", f"{repo_id}_bench_compile")
    impls[BASELINE] = reference
    dtype = speed_dtype(device)
    r, batch = ROUNDS_BATCH[device]
    rounds = rounds or 2 * r
    timings: list[Timing] = [
        Timing(w.name, n, None, e) for n, e in failed.items() for w in bench_workloads(device)
    ]
    record = SpeedRecord(
        env=load.env,
        device=device_label(device),
        repo=repo_id,
        version=version,
        commit=load.commit,
        dtype=str(dtype).removeprefix("torch."),
        timings=(),
        measured_at=_now(),
        method=METHOD[device].format(rounds=rounds, batch=batch, dtype=str(dtype).removeprefix("torch.")),
    )
    with timing_threads(device):
        for w in bench_workloads(device):
            a = make_inputs(w, dtype, device)
            calls, errors = {}, {}
            for name, module in impls.items():
                try:  # compiles / JITs here, and a failing implementation is left out of the timing
                    call = as_call(w, a, lambda w=w, a=a, m=module: api_forward(w, a, m))
                    call()
                except Exception as e:  # noqa: BLE001 - foreign code: recorded, the others are still timed
                    errors[name] = f"{type(e).__name__}: {e}".splitlines()[0]
                    continue
                calls[name] = call
            samples = time_calls(calls, device, rounds=rounds, batch=batch)
            timings += [Timing(w.name, n, round(statistics.median(s), 2)) for n, s in samples.items()]
            timings += [Timing(w.name, n, None, e) for n, e in errors.items()]
            record = replace(record, timings=tuple(timings))
            log.info(
                "bench: %s: %s",
                w.name,
                ", ".join(f"{n} {statistics.median(s):.1f} µs" for n, s in samples.items()),
            )
            if progress is not None:
                progress(record)
        for shape, name in zip(shapes, presets):
            for rows in PRESET_ROWS[device]:
                label = f"{name} M={rows}"
                shape = replace(shape, dtype=str(dtype).removeprefix("torch."))
                a = shape_inputs(shape, rows, device)
                calls, errors = {}, {}
                for impl, module in impls.items():
                    try:
                        call = _no_grad(lambda a=a, m=module, s=shape: shape_forward(s, a, m))
                        call()
                    except Exception as e:  # noqa: BLE001 - as above
                        errors[impl] = f"{type(e).__name__}: {e}".splitlines()[0]
                        continue
                    calls[impl] = call
                samples = time_calls(calls, device, rounds=rounds, batch=batch)
                timings += [Timing(label, n, round(statistics.median(v), 2)) for n, v in samples.items()]
                timings += [Timing(label, n, None, e) for n, e in errors.items()]
                record = replace(record, timings=tuple(timings))
                log.info(
                    "bench: %s: %s",
                    label,
                    ", ".join(f"{n} {statistics.median(v):.1f} µs" for n, v in samples.items()),
                )
                if progress is not None:
                    progress(record)
    # This machine's own loads order by it from now on, without waiting for the commit to be fetched anew.
    keep_speed_record(
        load.hub,
        repo_id,
        load.commit,
        speed_record_path(load.commit, load.env).rsplit("/", 1)[-1],
        json.dumps(record.to_json(), sort_keys=True).encode(),
    )
    return record
