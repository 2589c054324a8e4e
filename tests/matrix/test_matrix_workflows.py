"""GitHub workflows: actionlint and zizmor (offline) pass, they call only the project's CLI, and the
cibuildwheel recipe yields exactly the intended builds. Tools come pinned from requirements/cpu.txt."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / ".github" / "workflows"
BIN = Path(sys.executable).parent


def tool(name: str) -> str:
    path = BIN / name
    if not path.exists():
        pytest.fail(
            f"{name} is not installed next to {sys.executable}: run `make venv` (requirements/cpu.txt pins it)"
        )
    return str(path)


def run(*cmd: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        cmd,
        cwd=ROOT,
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


def test_the_four_workflows_exist():
    assert sorted(p.name for p in WORKFLOWS.glob("*.yml")) == [
        "build.yml",
        "ci.yml",
        "compat.yml",
        "publish.yml",
    ]


def test_actionlint_passes():
    r = run(tool("actionlint"), "-color=false")
    assert r.returncode == 0, r.stdout + r.stderr


def test_actionlint_catches_a_broken_workflow(tmp_path):
    """The lint can fail: an undefined job output and a bad expression are reported."""
    bad = tmp_path / ".github" / "workflows"
    bad.mkdir(parents=True)
    (bad / "bad.yml").write_text(
        "on: push\npermissions: {}\njobs:\n  a:\n    runs-on: ubuntu-24.04\n    steps:\n"
        "      - run: echo ${{ needs.nope.outputs.x }}\n"
    )
    r = subprocess.run(
        [tool("actionlint"), "-color=false", str(bad / "bad.yml")],
        check=False,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert r.returncode != 0 and "needs" in r.stdout


def test_zizmor_offline_finds_nothing():
    r = run(tool("zizmor"), "--offline", "--no-progress", "--format", "plain", ".github/workflows")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "No findings" in r.stdout + r.stderr


def test_zizmor_catches_template_injection(tmp_path):
    bad = tmp_path / "bad.yml"
    bad.write_text(
        "on: pull_request_target\npermissions: {}\njobs:\n  a:\n    runs-on: ubuntu-24.04\n    steps:\n"
        '      - run: echo "${{ github.event.pull_request.title }}"\n'
    )
    r = run(tool("zizmor"), "--offline", "--no-progress", "--format", "plain", str(bad))
    assert r.returncode != 0 and "template-injection" in r.stdout


def test_every_action_is_pinned_to_a_full_commit_sha():
    uses = [m for p in WORKFLOWS.glob("*.yml") for m in re.findall(r"uses:\s*(\S+)", p.read_text())]
    remote = [u for u in uses if not u.startswith(("./", "$/"))]
    assert remote and all(re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", u) for u in remote), remote


def test_workflows_run_only_the_project_cli_and_pinned_tools():
    """Every `run:` goes through make, .ci/run, kernel-hub, cibuildwheel or shell plumbing: same paths as CI."""
    text = "\n".join(p.read_text() for p in WORKFLOWS.glob("*.yml"))
    assert "bash .ci/run" in text
    assert ".venv/bin/kernel-hub build" in text and ".venv/bin/kernel-hub publish" in text
    assert 'kernel-hub matrix "$REPO" --version "$VERSION" --check' in text
    assert "kernel-hub matrix-plan build" in text and "kernel-hub matrix-plan compat" in text
    assert "persist-credentials: false" in text and "python -c" not in text


def test_cibuildwheel_lists_the_intended_builds():
    """One abi3 wheel per CPU (cp310 tag serves every Python >= 3.10), manylinux only, no musl/PyPy."""
    cmd = (
        tool("cibuildwheel"),
        "--print-build-identifiers",
        "--platform",
        "linux",
        "--config-file",
        "build/cibuildwheel/cibuildwheel.toml",
        "build/cuda",
    )
    for arch, expected in (("x86_64", "cp310-manylinux_x86_64"), ("aarch64", "cp310-manylinux_aarch64")):
        r = run(*cmd, env={"CIBW_ARCHS_LINUX": arch})
        assert r.returncode == 0, r.stderr
        assert r.stdout.split() == [expected]


def test_build_plan_feeds_the_cuda_job_with_the_matrix_arch_list():
    r = run(str(BIN / "kernel-hub"), "matrix-plan", "build")
    assert r.returncode == 0, r.stderr
    assert '"torch_cuda_arch_list":"8.0 8.9 9.0a 10.0a 12.0+PTX"' in r.stdout
