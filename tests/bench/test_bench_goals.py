"""Issue 42's goals for bench/, kept from regressing: at most 15 files and 3,000 lines in all (BENCHMARKS.md
included), BENCHMARKS.md at most 300 lines, no result files in git (every run appends to the git-ignored CSV or
writes its JSON elsewhere), and one harness (bench/harness.py) that every script imports."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
RESULT_SUFFIXES = {".json", ".csv", ".log", ".patch", ".txt", ".jsonl", ".out"}


def tracked() -> list[Path]:
    """bench/'s files as git has them (an untracked scratch file or the run CSV is not part of the tree)."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        return sorted(p for p in BENCH.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    out = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "bench"], capture_output=True, text=True, check=True
    )
    return [ROOT / line for line in out.stdout.splitlines() if (ROOT / line).is_file()]


def test_bench_has_at_most_15_files_and_3000_lines():
    files = tracked()
    lines = {p.name: len(p.read_text().splitlines()) for p in files}
    assert len(files) <= 15, f"{len(files)} files in bench/ (goal <= 15): {sorted(lines)}"
    assert sum(lines.values()) <= 3000, f"{sum(lines.values())} lines in bench/ (goal <= 3,000): {lines}"


def test_benchmarks_md_is_at_most_300_lines():
    n = len((BENCH / "BENCHMARKS.md").read_text().splitlines())
    assert n <= 300, f"bench/BENCHMARKS.md has {n} lines (goal <= 300): merge superseded tables, drop history"


def test_no_result_files_or_folders_in_bench():
    files = tracked()
    results = [p for p in files if p.suffix in RESULT_SUFFIXES]
    nested = [p for p in files if p.parent != BENCH]
    assert not results, f"result files belong in $BENCH_CSV or --json outside git: {results}"
    assert not nested, f"bench/ keeps its scripts at its top level, no dated folders: {nested}"


def test_every_script_uses_the_one_harness():
    scripts = [p for p in tracked() if p.suffix == ".py" and p.name != "harness.py"]
    assert scripts
    uses = re.compile(r"^(import harness|from harness import)", re.MULTILINE)
    missing = [p.name for p in scripts if not uses.search(p.read_text())]
    assert not missing, f"these scripts do not use bench/harness.py: {missing}"


@pytest.mark.skipif(shutil.which("duplicates") is None, reason="the duplicates tool is not installed here")
def test_duplicates_finds_no_pair_in_bench():
    out = subprocess.run(
        ["duplicates", "--repo", str(BENCH)], capture_output=True, text=True, check=False
    ).stdout
    assert "no duplicates" in out, out
