"""kernel-hub extensions the publisher relies on (docs/CONTRACTS.md): publisher keys and the
atomic `ref-update` compare-and-swap; plus the admin CLI working while the server runs."""

from __future__ import annotations

import base64
import subprocess
import sys

import httpx2
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from huggingface_hub import HfApi

from registry.spec import signing
from tests.conftest import REPO_ROOT, HubProcess


def _raw_public(key: Ed25519PrivateKey) -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def test_keys_cli_and_api(hub, http, tmp_path):
    pem = tmp_path / "key.pem"
    k1, k2 = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    pem.write_bytes(
        k1.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "registry.cli",
            "key",
            "add",
            "key-org",
            "--public-key",
            str(pem),
            "--data",
            str(hub.data_dir),
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    key_id = out.stdout.strip()
    assert len(key_id) == 16
    keys = http.get("/api/kernel-hub/keys/key-org").json()["keys"]
    assert keys == [{"id": key_id, "public_key": base64.b64encode(_raw_public(k1)).decode()}]

    token = hub.token("key-owner", write=["key-org"])
    body = {"public_key": base64.b64encode(_raw_public(k2)).decode()}
    assert http.post("/api/kernel-hub/keys/key-org", json=body).status_code == 401
    assert (
        http.post(
            "/api/kernel-hub/keys/key-org",
            json=body,
            headers={"authorization": f"Bearer {hub.token('key-stranger')}"},
        ).status_code
        == 403
    )
    # A second key only on purpose (issue 43): a write token alone is refused, an endorsement by the
    # current key lets it in (and is listed with it for loaders to follow).
    r = http.post("/api/kernel-hub/keys/key-org", json=body, headers={"authorization": f"Bearer {token}"})
    assert r.status_code == 403 and r.headers["x-error-code"] == "KeyNotAllowed"
    body["endorsed_by"] = key_id
    body["endorsement"] = signing.sign_endorsement(k1, "key-org", body["public_key"])
    r = http.post("/api/kernel-hub/keys/key-org", json=body, headers={"authorization": f"Bearer {token}"})
    assert r.status_code == 200 and len(http.get("/api/kernel-hub/keys/key-org").json()["keys"]) == 2
    assert http.get("/api/kernel-hub/keys/key-org").json()["keys"][1]["endorsed_by"] == key_id
    bad = http.post(
        "/api/kernel-hub/keys/key-org",
        json={"public_key": "AAAA"},
        headers={"authorization": f"Bearer {token}"},
    )
    assert bad.status_code == 400 and "32-byte" in bad.json()["error"]


def test_ref_update_is_compare_and_swap(hub, http):
    token = hub.token("cas-user")
    auth = {"authorization": f"Bearer {token}"}
    api = HfApi(endpoint=hub.url, token=token)
    api.create_repo("cas-user/k", repo_type="kernel")
    c1 = api.upload_file(path_or_fileobj=b"1", path_in_repo="f", repo_id="cas-user/k", repo_type="kernel").oid
    c2 = api.upload_file(path_or_fileobj=b"2", path_in_repo="f", repo_id="cas-user/k", repo_type="kernel").oid
    url = "/api/kernels/cas-user/k/ref-update"

    assert (
        http.post(url, json={"ref": "refs/heads/v1", "old": None, "new": c1}, headers=auth).status_code == 200
    )
    r = http.post(url, json={"ref": "refs/heads/v1", "old": None, "new": c2}, headers=auth)
    assert r.status_code == 412 and r.headers["x-error-code"] == "RefMoved" and r.json()["current"] == c1
    r = http.post(url, json={"ref": "refs/heads/v1", "old": c2, "new": c2}, headers=auth)
    assert r.status_code == 412 and r.json()["current"] == c1
    assert (
        http.post(url, json={"ref": "refs/heads/v1", "old": c1, "new": c2}, headers=auth).status_code == 200
    )
    refs = {b.name: b.target_commit for b in api.list_repo_refs("cas-user/k", repo_type="kernel").branches}
    assert refs["v1"] == c2

    assert (
        http.post(url, json={"ref": "refs/heads/v01", "old": None, "new": c1}, headers=auth).status_code
        == 400
    )
    assert (
        http.post(url, json={"ref": "refs/heads/v2", "old": None, "new": "0" * 40}, headers=auth).status_code
        == 404
    )
    assert http.post(url, json={"ref": "refs/heads/v2", "old": None, "new": c1}).status_code == 401
    assert http.post(url, json={"ref": "v2", "old": None, "new": c1}, headers=auth).status_code == 400
    assert (
        http.post(url, json={"ref": "refs/tags/t1", "old": None, "new": c1}, headers=auth).status_code == 200
    )


def test_whoami_and_org_overview(hub, http):
    hub.org("who-org", trusted=True, members=["who-user"])
    me = http.get("/api/whoami-v2", headers={"authorization": f"Bearer {hub.token('who-user')}"}).json()
    assert me["name"] == "who-user" and [o["name"] for o in me["orgs"]] == ["who-org"]
    assert http.get("/api/whoami-v2").status_code == 401
    assert http.get("/api/organizations/who-org/overview").json()["trustedKernelPublisher"] is True
    user = http.get("/api/organizations/who-user/overview").json()
    assert user["trustedKernelPublisher"] is False and user["type"] == "user"
    hub.org("who-org", trusted=False)
    assert http.get("/api/organizations/who-org/overview").json()["trustedKernelPublisher"] is False


def test_token_create_prints_only_the_token(hub):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "registry.cli",
            "token",
            "create",
            "--user",
            "cli-user",
            "--write",
            "cli-org",
            "--data",
            str(hub.data_dir),
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    token = out.strip()
    assert out == token + "\n" and token.startswith("hf_")
    stored = b"".join(p.read_bytes() for p in hub.data_dir.glob("hub.sqlite3*"))
    assert token.encode() not in stored
    HfApi(endpoint=hub.url, token=token).create_repo("cli-org/from-cli", repo_type="kernel")


def test_web_pages(hub, http):
    api = HfApi(endpoint=hub.url, token=hub.token("page-user"))
    api.create_repo("page-user/k", repo_type="kernel")
    api.upload_file(
        path_or_fileobj=b"{}",
        path_in_repo="build/torch-cpu/metadata.json",
        repo_id="page-user/k",
        repo_type="kernel",
    )
    api.create_branch("page-user/k", branch="v3", repo_type="kernel")
    assert "page-user/k" in http.get("/").text
    page = http.get("/kernels/page-user/k")
    assert page.status_code == 200 and "v3" in page.text and "torch-cpu" in page.text


def test_public_url_is_used_for_absolute_urls(tmp_path):
    proc = HubProcess(tmp_path / "data", "--public-url", "http://hub.example:9999/").start()
    try:
        token = proc.token("pub-user")
        r = httpx2.post(
            f"{proc.url}/api/repos/create",
            headers={"authorization": f"Bearer {token}"},
            json={"name": "k", "organization": "pub-user", "type": "kernel"},
        )
        assert r.json()["url"] == "http://hub.example:9999/kernels/pub-user/k"
    finally:
        proc.stop()
