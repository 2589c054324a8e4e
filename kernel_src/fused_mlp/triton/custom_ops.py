"""The Triton ops as torch custom ops (namespace `OPS_NAMESPACE`, names prefixed `triton_`), with fake
kernels and autograd, so torch.compile(fullgraph=True) sees one opaque op per call and differentiates it.
Eager calls do not come here (`ops`: direct launches, or `autograd`'s Functions when autograd records).

`gated_mlp` under autograd records the training op, whose forward also returns what backward reads
(h = act(g) * u and the pre-activations (g, u)) and whose backward is one op of four fused GEMMs
(`backward.gated_backward_rows`). The other ops' backward recomputes pre-activations with the same ops;
every backward is traceable by AOTAutograd.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .._build_info import OPS_NAMESPACE
from ..reference import apply_activation
from . import backward, forward


def _custom_op(name: str):
    """torch.library.custom_op under our namespace; reuses the op when this namespace already has it (the
    same package imported twice under the dev namespace). Checked before defining: a failed definition
    would leave a half-registered op whose cleanup tears down the live one."""

    def wrap(fn):
        namespace = getattr(torch.ops, OPS_NAMESPACE)
        if hasattr(namespace, name):
            return getattr(namespace, name)
        return torch.library.custom_op(f"{OPS_NAMESPACE}::{name}", mutates_args=())(fn)

    return wrap


def _registered(op) -> bool:
    """True for ops created here (they take fake/autograd registrations); False for reused OpOverloadPackets."""
    return hasattr(op, "register_fake")


# ---- forward ops -------------------------------------------------------------------------------------


@_custom_op("triton_linear")
def linear(x: Tensor, weight: Tensor, bias: Tensor | None, activation: str) -> Tensor:
    return forward.linear(x, weight, bias, activation)


def split_biases(biases: list[Tensor | None]) -> tuple[list[Tensor], list[int]]:
    """(present biases, their layer indices): the op schema cannot carry gradients for Tensor?[] lists."""
    return [b for b in biases if b is not None], [i for i, b in enumerate(biases) if b is not None]


def _join_biases(n: int, present: list[Tensor], layers: list[int]) -> list[Tensor | None]:
    biases: list[Tensor | None] = [None] * n
    for i, b in zip(layers, present):
        biases[i] = b
    return biases


@_custom_op("triton_mlp")
def mlp(
    x: Tensor, weights: list[Tensor], biases: list[Tensor], bias_layers: list[int], activation: str
) -> Tensor:
    """The layer chain; `biases` holds the present biases, `bias_layers` the layers they belong to."""
    all_biases = _join_biases(len(weights), biases, bias_layers)
    forward.check_mlp(x, weights, all_biases)
    out = forward.mlp_rows(forward.rows(x), weights, all_biases, activation)
    return out.view(*x.shape[:-1], weights[-1].shape[0])


@_custom_op("triton_gated_mlp")
def gated_mlp(x: Tensor, w_gate: Tensor, w_up: Tensor, w_down: Tensor, activation: str) -> Tensor:
    forward.check_gated(x, w_gate, w_up, w_down)
    out = forward.gated_rows(forward.rows(x), w_gate, w_up, w_down, activation)
    return out.view(*x.shape[:-1], w_down.shape[0])


@_custom_op("triton_gated_mlp_train")
def gated_mlp_train(
    x: Tensor, w_gate: Tensor, w_up: Tensor, w_down: Tensor, activation: str
) -> tuple[Tensor, Tensor, Tensor]:
    """(y, h [M, I], gu = (g, u) [2, M, I]): the gated forward that keeps what backward needs."""
    forward.check_gated(x, w_gate, w_up, w_down)
    out, h, gu = forward.gated_rows_train(forward.rows(x), w_gate, w_up, w_down, activation)
    return out.view(*x.shape[:-1], w_down.shape[0]), h, gu


@_custom_op("triton_gated_mlp_backward")
def gated_mlp_backward(
    grad: Tensor,
    x: Tensor,
    w_gate: Tensor,
    w_up: Tensor,
    w_down: Tensor,
    h: Tensor,
    gu: Tensor,
    activation: str,
) -> tuple[Tensor, Tensor, Tensor]:
    """(dx, (dw_gate, dw_up) [2, I, H], dw_down) from the training forward's h and gu."""
    dx, dw_gu, dw_down = backward.gated_backward_rows(
        forward.rows(grad), forward.rows(x), forward.unit_stride(w_gate), forward.unit_stride(w_up),
        forward.unit_stride(w_down), h, gu, activation,
    )  # fmt: skip
    return dx.view(x.shape), dw_gu, dw_down


def gated_mlp_recorded(x: Tensor, w_gate: Tensor, w_up: Tensor, w_down: Tensor, activation: str) -> Tensor:
    """The registered op a call records: the training op when autograd will need its saved tensors."""
    if torch.is_grad_enabled() and any(t.requires_grad for t in (x, w_gate, w_up, w_down)):
        return gated_mlp_train(x, w_gate, w_up, w_down, activation)[0]
    return gated_mlp(x, w_gate, w_up, w_down, activation)


@_custom_op("triton_act_and_mul")
def act_and_mul(gate: Tensor, up: Tensor, activation: str) -> Tensor:
    return forward.act_and_mul(gate, up, activation)


@_custom_op("triton_act_and_mul_backward")
def act_and_mul_backward(grad: Tensor, gate: Tensor, up: Tensor, activation: str) -> tuple[Tensor, Tensor]:
    return forward.act_and_mul_backward(grad, gate, up, activation)


@_custom_op("triton_activation_backward")
def activation_backward(grad: Tensor, pre: Tensor, activation: str) -> Tensor:
    return forward.activation_backward(grad, pre, activation)


# ---- fake kernels (shapes only) ----------------------------------------------------------------------


def _fake_linear(x, weight, bias, activation):
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


def _fake_mlp(x, weights, biases, bias_layers, activation):
    return x.new_empty((*x.shape[:-1], weights[-1].shape[0]))


def _fake_gated_mlp(x, w_gate, w_up, w_down, activation):
    return x.new_empty((*x.shape[:-1], w_down.shape[0]))


def _fake_gated_mlp_train(x, w_gate, w_up, w_down, activation):
    rows = x.numel() // x.shape[-1]
    return (x.new_empty((*x.shape[:-1], w_down.shape[0])), x.new_empty((rows, w_gate.shape[0])),
            x.new_empty((2, rows, w_gate.shape[0])))  # fmt: skip


def _fake_gated_mlp_backward(grad, x, w_gate, w_up, w_down, h, gu, activation):
    return torch.empty_like(x), w_gate.new_empty((2, *w_gate.shape)), torch.empty_like(w_down)


def _fake_act_and_mul(gate, up, activation):
    return torch.empty_like(gate)


def _fake_act_and_mul_backward(grad, gate, up, activation):
    return torch.empty_like(gate), torch.empty_like(up)


def _fake_activation_backward(grad, pre, activation):
    return torch.empty_like(grad)


# ---- autograd ----------------------------------------------------------------------------------------


def _flat(t: Tensor) -> Tensor:
    return t.reshape(-1, t.shape[-1])


def _setup_linear(ctx, inputs, output):
    x, weight, bias, activation = inputs
    ctx.activation = activation
    ctx.save_for_backward(x, weight, bias, output if activation == "relu" else None)


def _backward_linear(ctx, grad):
    """The activation's derivative (relu reads the output, the others recompute the pre-activation), then
    the one-layer chain."""
    x, weight, bias, out = ctx.saved_tensors
    pre = (
        out if ctx.activation in ("none", "relu") else linear(x, weight, bias, "none")
    )  # out: None for "none"
    dx, dw, db = backward.linear_grads(
        _flat(grad), _flat(x), weight, bias is not None, None if pre is None else _flat(pre), ctx.activation,
        activation_backward, ctx.needs_input_grad[0],
    )  # fmt: skip
    return (None if dx is None else dx.view(x.shape)), dw, db, None


def _setup_mlp(ctx, inputs, output):
    x, weights, biases, bias_layers, activation = inputs
    ctx.activation = activation
    ctx.n = len(weights)
    ctx.bias_layers = list(bias_layers)
    ctx.save_for_backward(x, *weights, *biases)


def _backward_mlp(ctx, grad):
    """Recompute each hidden layer's pre-activation and output with the registered ops, then the chain's
    gradients (the op keeps no intermediates: its schema returns the output only)."""
    x, *rest = ctx.saved_tensors
    weights = rest[: ctx.n]
    biases = _join_biases(ctx.n, list(rest[ctx.n :]), ctx.bias_layers)
    inputs, pres = [_flat(x)], []
    for w, b in zip(weights[:-1], biases[:-1]):
        pres.append(linear(inputs[-1], w, b, "none"))
        inputs.append(apply_activation(pres[-1], ctx.activation))
    dx, dweights, dbiases = backward.chain_grads(
        _flat(grad), inputs, pres, weights, [b is not None for b in biases], ctx.activation,
        activation_backward, ctx.needs_input_grad[0],
    )  # fmt: skip
    return (
        (None if dx is None else dx.view(x.shape)),
        dweights,
        [dbiases[i] for i in ctx.bias_layers],
        None,
        None,
    )


def _setup_gated(ctx, inputs, output):
    x, w_gate, w_up, w_down, activation = inputs
    ctx.activation = activation
    ctx.save_for_backward(x, w_gate, w_up, w_down)


def _gated_grads(ctx, grad, x, w_gate, w_up, w_down, h, gu):
    dx, dw_gu, dw_down = gated_mlp_backward(grad, x, w_gate, w_up, w_down, h, gu, ctx.activation)
    return dx, dw_gu[0], dw_gu[1], dw_down, None


def _backward_gated(ctx, grad):
    """The inference op called directly under autograd: recompute h and (g, u), then the fused backward."""
    x, w_gate, w_up, w_down = ctx.saved_tensors
    _, h, gu = gated_mlp_train(x, w_gate, w_up, w_down, ctx.activation)
    return _gated_grads(ctx, grad, x, w_gate, w_up, w_down, h, gu)


def _setup_gated_train(ctx, inputs, output):
    x, w_gate, w_up, w_down, activation = inputs
    _, h, gu = output
    ctx.activation = activation
    ctx.mark_non_differentiable(h, gu)
    ctx.save_for_backward(x, w_gate, w_up, w_down, h, gu)


def _backward_gated_train(ctx, grad, _grad_h, _grad_gu):
    return _gated_grads(ctx, grad, *ctx.saved_tensors)


def _setup_act_and_mul(ctx, inputs, output):
    gate, up, activation = inputs
    ctx.activation = activation
    ctx.save_for_backward(gate, up)


def _backward_act_and_mul(ctx, grad):
    gate, up = ctx.saved_tensors
    dgate, dup = act_and_mul_backward(grad, gate, up, ctx.activation)
    return dgate, dup, None


if _registered(linear):
    linear.register_fake(_fake_linear)
    mlp.register_fake(_fake_mlp)
    gated_mlp.register_fake(_fake_gated_mlp)
    gated_mlp_train.register_fake(_fake_gated_mlp_train)
    gated_mlp_backward.register_fake(_fake_gated_mlp_backward)
    act_and_mul.register_fake(_fake_act_and_mul)
    act_and_mul_backward.register_fake(_fake_act_and_mul_backward)
    activation_backward.register_fake(_fake_activation_backward)
    linear.register_autograd(_backward_linear, setup_context=_setup_linear)
    mlp.register_autograd(_backward_mlp, setup_context=_setup_mlp)
    gated_mlp.register_autograd(_backward_gated, setup_context=_setup_gated)
    gated_mlp_train.register_autograd(_backward_gated_train, setup_context=_setup_gated_train)
    act_and_mul.register_autograd(_backward_act_and_mul, setup_context=_setup_act_and_mul)
