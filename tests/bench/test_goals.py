"""bench/goals.py reads one run's JSON and says, goal by goal, met or missed: checked on the committed raw
output of two H200 runs (session 26's ops table, session 24's model and host-cost stages), whose numbers
bench/RESULTS.md quotes."""

import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import goals

RUNS = ROOT / "bench" / "results"
SOURCES = {
    "ops.json": RUNS / "h200-2026-12-05-s26" / "run2_ops.json",
    "model.json": RUNS / "h200-2026-12-04-s24" / "run5_model.json",
    "host.json": RUNS / "h200-2026-12-04-s24" / "run7_host.json",
}


def _rows(folder: Path, ours: str = "ours:stable-abi") -> dict[str, tuple[str, str]]:
    """goal text -> (measured, status) from the printed table."""
    out = {}
    for line in goals.goals_table(folder, ours).splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 5 and cells[0].startswith("#"):
            out[cells[1]] = (cells[2], cells[4])
    return out


def test_each_goal_status_from_the_committed_runs(tmp_path):
    for name, source in SOURCES.items():
        shutil.copy(source, tmp_path / name)
    rows = _rows(tmp_path)
    assert rows["act_and_mul [8192, 3072] GPU ≤ 37 µs"] == ("36.6", "**met**")
    assert rows["gated M=8192 GPU ≤ 175 µs"] == ("191.9", "missed")
    assert rows["gated fwd+bwd M=8192 GPU ≤ 555 µs"] == ("618.0", "missed")
    assert rows["ops: ours ≤ the best anchor in every row (GPU)"] == ("7 of 10", "missed")
    assert rows["ops: never slower than eager (wall)"] == ("10 of 10", "**met**")
    assert rows["host of one mlp call (M=16) ≤ 10 µs"] == ("19.5", "missed")
    assert rows["mlp infer M=16: wall ≤ 0.5× eager"] == ("0.30×", "**met**")
    assert rows["gated train M=16: wall ≤ 0.5× eager"] == ("0.58×", "missed")
    assert rows["gated train M=16: graph ≤ the best anchor"] == ("1911.9", "missed")  # compile 1857
    assert rows["mlp train: 24 new sizes ≤ 2× 24 calls of one size"] == ("0.99×", "**met**")


def test_a_missing_file_is_reported_not_measured(tmp_path):
    shutil.copy(SOURCES["ops.json"], tmp_path / "ops.json")
    table = goals.goals_table(tmp_path)
    assert "| goals from model.json | not measured |" in table
    assert "| goals from host.json | not measured |" in table


def test_another_implementation_label_is_judged_instead(tmp_path):
    shutil.copy(SOURCES["ops.json"], tmp_path / "ops.json")
    assert _rows(tmp_path)["mlp M=16 wall ≤ 14 µs"] == ("23.1", "missed")  # stable-abi, the default
    assert _rows(tmp_path, "ours:torch-cuda")["mlp M=16 wall ≤ 14 µs"] == ("202.7", "missed")
    assert _rows(tmp_path, "ours:torch-cuda")["ops: never slower than eager (wall)"][1] == "missed"
