"""Repos, commits, refs and LFS object grants on top of the SQL schema.

Git's model: a commit is an immutable full manifest, refs are the only mutable rows and move by
compare-and-swap (`UPDATE ... WHERE commit_id = :old`) inside the transaction that adds the commit.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from threading import Lock

from sqlalchemy import Engine, and_, delete, insert, select, update
from sqlalchemy.exc import IntegrityError

from registry.spec.names import is_commit

from ..errors import HubError
from ..manifest import FileEntry, Manifest, Op, apply_ops
from ..validate import HEX_PREFIX
from . import db
from .rowcache import RowCache


@dataclass(frozen=True)
class Repo:
    id: int
    type: str  # "kernel" | "model"
    namespace: str
    name: str
    private: bool
    created_at: float

    @property
    def repo_id(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class Commit:
    id: str
    parent: str | None
    title: str
    message: str
    author: str
    created_at: float


@dataclass(frozen=True)
class Ref:
    kind: str  # "branch" | "tag"
    name: str
    commit_id: str


MAX_KNOWN_COMMITS = 100_000


class RepoStore:
    MAX_COMMIT_ATTEMPTS = 20  # CAS retries for commits without parentCommit (last writer wins)

    def __init__(self, engine: Engine):
        self.engine = engine
        self._manifests: OrderedDict[tuple[int, str], Manifest] = OrderedDict()
        self._lock = Lock()
        self._rows = RowCache(engine)
        self._commits: set[tuple[int, str]] = set()  # (repo id, full commit id) known to exist

    # --- repos ---------------------------------------------------------------------------------
    def get(self, type_: str, namespace: str, name: str) -> Repo | None:
        return self._rows.get(("repo", type_, namespace, name), lambda: self._get(type_, namespace, name))

    def _get(self, type_: str, namespace: str, name: str) -> Repo | None:
        with db.read_tx(self.engine) as c:
            row = c.execute(
                select(db.repos).where(
                    db.repos.c.type == type_, db.repos.c.namespace == namespace, db.repos.c.name == name
                )
            ).first()
        return _repo(row) if row else None

    def list(self) -> list[Repo]:
        with db.read_tx(self.engine) as c:
            rows = c.execute(select(db.repos).order_by(db.repos.c.namespace, db.repos.c.name)).all()
        return [_repo(r) for r in rows]

    def create(self, type_: str, namespace: str, name: str, private: bool, author: str) -> Repo:
        """A new repo whose `main` branch points at an empty initial commit; RepoExists if taken."""
        now = time.time()
        try:
            with db.write_tx(self.engine) as c:
                rid = c.execute(
                    insert(db.repos).values(
                        type=type_, namespace=namespace, name=name, private=private, created_at=now
                    )
                ).inserted_primary_key[0]
                cid = _commit_id(rid, None, {}, "initial commit", "", author, now)
                c.execute(
                    insert(db.commits).values(
                        repo_id=rid,
                        id=cid,
                        parent=None,
                        title="initial commit",
                        message="",
                        author=author,
                        created_at=now,
                    )
                )
                c.execute(insert(db.refs).values(repo_id=rid, kind="branch", name="main", commit_id=cid))
        except IntegrityError:
            raise HubError(
                "RepoExists", f"You already created this {type_} repo: {namespace}/{name}"
            ) from None
        return Repo(rid, type_, namespace, name, private, now)

    def delete(self, repo: Repo) -> None:
        with db.write_tx(self.engine) as c:
            for t in (db.files, db.refs, db.commits, db.lfs_objects):
                c.execute(delete(t).where(t.c.repo_id == repo.id))
            c.execute(delete(db.repos).where(db.repos.c.id == repo.id))

    # --- refs and revisions ----------------------------------------------------------------------
    def refs(self, repo: Repo) -> list[Ref]:
        with db.read_tx(self.engine) as c:
            rows = c.execute(
                select(db.refs).where(db.refs.c.repo_id == repo.id).order_by(db.refs.c.kind, db.refs.c.name)
            ).all()
        return [Ref(r.kind, r.name, r.commit_id) for r in rows]

    def ref(self, repo: Repo, kind: str, name: str) -> str | None:
        return self._rows.get(("ref", repo.id, kind, name), lambda: self._ref(repo, kind, name))

    def _ref(self, repo: Repo, kind: str, name: str) -> str | None:
        with db.read_tx(self.engine) as c:
            return c.execute(
                select(db.refs.c.commit_id).where(
                    db.refs.c.repo_id == repo.id, db.refs.c.kind == kind, db.refs.c.name == name
                )
            ).scalar()

    def resolve(self, repo: Repo, rev: str) -> str:
        """The commit id a revision names: branch, tag, refs/heads/X, refs/tags/X, full or short commit."""
        for kind, name in _ref_candidates(rev):
            cid = self.ref(repo, kind, name)
            if cid:
                return cid
        if (repo.id, rev) in self._commits:  # a commit is never changed, and a repo id never reused
            return rev
        if HEX_PREFIX.match(rev or ""):
            with db.read_tx(self.engine) as c:
                found = (
                    c.execute(
                        select(db.commits.c.id)
                        .where(
                            db.commits.c.repo_id == repo.id, db.commits.c.id.startswith(rev, autoescape=True)
                        )
                        .limit(2)
                    )
                    .scalars()
                    .all()
                )
            if len(found) == 1:
                if found[0] == rev:
                    with self._lock:
                        if len(self._commits) >= MAX_KNOWN_COMMITS:
                            self._commits.clear()
                        self._commits.add((repo.id, rev))
                return found[0]
        raise HubError(
            "RevisionNotFound", f"Invalid rev id: {rev!r} is not a branch, tag or commit of {repo.repo_id}"
        )

    def create_ref(self, repo: Repo, kind: str, name: str, commit_id: str) -> None:
        try:
            with db.write_tx(self.engine) as c:
                c.execute(insert(db.refs).values(repo_id=repo.id, kind=kind, name=name, commit_id=commit_id))
        except IntegrityError:
            raise HubError(
                "RefExists", f"Reference already exists: {kind} {name!r} in {repo.repo_id}"
            ) from None

    def delete_ref(self, repo: Repo, kind: str, name: str, expect: str | None = None) -> None:
        """Delete a ref; with `expect`, only while it still points there (gc: RefMoved otherwise)."""
        where = [db.refs.c.repo_id == repo.id, db.refs.c.kind == kind, db.refs.c.name == name]
        if expect is not None:
            where.append(db.refs.c.commit_id == expect)
        with db.write_tx(self.engine) as c:
            n = c.execute(delete(db.refs).where(*where)).rowcount
        if n != 1 and expect is not None and self.ref(repo, kind, name) is not None:
            raise HubError("RefMoved", f"{kind} {name!r} of {repo.repo_id} moved; it was kept")
        if n != 1:
            raise HubError("RevisionNotFound", f"{kind} {name!r} does not exist in {repo.repo_id}")

    def branches_with_prefix(self, prefix: str) -> list[tuple[Repo, str, str]]:
        """(repo, branch, head commit) of every branch whose name starts with `prefix`."""
        with db.read_tx(self.engine) as c:
            rows = c.execute(
                select(db.repos, db.refs.c.name.label("ref_name"), db.refs.c.commit_id)
                .join(db.refs, db.refs.c.repo_id == db.repos.c.id)
                .where(db.refs.c.kind == "branch", db.refs.c.name.startswith(prefix, autoescape=True))
            ).all()
        return [(_repo(r), r.ref_name, r.commit_id) for r in rows]

    def referenced_blobs(self) -> set[str]:
        """Every sha256 a commit of any repo or an LFS grant names: what gc must keep."""
        with db.read_tx(self.engine) as c:
            files = c.execute(select(db.files.c.sha256).distinct()).scalars().all()
            lfs = c.execute(select(db.lfs_objects.c.oid).distinct()).scalars().all()
        return {*files, *lfs}

    def users_of(self, sha256: str, limit: int = 3) -> list[str]:
        """Up to `limit` `ns/name:path` that a commit stores with this content (what fsck names for a blob)."""
        query = (
            select(db.repos.c.namespace, db.repos.c.name, db.files.c.path)
            .join(db.repos, db.repos.c.id == db.files.c.repo_id)
            .where(db.files.c.sha256 == sha256)
            .distinct()
            .limit(limit)
        )
        with db.read_tx(self.engine) as c:
            return [f"{r.namespace}/{r.name}:{r.path}" for r in c.execute(query).all()]

    def committed_sizes(self) -> dict[str, int]:
        """sha256 -> size, as the commits record them (fsck's reference)."""
        with db.read_tx(self.engine) as c:
            rows = c.execute(select(db.files.c.sha256, db.files.c.size).distinct()).all()
        return {r.sha256: r.size for r in rows}

    def update_ref(self, repo: Repo, kind: str, name: str, old: str | None, new: str) -> None:
        """Compare-and-swap: point `name` at `new` only if it is at `old` now (None: must not exist)."""
        self.get_commit(repo, new)
        moved = False
        with db.write_tx(self.engine) as c:
            if old is None:
                try:
                    with c.begin_nested():
                        c.execute(
                            insert(db.refs).values(repo_id=repo.id, kind=kind, name=name, commit_id=new)
                        )
                except IntegrityError:
                    moved = True
            else:
                n = c.execute(
                    update(db.refs)
                    .where(
                        db.refs.c.repo_id == repo.id,
                        db.refs.c.kind == kind,
                        db.refs.c.name == name,
                        db.refs.c.commit_id == old,
                    )
                    .values(commit_id=new)
                ).rowcount
                moved = n != 1
        if moved:
            current = self.ref(repo, kind, name)
            raise HubError(
                "RefMoved",
                f"{kind} {name!r} is at {current or 'nothing'}, not at {old or 'nothing'}: it moved "
                "meanwhile; re-read it and retry",
                body={"current": current},
            )

    # --- commits ---------------------------------------------------------------------------------
    def get_commit(self, repo: Repo, commit_id: str) -> Commit:
        with db.read_tx(self.engine) as c:
            row = c.execute(
                select(db.commits).where(db.commits.c.repo_id == repo.id, db.commits.c.id == commit_id)
            ).first()
        if not row:
            raise HubError("RevisionNotFound", f"commit {commit_id!r} does not exist in {repo.repo_id}")
        return _commit(row)

    def history(self, repo: Repo, commit_id: str) -> list[Commit]:
        """The commit and its ancestors, newest first."""
        with db.read_tx(self.engine) as c:
            rows = c.execute(select(db.commits).where(db.commits.c.repo_id == repo.id)).all()
        by_id = {r.id: _commit(r) for r in rows}
        out, cur = [], commit_id
        while cur and cur in by_id:
            out.append(by_id[cur])
            cur = by_id[cur].parent
        return out

    def manifest(self, repo: Repo, commit_id: str) -> Manifest:
        key = (repo.id, commit_id)
        with self._lock:
            if key in self._manifests:
                self._manifests.move_to_end(key)
                return self._manifests[key]
        with db.read_tx(self.engine) as c:
            rows = c.execute(
                select(db.files).where(db.files.c.repo_id == repo.id, db.files.c.commit_id == commit_id)
            ).all()
        m = {r.path: FileEntry(r.sha256, r.size, r.oid, bool(r.lfs)) for r in rows}
        with self._lock:
            self._manifests[key] = m
            while len(self._manifests) > 256:
                self._manifests.popitem(last=False)
        return m

    def commit(
        self,
        repo: Repo,
        branch: str,
        ops: list[Op],
        *,
        title: str,
        message: str,
        author: str,
        parent_prefix: str | None,
        before_write: Callable[[], None],
    ) -> str:
        """Apply `ops` on the head of `branch` and move the branch by CAS; returns the new commit id.

        `parent_prefix` (the client's parentCommit) makes a moved branch a 412 instead of a retry.
        `before_write` runs once the ops are known to apply (it promotes the staged blobs).
        A commit that changes nothing returns the current head (retried POSTs stay idempotent).
        """
        promoted = False
        for _ in range(self.MAX_COMMIT_ATTEMPTS):
            head = self.ref(repo, "branch", branch)
            if head is None:
                raise HubError(
                    "RevisionNotFound",
                    f"branch {branch!r} does not exist in {repo.repo_id}; commits go to a branch",
                )
            if parent_prefix and not head.startswith(parent_prefix):
                raise _stale(parent_prefix, head)
            new_manifest = apply_ops(self.manifest(repo, head), ops)
            if new_manifest == self.manifest(repo, head):
                return head
            if not promoted:
                before_write()
                promoted = True
            now = time.time()
            cid = _commit_id(repo.id, head, new_manifest, title, message, author, now)
            with db.write_tx(self.engine) as c:
                moved = (
                    c.execute(
                        update(db.refs)
                        .where(
                            db.refs.c.repo_id == repo.id,
                            db.refs.c.kind == "branch",
                            db.refs.c.name == branch,
                            db.refs.c.commit_id == head,
                        )
                        .values(commit_id=cid)
                    ).rowcount
                    != 1
                )
                if not moved:
                    c.execute(
                        insert(db.commits).values(
                            repo_id=repo.id,
                            id=cid,
                            parent=head,
                            title=title,
                            message=message,
                            author=author,
                            created_at=now,
                        )
                    )
                    if new_manifest:
                        c.execute(
                            insert(db.files),
                            [
                                {
                                    "repo_id": repo.id,
                                    "commit_id": cid,
                                    "path": p,
                                    "sha256": e.sha256,
                                    "size": e.size,
                                    "oid": e.oid,
                                    "lfs": e.lfs,
                                }
                                for p, e in new_manifest.items()
                            ],
                        )
                    lfs = {e.sha256: e.size for e in new_manifest.values() if e.lfs}
                    self._grant_lfs(c, repo, lfs)
            if not moved:
                return cid
            if parent_prefix:
                raise _stale(parent_prefix, self.ref(repo, "branch", branch) or "nothing")
        raise HubError(
            "RefMoved", f"branch {branch!r} kept moving during {self.MAX_COMMIT_ATTEMPTS} attempts; retry"
        )

    # --- LFS grants ------------------------------------------------------------------------------
    def lfs_size(self, repo: Repo, oid: str) -> int | None:
        """The size of an LFS object this repo may reference, or None."""
        with db.read_tx(self.engine) as c:
            return c.execute(
                select(db.lfs_objects.c.size).where(
                    db.lfs_objects.c.repo_id == repo.id, db.lfs_objects.c.oid == oid
                )
            ).scalar()

    def grant_lfs(self, repo: Repo, oid: str, size: int) -> None:
        with db.write_tx(self.engine) as c:
            self._grant_lfs(c, repo, {oid: size})

    def _grant_lfs(self, c, repo: Repo, objects: dict[str, int]) -> None:
        if not objects:
            return
        have = set(
            c.execute(
                select(db.lfs_objects.c.oid).where(
                    and_(db.lfs_objects.c.repo_id == repo.id, db.lfs_objects.c.oid.in_(list(objects)))
                )
            ).scalars()
        )
        new = [{"repo_id": repo.id, "oid": o, "size": s} for o, s in objects.items() if o not in have]
        if new:
            c.execute(insert(db.lfs_objects), new)


def _ref_candidates(rev: str) -> list[tuple[str, str]]:
    if rev.startswith("refs/heads/"):
        return [("branch", rev[len("refs/heads/") :])]
    if rev.startswith("refs/tags/"):
        return [("tag", rev[len("refs/tags/") :])]
    if is_commit(rev):
        return []
    return [("branch", rev), ("tag", rev)]


def _stale(prefix: str, head: str) -> HubError:
    return HubError(
        "StaleParentCommit",
        f"A commit has happened since your parent commit {prefix}: the branch head is now {head}. "
        "Fetch the new head and retry.",
        body={"current": head},
    )


def _commit_id(
    repo_id: int,
    parent: str | None,
    manifest: Manifest,
    title: str,
    message: str,
    author: str,
    created_at: float,
) -> str:
    doc = {
        "repo": repo_id,
        "parent": parent,
        "files": sorted((p, e.sha256, e.lfs) for p, e in manifest.items()),
        "title": title,
        "message": message,
        "author": author,
        "time": created_at,
    }
    return hashlib.sha1(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def _repo(r) -> Repo:
    return Repo(r.id, r.type, r.namespace, r.name, bool(r.private), r.created_at)


def _commit(r) -> Commit:
    return Commit(r.id, r.parent, r.title, r.message, r.author, r.created_at)
