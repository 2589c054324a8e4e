"""`kernel-hub serve --no-extensions`: the HF Hub API only, as on the real Hub. Our extension routes
answer 404/405 like any route the Hub lacks; everything the stock clients use still works."""

from __future__ import annotations

import base64

import httpx2
from huggingface_hub import HfApi


def test_extension_routes_are_absent_and_the_hub_api_works(plain_hub):
    token = plain_hub.token("plain-user")
    auth = {"authorization": f"Bearer {token}"}
    api = HfApi(endpoint=plain_hub.url, token=token)
    api.create_repo("plain-user/k", repo_type="kernel")
    c1 = api.upload_file(
        path_or_fileobj=b"1", path_in_repo="f", repo_id="plain-user/k", repo_type="kernel"
    ).oid
    api.create_branch("plain-user/k", branch="v1", revision=c1, repo_type="kernel")

    with httpx2.Client(base_url=plain_hub.url, timeout=60) as http:
        assert http.get("/api/kernel-hub/keys/plain-user").status_code == 404
        key = {"public_key": base64.b64encode(bytes(32)).decode()}
        assert http.post("/api/kernel-hub/keys/plain-user", json=key, headers=auth).status_code in (404, 405)
        r = http.post(
            "/api/kernels/plain-user/k/ref-update",
            json={"ref": "refs/heads/v1", "old": c1, "new": c1},
            headers=auth,
        )
        assert r.status_code in (404, 405) and "endpoint" in r.json()["error"]

    refs = {b.name: b.target_commit for b in api.list_repo_refs("plain-user/k", repo_type="kernel").branches}
    assert refs["v1"] == c1
    c2 = api.upload_file(
        path_or_fileobj=b"2",
        path_in_repo="f",
        repo_id="plain-user/k",
        repo_type="kernel",
        revision="v1",
        parent_commit=c1,
    ).oid
    assert {b.name: b.target_commit for b in api.list_repo_refs("plain-user/k", repo_type="kernel").branches}[
        "v1"
    ] == c2


def test_the_normal_hub_keeps_its_extensions(hub):
    with httpx2.Client(base_url=hub.url, timeout=60) as http:
        assert http.get("/api/kernel-hub/keys/nobody-yet").status_code == 200
