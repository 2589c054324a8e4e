"""Eager training of the Triton ops: torch.autograd.Function classes whose forward and backward call the
kernel compositions (`forward`, `backward`) directly.

The registered custom ops (`custom_ops`) are what torch.compile traces; called eagerly they cost a
dispatcher round trip, a Python autograd kernel and pytree work per call, and their backward recomputes
every pre-activation with more op calls. On a host-bound small-batch training step that overhead was most
of the time (bench/BENCHMARKS.md: a 32-layer mlp at small batch trained several times slower than eager in
wall while its GPU time in a graph was close to eager's). Here the forward keeps what backward reads (each layer's input, the
pre-activation or, for relu, the output), as eager PyTorch does, so backward launches no recompute.
Double backward is not supported (as with the registered ops): it raises.
"""

from __future__ import annotations

from torch import Tensor
from torch.autograd import Function
from torch.autograd.function import once_differentiable

from ..reference import check_activation
from . import backward, forward


class _Linear(Function):
    @staticmethod
    def forward(ctx, x, weight, bias, activation):
        forward.check_linear(x, weight, bias, activation)
        x2 = forward.rows(x)
        out, pre = forward.linear_rows_train(x2, forward.layer_weight(weight), bias, activation)
        ctx.activation, ctx.x_shape, ctx.has_bias = activation, x.shape, bias is not None
        ctx.save_for_backward(x2, weight, pre)
        return out.view(*x.shape[:-1], weight.shape[0])

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        x2, weight, pre = ctx.saved_tensors
        dx, dw, db = backward.linear_grads(
            forward.rows(grad), x2, weight, ctx.has_bias, pre, ctx.activation, forward.activation_backward,
            *ctx.needs_input_grad[:2],
        )  # fmt: skip
        return (None if dx is None else dx.view(ctx.x_shape)), dw, db, None


class _Mlp(Function):
    """params = the n weights, then n biases (None where a layer has none)."""

    @staticmethod
    def forward(ctx, x, activation, n, *params):
        check_activation(activation)
        weights, biases = params[:n], params[n:]
        forward.check_mlp(x, weights, biases)
        out, inputs, pres = forward.mlp_rows_train(forward.rows(x), weights, biases, activation)
        ctx.activation, ctx.x_shape, ctx.n = activation, x.shape, n
        ctx.has_bias = [b is not None for b in biases]
        ctx.save_for_backward(*weights, *inputs, *(p for p in pres if p is not None))  # "none" keeps none
        return out.view(*x.shape[:-1], weights[-1].shape[0])

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        saved, n = ctx.saved_tensors, ctx.n
        weights, inputs, pres = (
            saved[:n],
            saved[n : 2 * n],
            saved[2 * n :],
        )  # chain_grads reads no pres for "none"
        dx, dweights, dbiases = backward.chain_grads(
            forward.rows(grad), inputs, pres, weights, ctx.has_bias, ctx.activation, forward.activation_backward,
            ctx.needs_input_grad[0], ctx.needs_input_grad[3 : 3 + n],
        )  # fmt: skip
        return (None if dx is None else dx.view(ctx.x_shape)), None, None, *dweights, *dbiases


class _Gated(Function):
    @staticmethod
    def forward(ctx, x, w_gate, w_up, w_down, activation):
        check_activation(activation)
        forward.check_gated(x, w_gate, w_up, w_down)
        x2 = forward.rows(x)
        out, h, gu = forward.gated_rows_train(x2, w_gate, w_up, w_down, activation)
        ctx.activation, ctx.x_shape = activation, x.shape
        ctx.save_for_backward(x2, w_gate, w_up, w_down, h, gu)
        return out.view(*x.shape[:-1], w_down.shape[0])

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        x2, w_gate, w_up, w_down, h, gu = ctx.saved_tensors
        dx, dw_gu, dw_down = backward.gated_backward_rows(
            forward.rows(grad), x2, forward.unit_stride(w_gate), forward.unit_stride(w_up),
            forward.unit_stride(w_down), h, gu, ctx.activation,
        )  # fmt: skip
        return dx.view(ctx.x_shape), dw_gu[0], dw_gu[1], dw_down, None


class _ActAndMul(Function):
    @staticmethod
    def forward(ctx, gate, up, activation):
        ctx.activation = activation
        ctx.save_for_backward(gate, up)
        return forward.act_and_mul(gate, up, activation)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        gate, up = ctx.saved_tensors
        dgate, dup = forward.act_and_mul_backward(grad, gate, up, ctx.activation)
        return dgate, dup, None


def linear(x: Tensor, weight: Tensor, bias: Tensor | None, activation: str) -> Tensor:
    return _Linear.apply(x, weight, bias, activation)


def mlp(x: Tensor, weights, biases, activation: str) -> Tensor:
    """`biases`: one entry (a tensor or None) per weight (reference.normalize_biases)."""
    return _Mlp.apply(x, activation, len(weights), *weights, *biases)


def gated_mlp(x: Tensor, w_gate: Tensor, w_up: Tensor, w_down: Tensor, activation: str) -> Tensor:
    return _Gated.apply(x, w_gate, w_up, w_down, activation)


def act_and_mul(gate: Tensor, up: Tensor, activation: str) -> Tensor:
    return _ActAndMul.apply(gate, up, activation)
