"""build.toml: kernel-builder's keys and ours, the variants they imply, and clear errors for bad files."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from registry.publisher.errors import BuildError
from registry.publisher.scaffold import init_package
from registry.spec.package import PackageConfigError, capability_arch, read_package

ROOT = Path(__file__).resolve().parents[2]
CUDA_PACKAGE = Path(__file__).parent / "data" / "cuda-scale"


def write(folder: Path, toml: str, package: str = "my_kernel") -> Path:
    (folder / package).mkdir(parents=True, exist_ok=True)
    (folder / package / "__init__.py").write_text("__all__ = []\n")
    (folder / "build.toml").write_text(toml)
    return folder


def test_the_cuda_package_implies_its_stable_abi_variant():
    pkg = read_package(CUDA_PACKAGE)
    assert (pkg.name, pkg.python_name, pkg.package_dir.name, pkg.ops) == (
        "cuda-scale",
        "cuda_scale",
        "cuda_scale",
        ("scale",),
    )
    (variant,) = pkg.variants()
    assert (variant.name, variant.kind, variant.archs, variant.torch_target) == (
        "torch-stable-abi211-cu130-x86_64-linux", "cuda", ("sm_80",), "2.11"
    )  # fmt: skip
    assert [p.relative_to(CUDA_PACKAGE).as_posix() for p in pkg.cuda_sources] == [
        "torch-ext/torch_binding.cpp", "csrc/scale.cu"
    ]  # fmt: skip


def test_fused_mlp_takes_its_variants_from_the_matrix():
    pkg = read_package(ROOT / "kernel_src" / "fused_mlp")
    assert (pkg.name, pkg.package_dir, pkg.matrix, pkg.aot_module) == (
        "fused-mlp", ROOT / "kernel_src" / "fused_mlp", "build/matrix.toml", "triton.aot_build"
    )  # fmt: skip


def test_capabilities_in_kernel_builders_notation():
    assert [capability_arch(c) for c in ("8.0", "9.0a", "12.0+PTX")] == [
        ("sm_80", False), ("sm_90a", False), ("sm_120", True)
    ]  # fmt: skip
    with pytest.raises(PackageConfigError, match="'sm_80' is not like '8.0'"):
        capability_arch("sm_80")


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ('[general]\nname = "My_Kernel"\n', r"\[general\] name must be lower-case"),
        (
            '[general]\nname = "my-kernel"\n[kernel.k]\nbackend = "cuda"\nsrc = ["k.cu"]\n',
            "needs cuda-capabilities",
        ),
        (
            '[general]\nname = "my-kernel"\n[kernel.k]\nsrc = ["k.cu"]\ncuda-capabilities = ["8.0"]\n',
            r"k\.cu do not exist",
        ),
        ('[general]\nname = "my-kernel"\n[kernel-hub]\nops = "scale"\n', "`ops` must be a list of strings"),
        ('[general]\nname = "my-kernel"\n[kernel-hub.triton]\narchs = ["sm_80"]\n', "no `aot` module"),
        ("[general\n", "build.toml"),
        ('[general]\nname = "my-kernel"\n[kernel-hub]\nreference = "ref-x"\n', "reference must be a module"),
        ('[general]\nname = "my-kernel"\n[kernel-hub]\nreference = "eager"\n', "'eager' is no module of"),
        ('[general]\nname = "my-kernel"\n[kernel-hub]\ntriton = "sm_80"\n', "triton must be a table"),
        ('[general]\nname = "my-kernel"\n[kernel-hub.triton]\narchs = "sm_80"\n', "`archs` must be a list"),
    ],
)
def test_a_bad_build_toml_says_what_is_wrong(tmp_path, toml, message):
    with pytest.raises(PackageConfigError, match=message):
        read_package(write(tmp_path, toml))


def test_a_declared_reference_module_or_package_is_found(tmp_path):
    src = write(tmp_path, '[general]\nname = "my-kernel"\n[kernel-hub]\nreference = "ops.eager"\n')
    (src / "my_kernel" / "ops" / "eager").mkdir(parents=True)
    (src / "my_kernel" / "ops" / "eager" / "__init__.py").write_text("")
    assert read_package(src).reference == "ops.eager"


def test_a_folder_without_the_package_names_where_it_looked(tmp_path):
    (tmp_path / "build.toml").write_text('[general]\nname = "my-kernel"\n')
    with pytest.raises(
        PackageConfigError, match=r"no Python package for 'my_kernel'.*\[kernel-hub\] package"
    ):
        read_package(tmp_path)


def test_ops_that_differ_from_the_packages_all_stop_the_build(tmp_path):
    from registry.publisher.build import build

    src = write(tmp_path / "src", '[general]\nname = "my-kernel"\n[kernel-hub]\nops = ["scale"]\n')
    (src / "my_kernel" / "_build_info.py").write_text('OPS_NAMESPACE = "x"\nBUILD_ID = "dev"\n')
    with pytest.raises(BuildError, match=r"ops \['scale'\] differ from the package's __all__ \[\]"):
        build(src, tmp_path / "dist", only=["torch-cpu"])


def test_init_refuses_a_bad_name_and_a_used_folder(tmp_path):
    with pytest.raises(BuildError, match="kernel name 'My Kernel'"):
        init_package("My Kernel", tmp_path)
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "keep.txt").write_text("mine")
    proc = subprocess.run([sys.executable, "-m", "registry.cli", "init", "taken", "--dir", str(tmp_path)],
                          capture_output=True, text=True, check=False, cwd=ROOT)  # fmt: skip
    assert (
        proc.returncode == 1 and "exists and is not empty" in proc.stderr and "Traceback" not in proc.stderr
    )
    assert (tmp_path / "taken" / "keep.txt").read_text() == "mine"


def test_a_library_using_torch_cxx_symbols_is_not_on_the_stable_abi():
    from registry.publisher.cuda_ext import torch_cxx_symbols

    readelf = """
Symbol table '.dynsym' contains 4 entries:
   Num:    Value          Size Type    Bind   Vis      Ndx Name
     1: 0000000000000000     0 FUNC    GLOBAL DEFAULT  UND aoti_torch_empty_strided
     2: 0000000000000000     0 FUNC    GLOBAL DEFAULT  UND _ZN2at6detail10empty_cudaEv@@Base (2)
     3: 0000000000000000     0 FUNC    GLOBAL DEFAULT  UND _ZNSt9basic_iosIcSt11char_traitsIcEE5clearESt12_Ios_Iostate@GLIBCXX_3.4 (2)
     4: 0000000000001230    12 FUNC    GLOBAL DEFAULT   12 _ZN3c106detail4funcEv
"""
    assert torch_cxx_symbols(readelf) == ["_ZN2at6detail10empty_cudaEv"]  # defined ones (4) do not count
