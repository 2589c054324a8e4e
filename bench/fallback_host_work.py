"""Host work of the Triton (torch-cuda fallback) backend, measured on any machine: the Python the package runs
per layer of a many-layer model, with every kernel launch replaced by a counter.

The fallback's small-batch model rows on the H200 are host-bound (wall far above GPU time), so the Python
around the launches decides them. A GPU is not needed to count that Python: CPU tensors go through the same
code under TRITON_INTERPRET=1, and the stubbed launch (`forward.launch`, `gemm.launch`) drops the interpreter's
kernel execution. What remains is argument checks, config lookups, allocations, autograd bookkeeping and
the torch matmuls of backward (real CPU work at `--dim`, kept small so it stays minor). Compare runs of this
script on two commits on one machine; absolute µs depend on the host.

    TRITON_INTERPRET=1 PYTHONPATH=kernel_src python bench/fallback_host_work.py [--cublas-rows] [--json out.json]

--cublas-rows: the tensors report sm_90a, whose table (configs.CUBLAS_LINEAR_ABOVE) gives relu/none GEMMs above one
row to cuBLAS, and each such cuBLAS call is counted too (it returns an unwritten tensor of the result's shape):
the Python around the H100/H200's small-batch relu mlp and gated down projection.
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("TRITON_INTERPRET", "1")

import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=32)
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--dim", type=int, default=32, help="hidden size (small: the CPU matmuls stay minor)")
    parser.add_argument("--dtype", default="bfloat16", choices=("float32", "bfloat16", "float16"))
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument(
        "--cublas-rows", action="store_true", help="take sm_90a's cuBLAS rows (calls counted)"
    )
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    import fused_mlp
    from fused_mlp.triton import forward, gemm

    if fused_mlp._CPU_OPS.__name__ != "fused_mlp.triton.ops":
        raise SystemExit("the Triton backend does not take CPU tensors here: set TRITON_INTERPRET=1")
    launches = [0]

    def counted(*_args, **_kwargs) -> None:
        launches[0] += 1

    forward.launch = gemm.launch = counted  # every kernel launch of the backend goes through these two names
    if args.cublas_rows:

        def vendor(x, w, b, activation, out=None):
            launches[0] += 1
            return out if out is not None else x.new_empty((x.shape[0], w.shape[0]))

        forward.device_arch = gemm.device_arch = lambda t: "sm_90a"
        forward.vendor_linear = vendor

    dt, d, n = getattr(torch, args.dtype), args.dim, args.layers
    torch.manual_seed(0)
    mlp_w = [[(torch.randn(d, d) * d**-0.5).to(dt).requires_grad_() for _ in range(3)] for _ in range(n)]
    mlp_b = [[torch.randn(d).to(dt).requires_grad_() for _ in range(3)] for _ in range(n)]
    gated_w = [
        [(torch.randn(*s) * d**-0.5).to(dt).requires_grad_() for s in ((4 * d, d), (4 * d, d), (d, 4 * d))]
        for _ in range(n)
    ]

    def layer(kind: str, i: int, h: torch.Tensor) -> torch.Tensor:
        if kind == "mlp":
            return fused_mlp.mlp(h, mlp_w[i], mlp_b[i], "relu")
        return fused_mlp.gated_mlp(h, *gated_w[i], "gelu_tanh")

    def step(kind: str, train: bool) -> None:
        x = torch.randn(args.rows, d).to(dt).requires_grad_(train)
        with torch.set_grad_enabled(train):
            h = x
            for i in range(n):
                h = h + layer(kind, i, h)
            if train:
                h.float().sum().backward()

    results = {}
    for kind in ("mlp", "gated"):
        for train in (False, True):
            step(kind, train)  # first call: imports, config tables
            launches[0] = 0
            start = time.perf_counter()
            for _ in range(args.repeats):
                step(kind, train)
            per_layer = (time.perf_counter() - start) / args.repeats / n * 1e6
            name = f"{kind} {'train' if train else 'infer'}"
            results[name] = {
                "host_us_per_layer": round(per_layer, 1),
                "launches_per_layer": launches[0] / args.repeats / n,
            }
            print(
                f"{name:12s} {per_layer:8.1f} us per layer  {launches[0] / args.repeats / n:.1f} launches per layer"
            )
    if args.json:
        meta = {"args": vars(args), "torch": torch.__version__, "results": results}
        with open(args.json, "w") as f:
            json.dump(meta, f, indent=1)


if __name__ == "__main__":
    main()
