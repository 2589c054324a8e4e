"""A download's lookups cost as few database round trips as they can: `db.reading()` makes the read_tx inside
it share one connection and one transaction, and a full commit id found once is not looked up again (commits
never change and repo ids are never reused). On PostgreSQL each checkout is a ping and each transaction a
COMMIT, so this is what a replica's uncached download costs (bench/BENCHMARKS.md "The hub")."""

from __future__ import annotations

from sqlalchemy import event

from registry.hub.storage import db, open_storage
from registry.hub.storage.repos import RepoStore


def _counting(engine):
    seen = {"checkouts": 0, "commit selects": 0}
    event.listen(engine, "checkout", lambda *a: seen.__setitem__("checkouts", seen["checkouts"] + 1))

    def on_execute(conn, cursor, statement, *args):
        if "FROM commits" in statement:
            seen["commit selects"] += 1

    event.listen(engine, "before_cursor_execute", on_execute)
    return seen


def test_reads_inside_reading_share_one_connection_and_transaction(tmp_path):
    engine = open_storage(tmp_path).engine
    store = RepoStore(engine)
    store.create("kernel", "acme", "k", False, "alice")
    fresh = RepoStore(engine)  # no cached rows (SQLite's row cache would answer without a connection)
    seen = _counting(engine)
    with db.reading(engine):
        with db.read_tx(engine) as a, db.read_tx(engine) as b:
            assert a is b
        repo = fresh.get("kernel", "acme", "k")
        fresh.resolve(repo, "main")
    assert seen["checkouts"] == 1
    with db.read_tx(engine) as a, db.read_tx(engine) as b:  # outside: a connection each again
        assert a is not b
    assert seen["checkouts"] == 3


def test_a_full_commit_id_is_looked_up_once(tmp_path):
    engine = open_storage(tmp_path).engine
    store = RepoStore(engine)
    repo = store.create("kernel", "acme", "k", False, "alice")
    commit = store.resolve(repo, "main")
    seen = _counting(engine)
    assert [store.resolve(repo, commit) for _ in range(3)] == [commit] * 3
    assert seen["commit selects"] == 1
    assert (
        store.resolve(repo, commit[:12]) == commit
    )  # a short id is looked up every time (it may grow ambiguous)
    assert seen["commit selects"] == 2
