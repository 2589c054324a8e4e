"""Autograd formulas of the C++ forward ops; each backward is one call of its C++ `*_backward` op.

Outputs that the public API hides (the MLP's intermediate layer outputs, the gated `h`) still get
correct gradients when something differentiates them (opcheck does): grads are not materialized,
and the C++ backward adds the ones that are present.
"""

from __future__ import annotations

from torch import Tensor


def _empty_like_none(g: Tensor | None, like: Tensor) -> Tensor:
    """The gradient, or an empty tensor that tells the C++ backward "no gradient here"."""
    return g if g is not None else like.new_empty(0)


def formulas(ns) -> dict:
    """{op name: (backward, setup_context)} for the forward ops of namespace object `ns`."""

    def setup_linear(ctx, inputs, output):
        x, weight, bias, activation = inputs
        ctx.activation, ctx.has_bias = activation, bias is not None
        ctx.save_for_backward(x, weight, bias, output)

    def backward_linear(ctx, grad):
        x, weight, bias, y = ctx.saved_tensors
        dx, dw, db = ns.cuda_linear_backward(grad, x, weight, bias, y, ctx.activation)
        return dx, dw, (db if ctx.has_bias else None), None

    def setup_mlp(ctx, inputs, output):
        x, weights, biases, activation = inputs
        ctx.activation, ctx.layers, ctx.has_bias = activation, len(weights), len(biases) > 0
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(x, *weights, *biases, *output)

    def backward_mlp(ctx, grads):
        x, *rest = ctx.saved_tensors
        n = ctx.layers
        weights = rest[:n]
        biases = rest[n : 2 * n] if ctx.has_bias else []
        outputs = rest[2 * n :] if ctx.has_bias else rest[n:]
        grads = list(grads)
        grads[-1] = grads[-1] if grads[-1] is not None else outputs[-1].new_zeros(outputs[-1].shape)
        grads = [_empty_like_none(g, o) for g, o in zip(grads, outputs)]
        result = ns.cuda_mlp_backward(grads, x, list(weights), list(biases), list(outputs), ctx.activation)
        dx, dweights, dbiases = result[0], list(result[1 : 1 + n]), list(result[1 + n :])
        return dx, dweights, (dbiases if ctx.has_bias else []), None

    def setup_gated(ctx, inputs, output):
        x, w_gate, w_up, w_down, activation = inputs
        ctx.activation = activation
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(x, w_gate, w_up, w_down, output[0], output[1])

    def backward_gated(ctx, grads):
        x, w_gate, w_up, w_down, y, h = ctx.saved_tensors
        grad_y, grad_h = grads
        grad_y = grad_y if grad_y is not None else y.new_zeros(y.shape)
        dx, dwg, dwu, dwd = ns.cuda_gated_mlp_backward(
            grad_y, _empty_like_none(grad_h, h), x, w_gate, w_up, w_down, h, ctx.activation
        )
        return dx, dwg, dwu, dwd, None

    def setup_act_and_mul(ctx, inputs, output):
        gate, up, activation = inputs
        ctx.activation = activation
        ctx.save_for_backward(gate, up)

    def backward_act_and_mul(ctx, grad):
        gate, up = ctx.saved_tensors
        dgate, dup = ns.cuda_act_and_mul_backward(grad, gate, up, ctx.activation)
        return dgate, dup, None

    return {
        "cuda_linear": (backward_linear, setup_linear),
        "cuda_mlp": (backward_mlp, setup_mlp),
        "cuda_gated_mlp": (backward_gated, setup_gated),
        "cuda_act_and_mul": (backward_act_and_mul, setup_act_and_mul),
    }
