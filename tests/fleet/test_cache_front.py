"""nginx's cache in front of the recommended fleet deployment (docs/SERVING.md "A cache in front"): files named by
their commit in public repos are kept for the hub's max-age, so many machines loading one version cost the
replicas one request per file; branch-named and private files always reach a replica.

The stock huggingface_hub download tests and a stock `kernels` load run here unchanged with this front as their
`hub` (both ask for files by commit once they know it, so they go through the cache)."""

from __future__ import annotations

import httpx2
import kernels
import pytest

from tests.fleet.test_accel_s3 import LARGE, SMALL, AccelFront, _resolves, make_repo
from tests.hub.test_kernels_client import _publish
from tests.hub.test_stock_client import (  # noqa: F401
    published,
    test_download_bytes_identical,
    test_snapshot_download_allow_patterns,
)

HUB_HEADERS = ("etag", "x-repo-commit", "x-linked-etag", "x-linked-size", "content-length", "cache-control")


@pytest.fixture(scope="module")
def hub(fleet):
    front = AccelFront(fleet, cached=True)
    yield front
    front.stop()


@pytest.fixture(scope="module")
def repo(hub):
    return make_repo(hub)


def _replica_requests(hub, path: str, expect: int) -> int:
    """How many requests for `path` the front's replicas answered (their access logs' request ids), once
    `expect` are logged or 5 s have passed (a replica logs after it answers)."""
    return len(_resolves(hub, path, expect))


def test_stock_kernels_loads_a_version_through_the_cache(hub, hub_env, tmp_path):
    name = _publish(hub, tmp_path, "k-cache", trusted=True, offset=11)
    module = kernels.get_kernel(name, version=1)
    assert module.add([1, 2, 3]) == [12, 13, 14]


def test_a_commit_named_file_is_fetched_once_then_served_from_the_cache(hub, repo):
    name, _, api = repo
    commit = api.repo_info(name).sha
    path = f"/{name}/resolve/{commit}/dir/large.bin"
    direct = httpx2.head(f"{hub.fleet.replicas[0].url}{path}")  # a streaming replica: the reference headers
    assert direct.headers["cache-control"] == "public, max-age=60"
    answers = [httpx2.get(f"{hub.url}{path}") for _ in range(3)] + [httpx2.head(f"{hub.url}{path}")]
    assert [a.headers["x-cache"] for a in answers] == ["MISS", "HIT", "HIT", "HIT"]
    for a in answers:
        assert a.status_code == 200
        assert {h: a.headers.get(h) for h in HUB_HEADERS} == {h: direct.headers.get(h) for h in HUB_HEADERS}
        assert not [h for h in a.headers if h.startswith(("x-accel", "x-blob", "x-amz"))], a.headers
    assert all(a.content == LARGE for a in answers[:3])
    part = httpx2.get(f"{hub.url}{path}", headers={"range": "bytes=100-199"})
    assert part.status_code == 206 and part.content == LARGE[100:200]
    assert part.headers["content-range"] == f"bytes 100-199/{len(LARGE)}"
    assert httpx2.get(f"{hub.url}{path}", headers={"range": "bytes=-10"}).content == LARGE[-10:]
    assert _replica_requests(hub, path, 1) == 1  # the fill; every other answer came from nginx's cache


def test_branch_named_files_always_reach_a_replica_and_see_a_new_publish_at_once(hub, repo):
    name, _, api = repo
    path = f"/{name}/resolve/main/small.bin"
    for _ in range(2):
        r = httpx2.get(f"{hub.url}{path}")
        assert r.content == SMALL and r.headers["cache-control"] == "no-cache" and "x-cache" not in r.headers
    assert _replica_requests(hub, path, 2) == 2
    api.upload_file(path_or_fileobj=b"new bytes", path_in_repo="small.bin", repo_id=name)
    assert httpx2.get(f"{hub.url}{path}").content == b"new bytes"
    commit = api.repo_info(name).sha
    assert httpx2.get(f"{hub.url}/{name}/resolve/{commit}/small.bin").content == b"new bytes"


def test_private_files_are_never_cached_nor_given_to_others(hub, repo):
    name, token, api = repo
    user = name.split("/")[0]
    commit = api.repo_info(f"{user}/priv").sha
    url = f"{hub.url}/{user}/priv/resolve/{commit}/s.txt"
    for _ in range(3):
        r = httpx2.get(url, headers={"authorization": f"Bearer {token}"})
        assert r.content == b"secret" and r.headers["cache-control"] == "private"
        assert r.headers["x-cache"] == "MISS", r.headers  # asked again each time, never kept
    anonymous = httpx2.get(url)
    assert anonymous.status_code == 404 and anonymous.headers["x-error-code"] == "RepoNotFound"
