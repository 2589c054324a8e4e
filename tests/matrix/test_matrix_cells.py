"""Cells: the variant the loader's own resolution picks per promised environment, and recorded checks."""

from __future__ import annotations

import pytest
from matrix_fixtures import STABLE, fixture_full_version, fixture_make_record, fixture_no_sm80_version  # noqa: F401 (fixtures)

from registry.matrix.cells import FAILED, FALLBACK_STATUS, STATIC, VERIFIED, build_matrix, cell_for
from registry.matrix.config import MatrixEnv, load_config

COMMIT = "c" * 40


def env(
    gpu_arch: str, torch: str = "2.11", cuda: str = "13.0", python: str = "3.12", cpu: str = "x86_64"
) -> MatrixEnv:
    return MatrixEnv(gpu_arch, torch, cuda, python, cpu, "linux")


def matrix(variants, records=()):
    return build_matrix(
        load_config(), repo="org/fused-mlp", version=1, commit=COMMIT, variants=variants, records=records
    )


def cell(m, **kw):
    [c] = [c for c in m.cells if c.env == env(**kw)]
    return c


def test_missing_sm80_falls_back_with_the_reason(no_sm80_version):
    c = cell(matrix(no_sm80_version), gpu_arch="sm_80")
    assert c.chosen is None and c.status == FALLBACK_STATUS
    assert c.label.startswith("fallback: torch.compile — no variant for sm_80: ")
    assert f"{STABLE}: no code for sm_80: built for sm_86(ptx), sm_89(sass), sm_90a(sass)" in c.reason
    assert "torch-cpu" not in c.reason  # CPU builds never are the kernel: not listed as candidates


def test_ptx_covers_sm86_and_newer_archs_without_sass(no_sm80_version):
    m = matrix(no_sm80_version)
    assert cell(m, gpu_arch="sm_86").label == f"{STABLE} (PTX sm_86)"
    assert cell(m, gpu_arch="sm_89").label == f"{STABLE} (SASS sm_89)"
    assert cell(m, gpu_arch="sm_90").label == f"{STABLE} (SASS sm_90a)"
    assert cell(m, gpu_arch="sm_120").label == f"{STABLE} (PTX sm_86)"  # sm_90a SASS is arch-specific


def test_cuda12_torch_cannot_run_a_cu130_build(no_sm80_version):
    c = cell(matrix(no_sm80_version), gpu_arch="sm_90", cuda="12.8")
    assert c.chosen is None and "CUDA" in c.reason


def test_problems_name_every_environment_without_a_kernel(no_sm80_version):
    m = matrix(no_sm80_version)
    problems = m.problems()
    fallbacks = [c for c in m.cells if c.chosen is None]
    assert len(problems) == len(fallbacks) > 0
    assert any(
        p.startswith("sm_80 torch 2.11 CUDA 13.0 Python 3.12 x86_64-linux: no variant fits") for p in problems
    )


def test_full_version_picks_stable_abi_on_x86_cu130_and_triton_elsewhere(full_version):
    m = matrix(full_version)
    assert cell(m, gpu_arch="sm_90").label == f"{STABLE} (SASS sm_90a)"
    assert cell(m, gpu_arch="sm_90", cpu="aarch64").label == "torch-cuda (AOT sm_90a)"
    # Triton cubins run on their exact arch only (their tile configs assume sm_80's shared memory).
    assert cell(m, gpu_arch="sm_86", cuda="12.8").label == "torch-cuda (Triton JIT)"
    # torch 2.14 pins Triton 3.8.0; the cubins are for 3.6.0, so the Triton variant JIT-compiles there.
    assert cell(m, gpu_arch="sm_90", torch="2.14", cuda="12.8").label == "torch-cuda (Triton JIT)"
    assert cell(m, gpu_arch="sm_120", cuda="12.8").label == "torch-cuda (AOT sm_120)"
    assert m.problems() == []


def test_cells_follow_the_loaders_resolution_not_a_copy(full_version):
    from registry.client.resolve import resolve_variant

    e = env("sm_89", torch="2.12", cpu="aarch64")
    expected = resolve_variant(full_version, e.to_env(load_config().triton_for("2.12"))).chosen
    assert cell_for(full_version, e, load_config().triton_for("2.12")).chosen == expected == "torch-cuda"


def test_excluded_environments_are_not_promised(full_version):
    m = matrix(full_version)
    assert not [c for c in m.cells if c.env.gpu_arch in ("sm_100", "sm_120") and c.env.cuda == "12.6"]
    assert (
        load_config().excluded_by(env("sm_120", cuda="12.6"))
        == "Blackwell (cc 10.0 / 12.0) needs CUDA >= 12.8"
    )


def test_a_passing_check_verifies_its_cell_and_only_its_commit(full_version, make_record):
    m = matrix(full_version, [make_record(COMMIT), make_record("d" * 40, passed=False, detail="old commit")])
    c = cell(m, gpu_arch="sm_90")
    assert c.status == VERIFIED and len(c.checks) == 1
    assert cell(m, gpu_arch="sm_90", python="3.11").status == STATIC
    assert m.problems() == []


def test_a_failed_check_breaks_the_promise(full_version, make_record):
    m = matrix(full_version, [make_record(COMMIT, passed=False, detail="FAILED: linear fp16 error 3e-1")])
    assert cell(m, gpu_arch="sm_90").status == FAILED
    assert any("FAILED: linear fp16 error 3e-1" in p for p in m.problems())


def test_a_runtime_fallback_where_a_kernel_should_run_breaks_the_promise(full_version, make_record):
    r = make_record(COMMIT, variant=None, source="fallback-compile", reason="import failed: undefined symbol")
    m = matrix(full_version, [r])
    assert cell(m, gpu_arch="sm_90").status == FAILED
    assert any(
        "fallback-compile (import failed: undefined symbol), expected " + STABLE in p for p in m.problems()
    )


def test_cpu_machine_checks_are_listed_outside_the_promise(full_version, make_record):
    ok = make_record(
        COMMIT,
        gpu_arch=None,
        cuda=None,
        torch="2.13.0",
        python="3.11",
        variant=None,
        source="fallback-compile",
        reason="no CUDA device",
    )
    m = matrix(full_version, [ok])
    assert m.other_checks == (ok,) and m.problems() == []
    bad = make_record(
        COMMIT,
        gpu_arch=None,
        cuda=None,
        variant=None,
        source="fallback-compile",
        passed=False,
        detail="FAILED: nan",
    )
    assert matrix(full_version, [bad]).problems() == [f"{bad.fingerprint}: check failed: FAILED: nan"]


@pytest.mark.parametrize("torch, triton", [("2.11", "3.6.0"), ("2.14", "3.8.0"), ("2.12", "unknown")])
def test_triton_per_torch_comes_from_the_matrix_file(torch, triton):
    assert load_config().triton_for(torch) == triton
