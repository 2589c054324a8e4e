"""Shared numerics for the kernel tests: fresh inputs, float64 oracle, per-dtype tolerances."""

from __future__ import annotations

import torch

# ||out - ref|| / ||ref|| bounds against a float64 reference. They sit a few times above what correct
# kernels reach (fp32 ~3e-7, fp16 ~6e-4, bf16 ~1e-2 with backward) and far below a one-term-short
# reduction (~1e-1), which test_tolerance checks.
TOL = {torch.float32: 1e-5, torch.float16: 3e-3, torch.bfloat16: 2.5e-2}
ACTIVATIONS = ("none", "relu", "gelu", "gelu_tanh", "silu")


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """Relative L2 error; NaN/inf in `out` give inf so they never pass."""
    out64, ref64 = out.detach().double().cpu(), ref.detach().double().cpu()
    if not torch.isfinite(out64).all():
        return float("inf")
    return ((out64 - ref64).norm() / ref64.norm().clamp_min(1e-30)).item()


def assert_close(out: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype, what: str) -> None:
    assert out.shape == ref.shape, f"{what}: shape {tuple(out.shape)} != {tuple(ref.shape)}"
    err = rel_err(out, ref)
    assert err <= TOL[dtype], f"{what}: relative error {err:.3e} > {TOL[dtype]:.1e} ({dtype})"


def randn(*shape: int, dtype: torch.dtype, device: str = "cpu", scale: float = 1.0, grad: bool = False):
    """Fresh normal values (never zeros), optionally requiring grad."""
    t = (torch.randn(*shape, dtype=torch.float32, device=device) * scale).to(dtype)
    return t.requires_grad_(grad)


def as64(*tensors):
    """float64 leaf copies (requiring grad where the source does) for the oracle."""
    return [None if t is None else t.detach().double().requires_grad_(t.requires_grad) for t in tensors]


def grads(out: torch.Tensor, inputs, upstream: torch.Tensor):
    """Gradients of <out, upstream> w.r.t. the inputs that require grad (None elsewhere)."""
    wanted = [t for t in inputs if t is not None and t.requires_grad]
    got = iter(torch.autograd.grad(out, wanted, upstream.to(out.dtype)))
    return [next(got) if (t is not None and t.requires_grad) else None for t in inputs]
