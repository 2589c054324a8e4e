"""Where the gated MLP's GPU time goes, per kernel, for each loaded variant and the ways a user may hold the weights.

The ops table (bench_ops.py) and the path sweep (bench_paths.py) timed the same stable-ABI gated_mlp at 8192
rows 15 µs apart in one run (2026-12-04 run 4: 192.4 vs 177.5 µs). They differ in the inputs (how the gate and
up weights were allocated, the down weight's scale) and in what ran before. This tool times the public op in a
CUDA graph for several input layouts, interleaved over rounds (so drift in clocks or heat shows as spread, not as
a difference), and lists each kernel's GPU time inside the graph (torch.profiler), next to cuBLAS's own GEMMs
for the same shapes (torch.mm on [M, 2I] and the down projection).

    python bench/gated_breakdown.py --variant-dir DIR=stable-abi [--variant-dir DIR=torch-cuda] \\
        [--rows 1024,8192] [--rounds 3] [--json out.json]
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
import harness

from registry.client.workloads import Workload, make_inputs

H, I = 768, 3072


def layouts(m: int, dt: torch.dtype, device: str = "cuda") -> dict[str, dict]:
    """name -> {x, wg, wu, wd, distance_bytes}: the same problem with the weights held as users hold them."""

    def r(*shape, scale=1.0):
        return torch.randn(*shape, device=device, dtype=dt) * scale

    out = {}
    torch.manual_seed(0)
    # bench_ops' inputs (fp32 randn cast to bf16: its own allocation order)
    a = make_inputs(Workload("gated", m), dt, device)
    out["workloads"] = a
    x, wg, wu, wd = r(m, H), r(I, H, scale=H**-0.5), r(I, H, scale=H**-0.5), r(H, I)
    out["bench_paths"] = {"x": x, "wg": wg, "wu": wu, "wd": wd}  # bench_paths' inputs (down weight unscaled)
    gu = r(2 * I, H, scale=H**-0.5)  # one [gate; up] parameter, as fused checkpoints hold it
    out["one_tensor_gate_first"] = {"x": x, "wg": gu[:I], "wu": gu[I:], "wd": a["wd"]}
    out["one_tensor_up_first"] = {"x": x, "wg": gu[I:], "wu": gu[:I], "wd": a["wd"]}
    # The Hopper gate/up kernel reads both weights through one 3D descriptor whose outer stride is their
    # distance: does that distance matter (DRAM channel or L2 slice aliasing)? Same bytes, other gaps.
    for gap in (256, 64 << 10, (1 << 20) + 256, 8 << 20):
        buf = torch.empty(2 * I * H + gap // 2, device=device, dtype=dt)
        wg_, wu_ = buf[: I * H].view(I, H), buf[I * H + gap // 2 :].view(I, H)
        wg_.copy_(gu[:I]), wu_.copy_(gu[I:])
        out[f"gap_{gap}B"] = {"x": x, "wg": wg_, "wu": wu_, "wd": a["wd"]}
    for t in out.values():  # what the launchers see: UP_FIRST and the plane distance
        t["distance_bytes"] = t["wu"].data_ptr() - t["wg"].data_ptr()
    return out


def kernel_times(replay: Callable[[], None], calls: int) -> dict[str, float]:
    """kernel name -> GPU µs per call inside one replay of a graph of `calls` calls (torch.profiler, CUPTI)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        replay()
        torch.cuda.synchronize()
    times: dict[str, float] = {}
    for e in prof.key_averages():
        us = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0.0)
        if us and e.key not in ("Activity Buffer Request",):
            times[e.key[:90]] = round(us / calls, 2)
    return dict(sorted(times.items(), key=lambda kv: -kv[1]))


def main(argv: list[str] | None = None) -> int:
    parser = harness.tool_parser(__doc__)
    parser.add_argument("--rows", default="1024,8192")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    kernels = harness.load_kernels(args)
    dt = torch.bfloat16
    repeat = 20
    records = []
    with torch.no_grad():
        for m in [int(v) for v in args.rows.split(",")]:
            calls: dict[str, Callable[[], object]] = {}
            layouts_seen: dict[str, int] = {}
            lays = layouts(m, dt)
            for lname, t in lays.items():
                for label, k in kernels.items():
                    calls[f"{label} {lname}"] = lambda k=k, t=t: k.gated_mlp(
                        t["x"], t["wg"], t["wu"], t["wd"], "gelu_tanh"
                    )
                    layouts_seen[f"{label} {lname}"] = t["distance_bytes"]
            t = lays["workloads"]
            wgu = torch.cat([t["wg"], t["wu"]])
            h = torch.randn(m, I, device="cuda", dtype=dt)
            calls["cublas mm [M,2I]"] = lambda t=t, wgu=wgu: torch.mm(t["x"], wgu.t())
            calls["cublas down mm"] = lambda t=t, h=h: torch.mm(h, t["wd"].t())
            calls["eager"] = lambda t=t: F.linear(
                F.gelu(F.linear(t["x"], t["wg"]), approximate="tanh") * F.linear(t["x"], t["wu"]), t["wd"]
            )
            replays = {name: harness.graphed(fn, repeat) for name, fn in calls.items()}
            times: dict[str, list[float]] = {name: [] for name in calls}
            for _ in range(args.rounds):  # interleaved: drift hits every entry alike
                for name, replay in replays.items():
                    times[name].append(harness.replay_us(replay, repeat, replays=5))
            for name, replay in replays.items():
                rec = {"rows": m, "call": name, "distance_bytes": layouts_seen.get(name), "gpu_us": [round(v, 2) for v in times[name]],
                       "median_us": round(statistics.median(times[name]), 2),
                       "kernels_us": kernel_times(replay, repeat)}  # fmt: skip
                records.append(rec)
                print(f"M={m:5d} {name:42s} {rec['median_us']:8.2f}  {rec['gpu_us']}  {rec['kernels_us']}")
            # after each row count: a stage that times out keeps what it measured
            report = {
                "environment": harness.environment(),
                "kernels": harness.describe(kernels),
                "rows": records,
            }
            harness.write_json(args.json, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
