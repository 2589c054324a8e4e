"""`kernel-hub build --out` deletes nothing but an earlier build: not the sources, not tracked files, not a
folder someone else wrote; and a build writes nothing beside the sources (build/ holds sources only). Runs in
a throw-away git checkout holding a copy of the sources."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from variant_names import CUDA_VARIANT

from registry.publisher import build as b
from registry.publisher.cuda import cuda_recipe
from registry.publisher.out_dir import MARKER

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def checkout(tmp_path) -> Path:
    """A git checkout with kernel_src/fused_mlp and build/matrix.toml committed."""
    repo = tmp_path / "repo"
    shutil.copytree(ROOT / "kernel_src" / "fused_mlp", repo / "kernel_src" / "fused_mlp",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))  # fmt: skip
    (repo / "build").mkdir()
    shutil.copyfile(ROOT / "build" / "matrix.toml", repo / "build" / "matrix.toml")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "sources"], check=True)
    return repo


def _files(repo: Path) -> set[str]:
    return {p.relative_to(repo).as_posix() for p in repo.rglob("*") if p.is_file() and ".git" not in p.parts}


def _build_cli(repo: Path, out: str) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "registry.cli", "build", "--source", "kernel_src/fused_mlp", "--out", out,
            "--variant", "torch-cpu", "--no-aot"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(argv, cwd=repo, env=env, capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.parametrize(
    ("out", "why"),
    [
        ("kernel_src", "contains --source"),  # what an old error message suggested: it deleted the sources
        ("kernel_src/fused_mlp", "is --source"),
        ("kernel_src/fused_mlp/dist", "lies inside --source"),
        ("build/dist", "holds files the git repository tracks (build/matrix.toml)"),
        (".", "contains --source"),
    ],
)
def test_build_refuses_sources_and_tracked_folders(checkout, out, why):
    before = _files(checkout)
    proc = _build_cli(checkout, out)
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kernel-hub build: --out ") and why in lines[0], lines
    assert "Traceback" not in proc.stderr and "choose" in lines[0]
    assert _files(checkout) == before  # nothing deleted, nothing written


def test_build_replaces_only_its_own_output(checkout):
    foreign = checkout / "dist" / "fused-mlp"
    foreign.mkdir(parents=True)
    (foreign / "notes.txt").write_text("mine")
    proc = _build_cli(checkout, "dist/fused-mlp")
    assert proc.returncode == 1 and f"no {MARKER} in it" in proc.stderr, proc.stderr
    assert (foreign / "notes.txt").read_text() == "mine"

    (foreign / "notes.txt").unlink()  # an empty folder may be used
    first = _build_cli(checkout, "dist/fused-mlp")
    assert first.returncode == 0, first.stderr
    assert (foreign / MARKER).is_file() and (foreign / "build" / "torch-cpu" / "metadata.json").is_file()
    (foreign / "build" / "stale.txt").write_text("from the earlier build")
    again = _build_cli(checkout, "dist/fused-mlp")  # its own output: replaced whole
    assert again.returncode == 0, again.stderr
    assert not (foreign / "build" / "stale.txt").exists() and (foreign / MARKER).is_file()
    (foreign / MARKER).unlink()  # a dist built before the marker existed: only build/<variant>/metadata.json
    assert _build_cli(checkout, "dist/fused-mlp").returncode == 0 and (foreign / MARKER).is_file()


def test_build_api_refuses_too(checkout):
    source = checkout / "kernel_src" / "fused_mlp"
    with pytest.raises(b.BuildError, match="contains --source"):
        b.build(
            source, checkout / "kernel_src", checkout / "build" / "matrix.toml", aot=False, only=["torch-cpu"]
        )
    assert (source / "__init__.py").is_file()


# A CUDA recipe as the builder calls it (registry/publisher/cuda.py): it records where it was told to work.
_RECIPE = """
import json
from pathlib import Path


class CudaBuildUnavailable(Exception):
    pass


class CudaBuildError(Exception):
    pass


class TritonAot:
    def __init__(self, **kwargs):
        pass


def cuda_unavailable_reason(python=None):
    return None


def build_cuda_variant(package_dir, out_dir, matrix, python, *, triton=None, archs=None):
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    (Path(out_dir) / "scratch.txt").write_text("build files")
    (Path(__file__).parent / "out_dir.txt").write_text(str(Path(out_dir).resolve()))
    so = Path(package_dir) / "cuda" / "_C.abi3.so"
    so.write_bytes(b"not a real extension")
    (so.parent / "build.json").write_text(json.dumps({"archs": list(archs), "ptx": [], "checks": []}))
    return so
"""


def test_the_cuda_build_writes_nothing_beside_the_sources(checkout):
    """The builder gives the CUDA recipe a scratch folder of the build's own: build/ holds sources only."""
    recipe = checkout / "build" / "cuda"
    recipe.mkdir()
    (recipe / "build_variant.py").write_text(_RECIPE)
    before = _files(checkout)
    cuda = CUDA_VARIANT
    argv = [sys.executable, "-m", "registry.cli", "build", "--source", "kernel_src/fused_mlp", "--out", "dist/k",
            "--variant", cuda, "--no-aot", "--require-cuda"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        argv, cwd=checkout, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stderr
    out_dir = Path((recipe / "out_dir.txt").read_text())
    assert not out_dir.is_relative_to(checkout) and not out_dir.exists()  # the build's temporary folder, gone
    written = {f for f in _files(checkout) - before if not f.startswith("dist/k/")}
    assert written == {"build/cuda/out_dir.txt"}, written
    assert (checkout / "dist" / "k" / "build" / cuda / "fused_mlp" / "cuda" / "_C.abi3.so").is_file()


def test_the_recipe_command_builds_into_an_ignored_output_folder():
    """`python build/cuda/build_variant.py` writes under dist/ (git-ignored), not build/ or kernel_src/."""
    out = cuda_recipe(ROOT / "build" / "cuda").DEFAULT_OUT  # the recipe as the builder imports it
    assert not out.is_relative_to(ROOT / "build") and not out.is_relative_to(ROOT / "kernel_src")
    ignored = subprocess.run(
        ["git", "-C", str(ROOT), "check-ignore", "-q", str(out / "stage" / "x.py")], check=False
    )
    assert ignored.returncode == 0, f"{out} is not git-ignored"
    assert "_work" not in (ROOT / ".gitignore").read_text()
