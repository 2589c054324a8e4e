"""A kernel page whose version lost a blob (issue 43: the page answered 500) still renders: what is readable,
and which file is not. Against the session's real hub process; the blobs are unique to this test."""

from __future__ import annotations

import hashlib
import json
import os
import uuid

from huggingface_hub import CommitOperationAdd, HfApi


def test_a_page_with_a_missing_blob_shows_what_is_readable(hub, http):
    user = f"dg{uuid.uuid4().hex[:8]}"
    api = HfApi(endpoint=hub.url, token=hub.token(user))
    repo = f"{user}/fused-mlp"
    api.create_repo(repo, repo_type="kernel")
    api.create_branch(repo, branch="v1", repo_type="kernel")
    readme = f"# {user}\n".encode() + os.urandom(8).hex().encode()
    good = json.dumps({"backend": {"type": "cpu"}, "nonce": user}).encode()
    lost = json.dumps({"backend": {"type": "cuda"}, "nonce": user + "x"}).encode()
    files = {
        "README.md": readme,
        "build/torch-cpu/metadata.json": good,
        "build/torch-cuda/metadata.json": lost,
    }
    ops = [CommitOperationAdd(path_in_repo=p, path_or_fileobj=d) for p, d in files.items()]
    api.create_commit(repo, ops, commit_message="Publish v1", repo_type="kernel", revision="v1")
    for data in (readme, lost):
        sha = hashlib.sha256(data).hexdigest()
        (hub.data_dir / "blobs" / "sha256" / sha[:2] / sha).unlink()

    for path in (f"/kernels/{repo}", f"/kernels/{repo}/tree/v1"):
        r = http.get(path)
        assert r.status_code == 200, (path, r.status_code, r.text[:300])
        assert "<code>torch-cpu</code> cpu" in r.text
        assert "<code>torch-cuda</code> metadata.json unreadable (a damaged file)" in r.text
    assert "README.md is unreadable on this hub" in http.get(f"/kernels/{repo}").text
