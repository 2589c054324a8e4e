"""Where a bench_ops.py workload's time goes inside a CUDA graph: every GPU activity of one replayed call (kernels,
memcpy and memset nodes, which Nsight Compute's per-kernel list leaves out) with its start, duration and the idle gap
before it, from the CUDA profiler's trace of a graph replay. Complements profile_step.py: when the per-kernel sums of
two variants agree but their graph times do not, the difference is in nodes that are not kernels or between them.

    python bench/graph_timeline.py --variant-dir DIR=stable-abi --variant-dir DIR2=torch-cuda --op gated --rows 8192 \\
        --mode train [--compile] [--cublaslt] [--repeats 1,3,20] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
import harness
import profile_step

from registry.client.workloads import as_call

GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
REPEAT = 3  # calls per graph; the middle one is reported (its neighbours make its start and end steady)


def timeline(call, repeat: int = REPEAT) -> dict:
    """Activities of the middle call of a graph of `repeat` calls, replayed once under the profiler."""
    replay = harness.graphed(call, repeat)
    replay()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        replay()
        torch.cuda.synchronize()
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        prof.export_chrome_trace(f.name)
        trace = json.loads(Path(f.name).read_text())
    acts = sorted(
        (e for e in trace.get("traceEvents", []) if e.get("ph") == "X" and e.get("cat") in GPU_CATEGORIES),
        key=lambda e: e["ts"],
    )
    if not acts or len(acts) % repeat:
        return {
            "error": f"{len(acts)} GPU activities for {repeat} calls",
            "names": [e["name"][:80] for e in acts],
        }
    per = len(acts) // repeat
    mid = acts[per : 2 * per]
    t0, prev_end = mid[0]["ts"], acts[per - 1]["ts"] + acts[per - 1]["dur"]
    rows = []
    for e in mid:
        rows.append({"at_us": round(e["ts"] - t0, 2), "dur_us": round(e["dur"], 2),
                     "gap_before_us": round(e["ts"] - prev_end, 2), "kind": e["cat"], "name": e["name"][:100]})  # fmt: skip
        prev_end = e["ts"] + e["dur"]
    next_start = acts[2 * per]["ts"] if len(acts) > 2 * per else prev_end
    return {
        "activities": rows,
        "busy_us": round(sum(r["dur_us"] for r in rows), 2),
        "gaps_us": round(sum(r["gap_before_us"] for r in rows), 2),
        "span_us": round(next_start - mid[0]["ts"] + rows[0]["gap_before_us"], 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    profile_step.add_workload_args(parser)
    parser.add_argument(
        "--repeats",
        default="",
        help="also GPU µs per call from graphs of this many calls, e.g. 1,3,20 (bench_ops: 20)",
    )
    parser.add_argument("--json", type=Path, help="write the timelines here")
    args = parser.parse_args(argv)
    w, a, forwards = profile_step.workload_forwards(args)
    report = {"workload": w.name, "environment": harness.environment(), "timelines": {}}
    for label, forward in forwards.items():
        call = as_call(w, a, forward)
        t = timeline(call)
        for n in [int(r) for r in args.repeats.split(",") if r]:
            torch.cuda.synchronize()
            before = torch.cuda.memory_reserved()
            t[f"graph_of_{n}_us"] = round(harness.replay_us(harness.graphed(call, n), n), 2)
            t[f"graph_of_{n}_reserved_mib"] = round((torch.cuda.memory_reserved() - before) / 2**20, 1)
        report["timelines"][label] = t
        print(f"== {label}: {w.name}", flush=True)
        if "error" in t:
            print("  ", t)
            continue
        print(f"   span {t['span_us']} µs = busy {t['busy_us']} + gaps {t['gaps_us']}")
        print("   " + ", ".join(f"{k} {v}" for k, v in t.items() if k.startswith("graph_of_")))
        for r in t["activities"]:
            print(
                f"   {r['at_us']:9.2f} {r['dur_us']:8.2f} gap {r['gap_before_us']:6.2f} {r['kind']:10s} {r['name'][:70]}"
            )
    harness.write_json(args.json, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
