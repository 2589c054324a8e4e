"""`kernel-hub gc` and `kernel-hub fsck` against a serving hub (issue #11, Deliver 3)."""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import sqlite3
import threading
import time

import httpx2
import pytest
from huggingface_hub import HfApi

from registry.cli import main
from registry.spec import names
from tests.conftest import HubProcess


def run_cli(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        rc = main(list(args))
    return rc, out.getvalue()


def blob(hub: HubProcess, data: bytes):
    sha = hashlib.sha256(data).hexdigest()
    return hub.data_dir / "blobs" / "sha256" / sha[:2] / sha


def age(hub: HubProcess, data: bytes, seconds: float) -> None:
    """Make a stored blob look written `seconds` ago: its file and its writer's lease (storage/leases.py)."""
    t = time.time() - seconds
    os.utime(blob(hub, data), (t, t))
    with contextlib.closing(sqlite3.connect(hub.data_dir / "hub.sqlite3", timeout=30)) as db, db:
        db.execute(
            "UPDATE blob_leases SET taken_at = ? WHERE sha256 = ?", (t, hashlib.sha256(data).hexdigest())
        )


@pytest.fixture
def gc_hub(tmp_path):
    proc = HubProcess(tmp_path / "data").start()
    yield proc, HfApi(endpoint=proc.url, token=proc.token("gcu"))
    proc.stop()


def test_gc_removes_only_unreferenced_blobs_past_the_grace(gc_hub):
    hub, api = gc_hub
    kept, orphan, fresh = os.urandom(500), os.urandom(600), os.urandom(700)
    api.create_repo("gcu/keep", repo_type="kernel")
    api.upload_file(path_or_fileobj=kept, path_in_repo="k.bin", repo_id="gcu/keep", repo_type="kernel")
    api.create_repo("gcu/gone", repo_type="kernel")
    for name, data in (("o.bin", orphan), ("f.bin", fresh)):
        api.upload_file(path_or_fileobj=data, path_in_repo=name, repo_id="gcu/gone", repo_type="kernel")
    api.delete_repo("gcu/gone", repo_type="kernel")  # its blobs are referenced by nothing now
    for data in (kept, orphan):
        age(hub, data, 7200)

    rc, out = run_cli("gc", "--data", str(hub.data_dir), "--dry-run")
    assert rc == 0 and "would remove" in out and "1 unreferenced blobs (600 bytes)" in out
    assert blob(hub, orphan).exists()

    rc, out = run_cli("gc", "--data", str(hub.data_dir))
    assert rc == 0 and "1 unreferenced blobs (600 bytes); kept 1 younger" in out, out
    assert not blob(hub, orphan).exists() and blob(hub, fresh).exists() and blob(hub, kept).exists()
    r = httpx2.get(f"{hub.url}/kernels/gcu/keep/resolve/main/k.bin")
    assert r.status_code == 200 and r.content == kept


def test_gc_removes_stale_publish_branches_only(gc_hub):
    """A publish branch's age is its name's start time (spec.names), not its head's: a live publish's branch
    points at the old vN's head, which may be months old."""
    hub, api = gc_hub
    api.create_repo("gcu/pub", repo_type="kernel")
    live = names.publish_branch(time.time() - 60, "live01")
    dead = names.publish_branch(time.time() - 2 * names.STALE_PUBLISH_S, "dead01")
    for branch in (live, dead, "publish/0123abcd", "feature"):  # publish/<hex>: an older publisher's, stale
        api.create_branch("gcu/pub", branch=branch, repo_type="kernel")
    rc, out = run_cli("gc", "--data", str(hub.data_dir))
    assert rc == 0 and "2 publish branches" in out and "gcu/pub@publish/0123abcd" in out and dead in out, out
    branches = {b.name for b in api.list_repo_refs("gcu/pub", repo_type="kernel").branches}
    assert branches == {"main", "feature", live}
    rc, out = run_cli("gc", "--data", str(hub.data_dir), "--publish-max-age", "0")
    assert rc == 0 and f"gcu/pub@{live}" in out
    branches = {b.name for b in api.list_repo_refs("gcu/pub", repo_type="kernel").branches}
    assert branches == {"main", "feature"}


def test_gc_while_publishers_reupload_the_same_bytes_loses_nothing(gc_hub):
    """gc in a loop with a 30 s grace (a promote-to-commit takes milliseconds), racing commits of the very
    bytes it is deleting (stored long ago, referenced by nothing): every commit's blob stays."""
    hub, api = gc_hub
    api.create_repo("gcu/race", repo_type="kernel")
    payloads = [os.urandom(300) for _ in range(8)]
    api.create_repo("gcu/tmp", repo_type="kernel")
    for i, data in enumerate(payloads):  # stored, then unreferenced and old: gc candidates
        api.upload_file(path_or_fileobj=data, path_in_repo=f"{i}.bin", repo_id="gcu/tmp", repo_type="kernel")
    api.delete_repo("gcu/tmp", repo_type="kernel")
    for data in payloads:
        age(hub, data, 7200)
    stop = threading.Event()

    def collect():
        while not stop.is_set():
            run_cli("gc", "--data", str(hub.data_dir), "--grace", "30")

    t = threading.Thread(target=collect)
    t.start()
    try:
        for i, data in enumerate(payloads):
            api.upload_file(
                path_or_fileobj=data, path_in_repo=f"{i}.bin", repo_id="gcu/race", repo_type="kernel"
            )
    finally:
        stop.set()
        t.join()
    for i, data in enumerate(payloads):
        r = httpx2.get(f"{hub.url}/kernels/gcu/race/resolve/main/{i}.bin")
        assert r.status_code == 200 and r.content == data
    rc, out = run_cli("fsck", "--data", str(hub.data_dir))
    assert rc == 0, out


def test_fsck_quarantines_damaged_blobs_and_reports_missing_ones(gc_hub):
    hub, api = gc_hub
    good, bad, lost = os.urandom(400), os.urandom(401), os.urandom(402)
    api.create_repo("gcu/fsck", repo_type="kernel")
    for name, data in (("good", good), ("bad", bad), ("lost", lost)):
        api.upload_file(path_or_fileobj=data, path_in_repo=name, repo_id="gcu/fsck", repo_type="kernel")
    rc, out = run_cli("fsck", "--data", str(hub.data_dir))
    assert rc == 0 and "0 damaged, 0 referenced but missing" in out
    p = blob(hub, bad)
    stored = p.read_bytes()
    p.write_bytes(bytes([stored[0] ^ 0xFF]) + stored[1:])  # a different first byte, whatever it was
    blob(hub, lost).unlink()
    rc, out = run_cli("fsck", "--data", str(hub.data_dir), "--no-quarantine")
    assert rc == 1 and "1 damaged, 1 referenced but missing" in out and p.exists()
    rc, out = run_cli("fsck", "--data", str(hub.data_dir))
    assert (
        rc == 1 and f"damaged {p.name}: its bytes hash to" in out and f"missing {blob(hub, lost).name}" in out
    )
    assert not p.exists() and list((hub.data_dir / "blobs" / "quarantine").glob(p.name + ".*"))
    r = httpx2.get(f"{hub.url}/kernels/gcu/fsck/resolve/main/good")
    assert r.status_code == 200 and r.content == good


def test_gc_and_fsck_refuse_a_folder_that_is_no_hub(tmp_path):
    rc, _ = run_cli("gc", "--data", str(tmp_path))
    assert rc == 2


def test_gc_dry_run_counts_the_temp_files_it_would_remove(gc_hub):
    """Issue 43: `gc --dry-run` said 0 temp files whatever was left; it counts them now, and keeps them."""
    hub, _ = gc_hub
    dead = hub.data_dir / "blobs" / "tmp" / "99999-crashed"
    dead.mkdir(parents=True)
    (dead / ".lock").touch()
    (dead / "partial-upload").write_bytes(b"x" * 100)
    rc, out = run_cli("gc", "--dry-run", "--data", str(hub.data_dir))
    assert rc == 0 and out.startswith("would remove: 1 temp files,"), out
    assert (dead / "partial-upload").exists()
    rc, out = run_cli("gc", "--data", str(hub.data_dir))
    assert rc == 0 and out.startswith("removed: 1 temp files,") and not dead.exists(), out
