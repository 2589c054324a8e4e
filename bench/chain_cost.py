"""Where the persistent chain kernel's time goes: GPU µs per call (graph replay) of the stable-ABI `mlp` with
1-4 layers of 1024x1024 and of `gated_mlp` H=768 I=3072, forced to the persistent kernel and to layer-by-layer
steps, at 1 and 16 rows (and 64). The step from one layer to two shows one grid barrier plus a layer; the step
from 1 to 16 rows shows the cost of reading the activations (every program reads a layer's whole input).
Also a stack of 8 distinct copies of the weights called in turn, so the weights come from HBM, not L2.

    python bench/chain_cost.py --variant-dir DIR=cuda [--json out.json]
"""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness


def main(argv: list[str] | None = None) -> int:
    got = harness.parse_and_load_cuda(harness.tool_parser(__doc__), argv, "chain_cost")
    if got is None:
        return 2
    args, label, kernel = got
    ns = getattr(torch.ops, kernel.OPS_NAMESPACE)
    d = torch.bfloat16

    def r(*shape, scale=1.0):
        return torch.randn(*shape, device="cuda", dtype=d) * scale

    copies = 8
    mlp_w = [[r(1024, 1024, scale=1024**-0.5) for _ in range(4)] for _ in range(copies)]
    mlp_b = [[r(1024) for _ in range(4)] for _ in range(copies)]
    gated_w = [
        (r(3072, 768, scale=768**-0.5), r(3072, 768, scale=768**-0.5), r(768, 3072)) for _ in range(copies)
    ]
    rows = []
    with torch.no_grad():
        for m in (1, 16, 64):
            x, xg = r(m, 1024), r(m, 768)
            cases = {
                f"mlp {n} layer(s)": partial(kernel.mlp, x, mlp_w[0][:n], mlp_b[0][:n], "relu")
                for n in (1, 2, 3, 4)
            }
            cases["gated 768x3072"] = partial(kernel.gated_mlp, xg, *gated_w[0], "gelu_tanh")
            cases[f"mlp 3 layers x {copies} weight copies"] = partial(
                lambda x: [kernel.mlp(x, mlp_w[c][:3], mlp_b[c][:3], "relu") for c in range(copies)], x
            )
            cases[f"gated x {copies} weight copies"] = partial(
                lambda xg: [kernel.gated_mlp(xg, *gated_w[c], "gelu_tanh") for c in range(copies)], xg
            )
            for name, call in cases.items():
                row = {"rows": m, "case": name}
                for impl in ("persistent", "layers"):
                    ns.cuda_set_path("chain", impl)
                    try:
                        row[impl] = harness.gpu_us(call)
                    finally:
                        ns.cuda_set_path("chain", "table")
                rows.append(row)
                print(
                    f"M={m:<3} {name:<34} persistent {row['persistent']:7.2f}  layers {row['layers']:7.2f}",
                    flush=True,
                )
    harness.write_json(
        args.json,
        {"environment": harness.environment(), "kernels": harness.describe({label: kernel}), "rows": rows},
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
