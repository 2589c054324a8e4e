"""Publish -> `registry.get_kernel` on both kinds of hub: ours, and one without our extensions (`serve
--no-extensions`, as the Hugging Face Hub). Keys are pinned on first use from the key route or the repo's
keys/<id>.pub; sigstore bundles must sign the exact metadata.json; lock files pin the commit; LOCAL_KERNELS
loads a folder on this machine, as stock kernels does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hubs import HUB_KINDS, publish_fresh, republish_with_new_key
from huggingface_hub import CommitOperationAdd, HfApi, hf_hub_download

from registry import KernelLoadError, constants, get_kernel
from tests.conftest import point_clients_at

QUIET = {"check": None, "speed_check": None, "backend": "cpu"}  # trust and signatures come first
SIGSTORE_DATA = Path(__file__).parent / "data" / "sigstore"
SOURCES = {"hub": "hub key route", "plain_hub": "repo key files"}


@pytest.fixture(params=HUB_KINDS)
def published(request, fused_mlp_v1, tmp_path, monkeypatch):
    """fused-mlp v1 of a fresh trusted org on each kind of hub, clients there: (kind, hub, repo, commit, token)."""
    hub = request.getfixturevalue(request.param)
    repo, commit, token = publish_fresh(hub, fused_mlp_v1[2], tmp_path / "key.pem")
    point_clients_at(monkeypatch, hub.url, tmp_path / "clients")
    monkeypatch.delenv("LOCAL_KERNELS", raising=False)
    return request.param, hub, repo, commit, token


def _key_file(hub, repo: str, commit: str, tmp_path: Path) -> Path:
    """The publisher key the version ships (keys/<key id>.pub), downloaded."""
    files = HfApi(endpoint=hub.url).list_repo_files(repo, repo_type="kernel", revision=commit)
    (path,) = [f for f in files if f.startswith("keys/")]
    return Path(hf_hub_download(repo, path, repo_type="kernel", revision=commit, cache_dir=tmp_path / "k"))


def test_first_use_pins_the_key_and_a_new_key_is_refused(published, fused_mlp_v1, tmp_path):
    kind, hub, repo, commit, token = published
    first = get_kernel(repo, version=1, fallback=None, **QUIET).__kernel_info__
    assert first["source"] == "hub" and first["commit"] == commit
    assert first["trust"]["keys"] == "first use"
    pins = json.loads(Path(first["trust"]["pin_file"]).read_text())
    assert [k["source"] for k in pins["keys"]] == [SOURCES[kind]]
    assert get_kernel(repo, version=1, fallback=None, **QUIET).__kernel_info__["trust"]["keys"] == "pinned"

    old_key = _key_file(hub, repo, commit, tmp_path)
    moved = republish_with_new_key(hub, repo, fused_mlp_v1[2], token, tmp_path / "new.pem")
    with pytest.raises(KernelLoadError, match=f"is pinned to key\\(s\\) {first['trust']['key_id']}"):
        get_kernel(repo, version=1, fallback=None, **QUIET)
    # The key the new version ships, given by the user, is accepted for this call (nothing pinned).
    info = get_kernel(
        repo,
        version=1,
        fallback=None,
        publisher_keys=[str(_key_file(hub, repo, moved.commit, tmp_path))],
        **QUIET,
    ).__kernel_info__
    assert info["commit"] == moved.commit and info["trust"]["keys"] == "given"
    assert old_key.read_text() != _key_file(hub, repo, moved.commit, tmp_path).read_text()


def test_a_sigstore_bundle_that_signs_other_bytes_is_refused(published, monkeypatch):
    _, hub, repo, commit, token = published
    # A real bundle (over the sigstore projects' a.txt) beside every variant's metadata.json, by a workflow
    # the user accepts: the signature is valid, but not over these bytes.
    api = HfApi(endpoint=hub.url, token=token)
    variants = sorted(
        {
            f.split("/")[1]
            for f in api.list_repo_files(repo, repo_type="kernel", revision=commit)
            if f.startswith("build/")
        }
    )
    bundle = (SIGSTORE_DATA / "a.txt.sigstore.json").read_bytes()
    ops = [CommitOperationAdd(f"build/{v}/metadata.json.sigstore", bundle) for v in variants]
    api.create_commit(
        repo, ops, commit_message="add bundles", repo_type="kernel", revision="v1", parent_commit=commit
    )
    monkeypatch.setenv(constants.SIGSTORE_ROOT, str(SIGSTORE_DATA / "trusted_root.json"))
    beacon = (
        "https://github.com/sigstore-conformance/extremely-dangerous-public-oidc-beacon/.github/workflows/*"
    )
    for identities in ([beacon + "@refs/heads/main"], None):
        with pytest.raises(KernelLoadError) as e:
            get_kernel(repo, version=1, fallback=None, sigstore_identities=identities, **QUIET)
        assert "sigstore: metadata.json.sigstore by" in str(e.value)
        assert "does not verify over this metadata.json" in str(e.value)


def test_a_lock_file_pins_the_commit(published, fused_mlp_v1, tmp_path):
    _, hub, repo, commit, token = published
    from registry.client.fetch import Hub
    from registry.client.lock import lock_text

    lock = tmp_path / "kernels.lock"
    lock.write_text(lock_text(Hub.from_env(hub.url, token), {repo: 1}))
    key = str(_key_file(hub, repo, commit, tmp_path))
    moved = republish_with_new_key(hub, repo, fused_mlp_v1[2], token, tmp_path / "new.pem")
    info = get_kernel(
        repo, version=1, lockfile=lock, publisher_keys=[key], fallback=None, **QUIET
    ).__kernel_info__
    assert info["commit"] == commit != moved.commit and info["lockfile"] == str(lock)
    # No version lookup: it loads with v1 gone from the hub.
    HfApi(endpoint=hub.url, token=token).delete_branch(repo, branch="v1", repo_type="kernel")
    assert get_kernel(repo, lockfile=lock, publisher_keys=[key], **QUIET).__kernel_info__["commit"] == commit
    with pytest.raises(KernelLoadError, match="version 2 does not exist"):
        get_kernel(repo, version=2, publisher_keys=[key], **QUIET)
    with pytest.raises(KernelLoadError, match="not version 2"):
        get_kernel(repo, version=2, lockfile=lock, publisher_keys=[key], **QUIET)


def test_local_kernels_as_stock_kernels(hub_env, fused_mlp_v1, monkeypatch):
    dist = fused_mlp_v1[2]
    repo = "nowhere/fused-mlp"  # on no hub: a local override needs none
    monkeypatch.setenv("LOCAL_KERNELS", f"other/kernel=/nonexistent:{repo}={dist}")
    import kernels

    stock = kernels.get_kernel(repo, version=1, backend="cpu")
    assert Path(stock.__file__).is_relative_to(dist / "build" / "torch-cpu")
    module = get_kernel(repo, version=1, backend="cpu", speed_check=None)
    info = module.__kernel_info__
    assert info["source"] == "local" and info["local_path"] == str(dist) and info["variant"] == "torch-cpu"
    assert Path(module.__file__).is_relative_to(dist / "build" / "torch-cpu")
    assert (
        info["check"]["status"].startswith("passed") and info["trust"]["keys"] == "not verified (local files)"
    )
    monkeypatch.setenv("LOCAL_KERNELS", f"{repo}={dist / 'nothing-here'}")
    with pytest.raises(KernelLoadError, match="has no variant"):
        get_kernel(repo, version=1, **QUIET)
