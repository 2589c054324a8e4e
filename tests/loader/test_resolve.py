"""The pure variant decision: simulated environments in, chosen variant and reasons out (no hardware)."""

from __future__ import annotations

import pytest
from variant_names import CUDA_VARIANT

from registry.client.resolve import NO_CUDA_DEVICE, Env, reference_sources, resolve_variant
from registry.spec.arch import parse_arch, ptx_runs_on, sass_runs_on

STABLE = CUDA_VARIANT


def archs(*entries: str) -> list[dict]:
    """`sm_80`, `sm_120+ptx`, `ptx:sm_80` (PTX only) -> our metadata `archs` list."""
    out = []
    for e in entries:
        if e.startswith("ptx:"):
            out.append({"arch": e[4:], "sass": False, "ptx": True})
        else:
            name, _, extra = e.partition("+")
            out.append({"arch": name, "sass": True, "ptx": extra == "ptx"})
    return out


# What the builder publishes per build/matrix.toml.
SHIPPED_ARCHS = archs("sm_80", "sm_89", "sm_90a", "sm_100a", "sm_120+ptx")
CUBIN_ARCHS = archs("sm_80", "sm_89", "sm_90a", "sm_100a", "sm_120")
SHIPPED = {
    STABLE: {"backend": {"type": "cuda"}, "archs": SHIPPED_ARCHS},
    "torch-cuda": {
        "backend": {"type": "cuda", "archs": ["8.0+PTX"]},
        "archs": CUBIN_ARCHS,
        "triton": ["3.6.0"],
    },
    "torch-cpu": {"backend": {"type": "cpu"}},
    "torch-universal": {"backend": {"type": "cpu"}},
}


def env(gpu_arch: str | None, *, torch="2.11.0", cuda="13.0", triton="3.6.0", driver=None) -> Env:
    return Env("linux", "x86_64", "3.12", torch, cuda, gpu_arch, triton, True, driver)


def verdict(res, name):
    return next(v for v in res.verdicts if v.variant == name)


@pytest.mark.parametrize(
    ("gpu", "code_arch"),
    [
        ("sm_80", "sm_80"),
        ("sm_86", "sm_80"),
        ("sm_90", "sm_90a"),
        ("sm_100", "sm_100a"),
        ("sm_120", "sm_120"),
    ],
)
def test_shipped_builds_pick_stable_abi_with_the_right_sass(gpu, code_arch):
    res = resolve_variant(SHIPPED, env(gpu))
    assert res.chosen == STABLE
    stable = verdict(res, STABLE)
    assert stable.detail["code_arch"] == code_arch and stable.detail["code"] == "sass"
    assert res.accepted == (STABLE, "torch-cuda")  # the Triton variant is the next candidate


def test_sm86_runs_ptx_of_sm80_when_no_sass_fits():
    meta = {STABLE: {"archs": archs("ptx:sm_80", "sm_90a")}}
    res = resolve_variant(meta, env("sm_86"))
    assert res.chosen == STABLE
    assert verdict(res, STABLE).detail == (
        {"device_arch": "sm_86", "archs": "sm_80(ptx), sm_90a(sass)", "code_arch": "sm_80", "code": "ptx"}
    )


def test_sm90a_code_is_refused_on_any_other_arch():
    meta = {STABLE: {"archs": archs("sm_90a")}}
    assert resolve_variant(meta, env("sm_90")).chosen == STABLE
    for gpu in ("sm_89", "sm_100", "sm_120"):
        res = resolve_variant(meta, env(gpu))
        assert res.chosen is None
        assert verdict(res, STABLE).reason == f"no code for {gpu}: built for sm_90a(sass)"


def test_plain_sm90_sass_is_not_arch_specific_but_needs_the_same_major():
    meta = {STABLE: {"archs": archs("sm_90")}}
    assert resolve_variant(meta, env("sm_90")).chosen == STABLE
    assert resolve_variant(meta, env("sm_100")).chosen is None


def test_sm100_needs_blackwell_code_and_sm120_ptx_does_not_reach_it():
    meta = {STABLE: {"archs": archs("sm_90a", "sm_120+ptx")}}
    assert resolve_variant(meta, env("sm_100")).chosen is None
    meta = {STABLE: {"archs": archs("sm_100a", "sm_120+ptx")}}
    assert verdict(resolve_variant(meta, env("sm_100")), STABLE).detail["code_arch"] == "sm_100a"
    assert resolve_variant(meta, env("sm_103")).chosen is None  # sm_100a is exact-only


def test_sm120_family_sass_serves_sm121_and_newer_majors_get_ptx():
    meta = {STABLE: {"archs": archs("sm_80", "sm_120+ptx")}}
    assert verdict(resolve_variant(meta, env("sm_121")), STABLE).detail["code"] == "sass"
    later = verdict(resolve_variant(meta, env("sm_130")), STABLE)
    assert later.accepted and later.detail == (
        {
            "device_arch": "sm_130",
            "archs": "sm_80(sass), sm_120(sass+ptx)",
            "code_arch": "sm_120",
            "code": "ptx",
        }
    )


def test_no_cuda_device_rejects_cuda_builds_and_picks_the_fallback():
    for cuda in (None, "13.0"):  # CPU torch, and CUDA torch on a machine without a GPU
        res = resolve_variant(SHIPPED, env(None, cuda=cuda))
        assert res.chosen is None
        assert res.fallback_reason == NO_CUDA_DEVICE
        assert verdict(res, STABLE).reason == NO_CUDA_DEVICE
        assert verdict(res, "torch-cuda").reason == NO_CUDA_DEVICE
        assert not verdict(res, "torch-universal").accepted


def test_backend_cpu_makes_cpu_builds_the_kernel_cpu_before_universal():
    res = resolve_variant(SHIPPED, env(None, cuda=None), backend="cpu")
    assert res.accepted == ("torch-cpu", "torch-universal")


def test_triton_variant_reports_aot_cubin_or_jit():
    res = resolve_variant({"torch-cuda": SHIPPED["torch-cuda"]}, env("sm_90"))
    assert res.chosen == "torch-cuda"
    assert verdict(res, "torch-cuda").detail["aot"] is True
    jit = verdict(
        resolve_variant({"torch-cuda": SHIPPED["torch-cuda"]}, env("sm_90", triton="3.8.0")), "torch-cuda"
    )
    assert jit.accepted and jit.detail["aot"] is False
    assert jit.detail["jit_reason"] == "AOT cubins are for Triton 3.6.0, running 3.8.0"
    assert jit.reason == "fits sm_90 (Triton JIT)"
    # sm_80 cubins are not used on sm_86 (aot.py loads the exact arch; configs assume sm_80's shared memory)
    ampere = verdict(resolve_variant({"torch-cuda": SHIPPED["torch-cuda"]}, env("sm_86")), "torch-cuda")
    assert ampere.accepted and ampere.detail["aot"] is False and ampere.reason == "fits sm_86 (Triton JIT)"
    none = resolve_variant({"torch-cuda": SHIPPED["torch-cuda"]}, env("sm_90", triton=None))
    assert none.chosen is None and "Triton is not installed" in none.fallback_reason


def test_triton_jit_floor_from_ptx_marks():
    res = resolve_variant(SHIPPED, env("sm_103"))
    assert res.chosen == "torch-cuda" and res.verdicts[0].reason == "fits sm_103 (Triton JIT)"
    old = resolve_variant(SHIPPED, env("sm_75"))
    assert old.chosen is None
    assert (
        verdict(old, "torch-cuda").reason == "no AOT cubin for sm_75 and the Triton JIT needs sm_80 or newer"
    )


def test_kernels_rules_still_apply_torch_and_cuda_versions():
    meta = {
        "torch-stable-abi213-cu130-x86_64-linux": {"archs": archs("sm_90a")},
        "torch211-cxx11-cu126-x86_64-linux": {"archs": archs("sm_90a")},
        "torch211-cxx11-cu130-aarch64-linux": {"archs": archs("sm_90a")},
    }
    res = resolve_variant(meta, env("sm_90", torch="2.11.0", cuda="13.0"))
    reasons = {v.variant: v.reason for v in res.verdicts}
    assert "too new" in reasons["torch-stable-abi213-cu130-x86_64-linux"]
    assert "not compatible with system CUDA version (13.0)" in reasons["torch211-cxx11-cu126-x86_64-linux"]
    assert "does not match system CPU" in reasons["torch211-cxx11-cu130-aarch64-linux"]
    assert res.fallback_reason.startswith("no variant fits this machine: ")


def test_old_driver_refuses_newer_cuda_build():
    res = resolve_variant({STABLE: {"archs": archs("sm_90a")}}, env("sm_90", driver="12.8"))
    assert res.chosen is None
    assert verdict(res, STABLE).reason.startswith("built for CUDA 13.0, the driver supports CUDA 12.8")


def test_kernels_backend_archs_are_read_when_ours_are_missing():
    meta = {STABLE: {"backend": {"type": "cuda", "archs": ["8.0", "9.0a"]}}}
    assert verdict(resolve_variant(meta, env("sm_90")), STABLE).detail["code_arch"] == "sm_90a"
    assert resolve_variant(meta, env("sm_89")).chosen == STABLE  # 8.0 SASS on 8.9


def test_unknown_names_are_rejected_not_fatal():
    res = resolve_variant({"not-a-variant": {}, "torch-cuda": SHIPPED["torch-cuda"]}, env("sm_90"))
    assert res.chosen == "torch-cuda"
    assert "not a variant name" in verdict(res, "not-a-variant").reason


def test_arch_rules():
    assert parse_arch("sm_100a") == parse_arch("10.0a")
    assert sass_runs_on(parse_arch("sm_80"), parse_arch("sm_89"))
    assert not sass_runs_on(parse_arch("sm_89"), parse_arch("sm_80"))
    assert not sass_runs_on(parse_arch("sm_90a"), parse_arch("sm_100"))
    assert ptx_runs_on(parse_arch("sm_80"), parse_arch("sm_120"))
    assert not ptx_runs_on(parse_arch("sm_90a"), parse_arch("sm_100"))
    with pytest.raises(ValueError, match="neither"):
        parse_arch("ampere")


def test_reference_sources_prefer_pure_python_builds():
    assert reference_sources(SHIPPED) == ["torch-cpu", "torch-universal", "torch-cuda", STABLE]
