"""Downloads from the object store (issue #16's speed work): one request to the store per download, with the same
size checks as before (a wrong-size or missing object is BlobDamaged, never a 200 with other bytes).
"""

from __future__ import annotations

import hashlib
import os
import uuid

import httpx2
import pytest
from huggingface_hub import HfApi

from registry.hub.blobcheck import BlobCheck
from registry.hub.errors import HubError
from registry.hub.storage import db, open_blobs
from registry.hub.storage.leases import Leases


@pytest.fixture
def s3_blobs(fleet, tmp_path, monkeypatch):
    """An S3 blob store on the fleet's SeaweedFS (own bucket) and a log of the S3 operations it sends."""
    for k, v in fleet.s3.env.items():
        monkeypatch.setenv(k, v)
    blobs = open_blobs(f"s3://{fleet.s3.bucket(f'dl{uuid.uuid4().hex[:8]}')}/p", Leases(db.connect(tmp_path)))
    sent: list[str] = []
    blobs.client.meta.events.register("before-call.s3", lambda model, **_: sent.append(model.name))
    return blobs, sent


def _put_raw(blobs, sha: str, data: bytes) -> None:
    """Bytes under a blob's key behind the hub's back (bit rot, a bad restore)."""
    blobs.client.put_object(Bucket=blobs.bucket, Key=blobs.key(sha), Body=data)


def _damaged(call) -> str:
    with pytest.raises(HubError) as e:
        call()
    assert e.value.kind == "BlobDamaged"
    return e.value.message


def test_a_checked_read_is_one_get_whose_answer_carries_the_size(s3_blobs):
    blobs, sent = s3_blobs
    data = os.urandom(300_000)
    staged = blobs.stage_bytes(data)
    blobs.promote(staged)
    check, sha = BlobCheck(blobs), staged.sha256
    sent.clear()
    with check.open(sha, len(data)) as r:
        assert b"".join(r) == data
    with check.open(sha, len(data), 1000, 1999) as r:
        assert r.read() == data[1000:2000]
    assert sent == ["GetObject", "GetObject"]  # no HeadObject before each read


def test_a_wrong_size_short_or_missing_object_is_blob_damaged_and_quarantined(s3_blobs):
    blobs, _ = s3_blobs
    check = BlobCheck(blobs)
    data = os.urandom(5000)
    sha = hashlib.sha256(data).hexdigest()
    assert "is missing" in _damaged(lambda: check.open(sha, len(data)))
    _put_raw(blobs, sha, data + b"!")
    assert "has 5001 bytes instead of 5000" in _damaged(lambda: check.open(sha, len(data)))
    assert not blobs.exists(sha)  # quarantined: the next read says missing, a re-upload heals it
    _put_raw(blobs, sha, data[:100])  # shorter than the range asked for: the store refuses the range
    assert "has 100 bytes instead of 5000" in _damaged(lambda: check.open(sha, len(data), 200, 299))
    assert not blobs.exists(sha)
    blobs.promote(blobs.stage_bytes(data))
    with check.open(sha, len(data), 4000) as r:
        assert r.read() == data[4000:]


def test_replicas_refuse_a_wrong_size_object_on_get_and_head(fleet):
    user = f"d{uuid.uuid4().hex[:8]}"
    api = HfApi(endpoint=fleet.url, token=fleet.token(user))
    api.create_repo(f"{user}/m")
    data = os.urandom(7000)
    api.upload_file(path_or_fileobj=data, path_in_repo="w.bin", repo_id=f"{user}/m")
    bucket, prefix = fleet.blobs[len("s3://") :].split("/", 1)
    sha = hashlib.sha256(data).hexdigest()
    fleet.s3.client().put_object(Bucket=bucket, Key=f"{prefix}/sha256/{sha[:2]}/{sha}", Body=data[:-1])
    url = f"{fleet.url}/{user}/m/resolve/main/w.bin"
    for method in ("HEAD", "GET"):  # the first quarantines the copy; then every replica says it is missing
        r = httpx2.request(method, url)
        assert r.status_code == 410 and r.headers["x-error-code"] == "BlobDamaged", (method, r.status_code)
    api.upload_file(path_or_fileobj=data, path_in_repo="again.bin", repo_id=f"{user}/m")  # heals it
    assert httpx2.get(url).content == data
