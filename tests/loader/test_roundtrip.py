"""build -> publish -> get_kernel against a real hub process, on this CPU-only machine."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from registry import KernelLoadError, get_kernel

OPS = {"linear", "mlp", "gated_mlp", "act_and_mul"}

LOAD_AND_REPORT = """
import json, registry
m = registry.get_kernel({repo!r}, version=1, {kwargs})
print(json.dumps(m.__kernel_info__))
"""


def test_cpu_gets_checked_compile_fallback_and_a_second_process_reuses_the_check(
    hub_env, fused_mlp_v1, run_python
):
    repo, commit, _ = fused_mlp_v1
    m = get_kernel(repo, version=1)
    info = m.__kernel_info__
    assert (info["source"], info["reason"], info["variant"], info["commit"]) == (
        "fallback-compile",
        "no CUDA device",
        None,
        commit,
    )
    assert info["reference_variant"] == "torch-cpu" and info["verification"]["signed_by"]
    assert "reject torch-cuda: no CUDA device" in info["trace"]
    check = info["check"]
    assert check["status"] == "passed", check.get("summary")
    seen = {(c["op"], c["dtype"], c["direction"]) for c in check["cases"]}
    assert seen == {
        (op, dt, d) for op in OPS for dt in ("float32", "float16") for d in ("forward", "backward")
    }
    assert all(c["error"] <= c["tolerance"] for c in check["cases"])

    x, w1, w2 = torch.randn(5, 33), torch.randn(40, 33), torch.randn(7, 40)
    torch.testing.assert_close(m.mlp(x, [w1, w2], None, "silu"), m.reference.mlp(x, [w1, w2], None, "silu"))

    again = run_python(LOAD_AND_REPORT.format(repo=repo, kwargs=""), hub_env)
    assert again["source"] == "fallback-compile" and again["check"]["status"] == "passed (cached)"
    assert again["check"]["cases"] == check["cases"]


def test_offline_loads_from_the_cache_with_or_without_refs(hub_env, fused_mlp_v1, run_python):
    repo, commit, _ = fused_mlp_v1
    get_kernel(repo, version=1, fallback="eager")  # fills this test's cache online
    offline = {**hub_env, "HF_HUB_OFFLINE": "1"}
    info = run_python(LOAD_AND_REPORT.format(repo=repo, kwargs="check=None"), offline)
    assert (info["offline"], info["commit"], info["source"]) == (True, commit, "fallback-compile")

    refs = Path(hub_env["KERNELS_CACHE"]) / f"kernels--{repo.replace('/', '--')}" / "refs"
    shutil.rmtree(refs)  # stock kernels needs refs/v1 offline; we also find the newest cached snapshot of v1
    assert run_python(LOAD_AND_REPORT.format(repo=repo, kwargs="check=None"), offline)["commit"] == commit


def test_offline_with_nothing_cached_says_so(hub_env, fused_mlp_v1, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("KERNELS_CACHE", str(tmp_path / "empty"))
    with pytest.raises(KernelLoadError, match=r"offline \(HF_HUB_OFFLINE=1\) and .*@v1 is not in the cache"):
        get_kernel(fused_mlp_v1[0], version=1)


def test_missing_version_lists_the_existing_ones(hub_env, fused_mlp_v1):
    with pytest.raises(KernelLoadError, match=r"version 7 does not exist \(versions on this repo: v1\)"):
        get_kernel(fused_mlp_v1[0], version=7)


def test_stock_kernels_loads_what_we_published(hub_env, fused_mlp_v1):
    import kernels

    repo, _, dist = fused_mlp_v1
    m = kernels.get_kernel(repo, version=1, trust_remote_code=True)
    expected_id = json.loads((dist / "build" / "torch-cpu" / "metadata.json").read_text())["id"]
    assert m.__name__ == expected_id  # torch-cpu: kernels' choice on a CPU-only torch
    x, w, b = torch.randn(3, 5, 24), torch.randn(16, 24), torch.randn(16)
    torch.testing.assert_close(
        m.linear(x, w, b, "gelu"), m.reference.linear(x, w, b, "gelu"), rtol=1e-4, atol=1e-4
    )


def test_variants_command_prints_the_trace(hub_env, fused_mlp_v1, capsys):
    from registry.cli import main

    assert main(["variants", fused_mlp_v1[0], "--version", "1"]) == 0
    out = capsys.readouterr().out
    assert "reject torch-cuda: no CUDA device" in out
    assert "reject torch-cpu: CPU build: holds the eager reference" in out
    assert out.rstrip().endswith("fallback: no CUDA device")

    assert main(["variants", fused_mlp_v1[0], "--version", "1", "--json", "--backend", "cpu"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["commit"], report["chosen"]) == (fused_mlp_v1[1], "torch-cpu")
    assert [v["variant"] for v in report["verdicts"] if v["accepted"]] == ["torch-cpu", "torch-universal"]
