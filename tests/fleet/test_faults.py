"""Faults in a fleet (3 replicas behind nginx, PostgreSQL, SeaweedFS): a replica killed mid-upload, the database
or the object store gone for a few seconds, 32 publishes of one version at once. After each: nothing partial
is visible, nothing stored is lost, every ref is right (checks.fleet_invariants).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import threading
import time
import uuid
from pathlib import Path

import httpx2
import pytest
from huggingface_hub import HfApi, hf_hub_download

from tests.conftest import point_clients_at
from tests.fleet.checks import fleet_invariants
from tests.hub.conftest import repo_state


def _repo(fleet, kind: str = "model") -> tuple[str, str, HfApi]:
    user = f"f{uuid.uuid4().hex[:8]}"
    token = fleet.token(user)
    api = HfApi(endpoint=fleet.url, token=token)
    repo = f"{user}/r"
    api.create_repo(repo, repo_type=kind)
    return repo, token, api


def _slow(body: bytes, sent: threading.Event, piece: int = 64 * 1024):
    """The body in pieces, slowly; `sent` is set once 1 MiB is on its way."""
    for i in range(0, len(body), piece):
        if i >= 1024 * 1024:
            sent.set()
        yield body[i : i + piece]
        time.sleep(0.01)


def _send_and_kill(fleet, method: str, url: str, body: bytes, headers: dict) -> None:
    """Send `body` slowly straight to replica 0 and kill -9 it mid-body; the request must fail."""
    sent, outcome = threading.Event(), {}

    def send():
        try:
            outcome["response"] = httpx2.request(
                method, url, content=_slow(body, sent), headers=headers, timeout=60
            )
        except httpx2.HTTPError as e:
            outcome["error"] = e

    t = threading.Thread(target=send)
    t.start()
    assert sent.wait(30), "the upload did not get going"
    fleet.kill(0)
    t.join(60)
    assert "error" in outcome, f"the killed replica answered: {outcome.get('response')}"


def _in_bucket(fleet, sha: str) -> bool:
    bucket, prefix = fleet.blobs[len("s3://") :].split("/", 1)
    listed = fleet.s3.client().list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/sha256/{sha[:2]}/{sha}")
    return bool(listed.get("Contents"))


@pytest.fixture
def replica0_back(fleet):
    yield
    if fleet.replicas[0].proc is None:
        fleet.restart(0)


def test_kill9_during_inline_commit_then_stock_retry_through_balancer(
    fleet, replica0_back, monkeypatch, tmp_path
):
    repo, token, api = _repo(fleet)
    before = repo_state(fleet.url, repo, token, t="models")
    data = os.urandom(6 * 1024 * 1024)
    sha = hashlib.sha256(data).hexdigest()
    lines = [
        {"key": "header", "value": {"summary": "big", "description": ""}},
        {
            "key": "file",
            "value": {"path": "big.bin", "content": base64.b64encode(data).decode(), "encoding": "base64"},
        },
    ]
    body = b"".join(json.dumps(x).encode() + b"\n" for x in lines)
    url = f"{fleet.replicas[0].url}/api/models/{repo}/commit/main"
    headers = {"authorization": f"Bearer {token}", "content-type": "application/x-ndjson"}
    _send_and_kill(fleet, "POST", url, body, headers)

    assert repo_state(fleet.url, repo, token, t="models") == before  # through the other replicas
    assert not _in_bucket(fleet, sha)  # nothing partial (nor complete) was stored
    # The client's retry goes through the balancer, which now skips the dead replica.
    api.upload_file(path_or_fileobj=data, path_in_repo="big.bin", repo_id=repo)
    point_clients_at(monkeypatch, fleet.url, tmp_path)
    assert Path(hf_hub_download(repo, "big.bin", token=token)).read_bytes() == data
    fleet_invariants(fleet, rehash={sha})


def test_kill9_during_lfs_put_then_the_same_signed_url_works_on_another_replica(fleet, replica0_back):
    repo, token, _ = _repo(fleet)
    data = os.urandom(4 * 1024 * 1024)
    sha = hashlib.sha256(data).hexdigest()
    auth = {"authorization": f"Bearer {token}"}
    batch = httpx2.post(
        f"{fleet.url}/{repo}.git/info/lfs/objects/batch",
        json={"operation": "upload", "objects": [{"oid": sha, "size": len(data)}]},
        headers=auth,
    ).json()
    href = batch["objects"][0]["actions"]["upload"]["href"]
    assert href.startswith(fleet.url)  # absolute URLs name the balancer (the Host it was asked by)
    _send_and_kill(fleet, "PUT", href.replace(fleet.url, fleet.replicas[0].url), data, {})
    assert not _in_bucket(fleet, sha)

    # Any replica accepts the URL another one signed: the HMAC secret lives in the shared database.
    assert httpx2.put(href, content=data, timeout=60).status_code == 200
    assert _in_bucket(fleet, sha)
    line = {"key": "lfsFile", "value": {"path": "w.bin", "algo": "sha256", "oid": sha, "size": len(data)}}
    body = json.dumps({"key": "header", "value": {"summary": "lfs"}}) + "\n" + json.dumps(line) + "\n"
    r = httpx2.post(f"{fleet.url}/api/models/{repo}/commit/main", content=body, headers=auth)
    assert r.status_code == 200, r.text
    got = httpx2.get(f"{fleet.url}/{repo}/resolve/main/w.bin", headers=auth, timeout=60)
    assert got.content == data
    fleet_invariants(fleet, rehash={sha})


def _wait_healthy(url: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while httpx2.get(url, timeout=10).status_code != 200:
        assert time.monotonic() < deadline, f"{url} did not recover within {timeout_s} s"
        time.sleep(0.5)


def _assert_503(r: httpx2.Response, what: str) -> None:
    assert r.status_code == 503, (r.status_code, r.text)
    assert r.headers["x-error-code"] == "StorageUnavailable"
    assert r.headers["retry-after"]
    assert what in r.json()["error"] and "retry" in r.json()["error"]


def test_database_outage_is_a_clear_503_then_everything_recovers(fleet):
    repo, token, api = _repo(fleet)
    api.upload_file(path_or_fileobj=b"before the outage\n", path_in_repo="a.txt", repo_id=repo)
    before = repo_state(fleet.url, repo, token, t="models")
    auth = {"authorization": f"Bearer {token}"}
    tree = f"{fleet.url}/api/models/{repo}/tree/main"
    commit = {"key": "header", "value": {"summary": "during"}}
    fleet.pg.stop()
    try:
        for replica in fleet.replicas:  # every replica says so, none hangs or answers 500
            _assert_503(httpx2.get(tree.replace(fleet.url, replica.url), timeout=30), "database")
        r = httpx2.post(
            f"{fleet.url}/api/models/{repo}/commit/main",
            content=json.dumps(commit)
            + "\n"
            + json.dumps(
                {"key": "file", "value": {"path": "b.txt", "content": "ZHVyaW5n", "encoding": "base64"}}
            ),
            headers=auth,
            timeout=30,
        )
        _assert_503(r, "database")
    finally:
        fleet.pg.start()
    for replica in fleet.replicas:
        _wait_healthy(tree.replace(fleet.url, replica.url))
    assert repo_state(fleet.url, repo, token, t="models") == before
    api.upload_file(path_or_fileobj=b"after\n", path_in_repo="b.txt", repo_id=repo)
    fleet_invariants(fleet)


def test_object_store_outage_is_a_clear_503_then_everything_recovers(fleet):
    repo, token, api = _repo(fleet)
    data = os.urandom(300_000)
    api.upload_file(path_or_fileobj=data, path_in_repo="a.bin", repo_id=repo)
    before = repo_state(fleet.url, repo, token, t="models")
    auth = {"authorization": f"Bearer {token}"}
    resolve = f"{fleet.url}/{repo}/resolve/main/a.bin"
    fleet.s3.stop()
    try:
        _assert_503(httpx2.get(resolve, headers=auth, timeout=60), "object store")
        line = {"key": "file", "value": {"path": "b.bin", "content": "bmV3", "encoding": "base64"}}
        r = httpx2.post(
            f"{fleet.url}/api/models/{repo}/commit/main",
            content=json.dumps({"key": "header", "value": {"summary": "during"}}) + "\n" + json.dumps(line),
            headers=auth,
            timeout=60,
        )
        _assert_503(r, "object store")
        # Metadata lives in the database: listings still answer.
        assert httpx2.get(f"{fleet.url}/api/models/{repo}/tree/main", headers=auth).status_code == 200
    finally:
        fleet.s3.start()
    _wait_healthy(resolve)
    assert repo_state(fleet.url, repo, token, t="models") == before
    assert httpx2.get(resolve, headers=auth, timeout=60).content == data
    api.upload_file(path_or_fileobj=b"after\n", path_in_repo="b.bin", repo_id=repo)
    fleet_invariants(fleet)


def test_32_concurrent_publishes_of_one_version_through_3_replicas_one_wins(fleet):
    """The publish protocol's last step (temp branch -> one ref-update of vN) raced 32 ways over the balancer."""
    repo, token, api = _repo(fleet, kind="kernel")
    commits = []
    for i in range(32):
        branch = f"publish/{i}"
        api.create_branch(repo, branch=branch, repo_type="kernel")
        info = api.upload_file(
            path_or_fileobj=f"{i}\n".encode(),
            path_in_repo="who.txt",
            repo_id=repo,
            repo_type="kernel",
            revision=branch,
        )
        commits.append(info.oid)
    url = f"{fleet.url}/api/kernels/{repo}/ref-update"
    auth = {"authorization": f"Bearer {token}"}
    barrier, answers = threading.Barrier(32), [None] * 32

    def swap(i: int) -> None:
        barrier.wait()
        answers[i] = httpx2.post(
            url, json={"ref": "refs/heads/v1", "old": None, "new": commits[i]}, headers=auth
        )

    threads = [threading.Thread(target=swap, args=(i,)) for i in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    codes = [a.status_code for a in answers]
    assert sorted(codes) == [200] + [412] * 31, codes
    winner = commits[codes.index(200)]
    for a in answers:
        if a.status_code == 412:
            assert a.headers["x-error-code"] == "RefMoved" and a.json()["current"] == winner
    v1 = {b.name: b.target_commit for b in api.list_repo_refs(repo, repo_type="kernel").branches}["v1"]
    assert v1 == winner
    who = httpx2.get(f"{fleet.url}/kernels/{repo}/resolve/v1/who.txt", headers=auth).text
    assert who == f"{commits.index(winner)}\n"
    fleet_invariants(fleet)
