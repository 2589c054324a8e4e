"""bench/summary.py reads one run's JSON and says, goal by goal, met or missed (on reports written here in the
shape bench_ops.py, bench_model.py and host_cost.py write them)."""

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import summary


def op_row(case: str, impl: str, gpu: float, wall: float, floor: float = 1.0) -> dict:
    preset, m, dtype = case.split()[:3]
    return {"case": case, "preset": preset, "rows": int(m[2:]), "dtype": dtype, "train": "fwd+bwd" in case,
            "impl": impl, "gpu_us": gpu, "wall_us": wall, "floor_us": floor}  # fmt: skip


def write_run(folder: Path) -> None:
    env = {"environment": {"gpu": "NVIDIA H100 80GB HBM3"}}
    ops = [
        op_row("geglu-768-3072 M=8192 bfloat16", "ours:stable-abi", 191.9, 200.0),
        op_row("geglu-768-3072 M=8192 bfloat16", "eager", 230.0, 240.0),
        op_row("geglu-768-3072 M=8192 bfloat16", "liger", 243.0, 250.0),
        op_row("geglu-768-3072 M=8192 bfloat16", "ours:torch-cuda", 260.0, 270.0),
        op_row("mlp-3x1024 M=16 bfloat16", "ours:stable-abi", 5.5, 23.1),
        op_row("mlp-3x1024 M=16 bfloat16", "eager", 9.0, 20.0),
        op_row("mlp-3x1024 M=16 bfloat16", "eager_cuda_graph", 9.0, 9.0),
        op_row("mlp-3x1024 M=16 bfloat16", "ours:torch-cuda", 8.0, 202.7),
        # within 1% of the best anchor counts as at it; the reference column is no anchor
        op_row("llama-3-8b M=1 bfloat16", "ours:stable-abi", 132.0, 140.0, floor=117.0),
        op_row("llama-3-8b M=1 bfloat16", "compile", 131.3, 139.0),
        op_row("llama-3-8b M=1 bfloat16", "cublas_gemms_only", 100.0, 100.0),
    ]
    model = [
        {"model": "geglu-768-3072", "mode": "train", "rows": 16, "impl": "ours:stable-abi", "wall_us": 580.0,
         "graph_us": 1911.9},
        {"model": "geglu-768-3072", "mode": "train", "rows": 16, "impl": "eager", "wall_us": 1000.0,
         "graph_us": 2000.0},
        {"model": "geglu-768-3072", "mode": "train", "rows": 16, "impl": "compile", "wall_us": 900.0,
         "graph_us": 1857.0},
        {"model": "mlp-3x1024", "mode": "train", "impl": "ours:stable-abi", "new_over_steady": 0.99},
    ]  # fmt: skip
    host = {
        "host_us": {"stable-abi: mlp(x, ws, bs) public call": 19.5, "stable-abi: gated_mlp public call": 8.0}
    }
    (folder / "ops.json").write_text(json.dumps({**env, "rows": ops}))
    (folder / "model.json").write_text(json.dumps({**env, "layers": 32, "results": model}))
    (folder / "host.json").write_text(json.dumps({**env, "host_us": host["host_us"]}))


def _rows(folder: Path, ours: str = "ours:stable-abi") -> dict[str, tuple[str, str]]:
    """goal text -> (measured, status) from the printed table."""
    out = {}
    for line in summary.goals_table(folder, ours).splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 5 and cells[0].startswith("#"):
            out[cells[1]] = (cells[2], cells[4])
    return out


def test_each_goal_status(tmp_path):
    write_run(tmp_path)
    rows = _rows(tmp_path)
    assert rows["geglu M=8192 GPU ≤ 175 µs"] == ("191.9", "missed")
    assert rows["mlp M=16 GPU ≤ 6 µs"] == ("5.5", "**met**")
    assert rows["llama-3-8b M=1 GPU ≤ 124 µs (H100)"] == ("132.0", "missed")
    assert rows["ops: ours ≤ the best anchor + 1% in every row (GPU)"] == ("3 of 3", "**met**")
    assert rows["ops: ours ≤ the best anchor + 1% in every row (wall)"] == ("2 of 3", "missed")
    assert rows["ops: never slower than eager (wall)"] == ("2 of 3", "missed")
    assert rows["llama-3-8b M=1 bfloat16: GPU ≤ 1.06× floor"] == ("1.13×", "missed")
    assert rows["host of one mlp call (M=16) ≤ 10 µs"] == ("19.5", "missed")
    assert rows["host of one gated_mlp call (M=16) ≤ 10 µs"] == ("8.0", "**met**")
    assert rows["geglu-768-3072 train M=16: wall ≤ 0.5× eager"] == ("0.58×", "missed")
    assert rows["geglu-768-3072 train M=16: graph ≤ the best anchor"] == ("1911.9", "missed")  # compile 1857
    assert rows["mlp-3x1024 train: 24 new sizes ≤ 2× 24 calls of one size"] == ("0.99×", "**met**")


def test_a_missing_file_is_reported_not_measured(tmp_path):
    write_run(tmp_path)
    (tmp_path / "model.json").unlink()
    (tmp_path / "host.json").unlink()
    table = summary.goals_table(tmp_path)
    assert "| goals from model.json | not measured |" in table
    assert "| goals from host.json | not measured |" in table


def test_another_implementation_label_is_judged_instead(tmp_path):
    write_run(tmp_path)
    assert _rows(tmp_path)["mlp M=16 wall ≤ 14 µs"] == ("23.1", "missed")  # stable-abi, the default
    assert _rows(tmp_path, "ours:torch-cuda")["mlp M=16 wall ≤ 14 µs"] == ("202.7", "missed")
    assert _rows(tmp_path, "ours:torch-cuda")["ops: never slower than eager (GPU)"] == ("1 of 2", "missed")


def test_a_nan_never_meets_a_goal(tmp_path):
    write_run(tmp_path)
    report = json.loads((tmp_path / "ops.json").read_text())
    report["rows"][0]["gpu_us"] = float("nan")
    (tmp_path / "ops.json").write_text(json.dumps(report))
    assert _rows(tmp_path)["geglu M=8192 GPU ≤ 175 µs"][1] == "missed"
