"""Shared numerics for the kernel tests: fresh inputs, float64 oracle, per-dtype tolerances."""

from __future__ import annotations

from collections.abc import Callable

import torch

# ||out - ref|| / ||ref|| bounds against a float64 reference. They sit a few times above what correct
# kernels reach (fp32 ~3e-7, fp16 ~6e-4, bf16 ~1e-2 with backward) and far below a one-term-short
# reduction (~1e-1), which test_tolerance checks.
TOL = {torch.float32: 1e-5, torch.float16: 3e-3, torch.bfloat16: 2.5e-2}
# The same bound for a backward given its own saved outputs (relu_chain_backward64): no relu flips, only a few
# roundings of each stored intermediate dz.
SAME_SAVED_TOL = {torch.float16: 2e-3, torch.bfloat16: 1e-2}
ACTIVATIONS = ("none", "relu", "gelu", "gelu_tanh", "silu")
ACT64 = {  # the activations as the float64 oracles apply them (fused_mlp.reference's, without importing it)
    "none": lambda z: z,
    "relu": torch.relu,
    "gelu": torch.nn.functional.gelu,
    "gelu_tanh": lambda z: torch.nn.functional.gelu(z, approximate="tanh"),
    "silu": torch.nn.functional.silu,
}


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


def assert_act_and_mul_far_tails(
    act_and_mul: Callable, reference: Callable, dtype, activation: str, device: str
):
    """Gate values out to +-60, where the kernels' exp(-2 * inner) overflows to inf (gelu_tanh below ~-9.8,
    silu below ~-88): every output and gradient of `act_and_mul(gate, up, activation)` finite and within about
    one rounding of float64 (`reference`) per element (eager's 1 + tanh loses all relative precision there; the
    kernels must not turn it into NaN)."""
    gate = torch.linspace(-60, 60, 64 * 128, device=device).reshape(64, 128)
    gate = (gate + 1e-3 * torch.randn_like(gate)).to(dtype).requires_grad_(True)
    up = randn(64, 128, dtype=dtype, device=device, grad=True)
    out = act_and_mul(gate, up, activation)
    p64 = as64(gate, up)
    expected = reference(*p64, activation)
    upstream = torch.randn(expected.shape, dtype=torch.float64, device=device)
    pairs = [(out, expected, "out")]
    pairs += [
        (g, w, f"grad {i}")
        for i, (g, w) in enumerate(zip(grads(out, (gate, up), upstream), grads(expected, p64, upstream)))
    ]
    # Two roundings to the dtype (the upstream gradient's, the result's) plus fp32 math; the floor (1e-3 of the
    # largest value) covers the cancellation near act'(z) = 0 that eager's formula shares.
    rtol = {torch.bfloat16: 2**-6, torch.float16: 2**-9, torch.float32: 2e-5}[dtype]
    for got, want, what in pairs:
        got = got.double()
        assert torch.isfinite(got).all(), f"act_and_mul {activation} {what}: non-finite values"
        floor = 1e-3 * want.abs().max() + 4 * torch.finfo(dtype).tiny
        bad = (got - want).abs() > rtol * (want.abs() + floor)
        assert not bad.any(), (
            f"act_and_mul {activation} {what} ({dtype}): {int(bad.sum())} elements off, e.g. gate "
            f"{gate.detach().double()[bad][:3].tolist()} -> {got[bad][:3].tolist()} vs {want[bad][:3].tolist()}"
        )


def relu_chain_outputs(x, weights, biases, last_relu: bool = False):
    """Every layer's output of a chain of linear layers with relu after each hidden one (and after the last
    if `last_relu`), in the inputs' dtype: the saved outputs a backward op is given."""
    outs, h = [], x
    for i, (w, b) in enumerate(zip(weights, biases)):
        h = torch.nn.functional.linear(h, w, b)
        h = torch.relu(h) if i + 1 < len(weights) or last_relu else h
        outs.append(h)
    return outs


def relu_chain_backward64(dy, x, weights, outputs, last_relu: bool = False, store=None):
    """Gradients [dx, dw_0.., db_0..] (float64) of a relu chain (relu_chain_outputs) given the op's own saved
    outputs: relu' is read from `outputs` (never recomputed), so relu flips of the forward do not enter, and
    only the backward's arithmetic is measured. `store`: the dtype the op keeps each intermediate dz in
    (rounded to it here too), None for none. A kernel bug then stands out against accumulation error alone."""
    dz = dy.double()
    if last_relu:
        dz = dz * (outputs[-1].double() > 0)
    dws, dbs = [None] * len(weights), [None] * len(weights)
    for i in reversed(range(len(weights))):
        inp = (x if i == 0 else outputs[i - 1]).double().reshape(-1, weights[i].shape[1])
        dz = dz.reshape(-1, weights[i].shape[0])
        dws[i], dbs[i] = dz.T @ inp, dz.sum(0)
        dz = dz @ weights[i].double()
        if i > 0:
            dz = dz * (outputs[i - 1].double().reshape(dz.shape) > 0)
            if store is not None:
                dz = dz.to(store).double()
    return [dz.reshape(x.shape), *dws, *dbs]


def gated_backward64(dy, x, w_gate, w_up, w_down, h, gu, activation: str, store=None):
    """Gradients [dx, (dw_gate, dw_up) as one [2, I, H] tensor, dw_down] (float64) of the gated MLP
    y = (act(g) * u) w_down^T, g = x w_gate^T, u = x w_up^T, given the op's own saved h and (g, u) planes `gu`
    ([2, M, I]): act and act' are taken at the saved g, so only the backward's arithmetic is measured. `store`:
    the dtype the op keeps dg and du in (rounded to it here too), None for none."""
    dy64, x64 = dy.double().reshape(-1, w_down.shape[0]), x.double().reshape(-1, w_gate.shape[1])
    g = gu[0].double().reshape(-1, w_gate.shape[0]).requires_grad_(True)
    u = gu[1].double().reshape(g.shape)
    dh = dy64 @ w_down.double()
    with torch.enable_grad():
        f = ACT64[activation](g)
        (df,) = torch.autograd.grad(f, g, torch.ones_like(f))
    dg, du = dh * u * df, dh * f.detach()
    if store is not None:
        dg, du = dg.to(store).double(), du.to(store).double()
    dx = dg @ w_gate.double() + du @ w_up.double()
    dw_gu = torch.stack((dg.T @ x64, du.T @ x64))
    return [dx.reshape(x.shape), dw_gu, dy64.T @ h.double().reshape(dy64.shape[0], -1)]
