"""A hub configured for LFS (`--lfs-threshold`) with HF_HUB_DISABLE_XET=1 publishers, and a restart
on the same `--data` keeping every repo, ref and blob."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import httpx2
import pytest
from huggingface_hub import HfApi, hf_hub_download

from tests.conftest import HubProcess, point_clients_at
from tests.hub.conftest import BIG_SIZE, repo_state


@pytest.fixture
def lfs_hub(tmp_path, monkeypatch):
    proc = HubProcess(tmp_path / "data", "--lfs-threshold", "1000000").start()
    point_clients_at(monkeypatch, proc.url, tmp_path)
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)
    yield proc
    proc.stop()


def test_lfs_upload_with_xet_disabled_then_restart(lfs_hub, tmp_path):
    api = HfApi(token=lfs_hub.token("lfs-user"))
    repo = "lfs-user/big"
    api.create_repo(repo, repo_type="kernel")
    data = os.urandom(BIG_SIZE)
    sha = hashlib.sha256(data).hexdigest()
    (tmp_path / "up").mkdir()
    (tmp_path / "up" / "big.bin").write_bytes(data)
    (tmp_path / "up" / "small.txt").write_bytes(b"small")
    api.upload_folder(folder_path=tmp_path / "up", repo_id=repo, repo_type="kernel", commit_message="lfs")
    api.create_branch(repo, branch="v1", repo_type="kernel")
    api.create_tag(repo, tag="first", repo_type="kernel")

    entries = {e.path: e for e in api.list_repo_tree(repo, repo_type="kernel")}
    assert entries["big.bin"].lfs is not None and entries["big.bin"].lfs.sha256 == sha
    assert entries["small.txt"].lfs is None
    head = httpx2.head(f"{lfs_hub.url}/kernels/{repo}/resolve/v1/big.bin")
    assert head.headers["x-linked-etag"].strip('"') == sha and head.headers["x-linked-size"] == str(BIG_SIZE)
    path = hf_hub_download(repo, "big.bin", repo_type="kernel", revision="v1")
    assert hashlib.sha256(Path(path).read_bytes()).hexdigest() == sha

    # a second upload of the same bytes is skipped by the batch API (no actions) and the commit is a no-op
    api.upload_folder(folder_path=tmp_path / "up", repo_id=repo, repo_type="kernel", commit_message="again")

    before = repo_state(lfs_hub.url, repo)
    lfs_hub.restart()
    assert repo_state(lfs_hub.url, repo) == before
    path = hf_hub_download(
        repo,
        "big.bin",
        repo_type="kernel",
        revision=before["refs"]["tags"][0]["targetCommit"],
        cache_dir=tmp_path / "fresh-cache",
    )
    assert hashlib.sha256(Path(path).read_bytes()).hexdigest() == sha
    api.create_branch(repo, branch="v2", repo_type="kernel")  # the old token still works after restart


def test_lfs_upload_url_is_signed_and_bytes_are_checked(lfs_hub):
    token = lfs_hub.token("lfs-user2")
    auth = {"authorization": f"Bearer {token}"}
    HfApi(token=token).create_repo("lfs-user2/r", repo_type="kernel")
    data = b"z" * 2000
    oid = hashlib.sha256(data).hexdigest()
    batch = httpx2.post(
        f"{lfs_hub.url}/kernels/lfs-user2/r.git/info/lfs/objects/batch",
        headers=auth,
        json={"operation": "upload", "transfers": ["basic"], "objects": [{"oid": oid, "size": 2000}]},
    )
    obj = batch.json()["objects"][0]
    href = obj["actions"]["upload"]["href"]
    assert httpx2.put(href.replace("sig=", "sig=0"), content=data).status_code == 403
    assert httpx2.put(href, content=b"y" * 2000).status_code == 422  # wrong bytes for this oid
    assert httpx2.put(href, content=data).status_code == 200
    assert (
        httpx2.post(
            obj["actions"]["verify"]["href"], headers=auth, json={"oid": oid, "size": 2000}
        ).status_code
        == 200
    )
    again = httpx2.post(
        f"{lfs_hub.url}/kernels/lfs-user2/r.git/info/lfs/objects/batch",
        headers=auth,
        json={"operation": "upload", "objects": [{"oid": oid, "size": 2000}]},
    ).json()
    assert "actions" not in again["objects"][0]
    # another repo may not reference the object without uploading it itself
    HfApi(token=token).create_repo("lfs-user2/other", repo_type="kernel")
    line = b'{"key":"header","value":{"summary":"s"}}\n{"key":"lfsFile","value":{"path":"x","algo":"sha256","oid":"%s","size":2000}}\n'
    r = httpx2.post(
        f"{lfs_hub.url}/api/kernels/lfs-user2/other/commit/main", headers=auth, content=line % oid.encode()
    )
    assert r.status_code == 422


def test_default_hub_never_answers_lfs(hub, hub_env):
    """Default preupload is `regular`, so the default (xet) client never needs Xet here."""
    token = hub.token("mode-user")
    HfApi(token=token).create_repo("mode-user/r", repo_type="kernel")
    r = httpx2.post(
        f"{hub.url}/api/kernels/mode-user/r/preupload/main",
        headers={"authorization": f"Bearer {token}"},
        json={"files": [{"path": "huge.bin", "size": 10**10, "sample": ""}]},
    )
    assert r.json()["files"] == [
        {"path": "huge.bin", "uploadMode": "regular", "shouldIgnore": False, "oid": None}
    ]


def test_client_opts_into_lfs_on_a_default_hub(hub, hub_env, monkeypatch, tmp_path):
    """With Xet off, a publisher sends `X-Kernel-Hub-Lfs: 1` and big files go through LFS."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)
    api = HfApi(token=hub.token("optin-user"), headers={"X-Kernel-Hub-Lfs": "1"})
    api.create_repo("optin-user/r", repo_type="kernel")
    data = os.urandom(BIG_SIZE)
    api.upload_file(path_or_fileobj=data, path_in_repo="big.bin", repo_id="optin-user/r", repo_type="kernel")
    api.upload_file(
        path_or_fileobj=b"tiny", path_in_repo="tiny.txt", repo_id="optin-user/r", repo_type="kernel"
    )
    entries = {e.path: e for e in api.list_repo_tree("optin-user/r", repo_type="kernel")}
    assert (
        entries["big.bin"].lfs.sha256 == hashlib.sha256(data).hexdigest() and entries["tiny.txt"].lfs is None
    )
    assert Path(hf_hub_download("optin-user/r", "big.bin", repo_type="kernel")).read_bytes() == data
