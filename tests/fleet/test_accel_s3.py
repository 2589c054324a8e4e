"""The recommended fleet deployment (docs/SERVING.md): nginx in front of replicas run with `--accel-redirect` on
PostgreSQL + S3. A replica decides (auth, revision, headers, the blob's size once per process) and answers a
download with `X-Accel-Redirect` to a presigned object path; nginx fetches the bytes from the object store with
`If-Match` on the ETag the replica checked, and asks a replica again when the store refuses.

The stock huggingface_hub download tests run here unchanged with this front as their `hub` (and stock `kernels`
loads a version through it), next to the headers, ranges, damage and outage checks of the redirect itself. The
front shares the fleet's database: tests that create fixed org names stay in test_same_tests.py.
"""

from __future__ import annotations

import hashlib
import os
import time
import uuid

import httpx2
import kernels
import pytest
from huggingface_hub import HfApi

from tests.hub.test_kernels_client import _publish
from tests.hub.test_stock_client import (  # noqa: F401
    published,
    test_download_bytes_identical,
    test_resolve_headers_and_range,
    test_snapshot_download_allow_patterns,
)
from tests.servers import require
from tests.servers.nginx_accel import ACCEL_PREFIX

SMALL, LARGE = os.urandom(20_000), os.urandom(3 << 20)


class AccelFront:
    """The fleet's storage and admin commands, with `url` = nginx in front of 2 `--accel-redirect` replicas
    (`cached`: with nginx's cache in front of commit-named files, test_cache_front.py)."""

    def __init__(self, fleet, cached: bool = False):
        self.fleet = fleet
        self.replicas = fleet.accel_replicas(2)
        self.nginx = (fleet.cached_nginx if cached else fleet.accel_nginx)(self.replicas)
        require(self.nginx.start)
        self.url = self.nginx.url
        self.data_dir = None

    def token(self, user: str, write=()) -> str:
        return self.fleet.token(user, write)

    def org(self, name: str, trusted: bool = False, members=()) -> None:
        self.fleet.org(name, trusted, members)

    def stop(self) -> None:
        self.nginx.destroy()
        for r in self.replicas:
            r.stop()


@pytest.fixture(scope="module")
def hub(fleet):
    front = AccelFront(fleet)
    yield front
    front.stop()


@pytest.fixture(scope="module")
def repo(hub):
    return make_repo(hub)


def make_repo(hub) -> tuple[str, str, HfApi]:
    """A public model repo with SMALL and LARGE (under dir/) and a private one with s.txt, by a new user."""
    user = f"a{uuid.uuid4().hex[:8]}"
    token = hub.token(user)
    api = HfApi(endpoint=hub.url, token=token)
    api.create_repo(f"{user}/m")
    api.upload_file(path_or_fileobj=SMALL, path_in_repo="small.bin", repo_id=f"{user}/m")
    api.upload_file(path_or_fileobj=LARGE, path_in_repo="dir/large.bin", repo_id=f"{user}/m")
    api.create_repo(f"{user}/priv", private=True)
    api.upload_file(path_or_fileobj=b"secret", path_in_repo="s.txt", repo_id=f"{user}/priv")
    return f"{user}/m", token, api


def test_stock_kernels_loads_a_version_through_the_front(hub, hub_env, tmp_path):
    repo = _publish(hub, tmp_path, "k-accel", trusted=True, offset=7)
    module = kernels.get_kernel(repo, version=1)
    assert module.add([1, 2, 3]) == [8, 9, 10]


def _key(fleet, data: bytes) -> tuple[str, str]:
    bucket, prefix = fleet.blobs[len("s3://") :].split("/", 1)
    sha = hashlib.sha256(data).hexdigest()
    return bucket, f"{prefix}/sha256/{sha[:2]}/{sha}"


def test_headers_are_the_replicas_and_ranges_work(hub, repo):
    name = repo[0]
    direct = hub.fleet.replicas[0].url  # a streaming replica of the same fleet: the reference answer
    for path in ("small.bin", "dir/large.bin"):
        ref = httpx2.head(f"{direct}/{name}/resolve/main/{path}")
        for method in ("HEAD", "GET"):
            via = httpx2.request(method, f"{hub.url}/{name}/resolve/main/{path}")
            assert via.status_code == 200, (method, path, via.text)
            for h in (
                "etag",
                "x-repo-commit",
                "x-linked-etag",
                "x-linked-size",
                "content-length",
                "cache-control",
            ):
                assert via.headers.get(h) == ref.headers.get(h), (method, path, h)
            assert via.headers.get("accept-ranges") == "bytes"
            assert not [h for h in via.headers if h.startswith(("x-accel", "x-blob", "x-amz"))], via.headers
    assert via.content == LARGE
    url = f"{hub.url}/{name}/resolve/main/dir/large.bin"
    part = httpx2.get(url, headers={"range": "bytes=100-199"})
    assert part.status_code == 206 and part.content == LARGE[100:200]
    assert part.headers["content-range"] == f"bytes 100-199/{len(LARGE)}"
    assert httpx2.get(url, headers={"range": "bytes=-10"}).content == LARGE[-10:]
    etag = part.headers["etag"]
    assert httpx2.get(url, headers={"range": "bytes=0-9", "if-range": etag}).content == LARGE[:10]
    stale = httpx2.get(url, headers={"range": "bytes=0-9", "if-range": '"other"'})
    assert stale.status_code == 200 and stale.content == LARGE  # If-Range is the replica's to judge
    r = httpx2.get(url, headers={"range": f"bytes={len(LARGE)}-"})
    assert r.status_code == 416 and r.headers["x-error-code"] == "RangeNotSatisfiable"


def _resolves(hub, path: str, expect: int = 0, before: frozenset[str] = frozenset()) -> set[str]:
    """The ids of the requests for `path` the front's replicas answered (their access logs' last field), less
    `before`. A replica logs a request after its answer has gone out, so a client can read the log before the
    line is there (CI, 2026-12-06: 3 of 4): wait up to 5 s for `expect` ids; more than expected still shows."""
    deadline = time.monotonic() + 5
    while True:
        lines = (line for r in hub.replicas for line in r.log_path.read_text().splitlines())
        ids = {line.rsplit(" ", 1)[1] for line in lines if f" {path} " in line} - before
        if len(ids) >= expect or time.monotonic() > deadline:
            return ids
        time.sleep(0.05)


def test_the_bytes_come_from_the_store_through_nginx_in_one_pass(hub, repo):
    """Each download reaches a replica once (its redirect, no body); a read the store refused would come back to
    a replica (`@blob_check`) and show as a second request."""
    name = repo[0]
    path = f"/{name}/resolve/main/dir/large.bin"
    before = frozenset(_resolves(hub, path))
    for rng, want in ((None, LARGE), ("bytes=5-9", LARGE[5:10]), ("bytes=-3", LARGE[-3:])):
        assert httpx2.get(f"{hub.url}{path}", headers={"range": rng} if rng else {}).content == want
    assert httpx2.head(f"{hub.url}{path}").status_code == 200
    assert len(_resolves(hub, path, expect=4, before=before)) == 4


def test_private_repos_and_the_internal_location_stay_closed(hub, repo):
    name, token, _ = repo
    priv = f"{hub.url}/{name.split('/')[0]}/priv/resolve/main/s.txt"
    r = httpx2.get(priv)
    assert r.status_code == 404 and r.headers["x-error-code"] == "RepoNotFound"
    assert httpx2.get(priv, headers={"authorization": f"Bearer {token}"}).content == b"secret"
    bucket, key = _key(hub.fleet, b"secret")
    assert httpx2.get(f"{hub.url}{ACCEL_PREFIX}/{bucket}/{key}").status_code == 404


def test_a_damaged_object_is_blob_damaged_through_nginx_and_a_reupload_heals_it(hub, repo):
    """The replicas recorded the object's ETag on earlier downloads; the store refuses (412) the changed
    object on nginx's read, a replica reads it again itself and answers BlobDamaged, never other bytes."""
    name, _, api = repo
    url = f"{hub.url}/{name}/resolve/main/small.bin"
    for _ in range(4):  # both replicas have checked the object and recorded its ETag
        assert httpx2.get(url).content == SMALL
    bucket, key = _key(hub.fleet, SMALL)
    s3 = hub.fleet.s3.client()
    s3.put_object(Bucket=bucket, Key=key, Body=SMALL + b"!")  # another object, of another size
    for method in ("HEAD", "GET"):
        r = httpx2.request(method, url)
        assert r.status_code == 410 and r.headers["x-error-code"] == "BlobDamaged", (method, r.status_code)
    s3.delete_object(Bucket=bucket, Key=key)
    r = httpx2.get(url)
    assert r.status_code == 410 and r.headers["x-error-code"] == "BlobDamaged"
    api.upload_file(path_or_fileobj=SMALL, path_in_repo="again.bin", repo_id=name)  # the publisher heals it
    for _ in range(4):
        assert httpx2.get(url).content == SMALL


def test_an_object_store_outage_is_a_clear_503_then_downloads_recover(hub, repo):
    name = repo[0]
    url = f"{hub.url}/{name}/resolve/main/dir/large.bin"
    assert httpx2.get(url).content == LARGE
    hub.fleet.s3.stop()
    try:
        r = httpx2.get(url, timeout=60)
        assert r.status_code == 503 and r.headers["x-error-code"] == "StorageUnavailable", r.status_code
        assert "object store" in r.json()["error"] and r.headers["retry-after"]
    finally:
        hub.fleet.s3.start()
    deadline = time.monotonic() + 60
    while (r := httpx2.get(url, timeout=30)).status_code != 200:
        assert time.monotonic() < deadline, r.status_code
        time.sleep(0.5)
    assert r.content == LARGE
