"""Pure parts of the hub (validation, manifests, ranges, raw-path routing) and the storage layer's
compare-and-swap under concurrent writers, on a real SQLite file."""

from __future__ import annotations

import threading

import pytest
from huggingface_hub.utils.sha import git_hash

from registry.hub import manifest as mf
from registry.hub import validate
from registry.hub.errors import HubError
from registry.hub.files import BlobResponse
from registry.hub.routing import match, split_raw_path
from registry.hub.storage import open_storage
from registry.hub.storage.blobs import git_blob_sha1
from registry.hub.storage.repos import RepoStore


def test_git_blob_sha1_matches_git():
    # `printf 'hello\n' | git hash-object --stdin`
    assert git_blob_sha1(b"hello\n") == "ce013625030ba8dba906f756967f9e9ca394464a"
    for data in (b"", b"hello\n", bytes(range(256)) * 9):  # what the stock client sends as `oid`
        assert git_blob_sha1(data) == git_hash(data)


@pytest.mark.parametrize(
    "name,ok",
    [
        ("v0", True),
        ("v1", True),
        ("v12", True),
        ("v01", False),
        ("v1_0", False),
        ("v1.5", False),
        ("vnext", True),
        ("main", True),
        ("feature/x", True),
    ],
)
def test_version_branch_rule(name, ok):
    if ok:
        assert validate.ref_name(name) == name
    else:
        with pytest.raises(HubError) as e:
            validate.ref_name(name)
        assert e.value.status == 400 and name in e.value.message


def test_tags_may_look_like_versions():
    assert validate.ref_name("v01", "tag") == "v01"


def test_raw_path_keeps_encoded_slashes_in_one_segment():
    segs = split_raw_path(b"/api/kernels/ns/n/tree/refs%2Fheads%2Fv1/build%2Ftorch-cpu")
    assert segs == ["api", "kernels", "ns", "n", "tree", "refs/heads/v1", "build/torch-cpu"]
    pattern = ("api", "{T}", "{ns}", "{name}", "tree", "{rev}", "{path:path}")
    assert match(pattern, segs)["rev"] == "refs/heads/v1"
    assert match(pattern, segs[:6]) == {
        "T": "kernels",
        "ns": "ns",
        "name": "n",
        "rev": "refs/heads/v1",
        "path": "",
    }


def test_range_check_answers_in_the_hub_format():
    BlobResponse.check_range(None, 10)
    BlobResponse.check_range("bytes=2-4", 10)
    BlobResponse.check_range("bytes=-3", 10)
    BlobResponse.check_range("bytes=8-100", 10)
    with pytest.raises(HubError) as e:
        BlobResponse.check_range("bytes=10-", 10)
    assert e.value.status == 416 and e.value.headers["Content-Range"] == "bytes */10"
    with pytest.raises(HubError) as e:
        BlobResponse.check_range("bytes=x-", 10)
    assert e.value.status == 400


def _entry(oid: str) -> mf.FileEntry:
    return mf.FileEntry(sha256=oid * 64, size=1, oid=oid * 40, lfs=False)


def test_tree_lists_direct_children_or_everything():
    m = {"a.txt": _entry("1"), "d/b.txt": _entry("2"), "d/e/c.txt": _entry("3")}
    assert [e["path"] for e in mf.tree(m, "", False)] == ["a.txt", "d"]
    assert [e["path"] for e in mf.tree(m, "", True)] == ["a.txt", "d", "d/b.txt", "d/e", "d/e/c.txt"]
    assert [e["type"] for e in mf.tree(m, "d", False)] == ["file", "directory"]
    with pytest.raises(HubError):
        mf.tree(m, "nope", False)


def test_apply_ops_checks_deletions_and_clashes():
    m = {"a.txt": _entry("1"), "d/b.txt": _entry("2")}
    assert mf.apply_ops(m, [mf.Op("deletedFolder", "d")]) == {"a.txt": _entry("1")}
    for bad in (
        [mf.Op("deletedFile", "zz")],
        [mf.Op("file", "a.txt/x", _entry("3"))],
        [mf.Op("file", "d", _entry("3"))],
    ):
        with pytest.raises(HubError):
            mf.apply_ops(m, bad)
    assert m == {"a.txt": _entry("1"), "d/b.txt": _entry("2")}  # the input manifest is never modified


def test_concurrent_commits_all_land_through_cas(tmp_path):
    storage = open_storage(tmp_path)
    store, blobs = RepoStore(storage.engine), storage.blobs
    repo = store.create("kernel", "ns", "k", False, "u")
    errors = []

    def writer(i: int) -> None:
        try:
            staged = blobs.stage_bytes(f"content {i}".encode())
            op = mf.Op("file", f"f{i}.txt", mf.FileEntry(staged.sha256, staged.size, staged.sha1, False))
            store.commit(
                repo,
                "main",
                [op],
                title=f"c{i}",
                message="",
                author="u",
                parent_prefix=None,
                before_write=lambda: blobs.promote(staged),
            )
        except Exception as e:  # noqa: BLE001 - collected and asserted below
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    head = store.ref(repo, "branch", "main")
    assert set(store.manifest(repo, head)) == {f"f{i}.txt" for i in range(12)}
    assert len(store.history(repo, head)) == 13  # every commit is in the linear history


def test_page_sections_come_by_injection_and_a_failing_one_becomes_a_note():
    from registry.hub import pages

    seen = []

    def good(**page):
        seen.append(page)
        return "<section>ok</section>"

    def bad(**page):
        raise ValueError("no <matrix> file")

    bad.title = "Compatibility matrix"
    read = {"build/v/metadata.json": b"{}"}.__getitem__
    manifest = {"build/v/metadata.json": None}
    out = pages.section_html((good, bad), "org/k", 3, "a" * 40, manifest, read, dict, None)
    assert out == ["<section>ok</section>", "<p>Compatibility matrix unavailable: no &lt;matrix&gt; file</p>"]
    assert seen == [
        {
            "repo": "org/k",
            "version": 3,
            "commit": "a" * 40,
            "paths": ["build/v/metadata.json"],
            "read": read,
            "compat": {},
        }
    ]
    # Kept per (version commit, compat head): the matrix is the costly part of a page.
    assert pages.section_html((good,), "org/k", 3, "a" * 40, manifest, read, dict, None) == out[:1]
    assert len(seen) == 1
