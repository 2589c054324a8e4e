"""`kernel-hub gc` and `kernel-hub fsck` on a fleet's storage (PostgreSQL + S3) while its replicas serve and
publish: gc runs in a loop against publishers re-uploading the very bytes it is deleting, and loses none;
fsck finds a damaged object, quarantines it, and the replicas then answer BlobDamaged instead of bad bytes.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import threading
import time
import uuid

import httpx2
from huggingface_hub import HfApi

from tests.conftest import REPO_ROOT
from tests.fleet.checks import fleet_invariants

GRACE_S = 2


def _cli(fleet, *args: str) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "registry.cli", *args, *fleet.storage_args]
    return subprocess.run(argv, cwd=REPO_ROOT, env=fleet.env, capture_output=True, text=True, check=False)


def _key(fleet, data: bytes) -> tuple[str, str]:
    bucket, prefix = fleet.blobs[len("s3://") :].split("/", 1)
    sha = hashlib.sha256(data).hexdigest()
    return bucket, f"{prefix}/sha256/{sha[:2]}/{sha}"


def _until_read_back(fleet, bucket: str, key: str, body: bytes, timeout_s: float = 20.0) -> None:
    """Wait until SeaweedFS serves `body` at `key`: an overwrite of a small object can be read back as the old
    bytes for a moment on a loaded machine (seen once in CI), and fsck must meet the damage it is tested on."""
    deadline = time.monotonic() + timeout_s
    while fleet.s3.client().get_object(Bucket=bucket, Key=key)["Body"].read() != body:
        assert time.monotonic() < deadline, (
            f"s3://{bucket}/{key} still serves its old bytes after {timeout_s} s"
        )
        time.sleep(0.1)


def _stored(fleet, data: bytes) -> bool:
    bucket, key = _key(fleet, data)
    return bool(fleet.s3.client().list_objects_v2(Bucket=bucket, Prefix=key).get("Contents"))


def test_gc_in_a_loop_while_replicas_take_the_same_bytes_again_loses_nothing(fleet):
    user = f"g{uuid.uuid4().hex[:8]}"
    api = HfApi(endpoint=fleet.url, token=fleet.token(user))
    payloads = [os.urandom(300 + i) for i in range(6)]
    orphan = os.urandom(299)
    api.create_repo(f"{user}/tmp", repo_type="kernel")
    for i, data in enumerate([*payloads, orphan]):
        api.upload_file(
            path_or_fileobj=data, path_in_repo=f"{i}.bin", repo_id=f"{user}/tmp", repo_type="kernel"
        )
    api.delete_repo(f"{user}/tmp", repo_type="kernel")  # all of them referenced by nothing now
    time.sleep(GRACE_S + 1)  # older than the grace: gc candidates, in the bucket and by their leases

    dry = _cli(fleet, "gc", "--grace", str(GRACE_S), "--dry-run")
    assert dry.returncode == 0 and "would remove" in dry.stdout, dry.stderr
    stop, runs = threading.Event(), []

    def collect():
        while not stop.is_set():
            runs.append(_cli(fleet, "gc", "--grace", str(GRACE_S)))

    api.create_repo(f"{user}/race", repo_type="kernel")
    t = threading.Thread(target=collect)
    t.start()
    try:
        for i, data in enumerate(payloads):  # through the balancer: every replica takes some
            api.upload_file(
                path_or_fileobj=data, path_in_repo=f"{i}.bin", repo_id=f"{user}/race", repo_type="kernel"
            )
            time.sleep(0.3)
    finally:
        stop.set()
        t.join()
    assert runs and all(r.returncode == 0 for r in runs), [r.stderr for r in runs if r.returncode]
    for i, data in enumerate(payloads):
        r = httpx2.get(f"{fleet.url}/kernels/{user}/race/resolve/main/{i}.bin")
        assert r.status_code == 200 and r.content == data
    final = _cli(fleet, "gc", "--grace", str(GRACE_S))
    assert final.returncode == 0, final.stderr
    assert not _stored(fleet, orphan)  # the one nobody took again is gone
    fsck = _cli(fleet, "fsck")
    assert fsck.returncode == 0 and "0 damaged, 0 referenced but missing" in fsck.stdout, fsck.stdout
    fleet_invariants(fleet)


def test_fsck_quarantines_a_damaged_object_and_replicas_refuse_to_serve_it(fleet):
    user = f"k{uuid.uuid4().hex[:8]}"
    api = HfApi(endpoint=fleet.url, token=fleet.token(user))
    api.create_repo(f"{user}/m")
    good, bad = os.urandom(5000), os.urandom(5001)
    for name, data in (("good.bin", good), ("bad.bin", bad)):
        api.upload_file(path_or_fileobj=data, path_in_repo=name, repo_id=f"{user}/m")
    bucket, key = _key(fleet, bad)
    rotten = bad[:-1] + bytes([bad[-1] ^ 0xFF])  # a different last byte, whatever it was
    fleet.s3.client().put_object(Bucket=bucket, Key=key, Body=rotten)  # bit rot behind our back
    _until_read_back(fleet, bucket, key, rotten)

    report = _cli(fleet, "fsck", "--no-quarantine")
    assert report.returncode == 1 and "1 damaged" in report.stdout, report.stdout
    fixed = _cli(fleet, "fsck")
    assert fixed.returncode == 1 and f"damaged {key.rpartition('/')[2]}: its bytes hash to" in fixed.stdout
    assert "quarantine" in fixed.stdout and not _stored(fleet, bad)
    r = httpx2.get(f"{fleet.url}/{user}/m/resolve/main/bad.bin")
    assert r.status_code == 410 and r.headers["x-error-code"] == "BlobDamaged"  # never the wrong bytes
    assert httpx2.get(f"{fleet.url}/{user}/m/resolve/main/good.bin").content == good
    api.upload_file(
        path_or_fileobj=bad, path_in_repo="bad-again.bin", repo_id=f"{user}/m"
    )  # the publisher heals it
    assert httpx2.get(f"{fleet.url}/{user}/m/resolve/main/bad.bin").content == bad
