"""A warm load stays cheap: it decides from the cached resolution and imports neither `kernels` nor
huggingface_hub's HfApi (together ~0.2 s, most of a warm get_kernel; issue #10's warm-load goal), and what it
decides is what a fresh decision gives."""

from __future__ import annotations

import json

import pytest
from huggingface_hub.file_download import repo_folder_name
from test_resolve import SHIPPED, env

from registry.client import resolve
from registry.client.fetch import repo_folder
from registry.client.resolve import cached_resolution, resolve_variant

HEAVY = ("kernels", "huggingface_hub.hf_api", "huggingface_hub.file_download")

WARM_LOAD = """
import json, sys, registry
m = registry.get_kernel({repo!r}, {how}, speed_check=None)
i = m.__kernel_info__
print(json.dumps({{"imported": [n for n in {heavy!r} if n in sys.modules], "variant": i["variant"],
                  "reason": i["reason"], "trace": i["trace"], "source": i["source"]}}))
"""


def test_a_warm_load_decides_from_the_cache_without_importing_kernels(hub_env, fused_mlp_v1, run_python):
    repo, commit, _ = fused_mlp_v1
    # The CPU build's own ops (not the Triton interpreter `make test` turns on) and no timing: this test is
    # about what a warm load imports, not which variant wins.
    hub_env = {**hub_env, "TRITON_INTERPRET": "0", "CUDA_VISIBLE_DEVICES": ""}
    for backend, source in (("cpu", "hub"), (None, "fallback-eager")):  # the CPU build, then no GPU: fallback
        load = f"backend={backend!r}, fallback='eager'"
        cold = run_python(WARM_LOAD.format(repo=repo, how=f"version=1, {load}", heavy=HEAVY), hub_env)
        assert cold["source"] == source, cold
        assert "kernels" in cold["imported"]  # the first decision asks kernels' rules
        for how in ("version=1", f"revision={commit!r}"):
            warm = run_python(WARM_LOAD.format(repo=repo, how=f"{how}, {load}", heavy=HEAVY), hub_env)
            assert warm["imported"] == [], (how, backend, warm["imported"])
            assert {k: warm[k] for k in ("source", "variant", "reason", "trace")} == {
                k: cold[k] for k in ("source", "variant", "reason", "trace")
            }


def test_the_cached_resolution_is_the_fresh_one_per_env_backend_and_commit(tmp_path, monkeypatch):
    cases = [(env("sm_90"), None), (env("sm_86"), None), (env(None), "cpu"), (env(None), None)]
    fresh = [resolve_variant(SHIPPED, e, backend=backend) for e, backend in cases]
    for (e, backend), want in zip(cases, fresh):
        assert cached_resolution(SHIPPED, e, backend, "c" * 40, tmp_path) == want
    assert len(list(tmp_path.glob("*.json"))) == len(cases)  # one decision each, none shared

    def must_not_decide(*args, **kwargs):
        raise AssertionError("decided again although the decision was cached")

    monkeypatch.setattr(resolve, "resolve_variant", must_not_decide)
    for (e, backend), want in zip(cases, fresh):
        again = cached_resolution(SHIPPED, e, backend, "c" * 40, tmp_path)
        assert again == want
        assert [v.detail for v in again.verdicts] == [
            v.detail for v in want.verdicts
        ]  # detail: compare=False
    with pytest.raises(AssertionError, match="decided again"):
        cached_resolution(SHIPPED, env("sm_90"), None, "d" * 40, tmp_path)  # another commit
    monkeypatch.setattr(resolve, "_rules_digest", lambda: "changed rules")  # a kernel-hub with other rules
    with pytest.raises(AssertionError, match="decided again"):
        cached_resolution(SHIPPED, env("sm_90"), None, "c" * 40, tmp_path)


def test_an_unreadable_cached_decision_is_made_again(tmp_path):
    e = env("sm_90")
    first = cached_resolution(SHIPPED, e, None, "c" * 40, tmp_path)
    (path,) = tmp_path.glob("*.json")
    path.write_text("{not json")
    assert cached_resolution(SHIPPED, e, None, "c" * 40, tmp_path) == first
    assert json.loads(path.read_text())["chosen"] == first.chosen


def test_repo_folder_is_huggingface_hubs_cache_layout():
    for repo in ("acme/fused-mlp", "a/b", "org-1/name.with.dots"):
        assert repo_folder(repo) == repo_folder_name(repo_id=repo, repo_type="kernel")


@pytest.mark.parametrize("bad", ["a/../b", "acme/x y", "a/b/c"])
def test_a_bad_repo_id_is_a_clear_error_before_any_request(bad, tmp_path, monkeypatch):
    """fetch.py asks the refs route itself; the repo id is still checked as HfApi checks it."""
    from registry import get_kernel

    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:1")  # nothing listens: a request would be unreachable
    monkeypatch.setenv("KERNELS_CACHE", str(tmp_path))
    with pytest.raises(ValueError, match="Repo id must"):
        get_kernel(bad, version=1)
    assert not any(tmp_path.iterdir())
