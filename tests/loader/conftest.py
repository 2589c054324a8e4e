"""Loader fixtures: real builds of kernel_src/fused_mlp published to the session's real hub process."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from loader_paths import FAST_VARIANTS, MATRIX, NAMESPACE, REPO_ROOT, SOURCE

from registry.publisher.build import build
from registry.publisher.publish import publish


@dataclass
class Publisher:
    """Builds the kernel package (optionally patched) and publishes it to `hub` as the loader test org."""

    hub: object
    token: str
    key: Path
    work: Path

    def build(
        self, name: str, variants=FAST_VARIANTS, patch: dict[str, tuple[str, str]] | None = None
    ) -> Path:
        """Build `variants` into a fresh dist; `patch` maps a package file to (old text, new text)."""
        src = self.work / name / "src" / "fused_mlp"
        shutil.copytree(SOURCE, src, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        # A per-build marker makes every file that names the build (ids, metadata, signature) unique to
        # this repo, so tampering with one repo's blobs never touches another's (blobs are shared by content).
        with open(src / "reference.py", "a") as f:
            f.write(f"# loader test build: {name}\n")
        for rel, (old, new) in (patch or {}).items():
            text = (src / rel).read_text()
            assert old in text, f"patch target {old!r} not found in {rel}: the kernel source changed"
            (src / rel).write_text(text.replace(old, new))
        out = self.work / name / "dist"
        build(src, out, MATRIX, aot=False, only=list(variants))
        return out

    def publish(self, repo: str, dist: Path, version: int = 1, key: Path | None = None) -> str:
        result = publish(
            f"{NAMESPACE}/{repo}",
            dist,
            version,
            endpoint=self.hub.url,
            token=self.token,
            key_path=key or self.key,
        )
        return result.commit

    def tamper(self, repo: str, path: str, replacement: bytes, version: int = 1) -> None:
        """Replace one file of version `version` by other bytes, committed straight to the version branch:
        what a stolen write token or a compromised hub can do. The signed metadata still names the old
        digest. (Damaging the blob on the hub's disk no longer reaches a client: the hub re-hashes what it
        serves and answers BlobDamaged, docs/SERVING.md.)"""
        from huggingface_hub import HfApi

        HfApi(endpoint=self.hub.url, token=self.token).upload_file(
            path_or_fileobj=replacement,
            path_in_repo=path,
            repo_id=f"{NAMESPACE}/{repo}",
            repo_type="kernel",
            revision=f"v{version}",
        )


@pytest.fixture(scope="session")
def publisher(hub, tmp_path_factory) -> Publisher:
    token = hub.token("loader-tests", write=[NAMESPACE])
    hub.org(NAMESPACE, trusted=True, members=("loader-tests",))
    work = tmp_path_factory.mktemp("loader")
    return Publisher(hub, token, work / "publisher.pem", work)


@pytest.fixture(scope="session")
def fused_mlp_v1(publisher) -> tuple[str, str, Path]:
    """`loaderorg/fused-mlp` v1 from the unmodified sources: (repo id, commit, dist)."""
    dist = publisher.build("fused-mlp")
    return f"{NAMESPACE}/fused-mlp", publisher.publish("fused-mlp", dist), dist


@pytest.fixture
def run_python():
    """run(code, env) -> the JSON that `code`, run in a fresh interpreter, prints last."""
    return _run_python


def _run_python(code: str, env: dict[str, str], timeout: float = 300) -> dict:
    full_env = {
        **os.environ,
        **env,
        "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(REPO_ROOT / "kernel_src")]),
    }
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env=full_env,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert proc.returncode == 0, f"subprocess failed ({proc.returncode}):\n{proc.stderr[-4000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])
