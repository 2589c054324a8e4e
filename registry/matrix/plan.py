"""CI job lists derived from build/matrix.toml, so the GitHub workflows never repeat the matrix.

`kernel-hub matrix-plan build` / `compat` print `{"include": [...]}` for a workflow's
`strategy.matrix: ${{ fromJSON(...) }}`. Pure functions of the parsed TOML.
"""

from __future__ import annotations

from collections.abc import Mapping

from kernels.variants import ArchVariant, parse_variant

from registry.spec.arch import parse_sm
from registry.spec.build_matrix import MatrixConfigError, parse_matrix

# GitHub-hosted runners per CPU for CPU-only build steps (Triton AOT compiles without a GPU).
BUILD_RUNNERS = {"x86_64": "ubuntu-24.04", "aarch64": "ubuntu-24.04-arm"}


def torch_cuda_arch_list(archs: list[str], ptx: list[str]) -> str:
    """build/matrix.toml archs in torch's TORCH_CUDA_ARCH_LIST syntax: sm_90a -> 9.0a, PTX as +PTX."""
    try:
        return " ".join(parse_sm(a).dotted(ptx=a in ptx) for a in archs)
    except ValueError as e:
        raise MatrixConfigError(f"build/matrix.toml: {e}") from None


def build_jobs(data: Mapping) -> list[dict]:
    """One job per variant (per CPU for compiled ones): what build.yml fans out to.

    A variant is one build: `kernel-hub build --variant V` compiles the AOT cubins of every arch in
    one content-hashed directory (CPU-only, minutes), and the CUDA extension is one fat binary
    (SASS per arch + PTX) via TORCH_CUDA_ARCH_LIST, so arch-level jobs would only repeat setup.
    """
    jobs = []
    for spec in parse_matrix(data).variants:
        name = spec.name
        job = {"variant": name, "kind": spec.kind, "archs": " ".join(spec.archs), "cpu": "x86_64"}
        if spec.kind == "cuda":
            v = parse_variant(name)
            job["cpu"] = v.arch.platform if isinstance(v, ArchVariant) else "x86_64"
            job["torch_cuda_arch_list"] = torch_cuda_arch_list(list(spec.archs), list(spec.ptx))
        if job["cpu"] not in BUILD_RUNNERS:
            raise MatrixConfigError(
                f"build/matrix.toml: variant {name!r} targets CPU {job['cpu']!r}; runners exist "
                f"for {sorted(BUILD_RUNNERS)}"
            )
        job["runner"] = BUILD_RUNNERS[job["cpu"]]
        jobs.append(job)
    return jobs


def compat_jobs(data: Mapping) -> list[dict]:
    """One job per promised GPU arch that has a runner in `[ci.gpu_runners]` (arch -> runner label)."""
    runners = (data.get("ci") or {}).get("gpu_runners") or {}
    archs = (data.get("environments") or {}).get("gpu_arch") or []
    unknown = sorted(set(runners) - set(archs))
    if unknown:
        raise MatrixConfigError(
            f"build/matrix.toml: [ci.gpu_runners] names archs {unknown} that "
            "[environments].gpu_arch does not promise"
        )
    return [{"gpu_arch": a, "runner": runners[a]} for a in archs if a in runners]
