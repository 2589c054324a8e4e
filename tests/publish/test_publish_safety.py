"""`kernel-hub publish` tells the user what happened, in one line, and leaves nothing behind: an unchanged
build makes no commit, refusals name the next free version, the key note appears only when a key is
registered, a hub that restarts mid-publish keeps no temporary branch, and old ones are swept.
Against real hub processes, through the CLI as a user runs it."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from hub_process import HubProcess
from huggingface_hub import HfApi
from kernel_sources import changed_source

from registry.cli import main
from registry.publisher import build as b
from registry.publisher import publish
from registry.spec import names

ROOT = Path(__file__).resolve().parents[2]
MATRIX = ROOT / "build" / "matrix.toml"


@pytest.fixture(scope="module")
def dists(tmp_path_factory):
    """torch-cpu dists: the kernel twice (two builds of one source), other bytes, an added symbol."""
    tmp = tmp_path_factory.mktemp("safety")
    base = changed_source(tmp, "base")

    def build(src: Path, name: str) -> Path:
        return b.build(src, tmp / name / "fused-mlp", MATRIX, aot=False, only=["torch-cpu"]).out

    return {
        "base": build(base, "base"),
        "rebuilt": build(base, "rebuilt"),
        "same_api": build(changed_source(tmp, "s", "\n# other bytes\n"), "same"),
        "new_api": build(
            changed_source(tmp, "n", "\n\ndef extra(x):\n    return x\n\n\n__all__ = [*__all__, 'extra']\n"),
            "new",
        ),
    }


def new_user(hub, tmp_path: Path, prefix: str = "s") -> dict:
    """A fresh user of `hub` publishing its own fused-mlp: repo, token, key file, hub URL."""
    name = f"{prefix}{uuid.uuid4().hex[:8]}"
    return {
        "repo": f"{name}/fused-mlp",
        "token": hub.token(name),
        "key": tmp_path / f"{name}.pem",
        "url": hub.url,
    }


@pytest.fixture
def user(hub, tmp_path):
    return new_user(hub, tmp_path)


def cli(user, dist: Path, version: int, *extra: str, update: bool = True) -> tuple[int, str, str]:
    """`kernel-hub publish` in this process: (exit code, stdout, stderr). `update`: pass --update, which
    most of these tests need, as they move vN on purpose."""
    out, err = io.StringIO(), io.StringIO()
    argv = ["publish", user["repo"], str(dist), "--version", str(version), "--endpoint", user["url"],
            "--token", user["token"], "--key", str(user["key"]), *(["--update"] if update else []), *extra]  # fmt: skip
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def _api(user) -> HfApi:
    return HfApi(endpoint=user["url"], token=user["token"])


def _branches(user) -> dict[str, str]:
    refs = _api(user).list_repo_refs(user["repo"], repo_type="kernel")
    return {r.name: r.target_commit for r in refs.branches}


def _commits(user, branch: str) -> list[str]:
    return [
        c.commit_id for c in _api(user).list_repo_commits(user["repo"], repo_type="kernel", revision=branch)
    ]


def test_unchanged_build_makes_no_commit_and_says_so(user, dists):
    code, out, err = cli(user, dists["base"], 1)
    assert code == 0 and "(new version)" in out, err
    assert "created publisher key" in err and f"registered for {user['repo'].split('/')[0]}" in err
    history = _commits(user, "v1")

    code, out, err = cli(user, dists["rebuilt"], 1)  # another build of the same source: same bytes
    assert code == 0, err
    assert out.count("\n") == 1 and "unchanged: the hub already holds this build, no commit made" in out
    assert "registered" not in err and "No files have been modified" not in err
    assert _commits(user, "v1") == history
    assert not [x for x in _branches(user) if x.startswith(names.PUBLISH_BRANCH_PREFIX)]

    code, out, err = cli(user, dists["same_api"], 1)
    assert code == 0 and f"(was {history[0][:12]})" in out and "registered" not in err


def test_moving_a_version_to_another_build_needs_update(user, dists):
    """Issue 43: `publish --version 1` of a different build moved v1 with exit 0; a release stays put unless
    the publisher says --update, and --version 0 is refused."""
    assert cli(user, dists["base"], 1, update=False)[0] == 0
    v1 = _branches(user)["v1"]
    code, out, err = cli(user, dists["same_api"], 1, update=False)
    lines = err.strip().splitlines()
    assert code == 1 and out == "", err
    assert lines[-1] == (
        f"kernel-hub publish: v1 of {user['repo']} already holds another build ({v1[:12]}); nothing was moved: "
        "pass --update to replace it (users of version=1 get the new build), or publish it as --version 2"
    )
    assert _branches(user)["v1"] == v1 and not [x for x in _branches(user) if x.startswith("publish/")]
    assert cli(user, dists["rebuilt"], 1, update=False)[0] == 0  # the same build again is no move
    code, out, err = cli(user, dists["same_api"], 1)
    assert code == 0 and f"(was {v1[:12]})" in out

    code, out, err = cli(user, dists["base"], 0, update=False)
    assert code == 1 and err.strip().splitlines()[-1].startswith("kernel-hub publish: --version 0 is refused")
    assert "v0" not in _branches(user)


def test_api_change_names_the_next_free_version(user, dists):
    assert cli(user, dists["base"], 1)[0] == 0
    assert cli(user, dists["new_api"], 2)[0] == 0
    code, out, err = cli(user, dists["new_api"], 1)
    lines = err.strip().splitlines()
    assert code == 1 and out == ""
    assert lines[-1].startswith("kernel-hub publish: the public API changed (torch-cpu: added extra)")
    assert "publish it as v3" in lines[-1] and "registered" not in err  # v2 exists: v3 is the free one


def test_stale_temporary_branches_are_removed_by_the_next_publish(user, dists):
    assert cli(user, dists["base"], 1)[0] == 0
    api, head = _api(user), _branches(user)["v1"]
    old = names.publish_branch(time.time() - 2 * names.STALE_PUBLISH_S, "dead01")
    legacy = f"publish/{uuid.uuid4().hex}"  # kernel-hub's names before the start time was in them
    live = names.publish_branch(time.time(), "live01")  # someone else's publish, running now
    for branch in (old, legacy, live):
        api.create_branch(user["repo"], branch=branch, revision=head, repo_type="kernel")
    code, _, err = cli(user, dists["same_api"], 1)
    assert code == 0, err
    left = {x for x in _branches(user) if x.startswith(names.PUBLISH_BRANCH_PREFIX)}
    assert left == {live}
    assert f"removed {old}, left behind by an interrupted publish" in err and legacy in err


@pytest.fixture
def own_hub(tmp_path):
    proc = HubProcess(tmp_path / "data").start()
    yield proc
    proc.stop()


def test_hub_restarting_mid_publish_leaves_no_branch_and_one_line(own_hub, dists, monkeypatch, tmp_path):
    """The hub goes away right before the swap and is back a second later: the publish fails in one line,
    vN stays where it was, and the cleanup's retries remove the temporary branch."""
    user = new_user(own_hub, tmp_path, "r")
    assert cli(user, dists["base"], 1)[0] == 0
    v1 = _branches(user)["v1"]
    real = publish.ref_update

    def come_back():
        again = HubProcess(own_hub.data_dir)
        again.port, again.url = own_hub.port, own_hub.url  # back on the same address
        own_hub.proc = again.start().proc

    def swap_while_down(*args, **kwargs):
        own_hub.stop()
        try:
            return real(*args, **kwargs)
        finally:
            restart.start()  # the cleanup's first try finds the hub down, a later one finds it back

    restart = threading.Thread(target=come_back)
    monkeypatch.setattr(publish, "ref_update", swap_while_down)
    # Longer pauses than a user gets, so a slow start on a busy machine still falls inside the window.
    monkeypatch.setattr(publish, "_CLEANUP_WAITS_S", (0.5, 2.0, 5.0, 10.0, 20.0))
    code, out, err = cli(user, dists["same_api"], 1)
    restart.join()
    lines = err.strip().splitlines()
    assert code == 1 and out == "", err
    assert lines[-1].startswith(f"kernel-hub publish: cannot reach the hub at {own_hub.url}"), lines
    assert "Traceback" not in err and len(lines) <= 3, lines  # progress lines, then the one-line failure
    branches = _branches(user)
    assert branches["v1"] == v1
    assert not [x for x in branches if x.startswith(names.PUBLISH_BRANCH_PREFIX)], branches


def test_unreachable_hub_and_bad_token_end_in_one_line(user, dists, tmp_path):
    code, out, err = cli({**user, "token": "hf_not_a_token"}, dists["base"], 1)
    assert code == 1 and out == ""
    assert err.strip().splitlines()[-1].startswith("kernel-hub publish: the hub refused the token (401: ")
    assert "Traceback" not in err
    down = {**user, "url": "http://127.0.0.1:9"}  # nothing listens on the discard port
    code, _, err = cli(down, dists["base"], 1)
    assert code == 1 and "cannot reach the hub at http://127.0.0.1:9" in err and "Traceback" not in err


def test_sources_given_as_dist_get_a_safe_suggestion(user):
    """The old message suggested `kernel-hub build --out kernel_src`, which deleted the sources."""
    code, _, err = cli(user, ROOT / "kernel_src", 1)
    assert code == 1 and "holds kernel sources, not a built dist" in err
    assert "--out dist/fused-mlp" in err and "--out kernel_src" not in err


def test_an_interrupted_publish_leaves_no_branch_after_the_next_publish(user, dists, monkeypatch, tmp_path):
    """Issue 43: Ctrl-C twice (the second one during the cleanup) or a killed publisher left a publish/...
    branch that the next publish kept for an hour. This machine's own interrupted publishes are recorded
    (publisher/inflight.py), so the next publish removes their branches at any age, also when it moves
    nothing."""
    from registry.publisher import inflight

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert cli(user, dists["base"], 1)[0] == 0

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr("huggingface_hub.HfApi.upload_folder", interrupted)
        m.setattr(publish, "delete_branch", interrupted)
        code, out, err = cli(user, dists["same_api"], 1)
    assert code == 130 and err.strip().splitlines()[-1] == "kernel-hub publish: interrupted"
    (ctrl_c,) = [b for b in _branches(user) if b.startswith(names.PUBLISH_BRANCH_PREFIX)]

    # a publisher killed with -9 on this machine: its record names a process that is gone
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    killed = names.publish_branch(time.time(), "killed")
    _api(user).create_branch(user["repo"], branch=killed, revision=_branches(user)["v1"], repo_type="kernel")
    record = json.loads(next(inflight._folder().glob("*.json")).read_text())
    (inflight._folder() / f"{dead.pid}-x.json").write_text(
        json.dumps({**record, "branch": killed, "pid": dead.pid})
    )
    assert len(list(inflight._folder().glob("*.json"))) == 2

    code, out, err = cli(user, dists["rebuilt"], 1)  # unchanged: no upload, but the cleanup runs
    assert code == 0 and "unchanged" in out, err
    assert not [b for b in _branches(user) if b.startswith(names.PUBLISH_BRANCH_PREFIX)]
    assert f"removed {ctrl_c}, left behind by an interrupted publish" in err and killed in err
    assert list(inflight._folder().glob("*.json")) == []


def test_gc_reports_young_publish_branches_and_removes_them_on_request(hub, user, dists):
    assert cli(user, dists["base"], 1)[0] == 0
    young = names.publish_branch(time.time(), "other1")  # another machine's: maybe live
    _api(user).create_branch(user["repo"], branch=young, revision=_branches(user)["v1"], repo_type="kernel")
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert main(["gc", "--dry-run", "--data", str(hub.data_dir)]) == 0
    assert "kept" in out.getvalue() and f"branch {user['repo']}@{young} (" in out.getvalue()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert main(["gc", "--publish-max-age", "0", "--data", str(hub.data_dir)]) == 0
    assert young not in _branches(user)


def test_a_restart_removes_the_branches_of_publishes_it_cut_off(own_hub, dists, tmp_path):
    """Issue 43: a hub killed mid-publish kept the publish/... branch visible in list_repo_refs. The next
    start of a hub that serves its data alone removes every temporary branch (their publishes were cut off)."""
    user = new_user(own_hub, tmp_path, "k")
    assert cli(user, dists["base"], 1)[0] == 0
    cut = names.publish_branch(time.time(), "cutoff")  # the branch of a publish the kill interrupted
    _api(user).create_branch(user["repo"], branch=cut, revision=_branches(user)["v1"], repo_type="kernel")
    own_hub.proc.kill()  # kill -9: no shutdown of any kind
    own_hub.proc.wait()
    own_hub.start()
    assert cut not in _branches(user) and "v1" in _branches(user)
    assert (
        f"removed 1 temporary branch(es) of publishes the last stop interrupted: {user['repo']}@{cut}"
        in own_hub.log()
    )
