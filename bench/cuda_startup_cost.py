"""What identifying the GPU costs in a fresh process after `import torch` (issue #10's warm get_kernel):
torch's CUDA start-up (is_available, then get_device_capability), a first allocation, and
registry.client.gpu's NVML read, importing a built variant (`--variant-dir`). Each measured in its own fresh process, seconds.

    python bench/cuda_startup_cost.py [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROBES = {
    "torch.cuda.is_available": "torch.cuda.is_available()",
    "is_available + get_device_capability": "torch.cuda.is_available(); torch.cuda.get_device_capability()",
    "is_available + capability + first allocation": (
        "torch.cuda.is_available(); torch.cuda.get_device_capability(); torch.zeros(1, device='cuda')"
    ),
    "registry.client.gpu.current_gpu (NVML)": "from registry.client.gpu import current_gpu; current_gpu()",
}
CHILD = (
    "import sys, time, json, torch\n"
    "t = time.perf_counter()\n"
    "exec(sys.argv[1])\n"
    "print(json.dumps({'s': time.perf_counter() - t, 'cuda_initialized': torch.cuda.is_initialized()}))\n"
)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--variant-dir", action="append", default=[], help="also time importing this built variant"
    )
    args = ap.parse_args()
    rows = {}
    probes = dict(PROBES)
    for d in args.variant_dir:
        probes[f"import {Path(d).name}"] = f"sys.path.insert(0, {str(Path(d).resolve())!r}); import fused_mlp"
    for name, stmt in probes.items():
        runs = []
        for _ in range(args.repeats):
            proc = subprocess.run(
                [sys.executable, "-c", CHILD, stmt], cwd=ROOT, capture_output=True, text=True, check=False
            )
            runs.append(
                json.loads(proc.stdout.strip().splitlines()[-1])
                if proc.returncode == 0
                else proc.stderr[-300:]
            )
        rows[name] = runs
        print(name, runs, flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
