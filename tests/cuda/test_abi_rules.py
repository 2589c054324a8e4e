"""The CUDA build's pure decisions: arch list and target constants from build/matrix.toml, the ABI rules
on symbol tables, the arch rule of the backend's availability check, and clear refusals when the
toolchain is missing. Fast; needs neither nvcc nor a GPU."""

import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "build" / "cuda"))
import abi_check
import build_variant

MATRIX = tomllib.loads((REPO / "build" / "matrix.toml").read_text())


def test_variant_name_is_what_kernels_parses():
    from kernels.variants import parse_variant

    variant = parse_variant(build_variant.VARIANT)
    assert str(variant.framework.version) in ("2.11", "2.11.0"), variant


def test_arch_list_from_matrix():
    plan = build_variant.cuda_plan(MATRIX)
    assert plan.archs == ("sm_80", "sm_89", "sm_90a", "sm_100a", "sm_120") and plan.ptx == ("sm_120",)
    assert build_variant.torch_arch_list(plan) == "8.0;8.9;9.0a;10.0a;12.0+PTX"
    assert build_variant.torch_target_hex(plan.torch_target) == "0x020b000000000000"


def test_ptx_outside_the_sass_archs_is_refused():
    matrix = {"variants": {build_variant.VARIANT: {"archs": ["sm_80"], "ptx": ["sm_90"], "torch_target": "2.11",
                                                   "cuda": "13.0"}}}  # fmt: skip
    with pytest.raises(build_variant.CudaBuildError, match="subset"):
        build_variant.cuda_plan(matrix)


def test_namespace_is_read_from_build_info(tmp_path):
    (tmp_path / "_build_info.py").write_text(
        '"""x"""\nOPS_NAMESPACE = "fused_mlp_1a2b3c4d"\nBUILD_ID = "b"\n'
    )
    assert build_variant.read_namespace(tmp_path) == "fused_mlp_1a2b3c4d"


READELF = """
Symbol table '.dynsym' contains 6 entries:
   Num:    Value          Size Type    Bind   Vis      Ndx Name
     1: 0000000000000000     0 FUNC    GLOBAL DEFAULT  UND memcpy@GLIBC_2.14 (2)
     2: 0000000000000000     0 FUNC    GLOBAL DEFAULT  UND dlsym@GLIBC_2.34 (3)
     3: 0000000000000000     0 FUNC    GLOBAL DEFAULT  UND _ZSt28__throw_bad_array_new_lengthv@GLIBCXX_3.4.29 (4)
     4: 0000000000000000     0 FUNC    GLOBAL DEFAULT  UND _ZN3c106detail14torchCheckFailEPKcS2_jS2_
     5: 0000000000000000     0 FUNC    GLOBAL DEFAULT  UND aoti_torch_get_numel
     6: 00000000000012a0    40 FUNC    GLOBAL DEFAULT   12 _ZN9fused_mlp4gemmERKNS_8GemmArgsE
"""


def test_symbol_rules_flag_new_glibc_and_torch_cxx():
    syms = abi_check.parse_dynsyms(READELF)
    assert len(syms) == 6
    assert abi_check.version_violations(syms) == [
        "_ZSt28__throw_bad_array_new_lengthv@GLIBCXX_3.4.29", "dlsym@GLIBC_2.34"]  # fmt: skip
    assert abi_check.torch_cxx_symbols(syms) == ["_ZN3c106detail14torchCheckFailEPKcS2_jS2_"]


def test_dependency_rule():
    dynamic = (" 0x01 (NEEDED)  Shared library: [libcublasLt.so.13]\n"
               " 0x01 (NEEDED)  Shared library: [libtorch_cpu.so]\n"
               " 0x01 (NEEDED)  Shared library: [libfoo.so.1]\n"
               " 0x1d (RUNPATH) Library runpath: [$ORIGIN/../lib]\n")  # fmt: skip
    needed, paths = abi_check.parse_needed(dynamic)
    assert needed == ["libcublasLt.so.13", "libtorch_cpu.so", "libfoo.so.1"] and paths == ["$ORIGIN/../lib"]
    assert abi_check.needed_violations(needed) == ["libfoo.so.1"]


def test_arch_rule_compares_sass_and_ptx():
    elf = "arch = sm_80\narch = sm_90a\narch = sm_90a\n"
    sass, ptx = abi_check.parse_cuobjdump_archs(elf, "PTX file    1: _C.abi3.1.sm_90a.ptx\n")
    assert sass == {"sm_80", "sm_90a"} and ptx == {"sm_90a"}
    assert abi_check.arch_result(sass, ptx, ["sm_80", "sm_90a"], ["sm_90a"]).ok
    missing = abi_check.arch_result(sass, ptx, ["sm_80", "sm_90a", "sm_120"], ["sm_120"])
    assert not missing.ok and "sm_120" in missing.detail


@pytest.mark.parametrize(("arch", "ptx", "cc", "runs"), [
    ("sm_90a", False, (9, 0), True), ("sm_90a", False, (10, 0), False), ("sm_80", False, (8, 6), True),
    ("sm_80", False, (9, 0), False), ("sm_120", True, (12, 1), True), ("sm_120", True, (10, 0), False),
    ("sm_100a", False, (10, 3), False),
])  # fmt: skip
def test_backend_arch_rule(arch, ptx, cc, runs):
    sys.path.insert(0, str(REPO / "kernel_src"))
    from fused_mlp.cuda._library import arch_runs

    assert arch_runs(arch, ptx, cc) is runs


def test_missing_toolchain_is_named(monkeypatch, tmp_path):
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "no-cuda"))
    monkeypatch.setenv("PATH", str(tmp_path))
    reason = build_variant.cuda_unavailable_reason(sys.executable)
    assert reason is not None and "nvcc" in reason and "CUDA_HOME" in reason


def test_cpu_torch_python_is_refused_with_what_to_do(monkeypatch, tmp_path):
    cuda_home = tmp_path / "cuda"
    (cuda_home / "bin").mkdir(parents=True)
    (cuda_home / "bin" / "nvcc").write_text("")
    monkeypatch.setenv("CUDA_HOME", str(cuda_home))
    monkeypatch.setenv("KERNEL_HUB_CUDA_PYTHON", sys.executable)  # this CI python has CPU torch
    monkeypatch.setattr(build_variant, "REPO", tmp_path)  # no .venv-cuda there
    reason = build_variant.cuda_unavailable_reason(sys.executable)
    assert reason is not None and "CUDA 13 torch" in reason and "make venv-cuda" in reason
