"""What a new user of the `kernel-hub` command met (issue 43), against real hub processes: `--version`,
`--json` on listings and results, `KERNEL_HUB_DATA`, warnings as `kernel-hub <cmd>: warning: ...`, a busy
port in one line, `lock` writing from the cache only with `--offline`, one-line not-found errors, and
`publish -v` saying what it uploads."""

from __future__ import annotations

import contextlib
import io
import json
import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from registry.cli import main

ROOT = Path(__file__).resolve().parents[2]


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as e:  # argparse's --version / --help
            code = e.code
    return code, out.getvalue(), err.getvalue()


def test_version_flag():
    code, out, _ = cli("--version")
    assert code == 0 and out.startswith("kernel-hub 0.") and out.count("\n") == 1


def test_listings_take_json_and_the_data_dir_comes_from_the_environment(hub, monkeypatch):
    ns = f"js{uuid.uuid4().hex[:6]}"
    hub.org(ns, trusted=True, members=(f"{ns}-u",))
    hub.token(f"{ns}-u")
    monkeypatch.setenv("KERNEL_HUB_DATA", str(hub.data_dir))
    monkeypatch.delenv("KERNEL_HUB_DB", raising=False)
    code, out, err = cli("org", "list", "--json")  # no --data: KERNEL_HUB_DATA
    assert code == 0, err
    assert {"org": ns, "trusted": "yes", "members": "1"} in json.loads(out)
    code, out, _ = cli("org", "members", ns, "--json")
    assert json.loads(out) == [f"{ns}-u"]
    code, out, _ = cli("token", "list", "--json")
    assert code == 0 and {"id", "user", "also_writes", "created"} <= set(json.loads(out)[0])
    code, out, _ = cli("gc", "--dry-run", "--json")
    report = json.loads(out)
    assert code == 0 and report["dry_run"] is True and "kept_branches" in report
    code, out, _ = cli("key", "list", "--json")
    assert code == 0 and isinstance(json.loads(out), list)


def test_warnings_are_one_line_with_the_command(tmp_path, monkeypatch):
    """A warning of the library (here: the hub does not answer) and a logged one read the same way."""
    (tmp_path / "pyproject.toml").write_text('[tool.kernels.dependencies]\n"nobody/nothing" = 1\n')
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"  # nothing listens there once closed
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("KERNELS_CACHE", str(tmp_path / "cache"))
    code, out, err = cli("lock", str(tmp_path), "--endpoint", dead)
    lines = err.strip().splitlines()
    assert code == 1 and out == "" and not (tmp_path / "kernels.lock").exists()
    assert all(line.startswith("kernel-hub lock: ") for line in lines), lines
    assert lines[0].startswith(f"kernel-hub lock: warning: {dead} is unreachable")
    assert "warnings.warn" not in err and ".py:" not in err


def test_lock_writes_from_the_cache_only_with_offline(hub, tmp_path, monkeypatch):
    from registry.publisher import build as b
    from registry.publisher.publish import publish

    ns = f"lk{uuid.uuid4().hex[:6]}"
    dist = b.build(ROOT / "kernel_src" / "fused_mlp", tmp_path / "dist", ROOT / "build" / "matrix.toml",
                   aot=False, only=["torch-cpu"]).out  # fmt: skip
    commit = publish(
        f"{ns}/k", dist, 1, endpoint=hub.url, token=hub.token(ns), key_path=tmp_path / "k.pem"
    ).commit
    monkeypatch.setenv("KERNELS_CACHE", str(tmp_path / "cache"))
    code, _, err = cli("lock", str(tmp_path), "--kernel", f"{ns}/k=1", "--endpoint", hub.url)
    assert code == 0, err
    assert json.loads((tmp_path / "kernels.lock").read_text())[0]["lock"]["commit"] == commit
    (tmp_path / "kernels.lock").unlink()

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    code, _, err = cli("lock", str(tmp_path), "--kernel", f"{ns}/k=1", "--endpoint", hub.url, "--offline")
    assert code == 0 and json.loads((tmp_path / "kernels.lock").read_text())[0]["lock"]["commit"] == commit
    (tmp_path / "kernels.lock").unlink()
    code, _, err = cli("lock", str(tmp_path), "--kernel", f"{ns}/k=1", "--endpoint", dead)
    assert code == 1 and not (tmp_path / "kernels.lock").exists()
    assert err.strip().splitlines()[-1].endswith("pass --offline to lock the cached commits")


@pytest.mark.parametrize("command", ["variants", "lock", "versions", "matrix"])
def test_a_missing_repo_is_one_short_line(hub, tmp_path, monkeypatch, command):
    monkeypatch.setenv("KERNELS_CACHE", str(tmp_path / "cache"))
    argv = {
        "variants": ["variants", "nobody/nothing", "--version", "1"],
        "lock": ["lock", str(tmp_path), "--kernel", "nobody/nothing=1"],
        "versions": ["versions", "nobody/nothing"],
        "matrix": ["matrix", "nobody/nothing", "--version", "1"],
    }[command]
    code, out, err = cli(*argv, "--endpoint", hub.url)
    assert code == (2 if command == "matrix" else 1) and out == "" and err.count("\n") == 1, err  # 2: source
    assert len(err) < 300 and "nobody/nothing" in err and "huggingface.co" not in err, err


def test_serve_on_a_busy_port_is_one_line(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        r = subprocess.run(
            [sys.executable, "-m", "registry.cli", "serve", "--port", str(port), "--data", str(tmp_path / "d")],
            capture_output=True, text=True, timeout=60, env=env, check=False,
        )  # fmt: skip
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr == (
        f"kernel-hub serve: 127.0.0.1:{port} is already in use (another `kernel-hub serve`?); stop it, or pass --port\n"
    )


def test_publish_verbose_lists_what_it_uploads_and_json_is_the_result(hub, tmp_path):
    from registry.publisher import build as b

    ns = f"pv{uuid.uuid4().hex[:6]}"
    dist = b.build(ROOT / "kernel_src" / "fused_mlp", tmp_path / "dist", ROOT / "build" / "matrix.toml",
                   aot=False, only=["torch-cpu"]).out  # fmt: skip
    code, out, err = cli("publish", f"{ns}/k", str(dist), "--version", "1", "--endpoint", hub.url,
                         "--token", hub.token(ns), "--key", str(tmp_path / "k.pem"), "-v", "--json")  # fmt: skip
    assert code == 0, err
    result = json.loads(out)
    assert result["version"] == 1 and result["previous"] is None and result["unchanged"] is False
    assert "  build/torch-cpu/metadata.json  " in err and "temporary branch publish/" in err
    assert f"signing with key {result['key_id']}" in err


def test_publish_in_a_terminal_shows_the_upload_progress_as_hf_does(hub, tmp_path):
    """In a terminal the stock client's live display (Preparing / Uploading / Committing bars) shows, as for
    `hf upload`; `script` gives the publish a pseudo-terminal."""
    import shutil

    if shutil.which("script") is None:
        pytest.skip("no `script` (util-linux) to run the publish in a pseudo-terminal")
    from registry.publisher import build as b

    ns = f"tty{uuid.uuid4().hex[:6]}"
    dist = b.build(ROOT / "kernel_src" / "fused_mlp", tmp_path / "dist", ROOT / "build" / "matrix.toml",
                   aot=False, only=["torch-cpu"]).out  # fmt: skip
    command = (
        f"{sys.executable} -m registry.cli publish {ns}/k {dist} --version 1 --endpoint {hub.url} "
        f"--token {hub.token(ns)} --key {tmp_path / 'k.pem'}"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_DISABLE_PROGRESS_BARS": ""}
    r = subprocess.run(["script", "-qec", command, "/dev/null"], capture_output=True, text=True, timeout=300,
                       env=env, check=False)  # fmt: skip
    assert r.returncode == 0, r.stdout[-2000:]
    assert "Uploading" in r.stdout and "Committing" in r.stdout and f"{ns}/k v1 -> " in r.stdout
