"""The test S3 server (SeaweedFS `weed mini`) is the same on every machine: it has room for every bucket the suite
makes, whatever the free disk. CI once failed when mini sized itself from a small disk (PutObject InternalError)."""

from __future__ import annotations

import json
import urllib.request
import uuid


def test_the_s3_server_has_fixed_room_for_buckets_on_any_disk(fleet):
    status = json.load(
        urllib.request.urlopen(f"http://127.0.0.1:{fleet.s3.ports['master']}/dir/status", timeout=10)
    )
    assert status["Topology"]["Max"] >= 256, (
        "weed mini sized its volume count from free disk; pass -volume.max"
    )
    client = fleet.s3.client()
    for _ in range(16):  # each new bucket takes a volume of its own
        bucket = fleet.s3.bucket(f"room-{uuid.uuid4().hex[:12]}")
        client.put_object(Bucket=bucket, Key="k", Body=b"bytes that must be stored")
        assert client.get_object(Bucket=bucket, Key="k")["Body"].read() == b"bytes that must be stored"
