"""`LOCAL_KERNELS=repo=path`: a folder on this machine instead of the hub, with the layouts stock kernels accepts."""

from __future__ import annotations

import shutil

import pytest

from registry.client.local import local_metadata, local_override, local_variants
from registry.errors import KernelLoadError


def test_local_override_parsing(monkeypatch, tmp_path):
    monkeypatch.delenv("LOCAL_KERNELS", raising=False)
    assert local_override("org/fused-mlp") is None
    monkeypatch.setenv("LOCAL_KERNELS", f"org/other=/x:org/fused-mlp={tmp_path}")
    assert local_override("org/fused-mlp") == tmp_path
    assert local_override("org/third") is None
    monkeypatch.setenv("LOCAL_KERNELS", "org/fused-mlp")
    with pytest.raises(KernelLoadError, match="is not repo_id=path"):
        local_override("org/fused-mlp")


def test_local_layouts_as_stock_kernels(fused_mlp_v1, tmp_path):
    dist = fused_mlp_v1[2]
    names = sorted(p.name for p in (dist / "build").iterdir())
    # A dist, a folder of variants, one variant.
    assert sorted(local_variants(dist)) == names
    assert sorted(local_variants(dist / "build")) == names
    one = dist / "build" / "torch-cpu"
    assert local_variants(one) == {"torch-cpu": one}
    assert local_metadata(local_variants(one))["torch-cpu"]["name"] == "fused-mlp"
    broken = tmp_path / "broken"
    shutil.copytree(one, broken / "torch-cpu")
    (broken / "torch-cpu" / "metadata.json").write_text("{")
    assert local_metadata(local_variants(broken)) == {"torch-cpu": {}}
    with pytest.raises(KernelLoadError, match="has no variant"):
        local_variants(tmp_path / "empty")
