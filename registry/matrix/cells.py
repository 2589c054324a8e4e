"""The compatibility matrix itself: for each promised environment, the variant the loader would choose.

Pure: variant metadata at one commit + the environments of build/matrix.toml + recorded checks ->
`Matrix`. The decision is the loader's own `registry.resolve.resolve_variant`, so the matrix can never
disagree with what `get_kernel` does on that machine; recorded checks then confirm or refute a cell.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kernels.backends import CUDA
from kernels.variants import NoarchVariant, parse_variant

from registry.client.resolve import Resolution, Verdict, resolve_variant

from .config import MatrixConfig, MatrixEnv
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

    @property
    def label(self) -> str:
        """One line for a table: `torch-cuda (AOT sm_90a)` or `fallback: torch.compile — <reason>`."""
        if self.chosen is None:
            return f"{FALLBACK} — {self.reason}"
        return f"{self.chosen} ({self.how})"

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


def cell_for(variants: Mapping[str, Mapping], env: MatrixEnv, triton: str) -> Cell:
    """The cell of one environment: `resolve_variant` on the variants' metadata, no hardware involved."""
    resolution = resolve_variant(variants, env.to_env(triton))
    if resolution.chosen is None:
        return Cell(env, None, "", fallback_reason(resolution, env))
    verdict = next(v for v in resolution.verdicts if v.variant == resolution.chosen)
    return Cell(env, resolution.chosen, how_it_runs(verdict), verdict.reason)


def build_matrix(
    config: MatrixConfig,
    *,
    repo: str,
    version: int,
    commit: str,
    variants: Mapping[str, Mapping],
    records: Iterable[CheckRecord] = (),
) -> Matrix:
    """The matrix of one version commit: a cell per promised environment, recorded checks merged in.

    Records of other commits are ignored (a check vouches for exactly the commit it ran against).
    """
    records = [r for r in records if r.commit == commit]
    cells, matched = [], set()
    for env in config.environments():
        mine = tuple(sorted((r for r in records if r.matches(env)), key=lambda r: r.checked_at))
        matched.update(id(r) for r in mine)
        cell = cell_for(variants, env, config.triton_for(env.torch))
        cells.append(Cell(cell.env, cell.chosen, cell.how, cell.reason, mine))
    others = tuple(sorted((r for r in records if id(r) not in matched), key=lambda r: r.fingerprint))
    return Matrix(repo, version, commit, tuple(sorted(variants)), tuple(cells), others)
