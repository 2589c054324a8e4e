"""Smoke check of the stable-ABI variant's newest implementation paths before the benchmarks use them.

Each group below runs in a child process (a kernel that faults leaves its CUDA context unusable, so it
must not take the benchmarks' processes with it): forced to that implementation, a few calls against
float64. The last line printed is `FUSED_MLP_CUDA_DISABLE=<impls>` naming every group that failed (empty
when all passed); bench/run_gpu.sh exports it, so later stages run those steps' fallbacks
(kernel_src/fused_mlp/cuda/paths.py) and the tables still fill. Takes a few seconds per group.

    python tests/cuda/check_paths.py --variant-dir DIST/build/torch-stable-abi211-cu130-x86_64-linux
"""

from __future__ import annotations

import argparse
import functools
import os
import subprocess
import sys
from pathlib import Path

# group -> the implementation FUSED_MLP_CUDA_DISABLE turns off when the group fails.
GROUPS = {"tma": "tma", "persistent": "persistent"}
TOL = 2.5e-2  # bf16, forward and backward (tests/kernels/kernel_numerics.py)
BACKWARD_ROWS = (1, 5, 16, 17, 33, 64)  # across the 16-row tiles of its MMAs; --backward-rows for others


def rnd(*shape, scale=1.0, grad=False):
    """Fresh normal bf16 values on the GPU (never zeros), optionally requiring grad."""
    import torch

    return (torch.randn(*shape, device="cuda") * scale).to(torch.bfloat16).requires_grad_(grad)


def rel(out, want) -> float:
    """Relative error of `out` against the float64 `want`; inf when `out` has a NaN or inf."""
    import torch

    out = out.double()
    return float("inf") if not torch.isfinite(out).all() else ((out - want).norm() / want.norm()).item()


@functools.cache
def numerics():
    """tests/kernels/kernel_numerics.py: the tests' float64 oracles and tolerances (a folder, not a package)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "kernels"))
    import kernel_numerics

    return kernel_numerics


def check_tma(kernel) -> list[str]:
    """The Hopper kernels from C++: linear and gate_up (inference; training with the (g, u) store)."""
    import torch

    ns = getattr(torch.ops, kernel.OPS_NAMESPACE)
    failures = []

    for rows in (1, 300, 1100, 4096):
        for step in ("linear", "gate_up"):
            ns.cuda_set_path(step, "tma")
            try:
                x = rnd(rows, 768)
                if step == "linear":
                    w, b = rnd(1024, 768, scale=768**-0.5), rnd(1024)
                    got = kernel.linear(x, w, b, "gelu_tanh")
                    want = torch.nn.functional.gelu(
                        x.double() @ w.double().T + b.double(), approximate="tanh"
                    )
                    errs = {"forward": rel(got, want)}
                else:
                    wg, wu = (rnd(3072, 768, scale=768**-0.5, grad=True) for _ in range(2))
                    wd = rnd(768, 3072, scale=3072**-0.5, grad=True)
                    xg = x.clone().requires_grad_()
                    got = kernel.gated_mlp(xg, wg, wu, wd, "gelu_tanh")
                    p64 = [t.detach().double().requires_grad_() for t in (xg, wg, wu, wd)]
                    g = torch.nn.functional.gelu(p64[0] @ p64[1].T, approximate="tanh")
                    want = (g * (p64[0] @ p64[2].T)) @ p64[3].T
                    up = torch.randn_like(want)
                    mine = torch.autograd.grad(got, (xg, wg, wu, wd), up.to(torch.bfloat16))
                    theirs = torch.autograd.grad(want, p64, up)
                    with torch.no_grad():
                        inferred = kernel.gated_mlp(x, wg, wu, wd, "gelu_tanh")
                    errs = {"forward": rel(got, want), "inference": rel(inferred, want)}
                    errs.update({f"grad {i}": rel(a, b) for i, (a, b) in enumerate(zip(mine, theirs))})
                torch.cuda.synchronize()
            finally:
                ns.cuda_set_path(step, "table")
            bad = {k: v for k, v in errs.items() if not v <= TOL}
            print(f"tma {step} M={rows}: " + ", ".join(f"{k} {v:.1e}" for k, v in errs.items()), flush=True)
            failures += [f"{step} M={rows} {k} {v:.1e}" for k, v in bad.items()]
    return failures


def check_persistent(kernel, backward_rows=BACKWARD_ROWS) -> list[str]:
    """The persistent chain kernels (the whole small-batch forward, and the mlp backward, in one launch): mlp
    and gated_mlp at 1-64 rows against float64, eager and replayed from a CUDA graph (a grid barrier that
    deadlocks times the child out instead of hanging the run)."""
    import torch

    ns = getattr(torch.ops, kernel.OPS_NAMESPACE)
    failures = []

    ns.cuda_set_path("chain", "persistent")
    try:
        with torch.no_grad():
            for rows in (1, 16, 40, 64):
                x, ws, bs = (
                    rnd(rows, 1024),
                    [rnd(1024, 1024, scale=1024**-0.5) for _ in range(3)],
                    [rnd(1024)] * 3,
                )
                want = x.double()
                for i, (w, b) in enumerate(zip(ws, bs)):
                    want = want @ w.double().T + b.double()
                    want = torch.relu(want) if i < 2 else want
                xg, wg, wu = rnd(rows, 768), rnd(3072, 768, scale=768**-0.5), rnd(3072, 768, scale=768**-0.5)
                wd = rnd(768, 3072, scale=3072**-0.5)
                g = torch.nn.functional.gelu(xg.double() @ wg.double().T, approximate="tanh")
                want_g = (g * (xg.double() @ wu.double().T)) @ wd.double().T
                graph = torch.cuda.CUDAGraph()
                kernel.mlp(x, ws, bs, "relu"), kernel.gated_mlp(xg, wg, wu, wd, "gelu_tanh")
                with torch.cuda.graph(graph):
                    y = kernel.mlp(x, ws, bs, "relu")
                    yg = kernel.gated_mlp(xg, wg, wu, wd, "gelu_tanh")
                y.zero_(), yg.zero_()
                graph.replay()
                torch.cuda.synchronize()
                errs = {
                    "mlp": rel(kernel.mlp(x, ws, bs, "relu"), want),
                    "gated": rel(kernel.gated_mlp(xg, wg, wu, wd, "gelu_tanh"), want_g),
                    "mlp graph": rel(y, want),
                    "gated graph": rel(yg, want_g),
                }
                bad = {k: v for k, v in errs.items() if not v <= TOL}
                print(
                    f"persistent M={rows}: " + ", ".join(f"{k} {v:.1e}" for k, v in errs.items()), flush=True
                )
                failures += [f"M={rows} {k} {v:.1e}" for k, v in bad.items()]
    finally:
        ns.cuda_set_path("chain", "table")
    return failures + check_persistent_backward(kernel, backward_rows)


def backward_errors(kernel, impl: str, rows: int, dtype, layers: int) -> dict[str, float]:
    """The mlp backward op (a relu mlp of `layers` 1024-wide layers; one layer is the linear op's backward,
    no activation) with the chain_backward step forced to `impl`, against float64 of the same saved outputs
    (tests/kernels/kernel_numerics.py: relu' from the op's inputs, so relu flips cannot hide or fake a bug).
    Also the error of dx per 16-row tile (`dx@16i`), to tell where a wrong value lands."""
    import torch

    ns = getattr(torch.ops, kernel.OPS_NAMESPACE)
    x = rnd(rows, 1024).to(dtype)
    ws = [rnd(1024, 1024, scale=1024**-0.5).to(dtype) for _ in range(layers)]
    bs = [rnd(1024).to(dtype) for _ in range(layers)]
    outs = numerics().relu_chain_outputs(x, ws, bs)
    dy = torch.randn(rows, 1024, device="cuda").to(dtype)
    ns.cuda_set_path("chain_backward", impl)
    try:
        if layers == 1:
            got = ns.cuda_linear_backward(dy, x, ws[0], bs[0], outs[0], "none")
        else:
            got = ns.cuda_mlp_backward(dy, [], x, ws, bs, outs, "relu")
        torch.cuda.synchronize()
    finally:
        ns.cuda_set_path("chain_backward", "table")
    want = numerics().relu_chain_backward64(dy, x, ws, outs, store=dtype)
    names = ["dx", *(f"dw{i}" for i in range(layers)), *(f"db{i}" for i in range(layers))]
    errs = {n: rel(g, w) for n, g, w in zip(names, got, want)}
    for t in range(0, rows, 16):
        errs[f"dx@{t}"] = rel(got[0][t : t + 16], want[0][t : t + 16])
    return errs


def gated_backward_errors(kernel, impl: str, rows: int, dtype, activation: str) -> dict[str, float]:
    """The gated_mlp backward op (H=768, I=3072) on the (h, g, u) its own training forward saved, with the
    chain_backward step forced to `impl`, against float64 of the same (kernel_numerics.gated_backward64)."""
    import torch

    ns = getattr(torch.ops, kernel.OPS_NAMESPACE)
    x = rnd(rows, 768).to(dtype)
    wg, wu = (rnd(3072, 768, scale=768**-0.5).to(dtype) for _ in range(2))
    wd = rnd(768, 3072, scale=3072**-0.5).to(dtype)
    _, h, gu = ns.cuda_gated_mlp_train(x, wg, wu, wd, activation)
    dy = torch.randn(rows, 768, device="cuda").to(dtype)
    ns.cuda_set_path("chain_backward", impl)
    try:
        got = ns.cuda_gated_mlp_backward(dy, None, x, wg, wu, wd, h, gu, activation)
        torch.cuda.synchronize()
    finally:
        ns.cuda_set_path("chain_backward", "table")
    want = numerics().gated_backward64(dy, x, wg, wu, wd, h, gu, activation, store=dtype)
    errs = {n: rel(g, w) for n, g, w in zip(("dx", "dw_gu", "dw_down"), got, want)}
    errs.update({f"dx@{r}": rel(got[0][r], want[0][r]) for r in range(rows)})
    return errs


def check_persistent_backward(kernel, rows_list=BACKWARD_ROWS) -> list[str]:
    """The persistent backward kernel (a whole small-batch mlp or gated backward in one launch), 1-3 layers of
    1024 and the gated MLP 768x3072 (the rows of `rows_list` up to 16, three activations) in bf16 and fp16: every
    gradient against float64 of the same saved outputs, within kernel_numerics' SAME_SAVED_TOL or 3x the
    cuBLASLt layers' own error on the same inputs."""
    import torch

    failures = []
    for dtype in (torch.bfloat16, torch.float16):
        for layers in (1, 2, 3):
            for rows in rows_list:
                torch.manual_seed(rows * 10 + layers)
                mine = backward_errors(kernel, "persistent", rows, dtype, layers)
                torch.manual_seed(rows * 10 + layers)
                base = backward_errors(kernel, "layers", rows, dtype, layers)
                tol = numerics().SAME_SAVED_TOL[dtype]
                print(
                    f"persistent backward {str(dtype)[6:]} layers={layers} M={rows}: "
                    + ", ".join(f"{k} {v:.1e}/{base[k]:.1e}" for k, v in mine.items()),
                    flush=True,
                )
                failures += [
                    f"backward {dtype} layers={layers} M={rows} {k} {v:.1e} (layers {base[k]:.1e})"
                    for k, v in mine.items()
                    if not v <= max(tol, 3 * base[k])
                ]
        for activation in ("gelu_tanh", "silu", "relu"):
            for rows in (r for r in rows_list if r <= 16):  # the kernel takes the gated shape at 1-16 rows
                torch.manual_seed(rows)
                mine = gated_backward_errors(kernel, "persistent", rows, dtype, activation)
                torch.manual_seed(rows)
                base = gated_backward_errors(kernel, "layers", rows, dtype, activation)
                tol = numerics().SAME_SAVED_TOL[dtype]
                print(
                    f"persistent gated backward {str(dtype)[6:]} {activation} M={rows}: "
                    + ", ".join(f"{k} {v:.1e}/{base[k]:.1e}" for k, v in mine.items() if "@" not in k)
                    + f", worst row {max(v for k, v in mine.items() if '@' in k):.1e}",
                    flush=True,
                )
                failures += [
                    f"gated backward {dtype} {activation} M={rows} {k} {v:.1e} (layers {base[k]:.1e})"
                    for k, v in mine.items()
                    if not v <= max(tol, 3 * base[k])
                ]
    return failures


def child(group: str, variant_dir: Path, backward_rows) -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    import harness

    kernel = harness.import_variant_dir(variant_dir, "check")
    if getattr(kernel, "BACKEND", None) != "cuda":
        print(f"{group}: the variant does not run its CUDA backend here ({kernel.BACKEND}); nothing to check")
        return 0
    failures = check_tma(kernel) if group == "tma" else check_persistent(kernel, backward_rows)
    for f in failures:
        print(f"{group} FAILED: {f}", flush=True)
    return 1 if failures else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant-dir", type=Path, required=True, help="the built stable-ABI variant dir")
    parser.add_argument("--child", choices=sorted(GROUPS), help=argparse.SUPPRESS)
    parser.add_argument("--timeout", type=int, default=90, help="seconds per group")
    parser.add_argument(
        "--backward-rows",
        default=",".join(map(str, BACKWARD_ROWS)),
        help="row counts of the persistent backward check (comma-separated; the kernel takes 1-64)",
    )
    args = parser.parse_args(argv)
    rows = tuple(int(r) for r in args.backward_rows.split(","))
    if args.child:
        return child(args.child, args.variant_dir, rows)
    disable = [v for v in os.environ.get("FUSED_MLP_CUDA_DISABLE", "").split(",") if v]
    for group, impl in GROUPS.items():
        cmd = [sys.executable, __file__, "--variant-dir", str(args.variant_dir), "--child", group]
        cmd += ["--backward-rows", args.backward_rows]
        try:
            proc = subprocess.run(cmd, timeout=args.timeout, check=False)
            ok = proc.returncode == 0
        except subprocess.TimeoutExpired:
            print(f"{group}: timed out after {args.timeout} s", flush=True)
            ok = False
        print(f"{group}: {'ok' if ok else 'FAILED: later stages run without ' + impl}", flush=True)
        if not ok and impl not in disable:
            disable.append(impl)
    print(f"FUSED_MLP_CUDA_DISABLE={','.join(disable)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
