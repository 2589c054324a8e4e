"""The matrix from the version itself (issue 43): `kernel-hub build` records what the build promises in every
metadata.json, so `kernel-hub matrix` needs no checkout; a CPU-only version promises CPU rows only (before:
exit 1, "1024 broken promises", no CPU row; outside a checkout exit 2), and the hub's page merges rows that
say the same everywhere. A real build, a real hub process, the CLI run from outside the checkout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from matrix_fixtures import fixture_no_sm80_version  # noqa: F401 (fixture)

from registry.matrix.cells import build_matrix
from registry.matrix.config import load_config, promised_config
from registry.matrix.render import render_html
from registry.publisher.build import build
from registry.publisher.publish import publish
from registry.spec.build_matrix import PROMISE_KEY

ROOT = Path(__file__).resolve().parents[2]


def test_a_cpu_only_version_promises_cpu_rows_and_needs_no_checkout(hub, tmp_path):
    dist = build(ROOT / "kernel_src" / "fused_mlp", tmp_path / "dist", ROOT / "build" / "matrix.toml",
                 aot=False, only=["torch-cpu"]).out  # fmt: skip
    meta = json.loads((dist / "build" / "torch-cpu" / "metadata.json").read_text())
    assert meta[PROMISE_KEY]["environments"]["gpu_arch"]  # the matrix file's promise travels with the build
    token = hub.token("mxcpu")
    publish("mxcpu/fused-mlp", dist, 1, endpoint=hub.url, token=token, key_path=tmp_path / "k.pem")

    outside = tmp_path / "elsewhere"  # no build/matrix.toml here or above
    outside.mkdir()
    env = {
        **os.environ,
        "HF_HOME": str(tmp_path / "home"),
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "kernel_src")]),
    }
    env.pop("HF_HUB_DISABLE_TELEMETRY", None)
    base = [
        sys.executable,
        "-m",
        "registry.cli",
        "matrix",
        "mxcpu/fused-mlp",
        "--version",
        "1",
        "--endpoint",
        hub.url,
    ]

    def run(*extra):
        return subprocess.run(
            [*base, *extra], cwd=outside, env=env, capture_output=True, text=True, timeout=300, check=False
        )

    r = run("--format", "json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["problems"] == [] and data["cells"]
    assert {c["env"]["gpu_arch"] for c in data["cells"]} == {"cpu"}
    assert {c["variant"] for c in data["cells"]} == {"torch-cpu"}
    r = run()
    assert r.returncode == 0, r.stderr
    assert "| cpu | - | 2.11–2.14 | torch-cpu (CPU) | torch-cpu (CPU) |" in r.stdout
    assert "Every promised environment has a hub kernel." in r.stdout


def test_the_page_merges_rows_that_say_the_same(no_sm80_version):
    """A version whose GPU builds are missing: every GPU row says the same fallback (the page showed 16 rows;
    two now: Blackwell is promised only from CUDA 12.8)."""
    cpu_only = {"torch-cpu": no_sm80_version["torch-cpu"]}
    m = build_matrix(load_config(), repo="org/k", version=1, commit="f" * 40, variants=cpu_only)
    rows = [line for line in render_html(m).splitlines() if line.startswith("<tr><td>")]
    assert len(rows) == 2 and all("the version has no CUDA variant" in r for r in rows)
    assert "<td>sm_80, sm_86, sm_89, sm_90</td><td>12.6</td><td>2.11–2.14</td>" in rows[0]
    assert (
        "<td>sm_80, sm_86, sm_89, sm_90, sm_100, sm_120</td><td>12.8, 13.0</td>" in rows[1]
    )  # Blackwell: CUDA >= 12.8
    assert len({(c.env.gpu_arch, c.env.cuda) for c in m.cells}) > 15  # what the rows stand for


def test_a_version_without_a_promise_still_reads_the_matrix_file(no_sm80_version):
    assert promised_config(no_sm80_version) is None  # built before builds recorded the promise
    promised = {**no_sm80_version, "torch-cpu": {**no_sm80_version["torch-cpu"], PROMISE_KEY: {
        "environments": {"gpu_arch": ["sm_90"], "torch": ["2.11"], "cuda": ["13.0"], "python": ["3.12"],
                         "cpu": ["x86_64"], "os": ["linux"]}}}}  # fmt: skip
    envs = promised_config(promised).environments()
    assert [(e.gpu_arch, e.cuda) for e in envs] == [("sm_90", "13.0"), ("cpu", "-")]
