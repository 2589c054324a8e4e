"""`kernel-hub build`: layout, metadata kernels accepts, per-build identity, reproducible digests."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from kernels._rust import Digest, DigestAlgorithm, Metadata
from variant_names import CUDA_VARIANT

from registry.publisher import aot
from registry.publisher import build as b
from registry.spec import digest
from registry.spec.arch import parse_sm
from registry.spec.build_matrix import MatrixConfigError, VariantSpec, parse_matrix, read_matrix

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "kernel_src" / "fused_mlp"
MATRIX = ROOT / "build" / "matrix.toml"


def test_plan_has_matrix_variants_and_cpu_noarch():
    plans = {p.name: p for p in b.plan_variants(read_matrix(MATRIX))}
    assert plans["torch-cuda"].kind == "triton" and plans["torch-cuda"].backend == "cuda"
    assert "sm_90a" in plans["torch-cuda"].archs and plans["torch-cuda"].triton
    assert plans[CUDA_VARIANT].kind == "cuda"
    assert plans["torch-cpu"].backend == plans["torch-universal"].backend == "cpu"


def test_plan_refuses_unknown_kind():
    with pytest.raises(MatrixConfigError, match="kind 'rust'"):
        parse_matrix({"variants": {"torch-x": {"kind": "rust"}}})


@pytest.mark.parametrize(
    ("arch", "ptx", "expected"),
    [
        ("sm_80", False, "8.0"),
        ("sm_90a", False, "9.0a"),
        ("sm_100a", False, "10.0a"),
        ("sm_120", True, "12.0+PTX"),
        ("sm_89", False, "8.9"),
    ],
)
def test_kernels_arch_notation(arch, ptx, expected):
    assert parse_sm(arch).dotted(ptx) == expected


def test_kernels_arch_rejects_garbage():
    with pytest.raises(ValueError, match="sm_<major><minor>"):
        parse_sm("hopper")
    with pytest.raises(MatrixConfigError, match="sm_<major><minor>"):
        parse_matrix({"variants": {"torch-x": {"kind": "triton", "archs": ["hopper"]}}})


def test_rewrite_build_info_keeps_docstring():
    text = '"""doc"""\n\nOPS_NAMESPACE = "fused_mlp_dev"\nBUILD_ID = "dev"\n'
    out = b.rewrite_build_info(text, "fused_mlp_1234abcd", "_fused_mlp_torch_cpu_1234abcd")
    assert (
        out
        == '"""doc"""\n\nOPS_NAMESPACE = \'fused_mlp_1234abcd\'\nBUILD_ID = \'_fused_mlp_torch_cpu_1234abcd\'\n'
    )
    with pytest.raises(b.BuildError, match="BUILD_ID"):
        b.rewrite_build_info('OPS_NAMESPACE = "x"\n', "a", "b")


def test_aot_decision_records_why():
    plan = VariantSpec("torch-cuda", "triton", "cuda", archs=("sm_80", "sm_90a"), triton=("3.6.0",))
    assert aot.aot_decision(plan, "3.6.0", True, ["sm_90a"]) == (True, "AOT cubins for triton 3.6.0: sm_90a")
    ok, why = aot.aot_decision(plan, "3.8.0", True, ["sm_90a"])
    assert not ok and "3.8.0" in why and "3.6.0" in why
    assert not aot.aot_decision(plan, "3.6.0", False, ["sm_90a"])[0]
    assert not aot.aot_decision(plan, None, True, ["sm_90a"])[0]
    assert aot.selected_archs(plan, None) == ["sm_80", "sm_90a"]
    assert aot.selected_archs(plan, ("sm_90a",)) == ["sm_90a"]
    with pytest.raises(b.BuildError, match="sm_75"):
        aot.selected_archs(plan, ("sm_75",))


def test_parse_elf_arch():
    assert aot.parse_elf_arch("ELF file    1: k-1.sm_120a.cubin\n") == "sm_120a"
    assert aot.parse_elf_arch("ELF file    1: k.sm_80.cubin\nELF file    2: k.sm_80.cubin\n") == "sm_80"
    assert aot.parse_elf_arch("ELF file 1: a.sm_80.cubin\nELF file 2: a.sm_90a.cubin") is None
    assert aot.parse_elf_arch("") is None


def test_backend_archs_for_triton_allow_jit_floor():
    plan = VariantSpec("torch-cuda", "triton", "cuda", archs=("sm_90a",), triton=("3.6.0",))
    assert b.backend_archs(plan, ["sm_90a"]) == ["9.0a", "8.0+PTX"]
    cuda = VariantSpec(CUDA_VARIANT, "cuda", "cuda", ptx=("sm_120",))
    assert b.backend_archs(cuda, ["sm_80", "sm_120"]) == ["8.0", "12.0+PTX"]


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """A snapshot of kernel_src/fused_mlp, so builds compared with each other see the same bytes."""
    src = tmp_path_factory.mktemp("src") / "fused_mlp"
    shutil.copytree(SOURCE, src, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return src


@pytest.fixture(scope="module")
def built(tmp_path_factory, source):
    out = tmp_path_factory.mktemp("dist") / "fused-mlp"
    result = b.build(
        source,
        out,
        MATRIX,
        aot=False,
        only=["torch-cuda", "torch-cpu", "torch-universal"],
    )
    return result


def test_layout_and_metadata_accepted_by_kernels(built):
    assert built.built == ["torch-cuda", "torch-cpu", "torch-universal"]
    ids, namespaces = set(), set()
    for name in built.built:
        vdir = built.out / "build" / name
        assert (vdir / "fused_mlp" / "__init__.py").is_file()
        assert not (vdir / "fused_mlp" / "cuda").exists()
        assert not list(vdir.rglob("__pycache__"))
        raw = (vdir / "metadata.json").read_bytes()
        meta = json.loads(raw)
        parsed = Metadata.from_bytes(raw)
        parsed.digest.validate(Digest.hash_variant(DigestAlgorithm.SHA256, vdir))
        assert digest.verify_digests(vdir, meta) == []
        assert meta["id"].startswith(f"_fused_mlp_{name.replace('-', '_')}_")
        assert meta["api"]["__all__"] and set(meta["api"]["signatures"]) == set(meta["api"]["__all__"])
        info = (vdir / "fused_mlp" / "_build_info.py").read_text()
        hash8 = meta["id"].rsplit("_", 1)[1]
        assert f"OPS_NAMESPACE = 'fused_mlp_{hash8}'" in info and f"BUILD_ID = {meta['id']!r}" in info
        ids.add(meta["id"])
        namespaces.add(hash8)
    assert len(ids) == len(namespaces) == 3
    cuda = json.loads((built.out / "build" / "torch-cuda" / "metadata.json").read_text())
    assert cuda["backend"] == {"type": "cuda", "archs": ["8.0+PTX"]}
    assert cuda["triton"] == [] and "disabled" in cuda["build"]["notes"][0]
    assert json.loads((built.out / "build" / "torch-cpu" / "metadata.json").read_text())["backend"] == {
        "type": "cpu"
    }


def test_build_is_reproducible_and_content_addressed(built, source, tmp_path):
    again = b.build(source, tmp_path / "fused-mlp", MATRIX, aot=False, only=["torch-cpu"])
    first = (built.out / "build" / "torch-cpu" / "metadata.json").read_bytes()
    assert (again.out / "build" / "torch-cpu" / "metadata.json").read_bytes() == first

    src = tmp_path / "src" / "fused_mlp"
    shutil.copytree(source, src)
    with open(src / "reference.py", "a") as f:
        f.write("\n# changed\n")
    changed = b.build(src, tmp_path / "changed", MATRIX, aot=False, only=["torch-cpu"])
    meta = json.loads((changed.out / "build" / "torch-cpu" / "metadata.json").read_text())
    assert meta["id"] != json.loads(first)["id"]
    assert (
        meta["digest"]["files"]["fused_mlp/reference.py"]
        != json.loads(first)["digest"]["files"]["fused_mlp/reference.py"]
    )
    assert "kernel-builder" in meta["provenance"]


def test_stock_kernels_imports_the_cpu_variant(built, monkeypatch):
    import kernels

    monkeypatch.delenv(
        "TRITON_INTERPRET", raising=False
    )  # the CPU variant's reference path, not the interpreter
    import torch

    mod = kernels.get_local_kernel(built.out, backend="cpu", trust_remote_code=True)
    assert mod.__name__.startswith("_fused_mlp_torch_cpu_")
    x, w, bias = (
        torch.randn(3, 7, dtype=torch.float64),
        torch.randn(5, 7, dtype=torch.float64),
        torch.randn(5, dtype=torch.float64),
    )
    out = mod.linear(x, w, bias, activation="relu")
    ref = torch.relu(x @ w.T + bias)
    assert torch.linalg.norm(out - ref) / torch.linalg.norm(ref) < 1e-12


def test_build_refuses_a_non_package(tmp_path):
    with pytest.raises(b.BuildError, match="no __init__.py"):
        b.build(tmp_path, tmp_path / "out", MATRIX, aot=False)
    with pytest.raises(b.BuildError, match="missing is not a folder"):
        b.build(tmp_path / "missing", tmp_path / "out", MATRIX, aot=False)


def _cuobjdump() -> Path:
    import triton

    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    if not tool.is_file():
        pytest.skip(f"triton ships no cuobjdump at {tool}; install triton==3.6.0 (requirements/cpu.txt)")
    return tool


def test_torch_cuda_with_aot_cubins_for_one_arch(source, tmp_path):
    """The real AOT path (narrowed to one arch, dtype and kernel to stay fast): valid ELF, reproducible.

    sm_120 is the telling arch: Triton emits arch-specific sm_120a SASS for it, and the metadata must say
    so (sm_120a runs only on cc 12.0, not on 12.1).
    """
    import subprocess
    import zipfile

    import triton

    narrow = {
        "aot_archs": ("sm_120",),
        "aot_kwargs": {"dtypes": ("fp16",), "kernels": ("act_and_mul_kernel",)},
    }
    metas = []
    for name in ("one", "two"):
        result = b.build(source, tmp_path / name / "fused-mlp", MATRIX, only=["torch-cuda"], **narrow)
        vdir = result.out / "build" / "torch-cuda"
        metas.append((vdir / "metadata.json").read_bytes())
    meta = json.loads(metas[0])
    assert metas[0] == metas[1], "two builds of the same source differ"
    assert meta["triton"] == [triton.__version__]
    assert triton.__version__ in read_matrix(MATRIX).variant("torch-cuda").triton
    assert meta["archs"] == [{"arch": "sm_120a", "sass": True, "ptx": False}]
    assert meta["backend"]["archs"] == ["12.0a", "8.0+PTX"]
    assert any("Triton emits sm_120a" in n for n in meta["build"]["notes"])
    # one bundle per (Triton version, arch): a loader fetches only its GPU's (registry.spec.variant.cubin_target)
    bundle = f"fused_mlp/triton/cubins/{triton.__version__}/sm_120.zip"
    assert [f for f in meta["digest"]["files"] if "/cubins/" in f] == [bundle]
    with zipfile.ZipFile(vdir / bundle) as z:
        names = z.namelist()
        cubins = [n for n in names if n.endswith(".cubin")]
        assert cubins and all(n.removesuffix(".cubin") + ".json" in names for n in cubins)
        for name in cubins:
            (tmp_path / name).write_bytes(z.read(name))
            listing = subprocess.run(
                [str(_cuobjdump()), "--list-elf", str(tmp_path / name)],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            assert aot.parse_elf_arch(listing) == "sm_120a", listing
    # the kernel's run-time finder indexes the bundle and extracts an entry for Triton's CompiledKernel
    from fused_mlp.triton import aot as runtime_aot

    index = runtime_aot.load_index(vdir / "fused_mlp/triton/cubins", triton.__version__, "sm_120")
    assert len(index) == len(cubins)
    entry = next(iter(index.values()))
    extracted = runtime_aot._extract(entry.bundle, entry.json_path.name)
    with zipfile.ZipFile(vdir / bundle) as z:
        assert extracted.read_bytes() == z.read(entry.json_path.name)
        assert extracted.with_suffix(".cubin").read_bytes() == z.read(entry.json_path.stem + ".cubin")


def test_cli_skips_the_cuda_variant_with_the_reason_or_fails_when_required(source, tmp_path):
    """A matrix whose folder has no CUDA recipe: the CUDA variant is skipped, and --require-cuda makes that fatal."""
    import os
    import subprocess
    import sys

    matrix = tmp_path / "build" / "matrix.toml"
    matrix.parent.mkdir()
    shutil.copyfile(MATRIX, matrix)
    cuda = CUDA_VARIANT
    base = [sys.executable, "-m", "registry.cli", "build", "--source", str(source), "--matrix", str(matrix),
            "--variant", cuda, "--variant", "torch-cpu"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    ok = subprocess.run([*base, "--out", str(tmp_path / "a")], cwd=ROOT, env=env, capture_output=True, text=True,
                        check=False)  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    assert f"skipped  {cuda}" in ok.stdout and "build_variant.py is missing" in ok.stdout
    assert (tmp_path / "a" / "build" / "torch-cpu" / "metadata.json").is_file()
    assert not (tmp_path / "a" / "build" / cuda).exists()
    required = subprocess.run([*base, "--out", str(tmp_path / "b"), "--require-cuda"], cwd=ROOT, env=env,
                              capture_output=True, text=True, check=False)  # fmt: skip
    assert required.returncode == 1
    assert "cannot build the CUDA variant" in required.stderr and not (tmp_path / "b").exists()
