"""Speed records: what `kernel-hub bench` measured for a version on one machine, and the order they imply.

One JSON file per (commit, machine) on the repo's `compat` branch at `speed/<commit>/<fingerprint>.json`
(the fingerprint starts with the GPU arch), beside the matrix's check records: µs per call of every
accepted variant, the compiled fallback and eager PyTorch (the package's reference) on the standard
workloads. Pure (no torch: the hub's pages read it): the format, and `recorded_order` — the loader tries accepted variants fastest first
by the records of its own GPU arch (same torch minor preferred); the matrix shows the same numbers.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from registry.errors import KernelHubError

from .resolve import Env, fingerprint
from .workloads import SPEED_CHECK

SCHEMA = 1
SPEED_DIR = "speed"
FALLBACK_COMPILE = "fallback-compile"
BASELINE = "eager"  # the package's reference, as is: what every speed-up is measured against
MARGIN = {
    "cuda": 0.05,
    "cpu": 0.25,
}  # the speed check's allowance for measurement noise (CPU: a shared CI box)


class SpeedRecordError(KernelHubError, ValueError):
    """A file under speed/ on the compat branch is not a speed record this version understands."""

    exit_code = 2


def speed_record_path(commit: str, env: Env) -> str:
    return f"{SPEED_DIR}/{commit}/{fingerprint(env)}.json"


def minor(version: str | None) -> str | None:
    """ "2.11.0+cu130" -> "2.11"."""
    return ".".join(version.split("+")[0].split(".")[:2]) if version else None


@dataclass(frozen=True)
class Timing:
    workload: str  # Workload.name
    implementation: str  # a variant name, "fallback-compile" or "eager"
    us: float | None  # None: it failed on this workload (`error` says why)
    error: str | None = None


@dataclass(frozen=True)
class SpeedRecord:
    """One `kernel-hub bench` run: every implementation on every standard workload on one machine."""

    env: Env
    device: str  # "NVIDIA H200 sm_90" | "cpu"
    repo: str
    version: int
    commit: str
    dtype: str
    timings: tuple[Timing, ...]
    measured_at: str
    method: str  # how the µs were taken, in one line

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.env)

    @property
    def device_arch(self) -> str:
        return self.env.gpu_arch or "cpu"

    def implementations(self) -> list[str]:
        return list(dict.fromkeys(t.implementation for t in self.timings))

    def workloads(self) -> list[str]:
        return list(dict.fromkeys(t.workload for t in self.timings))

    def us(self, implementation: str, workload: str) -> float | None:
        return next(
            (t.us for t in self.timings if t.implementation == implementation and t.workload == workload),
            None,
        )

    def speedups(self, implementation: str) -> dict[str, float]:
        """workload -> eager µs / `implementation` µs, where both were measured."""
        out = {}
        for w in self.workloads():
            base, mine = self.us(BASELINE, w), self.us(implementation, w)
            if base and mine:
                out[w] = base / mine
        return out

    def speedup(self, implementation: str) -> float | None:
        """Geometric mean of `speedups` (None without any measurement)."""
        s = list(self.speedups(implementation).values())
        return math.exp(sum(math.log(x) for x in s) / len(s)) if s else None

    def slower_than_eager(self, implementation: str) -> str | None:
        """The loader's speed verdict on these numbers (its shapes, its margin): the reason, or None."""
        margin = MARGIN["cuda" if self.env.gpu_arch else "cpu"]
        names = {w.name: w.label for w in SPEED_CHECK}
        slow = [
            f"{names.get(w, w)} {mine:.0f} µs vs {base:.0f} µs"
            for w in self.workloads()
            if (w in names or not self.env.gpu_arch)
            and (base := self.us(BASELINE, w))
            and (mine := self.us(implementation, w))
            and mine > base * (1 + margin)
        ]
        return f"recorded slower than {BASELINE} on {self.device}: " + "; ".join(slow) if slow else None

    def to_json(self) -> dict:
        data = dataclasses.asdict(self)
        data["timings"] = [dataclasses.asdict(t) for t in self.timings]
        return {"schema": SCHEMA, "kind": "speed", **data, "fingerprint": self.fingerprint}


def parse_speed_record(data: Mapping) -> SpeedRecord:
    """SpeedRecord from its JSON; raises SpeedRecordError saying which key is wrong."""
    if data.get("schema") != SCHEMA or data.get("kind") != "speed":
        raise SpeedRecordError(
            f"speed record schema {data.get('schema')!r} kind {data.get('kind')!r} is not {SCHEMA} 'speed'; "
            "re-run `kernel-hub bench`"
        )
    try:
        return SpeedRecord(
            env=Env(**data["env"]),
            device=str(data["device"]),
            repo=str(data["repo"]),
            version=int(data["version"]),
            commit=str(data["commit"]),
            dtype=str(data["dtype"]),
            timings=tuple(_timing(t) for t in data["timings"]),
            measured_at=str(data["measured_at"]),
            method=str(data.get("method", "")),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise SpeedRecordError(f"speed record is malformed ({type(e).__name__}: {e})") from None


def _timing(t: Mapping) -> Timing:
    us = None if t["us"] is None else float(t["us"])
    return Timing(str(t["workload"]), str(t["implementation"]), us, t.get("error"))


def parse_records(raw: Iterable[Mapping]) -> list[SpeedRecord]:
    """Every record that parses (a loader orders by what it can read and ignores the rest)."""
    out = []
    for data in raw:
        try:
            out.append(parse_speed_record(data))
        except SpeedRecordError:
            continue
    return out


def records_for(records: Iterable[SpeedRecord], gpu_arch: str | None, torch: str | None) -> list[SpeedRecord]:
    """Records of this device arch ("cpu" without a GPU), same torch minor if any, newest first."""
    device = gpu_arch or "cpu"
    mine = [r for r in records if r.device_arch == device]
    same = [r for r in mine if minor(r.env.torch) == minor(torch)]
    return sorted(same or mine, key=lambda r: r.measured_at, reverse=True)


def recorded_order(
    accepted: Sequence[str], records: Iterable[SpeedRecord], env: Env
) -> tuple[list[str], dict[str, float]]:
    """(accepted variants with recorded ones fastest first, the rest in their order; variant -> speed-up used)."""
    speedup: dict[str, float] = {}
    for record in records_for(records, env.gpu_arch, env.torch):
        for v in accepted:
            if v not in speedup and (s := record.speedup(v)) is not None:
                speedup[v] = s
    recorded = sorted((v for v in accepted if v in speedup), key=lambda v: -speedup[v])
    return recorded + [v for v in accepted if v not in speedup], speedup
