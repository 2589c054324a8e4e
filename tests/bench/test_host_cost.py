"""bench/host_cost.py's training pieces build and run against a kernel loaded the way users load it (a
variant dir imported under its own name, no `fused_mlp` on sys.path): the device run of 2026-12-06 lost the
whole training breakdown to an `import fused_mlp`. On CPU the package's ops are its eager reference."""

import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import harness
import host_cost


def test_training_pieces_run_on_a_kernel_loaded_from_a_variant_dir(monkeypatch):
    monkeypatch.setitem(sys.modules, "fused_mlp", None)  # as on the device: not importable by that name
    kernel = harness.import_variant_dir(ROOT / "kernel_src" / "fused_mlp", "host-cost-test")
    torch.manual_seed(0)
    d = 24
    x = torch.randn(5, d)
    ws = [torch.randn(d, d) * d**-0.5 for _ in range(3)]
    bs = [torch.randn(d) for _ in range(3)]
    pieces = host_cost._training_pieces({"cpu": kernel}, x, ws, bs)
    assert {"train: eager mlp forward + backward", "train: cpu: mlp forward + backward"} <= set(pieces)
    results = {name: fn() for name, fn in pieces.items()}

    eager, ours = (
        results["train: eager mlp forward + backward"],
        results["train: cpu: mlp forward + backward"],
    )
    assert len(eager) == len(ours) == 7  # d/dx and the three weights and biases
    for a, b in zip(ours, eager):
        assert torch.isfinite(b).all() and b.abs().sum() > 0
        torch.testing.assert_close(a, b)
