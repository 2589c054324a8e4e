"""The shared vocabulary (`registry.spec`): version branches, arch notation, metadata bytes, the matrix file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from registry.spec import names
from registry.spec.arch import Arch, parse_arch, parse_sm, ptx_runs_on, sass_runs_on
from registry.spec.build_matrix import MatrixConfigError, find_matrix, read_matrix
from registry.spec.variant import MetadataError, VariantMetadata, metadata_bytes, metadata_path, variant_of

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("branch", "number"),
    [
        ("v0", 0),
        ("v1", 1),
        ("v12", 12),
        ("v01", None),
        ("v1_0", None),
        ("v", None),
        ("main", None),
        ("V1", None),
    ],
)
def test_only_canonical_version_branches_are_versions(branch, number):
    assert names.version_of(branch) == number
    assert names.is_version_branch(branch) == (number is not None)


def test_versions_ignores_v01_so_every_reader_agrees_with_the_loader():
    heads = {"v1": "a" * 40, "v01": "b" * 40, "v2": "c" * 40, "compat": "d" * 40}
    assert names.versions(heads) == {1: "a" * 40, 2: "c" * 40}


@pytest.mark.parametrize("bad", [-1, True, "1", 1.0])
def test_version_branch_needs_a_non_negative_int(bad):
    with pytest.raises(ValueError, match="non-negative integer"):
        names.version_branch(bad)
    assert names.version_branch(3) == "v3"


def test_arch_spellings_and_rules():
    assert parse_arch("sm_100a") == parse_arch("10.0a") == Arch(10, 0, "a")
    assert parse_sm("sm_120").dotted(ptx=True) == "12.0+PTX"
    with pytest.raises(ValueError, match="sm_<major><minor>"):
        parse_sm("9.0")
    sm80, sm86, sm90, sm90a = (parse_arch(a) for a in ("sm_80", "sm_86", "sm_90", "sm_90a"))
    assert sass_runs_on(sm80, sm86) and not sass_runs_on(sm86, sm80) and not sass_runs_on(sm80, sm90)
    assert sass_runs_on(sm90a, sm90) and not sass_runs_on(parse_arch("sm_100a"), parse_arch("sm_103"))
    assert (
        ptx_runs_on(sm80, sm90)
        and not ptx_runs_on(sm90, sm86)
        and not ptx_runs_on(sm90a, parse_arch("sm_100"))
    )


def _metadata(**extra) -> dict:
    return {
        "id": "_fused_mlp_torch_cpu_1234abcd",
        "name": "fused-mlp",
        "version": 1,
        "license": "apache-2.0",
        "python-depends": [],
        "backend": {"type": "cuda", "archs": ["9.0a", "8.0+PTX"]},
        "archs": [{"arch": "sm_90a", "sass": True, "ptx": False}],
        "triton": ["3.6.0"],
        "api": {"__all__": ["linear"], "signatures": {"linear": "(x)"}},
        "checks": [],
        "build": {"variant": "torch-cuda", "kind": "triton", "notes": []},
        "digest": {"algorithm": "sha256", "files": {"fused_mlp/__init__.py": "AAAA"}},
        "provenance": {"kernel-builder": {"version": "kernel-hub 0.1.0"}},
        **extra,
    }


def test_metadata_round_trips_to_the_same_bytes_unknown_keys_included(tmp_path):
    raw = _metadata(future_key={"kept": True})
    meta = VariantMetadata.from_json(raw)
    assert meta.to_bytes() == metadata_bytes(raw)
    meta.with_version(4).write(tmp_path)
    again = VariantMetadata.read(tmp_path)
    assert again.version == 4 and json.loads(again.to_bytes()) == {**raw, "version": 4}


def test_malformed_metadata_names_the_key(tmp_path):
    with pytest.raises(MetadataError, match="lacks id"):
        VariantMetadata.from_json({k: v for k, v in _metadata().items() if k != "id"})
    with pytest.raises(MetadataError, match="archs"):
        VariantMetadata.from_json(_metadata(archs=[{"sass": True}]))
    (tmp_path / "metadata.json").write_text("{not json")
    with pytest.raises(MetadataError, match="not JSON"):
        VariantMetadata.read(tmp_path)


def test_variant_paths():
    assert metadata_path("torch-cpu") == "build/torch-cpu/metadata.json"
    assert variant_of("build/torch-cpu/metadata.json") == "torch-cpu"
    assert variant_of("build/torch-cpu/fused_mlp/metadata.json") is None


def test_matrix_file_is_found_from_any_folder_of_a_checkout_and_never_elsewhere(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT / "kernel_src" / "fused_mlp")
    assert find_matrix() == ROOT / "build" / "matrix.toml"
    assert {v.name for v in read_matrix().variants} >= {"torch-cuda"}
    monkeypatch.chdir(tmp_path)
    with pytest.raises(MatrixConfigError, match="--matrix PATH"):
        find_matrix()
    with pytest.raises(MatrixConfigError, match="--matrix PATH"):
        read_matrix(tmp_path / "nope.toml")
    (tmp_path / "bad.toml").write_text("[variants.x\n")
    with pytest.raises(MatrixConfigError, match="bad.toml"):
        read_matrix(tmp_path / "bad.toml")
