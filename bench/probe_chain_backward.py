"""Where the persistent backward kernel's time goes, phase by phase and program by program.

Needs a probe build of the stable-ABI variant: chain_backward.cu compiled with FUSED_MLP_TRACE_PHASES defined
(every program's thread 0 records %globaltimer at the end of each phase and prints the stamps when the kernel
ends; never shipped). Make one from a clone:

    sed -i '1i #define FUSED_MLP_TRACE_PHASES 1' kernel_src/fused_mlp/cuda/csrc/chain_backward.cu
    kernel-hub build --source kernel_src/fused_mlp --arch sm_90a --no-aot \\
        --variant torch-stable-abi211-cu130-x86_64-linux --out dist/fused-mlp-probe
    python bench/probe_chain_backward.py --variant-dir dist/fused-mlp-probe/build/torch-stable-abi211-cu130-x86_64-linux

A child process runs each workload's forward + backward through the public op (the chain_backward step forced
to the persistent kernel), a few times to warm up, then once between markers; the parent reads that launch's
stamps and prints, per phase, when programs reach its end (µs after the first program's entry: min / median /
max over the programs that have the phase). The printf at the kernel's end runs after the last stamp, so it does
not move the stamps; a launch that prints still costs more than one that does not, so only the spans between
phases mean anything, not the kernel's total against other runs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from registry.client.workloads import Workload, api_forward, make_inputs

LAYERS = {"gated": 2, "mlp": 3}  # the layers the backward kernel walks: the gated layer + down; three linears
LAYER_PHASES = ("slices ready", "d input", "d weight", "barrier")


def phase_names(layers: int) -> list[str]:
    """The stamp names of a kernel over `layers` layers, in the kernel's order (the last layer first)."""
    names = ["entry", "prefetch issued"]
    for step in range(layers):
        names += [f"L{layers - 1 - step} {p}" for p in LAYER_PHASES]
    return names


def run_one(kernel, workload: str, rows: int, device: str = "cuda") -> int:
    """Forward + backward of `workload` (the shared bench workload: gated H=768 I=3072, or mlp 3x1024) at `rows`
    through the public op; returns the number of layers its backward kernel walks."""
    import torch

    w = Workload(workload, rows, train=True)
    out = api_forward(w, make_inputs(w, torch.bfloat16, device), kernel)
    out.backward(torch.randn_like(out))
    return LAYERS[workload]


def child(variant_dir: Path, rows_list: list[int]) -> int:
    """Runs every (workload, rows) with markers on fd 1 around the traced launch."""
    import ctypes

    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import harness

    kernel = harness.import_variant_dir(variant_dir, "probe")
    # Reading BACKEND starts CUDA and loads the chosen backend: the op library registers its ops only then.
    if kernel.BACKEND != "cuda":
        raise SystemExit(f"{variant_dir}: the CUDA backend did not load ({kernel.BACKEND_SKIPPED})")
    ns = getattr(torch.ops, kernel.OPS_NAMESPACE)
    ns.cuda_set_path("chain_backward", "persistent")
    libc = ctypes.CDLL(None)

    def mark(text: str) -> None:
        torch.cuda.synchronize()  # the kernels' printf lands in stdout by the time this returns
        libc.fflush(None)
        os.write(1, f"{text}\n".encode())

    for workload in LAYERS:
        for rows in rows_list:
            for _ in range(3):
                run_one(kernel, workload, rows)
            mark("WARM")
            layers = run_one(kernel, workload, rows)
            mark(f"END {workload} {rows} {layers}")
    return 0


def summarize(text: str) -> list[dict]:
    """One record per traced launch: per phase, the min / median / max over programs (µs after the first entry)."""
    records, stamps = [], []
    for line in text.splitlines():
        parts = line.split()
        if parts[:1] == ["WARM"]:
            stamps = []
        elif parts[:1] == ["PHASE"]:
            stamps.append((int(parts[1]), int(parts[2]), int(parts[3])))
        elif parts[:1] == ["END"]:
            workload, rows, layers = parts[1], int(parts[2]), int(parts[3])
            t0 = min(t for _, i, t in stamps if i == 0)
            phases = []
            for i, name in enumerate(phase_names(layers)):
                ts = [(t - t0) / 1e3 for _, j, t in stamps if j == i and t > 0]
                if ts:
                    phases.append(
                        {
                            "phase": name,
                            "programs": len(ts),
                            "min": min(ts),
                            "median": statistics.median(ts),
                            "max": max(ts),
                        }
                    )
            records.append(
                {
                    "workload": workload,
                    "rows": rows,
                    "programs": len({b for b, _, _ in stamps}),
                    "phases": phases,
                }
            )
            stamps = []
    return records


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--variant-dir", type=Path, required=True, help="the probe build's stable-ABI variant dir"
    )
    parser.add_argument("--rows", default="1,16", help="comma-separated batch sizes")
    parser.add_argument("--json", type=Path, help="write the records here")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    rows = [int(r) for r in args.rows.split(",")]
    if args.child:
        return child(args.variant_dir, rows)
    cmd = [sys.executable, __file__, "--child", "--variant-dir", str(args.variant_dir), "--rows", args.rows]
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        print(proc.stdout[-2000:], proc.stderr[-4000:], sep="\n")
        return proc.returncode
    records = summarize(proc.stdout)
    for rec in records:
        print(
            f"\n{rec['workload']} at {rec['rows']} rows, {rec['programs']} programs (µs after the first entry)"
        )
        print(f"{'phase':<22}{'programs':>9}{'min':>9}{'median':>9}{'max':>9}")
        for p in rec["phases"]:
            print(f"{p['phase']:<22}{p['programs']:>9}{p['min']:>9.2f}{p['median']:>9.2f}{p['max']:>9.2f}")
    if args.json:
        args.json.write_text(json.dumps(records, indent=1))
    return 0 if records else 1


if __name__ == "__main__":
    sys.exit(main())
