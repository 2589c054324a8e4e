"""The unmodified `kernels` client against a real hub: version resolution, variant choice, import,
and the trusted-publisher check (docs/HUB_PROTOCOL.md §2, §6, §7)."""

from __future__ import annotations

import kernels
import pytest
from huggingface_hub import HfApi

from tests.hub.conftest import tiny_kernel_tree


def _publish(
    hub, tmp_path, org: str, trusted: bool, variants=("torch-cpu", "torch-universal"), offset=1
) -> str:
    hub.org(org, trusted=trusted, members=["kpub"])
    api = HfApi(endpoint=hub.url, token=hub.token("kpub"))
    repo = f"{org}/tiny"
    api.create_repo(repo, repo_type="kernel", exist_ok=True)
    src = tiny_kernel_tree(tmp_path / org, f"_tiny_{org.replace('-', '_')}", variants, offset)
    info = api.upload_folder(folder_path=src, repo_id=repo, repo_type="kernel", commit_message="v1")
    api.create_branch(repo, branch="v1", revision=info.oid, repo_type="kernel")
    return repo


def test_get_kernel_by_version_imports_and_runs(hub, hub_env, tmp_path):
    repo = _publish(hub, tmp_path, "k-trusted", trusted=True, offset=5)
    module = kernels.get_kernel(repo, version=1)
    assert module.add([1, 2, 3]) == [6, 7, 8]
    assert module.VARIANT in ("torch-cpu", "torch-universal")


def test_has_kernel_and_variants(hub, hub_env, tmp_path):
    repo = _publish(hub, tmp_path, "k-variants", trusted=True)
    assert kernels.has_kernel(repo, version=1)
    names = {v.variant.variant_str for v in kernels.get_kernel_variants(repo, version=1)}
    assert names == {"torch-cpu", "torch-universal"}
    metal_only = _publish(hub, tmp_path, "k-metal", trusted=True, variants=("torch-metal",))
    assert not kernels.has_kernel(metal_only, version=1)


def test_untrusted_org_is_refused_unless_trust_remote_code(hub, hub_env, tmp_path):
    repo = _publish(hub, tmp_path, "k-untrusted", trusted=False, offset=2)
    with pytest.raises(ValueError, match="trusted"):
        kernels.get_kernel(repo, version=1)
    assert kernels.get_kernel(repo, version=1, trust_remote_code=True).add([1]) == [3]


def test_missing_version_is_reported(hub, hub_env, tmp_path):
    repo = _publish(hub, tmp_path, "k-versions", trusted=True)
    with pytest.raises(ValueError, match="Version 7"):
        kernels.get_kernel(repo, version=7)


def test_a_wrong_token_is_reported_as_such(hub, hub_env, tmp_path, monkeypatch):
    """kernels turns any error of its trust check into "could not verify publisher trust status": the org
    overview (public data) answers an unknown token as no token, so the next request says what is wrong."""
    repo = _publish(hub, tmp_path, "k-token", trusted=True, offset=3)
    monkeypatch.setenv("HF_TOKEN", "hf_not_a_token")
    with pytest.raises(Exception) as err:
        kernels.get_kernel(repo, version=1)
    text = str(err.value)
    assert "could not verify publisher trust" not in text and "Repository Not Found" not in text
    assert "401" in text and "Invalid credentials in Authorization header" in text
    assert "unknown token; create one with `kernel-hub token create`" in text
    with pytest.raises(Exception, match="Invalid user token"):  # a private route still refuses it
        HfApi(endpoint=hub.url, token="hf_not_a_token").whoami()
