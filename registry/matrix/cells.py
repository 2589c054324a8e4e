"""The compatibility matrix itself: for each promised environment, the variant the loader would choose.

Pure: variant metadata at one commit + the environments of build/matrix.toml + recorded checks and speed
records -> `Matrix`. The decision is the loader's own: `resolve_variant`, then the accepted variants in
the order the speed records of that GPU arch give them (`recorded_order`), minus those recorded slower
than eager (the loader's speed check would refuse them), so the matrix never disagrees with what
`get_kernel` does on that machine; recorded checks then confirm or refute a cell, and the record's
speed-up over eager says what to expect.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kernels.backends import CUDA
from kernels.variants import NoarchVariant, parse_variant

from registry.client.resolve import Env, Resolution, Verdict, resolve_variant
from registry.client.speed_records import SpeedRecord, recorded_order, records_for

from .config import CPU_ROW, MatrixConfig, MatrixEnv
from .records import CheckRecord

FALLBACK = "fallback: torch.compile"

# Cell status, most notable first: a merged table cell shows the first that any of its environments has.
FAILED, FALLBACK_STATUS, VERIFIED, STATIC = "failed", "fallback", "verified", "static"
STATUS_ORDER = (FAILED, FALLBACK_STATUS, VERIFIED, STATIC)


@dataclass(frozen=True)
class Cell:
    """What one environment gets: the chosen variant and how its code runs there, or the fallback and why."""

    env: MatrixEnv
    chosen: str | None
    how: str  # "AOT sm_90a" | "Triton JIT" | "SASS sm_80" | "PTX sm_86" | "" (fallback)
    reason: str  # the fallback reason, or the loader's acceptance reason
    checks: tuple[CheckRecord, ...] = ()
    speedup: float | None = None  # recorded speed-up of `chosen` over eager (geometric mean over workloads)

    @property
    def label(self) -> str:
        """One line for a table: `torch-cuda (AOT sm_90a) ×2.10 vs eager` or `fallback: torch.compile — <reason>`."""
        if self.chosen is None:
            return f"{FALLBACK} — {self.reason}"
        speed = f" ×{self.speedup:.2f} vs eager" if self.speedup is not None else ""
        return f"{self.chosen} ({self.how}){speed}"

    @property
    def status(self) -> str:
        if any(not c.passed or c.variant != self.chosen for c in self.checks):
            return FAILED
        if self.chosen is None:
            return FALLBACK_STATUS
        return VERIFIED if self.checks else STATIC


@dataclass(frozen=True)
class Matrix:
    """Cells of every promised environment of one version, plus checks recorded on other machines."""

    repo: str
    version: int
    commit: str
    variants: tuple[str, ...]
    cells: tuple[Cell, ...]
    other_checks: tuple[CheckRecord, ...]  # machines outside the promise (e.g. CPU-only CI runners)
    speed: tuple[SpeedRecord, ...] = ()  # `kernel-hub bench` records of this commit

    def problems(self) -> list[str]:
        """Every promise broken: an environment with no hub kernel, or a recorded check that failed."""
        out = []
        for cell in self.cells:
            where = describe_env(cell.env)
            if cell.chosen is None:
                out.append(f"{where}: no variant fits ({cell.reason})")
            for c in cell.checks:
                if not c.passed:
                    out.append(f"{where}: check on {c.fingerprint} failed: {c.detail}")
                elif c.variant != cell.chosen:
                    out.append(
                        f"{where}: check on {c.fingerprint} ran {c.variant or c.source} ({c.reason}), "
                        f"expected {cell.chosen}"
                    )
        out += [f"{c.fingerprint}: check failed: {c.detail}" for c in self.other_checks if not c.passed]
        return out


def describe_env(env: MatrixEnv) -> str:
    if env.gpu_arch == CPU_ROW:
        return f"CPU torch {env.torch} Python {env.python} {env.cpu}-{env.os}"
    return f"{env.gpu_arch} torch {env.torch} CUDA {env.cuda} Python {env.python} {env.cpu}-{env.os}"


def _is_gpu_variant(name: str) -> bool:
    """CUDA builds (the kernel); CPU/universal builds only carry the reference for the fallback."""
    try:
        v = parse_variant(name)
    except ValueError:
        return True
    if isinstance(v, NoarchVariant):
        return v.arch.backend_name == "cuda"
    return isinstance(v.arch.backend, CUDA)


def how_it_runs(verdict: Verdict) -> str:
    """ "AOT sm_90a" / "Triton JIT" for the Triton variant, "SASS sm_80" / "PTX sm_86" for compiled builds."""
    d = verdict.detail
    if "aot" in d:
        return f"AOT {d['aot_arch']}" if d["aot"] else "Triton JIT"
    if "code" in d:
        return f"{d['code'].upper()} {d['code_arch']}"
    return verdict.reason


def fallback_reason(resolution: Resolution, env: MatrixEnv) -> str:
    """Why no variant fits, naming only the GPU variants (CPU builds never are the kernel)."""
    gpu = [v for v in resolution.verdicts if _is_gpu_variant(v.variant)]
    if not gpu:
        return "the version has no CUDA variant"
    return f"no variant for {env.gpu_arch}: " + "; ".join(f"{v.variant}: {v.reason}" for v in gpu)


def cell_for(
    variants: Mapping[str, Mapping], env: MatrixEnv, triton: str, speed: Iterable[SpeedRecord] = ()
) -> Cell:
    """The cell of one environment: the loader's decision on the variants' metadata and speed records, no hardware."""
    if env.gpu_arch == CPU_ROW:  # no GPU: the CPU build is the kernel there (kernels' backend="cpu")
        cpu_env = Env(env.os, env.cpu, env.python, env.torch, None, None, None)
        resolution = resolve_variant(variants, cpu_env, backend="cpu")
        if resolution.chosen is None:
            return Cell(env, None, "", "the version has no CPU variant")
        return Cell(env, resolution.chosen, "CPU", resolution.verdicts[0].reason)
    loader_env = env.to_env(triton)
    resolution = resolve_variant(variants, loader_env)
    records = records_for(speed, env.gpu_arch, env.torch)
    order, speedups = recorded_order(resolution.accepted, records, loader_env)
    slow = {}
    for v in order:
        why = next((r for r in (rec.slower_than_eager(v) for rec in records) if r), None)
        if why is None:
            verdict = next(x for x in resolution.verdicts if x.variant == v)
            return Cell(env, v, how_it_runs(verdict), verdict.reason, speedup=speedups.get(v))
        slow[v] = why
    if slow:
        return Cell(env, None, "", "; ".join(f"{v}: {why}" for v, why in slow.items()))
    return Cell(env, None, "", fallback_reason(resolution, env))


def build_matrix(
    config: MatrixConfig,
    *,
    repo: str,
    version: int,
    commit: str,
    variants: Mapping[str, Mapping],
    records: Iterable[CheckRecord] = (),
    speed: Iterable[SpeedRecord] = (),
) -> Matrix:
    """The matrix of one version commit: a cell per promised environment, recorded checks merged in.

    Records of other commits are ignored (a check or a timing vouches for exactly the commit it ran against).
    """
    records = [r for r in records if r.commit == commit]
    speed = tuple(sorted((s for s in speed if s.commit == commit), key=lambda s: s.fingerprint))
    cells, matched = [], set()
    for env in config.environments():
        mine = tuple(sorted((r for r in records if r.matches(env)), key=lambda r: r.checked_at))
        matched.update(id(r) for r in mine)
        cell = cell_for(variants, env, config.triton_for(env.torch), speed)
        cells.append(Cell(cell.env, cell.chosen, cell.how, cell.reason, mine, cell.speedup))
    others = tuple(sorted((r for r in records if id(r) not in matched), key=lambda r: r.fingerprint))
    return Matrix(repo, version, commit, tuple(sorted(variants)), tuple(cells), others, speed)
