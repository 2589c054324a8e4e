"""The unmodified huggingface_hub client against a real `kernel-hub serve`: upload, refs, listing,
download, deletion and the stale-parent refusal (docs/HUB_PROTOCOL.md §2-4)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import httpx2
import pytest
from huggingface_hub import CommitOperationAdd, HfApi, hf_hub_download, snapshot_download
from huggingface_hub.errors import HfHubHTTPError, RevisionNotFoundError

from tests.conftest import point_clients_at
from tests.hub.conftest import BIG_SIZE, make_tree, repo_state


def _sha256(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@pytest.fixture(scope="module", params=["xet-default", "xet-disabled"])
def published(request, hub, tmp_path_factory):
    """A kernel repo with 300 small files, a 20 MB file and a README, uploaded by the stock client.

    Once with the default client (hf_xet installed) and once with HF_HUB_DISABLE_XET=1: both must
    work because preupload answers `regular` (the server's default, see commits.upload_mode).
    """
    work = tmp_path_factory.mktemp(request.param)
    with pytest.MonkeyPatch.context() as mp:
        point_clients_at(mp, hub.url, work)
        if request.param == "xet-disabled":
            from huggingface_hub import constants

            mp.setenv("HF_HUB_DISABLE_XET", "1")
            mp.setattr(constants, "HF_HUB_DISABLE_XET", True)
        user = f"up-{request.param}"
        api = HfApi(token=hub.token(user))
        repo = f"{user}/tree"
        api.create_repo(repo, repo_type="kernel", exist_ok=True)
        api.create_repo(repo, repo_type="kernel", exist_ok=True)  # 409 body carries the url
        sums = make_tree(work / "tree")
        info = api.upload_folder(
            folder_path=work / "tree", repo_id=repo, repo_type="kernel", commit_message="msg"
        )
        yield {"api": api, "repo": repo, "sums": sums, "commit": info.oid, "work": work, "user": user}


def test_upload_folder_stores_every_file(published):
    api, repo = published["api"], published["repo"]
    files = set(api.list_repo_files(repo, repo_type="kernel"))
    assert files == set(published["sums"])
    assert len(files) == 302


def test_branches_tags_and_refs(published):
    api, repo, commit = published["api"], published["repo"], published["commit"]
    api.create_branch(repo, branch="v1", repo_type="kernel", exist_ok=True)
    api.create_branch(repo, branch="v2", revision=commit, repo_type="kernel", exist_ok=True)
    api.create_branch(repo, branch="v2", repo_type="kernel", exist_ok=True)
    api.create_tag(repo, tag="release-1", revision="v1", repo_type="kernel", exist_ok=True)
    refs = api.list_repo_refs(repo, repo_type="kernel")
    branches = {b.name: b.target_commit for b in refs.branches}
    assert branches == {"main": commit, "v1": commit, "v2": commit}
    assert {t.name: t.target_commit for t in refs.tags} == {"release-1": commit}
    with pytest.raises(HfHubHTTPError) as e:
        api.create_branch(repo, branch="v1", repo_type="kernel")
    assert e.value.response.status_code == 409


def test_delete_branch_and_tag(published):
    api, repo, commit = published["api"], published["repo"], published["commit"]
    api.create_branch(repo, branch="short-lived", repo_type="kernel")
    api.create_tag(repo, tag="short-tag", revision=commit, repo_type="kernel")
    api.delete_branch(repo, branch="short-lived", repo_type="kernel")
    api.delete_tag(repo, tag="short-tag", repo_type="kernel")
    refs = api.list_repo_refs(repo, repo_type="kernel")
    assert "short-lived" not in {b.name for b in refs.branches} and "short-tag" not in {
        t.name for t in refs.tags
    }
    with pytest.raises(RevisionNotFoundError):
        api.delete_tag(repo, tag="short-tag", repo_type="kernel")
    assert (
        api.repo_info(repo, repo_type="kernel", revision=commit).sha == commit
    )  # the commit stays reachable


def test_tree_listing_recursive_and_not(published, hub):
    api, repo = published["api"], published["repo"]
    top = {(e.path, type(e).__name__) for e in api.list_repo_tree(repo, repo_type="kernel")}
    assert top == {("README.md", "RepoFile"), ("big.bin", "RepoFile"), ("data", "RepoFolder")}
    sub = [e.path for e in api.list_repo_tree(repo, path_in_repo="data/d1", repo_type="kernel")]
    assert sub == ["data/d1/sub0", "data/d1/sub1", "data/d1/sub2"]
    everything = list(api.list_repo_tree(repo, repo_type="kernel", recursive=True))
    files = {e.path: e for e in everything if type(e).__name__ == "RepoFile"}
    assert set(files) == set(published["sums"])
    assert files["big.bin"].size == BIG_SIZE
    # more entries than one page (the fixture serves 100 per page): the next page is an absolute Link
    r = httpx2.get(f"{hub.url}/api/kernels/{repo}/tree/main?recursive=true")
    assert len(r.json()) == 100 and r.links["next"]["url"].startswith(hub.url + "/api/kernels/")


def test_commits_list_newest_first(published):
    api, repo = published["api"], published["repo"]
    commits = api.list_repo_commits(repo, repo_type="kernel")
    assert commits[0].commit_id == published["commit"]
    assert commits[-1].title == "initial commit"
    assert all(c.title.startswith("msg") for c in commits[:-1])


def test_repo_info_at_branch_commit_and_short_commit(published):
    api, repo, commit = published["api"], published["repo"], published["commit"]
    api.create_branch(repo, branch="v1", repo_type="kernel", exist_ok=True)
    api.create_tag(repo, tag="info-tag", repo_type="kernel", exist_ok=True)
    for rev in ("main", "v1", "refs/heads/v1", "info-tag", "refs/tags/info-tag", commit, commit[:10]):
        assert api.repo_info(repo, repo_type="kernel", revision=rev).sha == commit
    first = api.list_repo_commits(repo, repo_type="kernel")[-1].commit_id
    assert api.repo_info(repo, repo_type="kernel", revision=first).sha == first


def test_file_exists(published):
    api, repo = published["api"], published["repo"]
    assert api.file_exists(repo, "data/d0/sub0/f0.txt", repo_type="kernel")
    assert not api.file_exists(repo, "data/d0/nope.txt", repo_type="kernel")


def test_download_bytes_identical(published):
    repo, sums = published["repo"], published["sums"]
    for rel in ("big.bin", "README.md", "data/d3/sub1/f10.txt"):
        path = hf_hub_download(repo, rel, repo_type="kernel", revision="main")
        assert _sha256(path) == sums[rel], rel


def test_resolve_headers_and_range(published, hub):
    repo = published["repo"]
    url = f"{hub.url}/kernels/{repo}/resolve/main/big.bin"
    head = httpx2.head(url)
    assert head.headers["x-repo-commit"] == published["commit"]
    assert head.headers["content-length"] == str(BIG_SIZE)
    assert len(head.headers["etag"].strip('"')) == 40  # git blob sha1 of a regular file
    part = httpx2.get(url, headers={"Range": "bytes=100-199"})
    full = Path(hf_hub_download(repo, "big.bin", repo_type="kernel")).read_bytes()
    assert part.status_code == 206 and part.content == full[100:200]
    assert part.headers["content-range"] == f"bytes 100-199/{BIG_SIZE}"
    assert httpx2.get(url, headers={"Range": f"bytes={BIG_SIZE}-"}).status_code == 416
    missing = httpx2.head(f"{hub.url}/kernels/{repo}/resolve/main/absent.txt")
    assert missing.status_code == 404 and missing.headers["x-error-code"] == "EntryNotFound"
    assert missing.headers["x-repo-commit"] == published["commit"]


def test_snapshot_download_allow_patterns(published, tmp_path):
    d = Path(
        snapshot_download(
            published["repo"], repo_type="kernel", allow_patterns=["data/d2/*"], cache_dir=tmp_path
        )
    )
    got = {str(p.relative_to(d)) for p in d.rglob("*") if p.is_file()}
    want = {p for p in published["sums"] if p.startswith("data/d2/")}
    assert got == want and want
    assert all(_sha256(d / p) == published["sums"][p] for p in got)


def test_delete_file_and_folder(published):
    api, user = published["api"], published["user"]
    repo = f"{user}/deletions"
    api.create_repo(repo, repo_type="kernel", exist_ok=True)
    api.create_commit(
        repo,
        repo_type="kernel",
        commit_message="add",
        operations=[
            CommitOperationAdd(path_in_repo=p, path_or_fileobj=b"x")
            for p in ("a.txt", "dir/b.txt", "dir/c/d.txt")
        ],
    )
    api.delete_file("a.txt", repo, repo_type="kernel")
    assert set(api.list_repo_files(repo, repo_type="kernel")) == {"dir/b.txt", "dir/c/d.txt"}
    api.delete_folder("dir/c", repo, repo_type="kernel")
    assert set(api.list_repo_files(repo, repo_type="kernel")) == {"dir/b.txt"}


def test_stale_parent_commit_is_412_and_changes_nothing(published, hub):
    api, user = published["api"], published["user"]
    repo = f"{user}/stale"
    api.create_repo(repo, repo_type="kernel", exist_ok=True)
    first = api.upload_file(
        path_or_fileobj=b"one", path_in_repo="f.txt", repo_id=repo, repo_type="kernel"
    ).oid
    api.upload_file(path_or_fileobj=b"two", path_in_repo="f.txt", repo_id=repo, repo_type="kernel")
    before = repo_state(hub.url, repo)
    with pytest.raises(HfHubHTTPError) as e:
        api.create_commit(
            repo,
            repo_type="kernel",
            commit_message="late",
            parent_commit=first,
            operations=[CommitOperationAdd(path_in_repo="g.txt", path_or_fileobj=b"three")],
        )
    assert e.value.response.status_code == 412
    assert repo_state(hub.url, repo) == before


def test_paths_info(published):
    api, repo = published["api"], published["repo"]
    infos = api.get_paths_info(repo, ["README.md", "data/d1", "absent.txt"], repo_type="kernel")
    assert [(type(i).__name__, i.path) for i in infos] == [
        ("RepoFile", "README.md"),
        ("RepoFolder", "data/d1"),
    ]
