"""`kernel-hub matrix` against a real hub process: versions published with hand-built metadata, check
records written to and read back from the repo's `compat` branch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from matrix_fixtures import STABLE, fixture_full_version, fixture_make_record, fixture_no_sm80_version  # noqa: F401 (fixtures)

ROOT = Path(__file__).resolve().parents[2]
USER = "mxuser"


def publish_metadata(api, repo: str, version: int, variants: dict[str, dict], tmp: Path) -> str:
    """Publish `build/<variant>/metadata.json` files as branch v<version>; returns its commit."""
    folder = tmp / f"v{version}"
    for name, meta in variants.items():
        (folder / "build" / name).mkdir(parents=True)
        (folder / "build" / name / "metadata.json").write_text(json.dumps(meta))
    api.create_repo(repo, repo_type="kernel", exist_ok=True)
    api.create_branch(repo, branch=f"v{version}", repo_type="kernel", exist_ok=True)
    info = api.upload_folder(repo_id=repo, folder_path=folder, repo_type="kernel", revision=f"v{version}")
    return info.oid


@pytest.fixture(scope="module")
def token(hub):
    return hub.token(USER)


@pytest.fixture
def api(hub, token, hub_env):
    from huggingface_hub import HfApi

    return HfApi(endpoint=hub.url, token=token)


def cli(hub, token, tmp_path, *args: str) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "HF_HOME": str(tmp_path / "cli-home"),
        "HF_HUB_CACHE": str(tmp_path / "cli-home" / "hub"),
    }
    env.pop("HF_HUB_DISABLE_TELEMETRY", None)
    cmd = [sys.executable, "-m", "registry.cli", "matrix", *args, "--endpoint", hub.url, "--token", token]
    return subprocess.run(cmd, check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def test_matrix_of_a_version_missing_sm80(hub, token, api, tmp_path, no_sm80_version):
    repo = f"{USER}/no-sm80"
    publish_metadata(api, repo, 1, no_sm80_version, tmp_path)
    r = cli(hub, token, tmp_path, repo, "--version", "1", "--format", "json")
    assert r.returncode == 1, r.stderr  # sm_80 is promised and gets no kernel: a broken promise
    data = json.loads(r.stdout)
    cells = {
        (c["env"]["gpu_arch"], c["env"]["torch"], c["env"]["cuda"], c["env"]["python"], c["env"]["cpu"]): c
        for c in data["cells"]
    }
    sm80 = cells[("sm_80", "2.11", "13.0", "3.12", "x86_64")]
    assert sm80["variant"] is None and sm80["status"] == "fallback"
    assert sm80["label"].startswith(
        "fallback: torch.compile — no variant for sm_80: " + STABLE + ": no code for sm_80"
    )
    assert cells[("sm_86", "2.11", "13.0", "3.12", "x86_64")]["label"] == f"{STABLE} (PTX sm_86)"
    assert cells[("sm_90", "2.13", "13.0", "3.10", "x86_64")]["label"] == f"{STABLE} (SASS sm_90a)"
    # stderr: one summary line; -v lists every broken promise
    assert r.stderr.strip().splitlines()[-1].startswith("kernel-hub matrix: ")
    assert "broken promise(s), listed by reason in the report; -v lists each" in r.stderr
    assert "no variant fits" not in r.stderr
    verbose = cli(hub, token, tmp_path, repo, "--version", "1", "--format", "json", "-v")
    assert verbose.returncode == 1
    assert "sm_80 torch 2.11 CUDA 13.0 Python 3.12 x86_64-linux: no variant fits" in verbose.stderr


def test_full_version_keeps_every_promise_and_prints_markdown(hub, token, api, tmp_path, full_version):
    repo = f"{USER}/full"
    publish_metadata(api, repo, 2, full_version, tmp_path)
    r = cli(hub, token, tmp_path, repo, "--version", "2")
    assert r.returncode == 0, r.stderr
    assert f"| sm_90 | 13.0 | 2.11 | torch-cuda (AOT sm_90a) | {STABLE} (SASS sm_90a) |" in r.stdout
    assert "Every promised environment has a hub kernel." in r.stdout


def test_unknown_version_is_a_usage_error_that_lists_versions(hub, token, api, tmp_path, full_version):
    repo = f"{USER}/versions"
    publish_metadata(api, repo, 1, full_version, tmp_path)
    r = cli(hub, token, tmp_path, repo, "--version", "7")
    assert r.returncode == 2 and "has no version 7 (branch v7); versions: v1" in r.stderr


def test_records_on_the_compat_branch_show_in_the_next_render(
    hub, token, api, tmp_path, full_version, make_record
):
    from registry.matrix.store import check_records, write_record
    from registry.wire import HubClient

    client = HubClient(hub.url, token)
    repo = f"{USER}/recorded"
    commit = publish_metadata(api, repo, 1, full_version, tmp_path)
    assert check_records(client, repo, commit) == []  # no compat branch yet
    good = make_record(commit)
    bad = make_record(commit, python="3.13", passed=False, detail="FAILED: gated_mlp bf16 error 4.0e-01")
    write_record(client, repo, good)
    write_record(client, repo, bad)
    assert sorted(r.fingerprint for r in check_records(client, repo, commit)) == sorted(
        [good.fingerprint, bad.fingerprint]
    )
    files = api.list_repo_files(repo, repo_type="kernel", revision="compat")
    assert f"checks/{commit}/{good.fingerprint}.json" in files
    assert not [
        f for f in api.list_repo_files(repo, repo_type="kernel", revision="v1") if f.startswith("checks/")
    ]

    r = cli(hub, token, tmp_path, repo, "--version", "1")
    assert r.returncode == 1  # the failed check breaks the promise
    assert f"| sm_90 | 13.0 | 2.11 | torch-cuda (AOT sm_90a) | ❌ {STABLE} (SASS sm_90a) |" in r.stdout
    assert "FAILED: gated_mlp bf16 error 4.0e-01" in r.stdout
    assert "passed on sm_90-x86_64-py3.12-" in r.stdout

    write_record(
        client, repo, make_record(commit, python="3.13")
    )  # same machine re-checked: replaces its file
    r = cli(hub, token, tmp_path, repo, "--version", "1")
    assert r.returncode == 0, r.stderr
    assert f"| ✅ {STABLE} (SASS sm_90a) |" in r.stdout


def test_without_version_every_version_is_rendered_and_html_is_a_page(
    hub, token, api, tmp_path, full_version, no_sm80_version
):
    repo = f"{USER}/two-versions"
    publish_metadata(api, repo, 1, no_sm80_version, tmp_path / "a")
    publish_metadata(api, repo, 2, full_version, tmp_path / "b")
    r = cli(hub, token, tmp_path, repo)
    assert r.returncode == 1  # v1 still breaks the promise for sm_80
    assert (
        f"### Compatibility matrix: {repo} v1" in r.stdout
        and f"### Compatibility matrix: {repo} v2" in r.stdout
    )
    out = tmp_path / "matrix.html"
    r = cli(hub, token, tmp_path, repo, "--version", "2", "--format", "html", "--output", str(out))
    assert r.returncode == 0 and r.stdout == ""
    page = out.read_text()
    assert page.startswith("<!doctype html>") and 'id="matrix-v2"' in page and 'id="matrix-v1"' not in page
    r = cli(hub, token, tmp_path, repo, "--check")
    assert r.returncode == 2 and "--check needs --version N" in r.stderr
