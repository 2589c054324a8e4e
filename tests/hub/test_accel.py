"""The production setup (docs/SERVING.md): nginx in front of `serve --workers 2 --accel-redirect /_blobs`.
The stock client uploads and downloads through nginx; the hub decides, nginx streams the blob."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

import httpx2
import pytest
from huggingface_hub import HfApi, hf_hub_download

from tests.conftest import HubProcess
from tests.servers import free_ports, require
from tests.servers.nginx import Nginx
from tests.servers.nginx_accel import ACCEL_PREFIX, accel_conf

SMALL, LARGE = os.urandom(20_000), os.urandom(3 << 20)


@pytest.fixture(scope="module")
def front():
    base = Path(tempfile.mkdtemp(prefix="kernel-hub-accel-"))
    base.chmod(0o755)  # nginx's workers run as another user and read the blobs below it
    hub = HubProcess(base / "data", "--workers", "2", "--accel-redirect", ACCEL_PREFIX).start()
    port = free_ports(1)[0]
    nginx = Nginx(accel_conf([hub.url.removeprefix("http://")], hub.data_dir / "blobs", port), port)
    try:  # a skip (no nginx) or a failed set-up must not leave the hub running
        require(nginx.start)
        token = hub.token("acc")
        api = HfApi(endpoint=nginx.url, token=token)  # uploads go through nginx too
        api.create_repo("acc/pub", repo_type="kernel")
        api.upload_file(
            path_or_fileobj=SMALL, path_in_repo="small.bin", repo_id="acc/pub", repo_type="kernel"
        )
        api.upload_file(
            path_or_fileobj=LARGE, path_in_repo="dir/large.bin", repo_id="acc/pub", repo_type="kernel"
        )
        api.create_repo("acc/priv", repo_type="kernel", private=True)
        api.upload_file(
            path_or_fileobj=b"secret", path_in_repo="s.txt", repo_id="acc/priv", repo_type="kernel"
        )
        yield nginx, hub, token
    finally:
        nginx.destroy()
        hub.stop()
        shutil.rmtree(base, ignore_errors=True)


def test_stock_client_downloads_through_nginx(front, tmp_path):
    nginx, _hub, _ = front
    for name, data in (("small.bin", SMALL), ("dir/large.bin", LARGE)):
        path = hf_hub_download("acc/pub", name, repo_type="kernel", endpoint=nginx.url, cache_dir=tmp_path)
        assert Path(path).read_bytes() == data


def test_headers_are_the_hubs_and_ranges_work(front):
    nginx, hub, _ = front
    direct = httpx2.head(f"{hub.url}/kernels/acc/pub/resolve/main/dir/large.bin")
    via = httpx2.head(f"{nginx.url}/kernels/acc/pub/resolve/main/dir/large.bin")
    assert via.status_code == 200 and "x-accel-redirect" not in via.headers
    for h in ("etag", "x-repo-commit"):
        assert via.headers[h] == direct.headers[h], h
    assert int(via.headers["content-length"]) == len(LARGE)
    r = httpx2.get(
        f"{nginx.url}/kernels/acc/pub/resolve/main/dir/large.bin", headers={"range": "bytes=100-199"}
    )
    assert r.status_code == 206 and r.content == LARGE[100:200]


def test_private_repos_and_the_internal_location_stay_closed(front):
    nginx, _hub, token = front
    r = httpx2.get(f"{nginx.url}/kernels/acc/priv/resolve/main/s.txt")
    assert r.status_code == 404 and r.headers["x-error-code"] == "RepoNotFound"
    r = httpx2.get(
        f"{nginx.url}/kernels/acc/priv/resolve/main/s.txt", headers={"authorization": f"Bearer {token}"}
    )
    assert r.status_code == 200 and r.content == b"secret"
    sha = hashlib.sha256(b"secret").hexdigest()
    assert httpx2.get(f"{nginx.url}{ACCEL_PREFIX}/{sha[:2]}/{sha}").status_code == 404


def test_a_damaged_blob_is_refused_through_nginx_too(front):
    nginx, hub, _ = front
    sha = hashlib.sha256(SMALL).hexdigest()
    (hub.data_dir / "blobs" / "sha256" / sha[:2] / sha).unlink()
    r = httpx2.get(f"{nginx.url}/kernels/acc/pub/resolve/main/small.bin")
    assert r.status_code == 410 and r.headers["x-error-code"] == "BlobDamaged"
