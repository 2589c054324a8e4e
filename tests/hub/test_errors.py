"""Hub errors reach the stock client as the right exception classes and status codes."""

from __future__ import annotations

from pathlib import Path

import pytest
from huggingface_hub import HfApi, hf_hub_download
from huggingface_hub.errors import (
    EntryNotFoundError,
    HfHubHTTPError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)


@pytest.fixture
def owner(hub, hub_env):
    api = HfApi(token=hub.token("err-owner"))
    api.create_repo("err-owner/repo", repo_type="kernel", exist_ok=True)
    api.upload_file(
        path_or_fileobj=b"hello", path_in_repo="a.txt", repo_id="err-owner/repo", repo_type="kernel"
    )
    return api


def test_missing_repo_revision_and_entry(owner):
    with pytest.raises(RepositoryNotFoundError):
        owner.repo_info("err-owner/absent", repo_type="kernel")
    with pytest.raises(RevisionNotFoundError):
        owner.repo_info("err-owner/repo", repo_type="kernel", revision="no-such-branch")
    with pytest.raises(EntryNotFoundError):
        hf_hub_download("err-owner/repo", "absent.txt", repo_type="kernel")
    with pytest.raises(EntryNotFoundError):
        list(owner.list_repo_tree("err-owner/repo", path_in_repo="absent-dir", repo_type="kernel"))
    with pytest.raises(RevisionNotFoundError):
        owner.delete_branch("err-owner/repo", branch="absent", repo_type="kernel")
    assert not owner.repo_exists("err-owner/absent", repo_type="kernel")
    assert not owner.revision_exists("err-owner/repo", "nope", repo_type="kernel")


def _status(fn) -> int:
    with pytest.raises(HfHubHTTPError) as e:
        fn()
    return e.value.response.status_code


def test_writes_need_a_token_with_rights(hub, owner):
    anon = HfApi(token=False)
    other = HfApi(token=hub.token("err-other"))
    upload = {
        "path_or_fileobj": b"x",
        "path_in_repo": "b.txt",
        "repo_id": "err-owner/repo",
        "repo_type": "kernel",
    }
    assert _status(lambda: anon.create_repo("err-owner/new", repo_type="kernel")) == 401
    assert _status(lambda: anon.upload_file(**upload)) == 401
    assert _status(lambda: other.create_repo("err-owner/new", repo_type="kernel")) == 403
    assert _status(lambda: other.upload_file(**upload)) == 403
    assert _status(lambda: other.create_branch("err-owner/repo", branch="v1", repo_type="kernel")) == 403
    assert _status(lambda: owner.delete_branch("err-owner/repo", branch="main", repo_type="kernel")) == 403
    assert _status(lambda: HfApi(token="hf_unknown").repo_info("err-owner/repo", repo_type="kernel")) == 401
    assert owner.list_repo_files("err-owner/repo", repo_type="kernel") == ["a.txt"]


def test_org_members_and_granted_namespaces_may_write(hub, hub_env):
    hub.org("err-org", members=["err-member"])
    HfApi(token=hub.token("err-member")).create_repo("err-org/by-member", repo_type="kernel")
    HfApi(token=hub.token("err-granted", write=["err-org"])).create_repo(
        "err-org/by-grant", repo_type="kernel"
    )


def test_create_existing_repo_is_409(owner):
    assert _status(lambda: owner.create_repo("err-owner/repo", repo_type="kernel")) == 409
    assert str(owner.create_repo("err-owner/repo", repo_type="kernel", exist_ok=True)).endswith(
        "/kernels/err-owner/repo"
    )


def test_private_repos_need_a_token_to_read(hub, owner):
    owner.create_repo("err-owner/secret", repo_type="kernel", private=True)
    assert owner.repo_info("err-owner/secret", repo_type="kernel").private
    with pytest.raises(RepositoryNotFoundError):
        HfApi(token=False).repo_info("err-owner/secret", repo_type="kernel")
    with pytest.raises(RepositoryNotFoundError):
        HfApi(token=hub.token("err-nosy")).list_repo_files("err-owner/secret", repo_type="kernel")


def test_model_repos_are_served_too(hub, hub_env, tmp_path):
    api = HfApi(token=hub.token("err-model"))
    api.create_repo("err-model/m")
    api.upload_file(path_or_fileobj=b"weights", path_in_repo="w.bin", repo_id="err-model/m")
    info = api.model_info("err-model/m", files_metadata=True)
    assert [s.rfilename for s in info.siblings] == ["w.bin"]
    assert Path(hf_hub_download("err-model/m", "w.bin", cache_dir=tmp_path)).read_bytes() == b"weights"
    api.delete_repo("err-model/m")
    with pytest.raises(RepositoryNotFoundError):
        api.model_info("err-model/m")
    api.delete_repo("err-model/m", missing_ok=True)
