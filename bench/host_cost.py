"""Host-cost breakdown of one small-batch call (M=16, bf16): where the CPU time of `mlp` / `gated_mlp` goes.

For each loaded kernel (harness.py): the public call, then the layers under it for the CUDA variant
(the backend's wrapper, the registered op through OpOverload, the raw C++ op entry), next to reference
points on the same host: an empty Python call, one Python-level torch op (`torch.empty`, `x.new_empty`,
`torch.relu`), and the call's GPU time. Host µs = CPU time to issue one call (harness.host_us).
Then one training step of the same mlp (weights requiring grad): forward under autograd, forward + backward
(`torch.autograd.grad`, so no gradient accumulation), for each kernel and for eager, next to the autograd
engine's fixed cost (an identity autograd.Function) and, for the CUDA variant, its raw backward op alone.

    python bench/host_cost.py --variant-dir DIR=label ... [--json out.json]
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness


def _noop(*args) -> None:
    return None


def _cuda_layers(label: str, m, x, ws, bs, gated: tuple) -> dict:
    """The layers under one stable-ABI `mlp` call: backend wrapper, OpOverload, raw C++ entry, and the raw
    op stopped after each stage (cuda_mlp_probe), plus a raw op call that carries no tensors."""
    ops = m._GPU_OPS  # the backend's ops module that the package sends CUDA tensors to
    ns = getattr(torch.ops, m.OPS_NAMESPACE)
    infer, probe = ns.cuda_mlp_infer.default, ns.cuda_mlp_probe.default._op
    raw, raw_gated, info = infer._op, ns.cuda_gated_mlp_infer.default._op, ns.cuda_build_info.default._op
    return {
        f"{label}: backend ops.mlp (no package dispatch)": lambda: ops.mlp(x, ws, bs, "relu"),
        f"{label}: OpOverload cuda_mlp_infer(...)": lambda: infer(x, ws, bs, "relu"),
        f"{label}: raw C++ op cuda_mlp_infer._op(...)": lambda: raw(x, ws, bs, "relu"),
        f"{label}: raw mlp op returning once the arguments reach C++": lambda: probe(x, ws, bs, "relu", 0),
        f"{label}: raw mlp op returning after checks and plans": lambda: probe(x, ws, bs, "relu", 1),
        f"{label}: raw mlp op returning after allocation": lambda: probe(x, ws, bs, "relu", 2),
        f"{label}: raw C++ op cuda_gated_mlp_infer._op(...)": lambda: raw_gated(*gated, "gelu_tanh"),
        f"{label}: raw C++ op without tensors (cuda_build_info)": lambda: info(0),
    }


def breakdown(kernels: dict) -> dict[str, float]:
    torch.manual_seed(0)
    d, dt = 1024, torch.bfloat16
    x = torch.randn(16, d, device="cuda", dtype=dt)
    ws = [torch.randn(d, d, device="cuda", dtype=dt) * d**-0.5 for _ in range(3)]
    bs = [torch.randn(d, device="cuda", dtype=dt) for _ in range(3)]
    xg = torch.randn(16, 768, device="cuda", dtype=dt)
    wg, wu = (torch.randn(3072, 768, device="cuda", dtype=dt) * 768**-0.5 for _ in range(2))
    wd = torch.randn(768, 3072, device="cuda", dtype=dt) * 3072**-0.5
    pieces = {
        "empty Python function call (3 args)": lambda: _noop(x, ws, bs),
        "torch.empty((16, 1024), device='cuda')": lambda: torch.empty((16, d), device="cuda", dtype=dt),
        "x.new_empty((16, 1024))": lambda: x.new_empty((16, d)),
        "torch.relu(x) (one Python-level op, one launch)": lambda: torch.relu(x),
    }
    for label, m in kernels.items():
        pieces[f"{label}: mlp(x, ws, bs) public call"] = lambda m=m: m.mlp(x, ws, bs, "relu")
        pieces[f"{label}: gated_mlp public call"] = lambda m=m: m.gated_mlp(xg, wg, wu, wd, "gelu_tanh")
        if getattr(m, "BACKEND", None) == "cuda":
            pieces.update(_cuda_layers(label, m, x, ws, bs, (xg, wg, wu, wd)))
    out = {}
    with torch.no_grad():
        for name, fn in pieces.items():
            out[name] = harness.host_us(fn)
            print(f"host {name:<66} {out[name]:7.2f} us", flush=True)
        for label, m in kernels.items():
            call = lambda m=m: m.mlp(x, ws, bs, "relu")
            timings = {
                f"{label}: mlp GPU µs (graph)": harness.gpu_us(call),
                f"{label}: mlp GPU µs (stream, host ahead)": harness.stream_gpu_us(call),
                f"{label}: mlp wall µs (stream)": harness.stream_us(call, 200),
            }
            out.update(timings)
            print("  ".join(f"{k} {v:.2f}" for k, v in timings.items()), flush=True)
    for name, fn in _training_pieces(kernels, x, ws, bs).items():
        try:
            out[name] = harness.host_us(fn, iters=50)
        except Exception as exc:  # noqa: BLE001 - one failing piece must not lose the measured ones
            out[name] = None
            print(f"host {name:<66} failed: {type(exc).__name__}: {exc}", flush=True)
            continue
        print(f"host {name:<66} {out[name]:7.2f} us", flush=True)
    return out


class _Identity(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return grad


def _training_pieces(kernels: dict, x, ws, bs) -> dict:
    """Host cost of one training step of the 3-layer mlp (M=16): where a small-batch training step's CPU
    time goes (the 32-layer model's training rows are host-bound)."""
    # The loaded package's own eager reference: `fused_mlp` is not importable by that name where the kernel
    # came from a hub or a variant dir (what users load).
    ref = next(iter(kernels.values())).reference
    params = [t.detach().requires_grad_() for t in (*ws, *bs)]
    pw, pb = params[:3], params[3:]
    xt = x.detach().requires_grad_()
    g = torch.randn(x.shape[0], ws[-1].shape[0], device=x.device, dtype=x.dtype)

    def step(fn):
        return lambda: torch.autograd.grad(fn(), [xt, *params], g)

    pieces = {
        "train: autograd engine, identity Function fwd+bwd": lambda: torch.autograd.grad(
            _Identity.apply(xt), [xt], x
        ),
        "train: eager mlp forward (grad enabled)": lambda: ref.mlp(xt, pw, pb, "relu"),
        "train: eager mlp forward + backward": step(lambda: ref.mlp(xt, pw, pb, "relu")),
    }
    for label, m in kernels.items():
        pieces[f"train: {label}: mlp forward (grad enabled)"] = lambda m=m: m.mlp(xt, pw, pb, "relu")
        pieces[f"train: {label}: mlp forward + backward"] = step(lambda m=m: m.mlp(xt, pw, pb, "relu"))
        if getattr(m, "BACKEND", None) == "cuda":
            ns = getattr(torch.ops, m.OPS_NAMESPACE)
            try:
                with torch.no_grad():
                    outs = ns.cuda_mlp_train.default._op(x, ws, bs, "relu")
            except Exception as exc:  # noqa: BLE001 - report, keep the other pieces
                print(f"host {label}: raw backward op not measured: {type(exc).__name__}: {exc}", flush=True)
                continue
            bwd = ns.cuda_mlp_backward.default._op
            raw = lambda bwd=bwd, outs=outs: bwd(g, [], x, ws, bs, outs, "relu")
            pieces[f"train: {label}: raw backward op alone"] = raw
    return pieces


def main(argv: list[str] | None = None) -> int:
    args = harness.tool_parser(__doc__).parse_args(argv)
    kernels = harness.load_kernels(args)
    report = {"environment": harness.environment(), "kernels": harness.describe(kernels)}
    report["host_us"] = breakdown(kernels)
    harness.write_json(args.json, report)
    rows = [{"case": name, "impl": "", "us": us} for name, us in report["host_us"].items()]
    harness.append_csv("host", rows, ("case",), ("us",), args.csv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
