"""Which downloads a shared cache (nginx's proxy_cache, a CDN) may keep: the hub says so in Cache-Control.

A file named by its full commit id in a public repo never changes: `public, max-age=<--shared-cache-s>`. A branch's
file changes with the next publish (`no-cache`), a private repo's belongs to the requester (`private`); errors
carry no Cache-Control, so nothing caches them."""

from __future__ import annotations

import uuid

import httpx2
from hub_process import HubProcess
from huggingface_hub import HfApi


def _repos(hub) -> tuple[str, str, str, str]:
    user = f"cc{uuid.uuid4().hex[:8]}"
    token = hub.token(user)
    api = HfApi(endpoint=hub.url, token=token)
    for name, private in (("pub", False), ("priv", True)):
        api.create_repo(f"{user}/{name}", repo_type="kernel", private=private)
        api.upload_file(
            path_or_fileobj=b"bytes", path_in_repo="f.bin", repo_id=f"{user}/{name}", repo_type="kernel"
        )
    commit = api.repo_info(f"{user}/pub", repo_type="kernel").sha
    private_commit = api.repo_info(f"{user}/priv", repo_type="kernel").sha
    return user, token, commit, private_commit


def _cache_control(url: str, token: str | None = None) -> tuple[int, str | None]:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    out = set()
    for method in ("HEAD", "GET"):
        r = httpx2.request(method, url, headers=headers)
        out.add((r.status_code, r.headers.get("cache-control")))
    assert len(out) == 1, out  # HEAD and GET agree
    return out.pop()


def test_only_commit_named_files_of_public_repos_may_be_shared(hub):
    user, token, commit, private_commit = _repos(hub)
    base = f"{hub.url}/kernels/{user}"
    assert _cache_control(f"{base}/pub/resolve/{commit}/f.bin") == (200, "public, max-age=60")
    assert _cache_control(f"{base}/pub/resolve/{commit}/f.bin", token) == (200, "public, max-age=60")
    assert _cache_control(f"{base}/pub/resolve/main/f.bin") == (200, "no-cache")
    assert _cache_control(f"{base}/pub/resolve/{commit[:12]}/f.bin")[1] != "public, max-age=60"
    assert _cache_control(f"{base}/priv/resolve/{private_commit}/f.bin", token) == (200, "private")
    assert _cache_control(f"{base}/priv/resolve/main/f.bin", token) == (200, "private")
    for missing in (f"{base}/pub/resolve/{commit}/absent.bin", f"{base}/priv/resolve/{private_commit}/f.bin"):
        status, cache_control = _cache_control(missing)
        assert status == 404 and cache_control is None, (missing, status, cache_control)


def test_shared_caching_can_be_turned_off(tmp_path):
    hub = HubProcess(tmp_path / "data", "--shared-cache-s", "0").start()
    try:
        user, _, commit, _ = _repos(hub)
        assert _cache_control(f"{hub.url}/kernels/{user}/pub/resolve/{commit}/f.bin") == (200, "no-cache")
    finally:
        hub.stop()
