"""Matrix test fixtures (imported by name: a second `conftest` module would shadow tests/conftest.py's helpers).

Hand-built variant metadata (what `kernel-hub build` writes, reduced to the keys resolution reads)."""

from __future__ import annotations

import pytest
from variant_names import CUDA_VARIANT

STABLE = CUDA_VARIANT


def archs(*entries: str) -> list[dict]:
    """`archs` entries from "sm_89" (SASS), "sm_86+PTX" (SASS+PTX) or "sm_86:ptx" (PTX only)."""
    out = []
    for e in entries:
        name, _, kind = e.replace("+PTX", ":both").partition(":")
        out.append({"arch": name, "sass": kind in ("", "both"), "ptx": kind in ("ptx", "both")})
    return out


def cuda_meta(*entries: str) -> dict:
    return {
        "name": "fused-mlp",
        "backend": {"type": "cuda"},
        "archs": archs(*entries),
        "torch_stable_abi": "2.11",
    }


def triton_meta(*entries: str, triton: tuple[str, ...] = ("3.6.0",)) -> dict:
    return {
        "name": "fused-mlp",
        "backend": {"type": "cuda"},
        "archs": archs(*entries),
        "triton": list(triton),
    }


CPU_META = {"name": "fused-mlp", "backend": {"type": "cpu"}}


@pytest.fixture(name="no_sm80_version")
def fixture_no_sm80_version() -> dict[str, dict]:
    """Only the compiled variant, without sm_80 code; PTX for sm_86 covers sm_86 and newer."""
    return {STABLE: cuda_meta("sm_86:ptx", "sm_89", "sm_90a"), "torch-cpu": CPU_META}


@pytest.fixture(name="full_version")
def fixture_full_version() -> dict[str, dict]:
    """What build/matrix.toml builds: Triton AOT + stable-ABI CUDA, plus the CPU reference builds."""
    a = ("sm_80", "sm_89", "sm_90a", "sm_100a", "sm_120")
    return {
        "torch-cuda": triton_meta(*a),
        STABLE: cuda_meta(*a[:-1], "sm_120+PTX"),
        "torch-cpu": CPU_META,
        "torch-universal": {"name": "fused-mlp", "backend": {"type": "universal"}},
    }


@pytest.fixture(name="make_record")
def fixture_make_record():
    """Factory for a CheckRecord of a machine (defaults: an H200 with torch 2.11 cu130, Python 3.12)."""
    from registry.client.resolve import Env
    from registry.matrix.records import CheckRecord

    def make(
        commit: str,
        *,
        gpu_arch: str | None = "sm_90",
        torch: str = "2.11.0",
        cuda: str | None = "13.0",
        python: str = "3.12",
        cpu: str = "x86_64",
        variant: str | None = STABLE,
        passed: bool = True,
        source: str = "hub",
        reason: str | None = None,
        detail: str = "passed: 60/60 comparisons",
    ) -> CheckRecord:
        env = Env("linux", cpu, python, torch, cuda, gpu_arch, "3.6.0", True, cuda)
        return CheckRecord(
            env,
            "org/fused-mlp",
            1,
            commit,
            variant,
            source,
            reason,
            passed,
            {"linear/torch.float16/forward": 1.2e-3},
            detail,
            "2026-12-02T17:00:00+00:00",
            4.2,
        )

    return make
