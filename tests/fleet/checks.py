"""Whole-fleet invariants the fault tests assert after each fault: no lost or partial blob, no wrong ref."""

from __future__ import annotations

import hashlib

from sqlalchemy import create_engine, select

from registry.hub.storage import db


def fleet_invariants(fleet, rehash: set[str] = frozenset()) -> dict[str, int]:
    """Every ref names a stored commit; every blob a commit or LFS grant names is in the bucket, complete
    (size; and the sha256 of those in `rehash`). Returns counts for the test's message."""
    engine = create_engine(fleet.pg.url)
    s3 = fleet.s3.client()
    bucket, prefix = fleet.blobs[len("s3://") :].split("/", 1)
    with engine.connect() as c:
        commits = {(r.repo_id, r.id) for r in c.execute(select(db.commits.c.repo_id, db.commits.c.id))}
        refs = c.execute(select(db.refs)).all()
        wanted = {r.sha256: r.size for r in c.execute(select(db.files.c.sha256, db.files.c.size).distinct())}
        wanted |= {r.oid: r.size for r in c.execute(select(db.lfs_objects.c.oid, db.lfs_objects.c.size))}
    engine.dispose()
    bad_refs = [r for r in refs if (r.repo_id, r.commit_id) not in commits]
    assert not bad_refs, f"refs pointing at no commit: {bad_refs}"
    stored = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{prefix}/sha256/"):
        stored |= {o["Key"].rpartition("/")[2]: o["Size"] for o in page.get("Contents", [])}
    missing = {s for s in wanted if s not in stored}
    assert not missing, f"{len(missing)} referenced blobs are not in the bucket: {sorted(missing)[:3]}"
    short = {s for s, n in wanted.items() if stored[s] != n}
    assert not short, f"{len(short)} blobs have the wrong size: {sorted(short)[:3]}"
    for sha in rehash:
        key = f"{prefix}/sha256/{sha[:2]}/{sha}"
        assert hashlib.sha256(s3.get_object(Bucket=bucket, Key=key)["Body"].read()).hexdigest() == sha
    return {"refs": len(refs), "blobs": len(wanted)}
