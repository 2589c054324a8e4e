"""GPU arch notation has two homes and no more: `fused_mlp.arch` (the kernel package ships without kernel-hub)
and `registry.spec.arch` (kernel-hub's vocabulary). They agree on a table of spellings and on which built code
runs where; nothing else under kernel_src/, registry/ or build/ takes an arch string apart; the Triton AOT
archs come from build/matrix.toml alone."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest
from fused_mlp import arch as kernel_arch

from registry.spec import arch as spec_arch
from registry.spec.build_matrix import read_matrix

ROOT = Path(__file__).resolve().parents[1]
HOMES = {ROOT / "kernel_src" / "fused_mlp" / "arch.py", ROOT / "registry" / "spec" / "arch.py"}

SPELLINGS = ["sm_80", "sm_86", "sm_89", "sm_90", "sm_90a", "sm_100", "sm_100a", "sm_100f", "sm_103a", "sm_110",
             "sm_120", "sm_120a", "sm_121", "8.0", "8.6", "9.0a", "10.0a", "10.3f", "12.0", "12.1", " SM_90A "]  # fmt: skip
NOT_ARCHS = ["sm_9", "sm90", "90", "sm_90x", "9", "9.a", "interpreter", "default", "", "sm_", "compute_90"]
DEVICES = [(8, 0), (8, 6), (8, 9), (9, 0), (10, 0), (10, 3), (11, 0), (12, 0), (12, 1)]


@pytest.mark.parametrize("text", SPELLINGS)
def test_both_modules_read_a_spelling_alike(text):
    k, s = kernel_arch.parse_arch(text), spec_arch.parse_arch(text)
    assert (k.major, k.minor, k.suffix) == (s.major, s.minor, s.suffix)
    assert k.name == s.name and k.dotted() == s.dotted() and k.dotted(ptx=True) == s.dotted(ptx=True)
    assert kernel_arch.parse_arch(k.name) == k and kernel_arch.parse_arch(k.dotted()) == k


def test_the_majors_of_blackwell_are_two_digits():
    """sm_100a is 10.0 (not 1.0 or 10): the reading behind the PDL bug of issue 42."""
    for module in (kernel_arch, spec_arch):
        a = module.parse_arch("sm_100a")
        assert (a.major, a.minor, a.suffix) == (10, 0, "a")
    assert kernel_arch.parse_arch("sm_120").number == 120 and kernel_arch.at_least("sm_100a", (9, 0))
    assert not kernel_arch.at_least("sm_89", (9, 0)) and not kernel_arch.at_least("interpreter", (9, 0))


@pytest.mark.parametrize("text", NOT_ARCHS)
def test_both_modules_refuse_a_non_arch(text):
    with pytest.raises(ValueError):
        kernel_arch.parse_arch(text)
    with pytest.raises(ValueError):
        spec_arch.parse_arch(text)
    assert not kernel_arch.is_arch(text)


def test_both_modules_agree_on_what_runs_where():
    builds = [a for a in SPELLINGS if a.strip().startswith(("sm_", "SM_"))]
    for build, cc in itertools.product(builds, DEVICES):
        device = spec_arch.Arch(*cc)
        b = spec_arch.parse_arch(build)
        assert kernel_arch.sass_runs_on(build, cc) == spec_arch.sass_runs_on(b, device), (build, cc)
        assert kernel_arch.ptx_runs_on(build, cc) == spec_arch.ptx_runs_on(b, device), (build, cc)


@pytest.mark.parametrize(("cap", "arch"), (((9, 0), "sm_90a"), ((8, 0), "sm_80"), ((8, 9), "sm_89"),
                                           ((10, 0), "sm_100a"), ((12, 0), "sm_120"), (None, "interpreter")))  # fmt: skip
def test_arch_of(cap, arch):
    assert kernel_arch.arch_of(cap) == arch


# Ways code took an arch string apart by hand before there was one module for it.
HAND_PARSING = re.compile(
    r"""removeprefix\(\s*["']sm_["']\s*\)|\barch\[\d|int\(\s*arch\b|rstrip\(\s*["']a?f?["']\s*\)"""
    r"""|startswith\(\s*["']sm_["']\s*\)|f["']sm_\{"""
)


def test_no_arch_parsing_outside_the_two_homes():
    found = []
    for tree in ("kernel_src", "registry", "build"):
        for path in sorted((ROOT / tree).rglob("*.py")):
            if path in HOMES:
                continue
            for n, line in enumerate(path.read_text().splitlines(), 1):
                if HAND_PARSING.search(line):
                    found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not found, "parse archs with fused_mlp.arch or registry.spec.arch:\n" + "\n".join(found)


def test_hand_parsing_pattern_catches_the_old_forms():
    for line in ('int(arch[3:5]) >= 90', 'digits = arch.removeprefix("sm_")', 'f"sm_{major}{minor}"',
                 'arch.startswith("sm_")', 'int(digits.rstrip("af"))'):  # fmt: skip
        assert HAND_PARSING.search(line), line


def test_aot_archs_come_from_the_matrix():
    """Every arch the matrix lists for the Triton variant has a Triton target, computed from the arch; the
    kernel package keeps no list of its own (it ships without build/, so the builder passes the archs in)."""
    aot_build = pytest.importorskip("fused_mlp.triton.aot_build")
    archs = [
        a for v in read_matrix(ROOT / "build" / "matrix.toml").variants if v.kind == "triton" for a in v.archs
    ]
    assert archs
    for arch in archs:
        assert (
            aot_build.triton_target(arch)
            == spec_arch.parse_sm(arch).major * 10 + spec_arch.parse_sm(arch).minor
        )
    for bad in ("sm_75", "interpreter", "sm90"):
        with pytest.raises(ValueError, match="build/matrix.toml"):
            aot_build.triton_target(bad)
    sources = [p for tree in ("kernel_src", "registry", "build") for p in (ROOT / tree).rglob("*.py")]
    assert not [p for p in sources if "AOT_ARCHS" in p.read_text()]
