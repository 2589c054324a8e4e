"""bench/probe_chain_backward.py reads a probe build's stamps right and its workloads run through the public ops
(on CPU, the package's eager reference): a device call spent on a probe that cannot parse or run is lost."""

import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import harness
import probe_chain_backward as probe


def stamps(program: int, times_ns: list[int]) -> str:
    return "".join(f"PHASE {program} {i} {t}\n" for i, t in enumerate(times_ns))


def test_summary_is_per_phase_over_programs_of_the_traced_launch_only():
    warm = stamps(0, [1, 2, 3, 4, 5, 6]) + stamps(1, [1, 2, 3, 4, 5, 6])  # a warm-up launch: dropped
    # Two programs over one layer; program 1 has no d-input tile (its "slices ready" stamp is 0: skipped).
    traced = stamps(0, [10_000, 11_000, 15_000, 20_000, 30_000, 30_500]) + stamps(
        1, [12_000, 12_500, 0, 16_000, 26_000, 30_500]
    )
    (rec,) = probe.summarize(warm + "WARM\n" + traced + "END gated 16 1\n")
    assert (rec["workload"], rec["rows"], rec["programs"]) == ("gated", 16, 2)
    by_name = {p["phase"]: p for p in rec["phases"]}
    assert list(by_name) == probe.phase_names(1)
    assert by_name["entry"] == {"phase": "entry", "programs": 2, "min": 0.0, "median": 1.0, "max": 2.0}
    assert by_name["L0 slices ready"]["programs"] == 1 and by_name["L0 slices ready"]["max"] == 5.0
    assert by_name["L0 d weight"]["min"] == 16.0 and by_name["L0 d weight"]["max"] == 20.0


def test_phase_names_follow_the_kernel_order_last_layer_first():
    names = probe.phase_names(2)
    assert names[:3] == ["entry", "prefetch issued", "L1 slices ready"]
    assert names[-1] == "L0 barrier" and len(names) == 2 + 4 * 2


@pytest.mark.parametrize("workload,layers", [("gated", 2), ("mlp", 3)])
def test_workloads_run_forward_and_backward_through_the_public_ops(workload, layers):
    kernel = harness.import_variant_dir(ROOT / "kernel_src" / "fused_mlp", "probe-test")
    torch.manual_seed(0)
    assert probe.run_one(kernel, workload, 3, device="cpu") == layers
