"""bench/harness.py builds every preset's block the same way for ours and for each anchor: on CPU, small
presets of each op/activation/bias kind through eager, cuBLASLt's epilogue form and the package's public
ops (a variant dir imported as users import it) agree with the float64 reference; the CSV gets one line per
number, appended."""

import csv
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import harness

from registry.spec.presets import Case, Preset

SMALL = (
    Preset("swiglu", "gated_mlp", (24, 64), "silu"),
    Preset("geglu", "gated_mlp", (24, 64), "gelu_tanh"),
    Preset("gpt2ish", "mlp", (24, 64, 24), "gelu_tanh", bias=True),
    Preset("bertish", "mlp", (24, 64, 24), "gelu", bias=True),
    Preset("relu3", "mlp", (32, 32, 32, 32), "relu", bias=True),
)


@pytest.fixture(scope="module")
def kernel():
    return harness.import_variant_dir(ROOT / "kernel_src" / "fused_mlp", "harness-test")


@pytest.mark.parametrize("p", SMALL, ids=lambda p: p.name)
def test_every_implementation_computes_the_block(p, kernel):
    torch.manual_seed(0)
    a = harness.inputs(p, 5, torch.float32, device="cpu")
    assert a["x"].shape == (5, p.hidden) and [tuple(w.shape) for w in a["ws"]] == list(p.weight_shapes)
    assert len(a["bs"]) == (len(p.weight_shapes) if p.bias else 0)
    expected = harness.reference64(p, a)
    impls = harness.implementations(p, a, {"cpu": kernel}, train=False, compile_modes=())
    assert ("cublaslt_epilogue" in impls) == (p.activation == "relu")  # gelu_tanh too, on CUDA
    for name, build in impls.items():
        err = harness.rel_err(harness.as_call(Case(p, 5, "float32"), a, build())(), expected)
        assert err < 1e-5, f"{p.name} {name}: {err}"


def test_training_call_gives_a_gradient_of_every_leaf(kernel):
    p = SMALL[2]
    a = harness.inputs(p, 5, torch.float32, train=True, device="cpu")
    step = harness.as_call(
        Case(p, 5, "float32", True), a, lambda: harness.ours(p, kernel, a["x"], a["ws"], a["bs"])
    )
    grads = step()
    assert len(grads) == 1 + 2 + 2 and all(torch.isfinite(g).all() for g in grads)


def test_floor_is_the_slower_of_bytes_and_flops(monkeypatch):
    monkeypatch.setattr(harness, "peaks", lambda gpu=None: (1e12, 1e12))
    p = Preset("t", "gated_mlp", (1000, 4000), "silu")
    weights, rows = 3 * 4000 * 1000 * 2, 2 * 1000 * 2  # bf16 bytes: weights, one row in and out
    assert harness.floor_us(Case(p, 1, "bfloat16"), 2) == pytest.approx((weights + rows) / 1e6)
    # training: weights read twice and their gradients written; bandwidth-bound at one row
    assert harness.floor_us(Case(p, 1, "bfloat16", True), 2) == pytest.approx(3 * (weights + rows) / 1e6)
    # compute-bound at 8192 rows
    assert harness.floor_us(Case(p, 8192, "bfloat16"), 2) == pytest.approx(p.flops(8192) / 1e6)


def test_csv_appends_one_line_per_number(tmp_path, monkeypatch):
    path = tmp_path / "data.csv"
    monkeypatch.setenv("BENCH_CSV", str(path))
    rows = [
        {
            "case": "gpt2 M=1 bfloat16",
            "impl": "eager",
            "gpu_us": 3.25,
            "wall_us": None,
            "rel_err": float("nan"),
        }
    ]
    harness.append_csv("ops", rows, ("case",), ("gpu_us", "wall_us", "rel_err"), gpu="card")
    harness.append_csv("ops", rows, ("case",), ("gpu_us",), gpu="card")
    lines = list(csv.reader(path.open()))
    assert lines[0] == list(harness.CSV_COLUMNS)
    body = [line[1:] for line in lines[1:]]
    assert body[0] == ["card", "ops", "gpt2 M=1 bfloat16", "eager", "gpu_us", "3.25"]
    assert body[1][-2:] == ["rel_err", "nan"] and body[2][-2:] == ["gpu_us", "3.25"] and len(body) == 3
