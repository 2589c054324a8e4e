"""Bad input gets a 4xx with a clear message, and a re-read shows nothing changed (no refs, no
commits, no blobs)."""

from __future__ import annotations

import base64
import json
import os

import httpx2
import pytest
from huggingface_hub import HfApi

from tests.conftest import HubProcess
from tests.hub.conftest import repo_state, temp_files

REPO = "bad-user/repo"


@pytest.fixture(scope="module")
def setup(hub):
    token = hub.token("bad-user")
    api = HfApi(endpoint=hub.url, token=token)
    api.create_repo(REPO, repo_type="kernel", exist_ok=True)
    api.upload_file(path_or_fileobj=b"keep", path_in_repo="keep.txt", repo_id=REPO, repo_type="kernel")
    return {"token": token, "auth": {"authorization": f"Bearer {token}"}}


def _blobs(hub) -> set[str]:
    root = hub.data_dir / "blobs"
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


@pytest.fixture
def unchanged(hub, setup):
    """Asserts after the test that the repo and the blob store are exactly as before."""
    before, blobs = repo_state(hub.url, REPO), _blobs(hub)
    yield
    assert repo_state(hub.url, REPO) == before
    assert _blobs(hub) == blobs


def ndjson(*lines: dict) -> bytes:
    return b"".join(json.dumps(x).encode() + b"\n" for x in lines)


HEADER = {"key": "header", "value": {"summary": "bad"}}


def add(path: str, data: bytes = b"payload") -> dict:
    return {
        "key": "file",
        "value": {"path": path, "content": base64.b64encode(data).decode(), "encoding": "base64"},
    }


def _commit(http, setup, body: bytes):
    return http.post(
        f"/api/kernels/{REPO}/commit/main",
        content=body,
        headers={**setup["auth"], "content-type": "application/x-ndjson"},
    )


@pytest.mark.parametrize(
    "path",
    [
        "../escape.txt",
        "a/../../b",
        "/abs.txt",
        "a\\b.txt",
        "a//b.txt",
        "nul\x00.txt",
        "./x",
        "dir/",
        ".git/config",
        "x" * 300,
        "/".join(["d"] * 600),
    ],
)
def test_bad_paths_are_refused(http, setup, unchanged, path):
    # a good file first: it must not be stored either when a later line is refused
    r = _commit(http, setup, ndjson(HEADER, add("good.txt", os.urandom(64)), add(path)))
    assert r.status_code == 400, r.text
    assert r.headers["x-error-code"] == "InvalidPath" and "invalid file path" in r.json()["error"]


@pytest.mark.parametrize(
    "body,needle",
    [
        (b"not json\n", "not valid JSON"),
        (ndjson(add("x.txt")), "first line must be the header"),
        (ndjson(HEADER, HEADER), "second header"),
        (ndjson(HEADER, {"key": "rename", "value": {"path": "x"}}), "unknown operation"),
        (
            ndjson(HEADER, {"key": "file", "value": {"path": "x", "content": "@@@", "encoding": "base64"}}),
            "base64",
        ),
        (ndjson({"key": "header", "value": {"summary": ""}}), "summary"),
        (ndjson({"key": "header", "value": {"summary": "s", "parentCommit": "xyz"}}), "parentCommit"),
        (b"", "empty commit body"),
    ],
)
def test_malformed_ndjson_is_refused(http, setup, unchanged, body, needle):
    r = _commit(http, setup, body)
    assert r.status_code == 400 and needle in r.json()["error"], r.text


def test_unknown_lfs_oid_is_refused(http, setup, unchanged):
    oid = "ab" * 32
    r = _commit(
        http,
        setup,
        ndjson(
            HEADER, {"key": "lfsFile", "value": {"path": "w.bin", "algo": "sha256", "oid": oid, "size": 3}}
        ),
    )
    assert r.status_code == 422 and oid in r.json()["error"]


def test_deleting_a_missing_file_is_404(http, setup, unchanged):
    r = _commit(
        http, setup, ndjson(HEADER, add("new.txt"), {"key": "deletedFile", "value": {"path": "absent.txt"}})
    )
    assert r.status_code == 404 and r.headers["x-error-code"] == "EntryNotFound"


def test_file_folder_clash_is_refused(http, setup, unchanged):
    r = _commit(http, setup, ndjson(HEADER, add("keep.txt/inner.txt")))
    assert r.status_code == 409 and "is a file" in r.json()["error"]


@pytest.mark.parametrize(
    "name", ["v01", "v1_0", "v1.5", "v2-rc", "refs/heads/x", "a..b", "-x", "x.lock", "a" * 40 + "/"]
)
def test_bad_branch_names_are_refused(http, setup, unchanged, name):
    r = http.post(f"/api/kernels/{REPO}/branch/{name.replace('/', '%2F')}", json={}, headers=setup["auth"])
    assert r.status_code == 400 and r.headers["x-error-code"] == "InvalidRevision", r.text


def test_canonical_version_branches_are_accepted(http, setup):
    for name in ("v0", "v10", "vnext", "release/v01"):
        r = http.post(
            f"/api/kernels/{REPO}/branch/{name.replace('/', '%2F')}", json={}, headers=setup["auth"]
        )
        assert r.status_code == 200, (name, r.text)


@pytest.mark.parametrize(
    "payload",
    [
        {"name": "bad--name", "organization": "bad-user", "type": "kernel"},
        {"name": "-dash", "organization": "bad-user", "type": "kernel"},
        {"name": "x.git", "organization": "bad-user", "type": "kernel"},
        {"name": "ok", "organization": "api", "type": "kernel"},
        {"name": "a/b", "organization": "bad-user", "type": "kernel"},
        {"name": "ok", "organization": "bad-user", "type": "dataset"},
        {"name": None, "organization": "bad-user", "type": "kernel"},
    ],
)
def test_bad_repo_names_are_refused(http, setup, payload):
    before = http.get("/").text
    r = http.post("/api/repos/create", json=payload, headers=setup["auth"])
    assert r.status_code in (400, 403), r.text
    assert r.json()["error"] and r.headers["x-error-code"]
    assert http.get("/").text == before


def test_invalid_readme_metadata_is_refused(hub, setup, unchanged):
    api = HfApi(endpoint=hub.url, token=setup["token"])
    with pytest.raises(ValueError, match="Invalid metadata"):
        api.upload_file(
            path_or_fileobj=b"---\nkey: [unclosed\n---\n# x\n",
            path_in_repo="README.md",
            repo_id=REPO,
            repo_type="kernel",
        )


def test_oversized_json_body_is_413(http, setup, unchanged):
    files = [{"path": f"f{i}.txt", "size": 1, "sample": "A" * 9000} for i in range(1000)]
    r = http.post(f"/api/kernels/{REPO}/preupload/main", json={"files": files}, headers=setup["auth"])
    assert r.status_code == 413 and "exceeds the limit" in r.json()["error"]


def test_oversized_commit_body_is_413(tmp_path):
    small = HubProcess(tmp_path / "data", "--max-commit-bytes", "100000").start()
    try:
        token = small.token("big")
        api = HfApi(endpoint=small.url, token=token)
        api.create_repo("big/r", repo_type="kernel")
        before = repo_state(small.url, "big/r")
        r = httpx2.post(
            f"{small.url}/api/kernels/big/r/commit/main",
            content=ndjson(HEADER, add("big.bin", os.urandom(200_000))),
            headers={"authorization": f"Bearer {token}"},
        )
        assert r.status_code == 413 and "100000" in r.json()["error"]
        assert repo_state(small.url, "big/r") == before
        assert not temp_files(small.data_dir)
    finally:
        small.stop()


def test_unknown_routes_and_methods_answer_json(http):
    r = http.get("/api/nothing-here")
    assert r.status_code == 404 and r.headers["x-error-code"] == "NotFound" and r.json()["error"]
    assert len(r.headers["x-request-id"]) == 32
    r = http.put(f"/api/kernels/{REPO}/refs")
    assert r.status_code == 405 and r.json()["error"]
