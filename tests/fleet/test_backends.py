"""The storage backends on real servers: the blob store contract on files and on S3 (SeaweedFS), gc's lease
protocol on SQLite and PostgreSQL, the Alembic history on both, `kernel-hub db upgrade`, the presigned redirect.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import httpx2
import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from botocore.exceptions import ClientError
from huggingface_hub import HfApi, hf_hub_download
from sqlalchemy import insert, inspect, text

from registry.commands.serve import ServeProcess
from registry.hub.storage import db, open_blobs, open_storage, schema
from registry.hub.storage.blobs import BlobMissing, StagedBlob
from registry.hub.storage.leases import Leases
from tests.conftest import REPO_ROOT, point_clients_at

GRACE_S = 1.0


@pytest.fixture(params=["sqlite+files", "postgresql+s3"])
def storage(request, tmp_path, monkeypatch):
    """A fresh database and blob store of one kind (the servers are the fleet's; the embedded kind needs none)."""
    if request.param == "sqlite+files":
        return open_storage(tmp_path)
    fleet = request.getfixturevalue("fleet")
    name = f"t{uuid.uuid4().hex[:10]}"
    for k, v in fleet.s3.env.items():
        monkeypatch.setenv(k, v)  # read by the S3 store, as a replica would
    return open_storage(db=fleet.pg.create_database(name), blobs=f"s3://{fleet.s3.bucket(name)}/p")


def _put(blobs, data: bytes) -> str:
    staged = blobs.stage_bytes(data)
    blobs.promote(staged)
    return staged.sha256


def test_blob_store_contract(storage):
    blobs = storage.blobs
    data = os.urandom(3 * 1024 * 1024 + 7)
    sha = hashlib.sha256(data).hexdigest()
    assert not blobs.exists(sha) and blobs.stat(sha) is None
    with pytest.raises(BlobMissing):
        blobs.open(sha)
    writer = blobs.new_writer()
    for i in range(0, len(data), 65536):
        writer.write(data[i : i + 65536])
    staged = writer.finish()
    assert (staged.sha256, staged.size) == (sha, len(data))
    assert not blobs.exists(sha)  # staged is invisible
    blobs.promote(staged)
    blobs.promote(blobs.stage_bytes(data))  # the same content again: kept, not rewritten
    st = blobs.stat(sha)
    assert st.size == len(data) and abs(st.mtime - time.time()) < 120
    with blobs.open(sha) as r:
        assert r.size == len(data) and b"".join(r) == data
    with blobs.open(sha, 1000, 1999) as r:
        assert r.size == len(data) and r.read() == data[1000:2000]
    with pytest.raises(BlobMissing):
        blobs.open(sha, len(data) + 10)
    assert [b.sha256 for b in blobs.iter_blobs()] == [sha]
    discarded = blobs.stage_bytes(b"never promoted")
    blobs.discard(discarded)
    assert not blobs.exists(discarded.sha256)
    where = blobs.quarantine(sha, "test: flipped byte")
    assert sha in where and not blobs.exists(sha)
    blobs.promote(blobs.stage_bytes(data))  # a publisher's re-upload heals it
    assert blobs.exists(sha)
    assert blobs.clean_staging(3600) == 0
    assert blobs.describe()


def test_s3_store_refuses_bytes_that_do_not_match_their_sha256(fleet, tmp_path):
    """The object store checks the sha256 we send with each PUT: a wrong address is never stored."""
    for k, v in fleet.s3.env.items():
        os.environ[k] = v
    blobs = open_blobs(f"s3://{fleet.s3.bucket('checksums')}/p", Leases(db.connect(tmp_path)))
    good = blobs.stage_bytes(b"the real bytes")
    lie = StagedBlob(hashlib.sha256(b"other bytes").hexdigest(), None, good.size, file=good.file)
    with pytest.raises(ClientError, match="BadDigest|Checksum|checksum"):
        blobs.promote(lie)
    assert not blobs.exists(lie.sha256)


def test_gc_sweep_deletes_only_unreferenced_unleased_old_blobs(storage):
    blobs, leases = storage.blobs, Leases(storage.engine)
    garbage, kept_by_ref, leased = (_put(blobs, f"{w} {uuid.uuid4()}".encode()) for w in ("g", "r", "l"))
    with db.write_tx(storage.engine) as c:
        c.execute(insert(db.files).values(repo_id=1, commit_id="c" * 40, path="x", sha256=kept_by_ref,
                                          size=1, oid="o", lfs=False))  # fmt: skip
    time.sleep(GRACE_S + 0.2)
    leases.take([leased])  # a writer relies on it now
    assert leases.sweep(blobs, garbage, GRACE_S)
    assert not leases.sweep(blobs, kept_by_ref, GRACE_S)
    assert not leases.sweep(blobs, leased, GRACE_S)
    assert not blobs.exists(garbage) and blobs.exists(kept_by_ref) and blobs.exists(leased)
    assert leases.expire(0) >= 1


def test_a_writer_racing_gc_for_the_same_blob_never_loses_it(storage):
    """gc holds the blob's lease row while it deletes; the writer's promote waits, then finds it absent and
    uploads it again (or gc sees the writer's fresh lease and keeps it)."""
    blobs, leases = storage.blobs, Leases(storage.engine)
    data = f"shared {uuid.uuid4()}".encode()
    sha = _put(blobs, data)
    time.sleep(GRACE_S + 0.2)
    in_delete, done = threading.Event(), {}

    class SlowDelete:
        """The store, but its delete takes a second (gc mid-delete)."""

        def __getattr__(self, name):
            return getattr(blobs, name)

        def delete(self, s):
            in_delete.set()
            time.sleep(1.0)
            blobs.delete(s)

    gc = threading.Thread(target=lambda: done.setdefault("swept", leases.sweep(SlowDelete(), sha, GRACE_S)))
    gc.start()
    assert in_delete.wait(10)
    blobs.promote(blobs.stage_bytes(data))  # a publisher re-uses the content right now
    gc.join(10)
    assert done["swept"] is True
    with blobs.open(sha) as r:
        assert r.read() == data


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_one_alembic_history_builds_the_models_on_both_databases(kind, request, tmp_path):
    if kind == "sqlite":
        url = str(tmp_path)
    else:
        url = request.getfixturevalue("fleet").pg.create_database(f"m{uuid.uuid4().hex[:10]}")
    engine = db.connect(url, prepare=False)
    assert schema.upgrade(engine) == (None, schema.head())
    with engine.connect() as c:
        assert compare_metadata(MigrationContext.configure(c), db.metadata) == []
    with engine.connect() as c, c.begin():  # and back down to nothing, and up again: the history is whole
        cfg = schema._config(c)
        command.downgrade(cfg, "base")
        command.upgrade(cfg, "head")
    assert schema.upgrade(engine) == (schema.head(), schema.head())


def test_a_round1_sqlite_database_is_stamped_and_upgraded_keeping_its_rows(tmp_path):
    engine = db.connect(tmp_path, prepare=False)
    with engine.connect() as c, c.begin():
        command.upgrade(schema._config(c), schema.BASELINE)
        c.execute(text("DROP TABLE alembic_version"))  # what create_all left: tables, no revision
        c.execute(text("INSERT INTO orgs VALUES ('acme', 1, 0)"))
    engine.dispose()
    engine = db.connect(tmp_path)  # what serve does
    with engine.connect() as c:
        assert schema.current(c) == schema.head()
        assert inspect(c).has_table("blob_leases")
        assert c.execute(text("SELECT name FROM orgs")).scalar() == "acme"


def _cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "registry.cli", *args], cwd=REPO_ROOT, env=env or os.environ.copy(),
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip


def test_db_upgrade_command_and_replicas_refuse_an_older_postgres_schema(fleet, tmp_path):
    url = fleet.pg.create_database(f"u{uuid.uuid4().hex[:10]}")
    engine = db.connect(url, prepare=False)
    with engine.connect() as c, c.begin():
        command.upgrade(schema._config(c), schema.BASELINE)
    engine.dispose()
    refused = _cli("serve", "--port", "1", "--db", url, "--blobs", str(tmp_path / "b"))
    assert refused.returncode == 1 and "kernel-hub db upgrade" in refused.stderr, refused.stderr
    up = _cli("db", "upgrade", "--db", url)
    assert up.returncode == 0 and up.stdout.strip() == f"schema {schema.head()} (was {schema.BASELINE})"
    again = _cli("db", "upgrade", "--db", url)
    assert again.stdout.strip() == f"schema {schema.head()} (already newest)"
    token = _cli("token", "create", "--user", "admin", "--db", url)  # admin commands take --db
    assert token.returncode == 0 and token.stdout.startswith("hf_")


def test_admin_commands_refuse_an_empty_database_unless_init(fleet):
    """As with a mistyped --data: a --db without the hub's schema is not silently made a new hub."""
    url = fleet.pg.create_database(f"e{uuid.uuid4().hex[:10]}")
    listed = _cli("token", "list", "--db", url)
    assert listed.returncode == 2
    assert (
        listed.stderr.strip()
        == f"kernel-hub token: --db {url} holds no hub (an empty database); check the path"
    )
    refused = _cli("gc", "--db", url, "--blobs", "s3://kernel-hub/none")
    assert refused.returncode == 2 and "holds no hub (an empty database)" in refused.stderr
    made = _cli("token", "create", "--user", "admin", "--db", url, "--init")
    assert made.returncode == 0 and made.stdout.startswith("hf_"), made.stderr
    assert _cli("token", "list", "--db", url).stdout.split("\n")[1].split()[1] == "admin"


def test_replicas_say_where_their_storage_is(fleet):
    for i in range(fleet.n):
        log = (fleet.dir / f"replica-{i}.log").read_text()
        line = f"  storage: database {fleet.pg.url}, blobs {fleet.blobs} at {fleet.s3.endpoint} ("
        assert line in log, log[:2000]


def test_presigned_redirect_is_followed_by_stock_huggingface_hub(fleet, monkeypatch, tmp_path):
    """`--blob-redirect`: GET answers 302 to the object store; HEAD still answers itself. Stock
    huggingface_hub follows the redirect for the bytes (and drops its token on the other host)."""
    replica = ServeProcess(
        None,
        *fleet.storage_args,
        "--blob-redirect",
        log_path=tmp_path / "r.log",
        cwd=REPO_ROOT,
        env=fleet.env,
    ).start(timeout_s=90)
    try:
        token = fleet.token("redir")
        api = HfApi(endpoint=replica.url, token=token)
        api.create_repo("redir/m")
        data = os.urandom(2 * 1024 * 1024)
        api.upload_file(path_or_fileobj=data, path_in_repo="w.bin", repo_id="redir/m")
        auth = {"authorization": f"Bearer {token}"}
        r = httpx2.get(f"{replica.url}/redir/m/resolve/main/w.bin", headers=auth)
        assert r.status_code == 302 and r.headers["location"].startswith(fleet.s3.endpoint)
        assert r.headers["x-repo-commit"] and r.headers["etag"]
        head = httpx2.head(f"{replica.url}/redir/m/resolve/main/w.bin", headers=auth)
        assert head.status_code == 200 and int(head.headers["content-length"]) == len(data)
        ranged = httpx2.get(r.headers["location"], headers={"range": "bytes=10-19"})
        assert ranged.status_code == 206 and ranged.content == data[10:20]
        point_clients_at(monkeypatch, replica.url, tmp_path)
        assert Path(hf_hub_download("redir/m", "w.bin", token=token)).read_bytes() == data
    finally:
        replica.stop()


def _peak_rss_mib(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:"))) / 1024


def test_a_replica_streams_big_blobs_both_ways_without_holding_them(fleet, tmp_path):
    """64 MiB up (LFS PUT, spooled to an unlinked temp file, multipart to S3) and down (ranged GET streamed in
    1 MiB chunks): the replica's peak memory grows by far less than the file."""
    replica = ServeProcess(
        None, *fleet.storage_args, log_path=tmp_path / "r.log", cwd=REPO_ROOT, env=fleet.env
    )
    replica.start(timeout_s=90)
    try:
        token = fleet.token("stream")
        auth = {"authorization": f"Bearer {token}"}
        HfApi(endpoint=replica.url, token=token).create_repo("stream/m")
        data = os.urandom(64 * 1024 * 1024)
        sha = hashlib.sha256(data).hexdigest()
        base = _peak_rss_mib(replica.proc.pid)
        batch = httpx2.post(
            f"{replica.url}/stream/m.git/info/lfs/objects/batch",
            json={"operation": "upload", "objects": [{"oid": sha, "size": len(data)}]},
            headers=auth,
        ).json()
        href = batch["objects"][0]["actions"]["upload"]["href"]
        chunks = (data[i : i + 1024 * 1024] for i in range(0, len(data), 1024 * 1024))
        assert httpx2.put(href, content=chunks, timeout=120).status_code == 200
        line = {
            "key": "lfsFile",
            "value": {"path": "big.bin", "algo": "sha256", "oid": sha, "size": len(data)},
        }
        body = json.dumps({"key": "header", "value": {"summary": "big"}}) + "\n" + json.dumps(line)
        assert httpx2.post(
            f"{replica.url}/api/models/stream/m/commit/main", content=body, headers=auth
        ).is_success
        got = hashlib.sha256()
        with httpx2.stream(
            "GET", f"{replica.url}/stream/m/resolve/main/big.bin", headers=auth, timeout=120
        ) as r:
            for chunk in r.iter_bytes():
                got.update(chunk)
        assert got.hexdigest() == sha
        grew = _peak_rss_mib(replica.proc.pid) - base
        assert grew < 24, f"the replica's peak memory grew by {grew:.0f} MiB moving a 64 MiB file"
    finally:
        replica.stop()
