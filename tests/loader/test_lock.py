"""`kernel-hub lock` writes the `kernels.lock` stock `kernels` writes and reads, on both kinds of hub."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest
from hubs import HUB_KINDS, publish_fresh, republish_with_new_key
from kernels._rust import KernelLocks

from registry.cli import main
from registry.client.lock import LockError, locked_commit
from tests.conftest import point_clients_at


def _published(hub, dist: Path, tmp_path: Path, monkeypatch) -> tuple:
    repo, commit, token = publish_fresh(hub, dist, tmp_path / "key.pem")
    point_clients_at(monkeypatch, hub.url, tmp_path / "clients")
    return hub, repo, commit, token


@pytest.fixture(params=HUB_KINDS)
def locked_hub(request, fused_mlp_v1, tmp_path, monkeypatch):
    """v1 of a fresh repo on each kind of hub, clients pointed there: (hub, repo id, commit, token)."""
    return _published(request.getfixturevalue(request.param), fused_mlp_v1[2], tmp_path, monkeypatch)


@pytest.fixture
def plain_locked_hub(plain_hub, fused_mlp_v1, tmp_path, monkeypatch):
    """As `locked_hub`, on the hub without extensions only."""
    return _published(plain_hub, fused_mlp_v1[2], tmp_path, monkeypatch)


def _cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(argv))
    return rc, out.getvalue(), err.getvalue()


def test_lock_matches_stock_kernels_lock_and_stock_kernels_loads_it(
    locked_hub, fused_mlp_v1, tmp_path, monkeypatch
):
    hub, repo, commit, token = locked_hub
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text(f'[tool.kernels.dependencies]\n"{repo}" = 1\n')
    rc, out, err = _cli("lock", str(project), "--endpoint", hub.url)
    assert rc == 0, err
    ours = (project / "kernels.lock").read_text()
    assert out.strip() == str(project / "kernels.lock")
    assert json.loads(ours) == [{"dependency": {"repo-id": repo, "version": 1}, "lock": {"commit": commit}}]

    # Stock `kernels lock` of the same project writes the same pins.
    from kernels.cli.lock import lock_kernels

    stock_dir = tmp_path / "stock"
    stock_dir.mkdir()
    (stock_dir / "pyproject.toml").write_text((project / "pyproject.toml").read_text())
    lock_kernels(type("Args", (), {"project_dir": stock_dir})())
    assert KernelLocks.from_json(ours) == KernelLocks.from_json((stock_dir / "kernels.lock").read_text())

    # Stock kernels loads what the lock pins, also after v1 moved on (another key: another tree).
    import kernels

    moved = republish_with_new_key(hub, repo, fused_mlp_v1[2], token, tmp_path / "new.pem")
    assert moved.commit != commit

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # the CPU variant's reference path
    mod = kernels.get_locked_kernel(repo, lockfile=project / "kernels.lock")
    assert f"/snapshots/{commit}/" in Path(mod.__file__).as_posix()
    assert locked_commit(project / "kernels.lock", repo, 1) == commit


def test_lock_of_named_kernels_and_errors(plain_locked_hub, tmp_path):
    hub, repo, commit, _ = plain_locked_hub
    out_file = tmp_path / "elsewhere" / "my.lock"
    out_file.parent.mkdir()
    rc, _, err = _cli("lock", "--kernel", f"{repo}=1", "--output", str(out_file), "--endpoint", hub.url)
    assert rc == 0, err
    assert locked_commit(out_file, repo) == commit

    with pytest.raises(LockError, match=r"not locked in .* \(it locks " + repo):
        locked_commit(out_file, "other/kernel")
    with pytest.raises(LockError, match="not version 2"):
        locked_commit(out_file, repo, 2)
    (tmp_path / "bad.lock").write_text("{}")
    with pytest.raises(LockError, match="is not a kernels.lock file"):
        locked_commit(tmp_path / "bad.lock", repo)
    with pytest.raises(LockError, match="cannot read lock file"):
        locked_commit(tmp_path / "missing.lock", repo)

    rc, _, err = _cli("lock", "--kernel", f"{repo}=7", "--endpoint", hub.url)
    assert rc == 1 and "version 7 does not exist" in err and "v1" in err
    rc, _, err = _cli("lock", "--kernel", "no-version", "--endpoint", hub.url)
    assert rc == 2 and "use REPO=N" in err
    rc, _, err = _cli("lock", str(tmp_path), "--endpoint", hub.url)
    assert rc == 1 and "pyproject.toml does not exist" in err
    (tmp_path / "pyproject.toml").write_text('[tool.kernels.dependencies]\n"a/b" = "1"\n')
    rc, _, err = _cli("lock", str(tmp_path), "--endpoint", hub.url)
    assert rc == 1 and "needs a version number" in err
