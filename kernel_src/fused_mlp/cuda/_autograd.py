"""Autograd of the C++ ops, in two forms that share each backward's one C++ `*_backward` op call:

- `Functions(ns)`: torch.autograd.Function classes for eager training. Their forward calls a C++ op that
  has no autograd registered (`*_train`, `*_infer`) through its raw entry point, so a training call goes
  dispatcher -> C++ once and never through Python autograd kernels; their backward calls the `*_backward`
  op the same way: the registered-op path cost more host time per training step than eager PyTorch
  (bench/BENCHMARKS.md).
- `formulas(ns)`: register_autograd formulas of the registered ops (`cuda_linear`, `cuda_mlp`, ...), which
  torch.compile traces and opcheck checks. Outputs that the public API hides (the MLP's hidden layer
  outputs, the gated `h`) still get correct gradients when something differentiates them (opcheck does);
  the gated (g, u) planes are not differentiable.
"""

from __future__ import annotations

from torch import Tensor
from torch.autograd import Function


def _empty_like_none(g: Tensor | None, like: Tensor) -> Tensor:
    """The gradient, or an empty tensor that tells the C++ backward "no gradient here"."""
    return g if g is not None else like.new_empty(0)


class Functions:
    """The eager autograd.Function of each public op, bound to the namespace `ns`'s raw C++ entries."""

    def __init__(self, ns) -> None:
        linear_fwd, linear_bwd = ns.cuda_linear_infer.default._op, ns.cuda_linear_backward.default._op
        mlp_fwd, mlp_bwd = ns.cuda_mlp_train.default._op, ns.cuda_mlp_backward.default._op
        gated_fwd, gated_bwd = ns.cuda_gated_mlp_train.default._op, ns.cuda_gated_mlp_backward.default._op
        mul_fwd, mul_bwd = ns.cuda_act_and_mul_infer.default._op, ns.cuda_act_and_mul_backward.default._op

        class Linear(Function):
            @staticmethod
            def forward(ctx, x, weight, bias, activation):
                y = linear_fwd(x, weight, bias, activation)
                ctx.activation, ctx.has_bias = activation, bias is not None
                ctx.save_for_backward(x, weight, bias, y)
                return y

            @staticmethod
            def backward(ctx, grad):
                x, weight, bias, y = ctx.saved_tensors
                dx, dw, db = linear_bwd(grad, x, weight, bias, y, ctx.activation)
                return dx, dw, (db if ctx.has_bias else None), None

        class Mlp(Function):
            """params = the weights, then the biases (none, or one per weight)."""

            @staticmethod
            def forward(ctx, x, activation, layers, *params):
                outs = mlp_fwd(x, list(params[:layers]), list(params[layers:]), activation)
                ctx.activation, ctx.layers = activation, layers
                ctx.save_for_backward(x, *params, *outs)
                return outs[-1]

            @staticmethod
            def backward(ctx, grad):
                x, *rest = ctx.saved_tensors
                n = ctx.layers
                params, outs = rest[: len(rest) - n], rest[len(rest) - n :]
                grads = mlp_bwd(grad, [], x, params[:n], params[n:], outs, ctx.activation)
                dbs = grads[1 + n :] if len(params) > n else []
                return (grads[0], None, None, *grads[1 : 1 + n], *dbs)

        class Gated(Function):
            @staticmethod
            def forward(ctx, x, w_gate, w_up, w_down, activation):
                y, h, gu = gated_fwd(x, w_gate, w_up, w_down, activation)
                ctx.activation = activation
                ctx.save_for_backward(x, w_gate, w_up, w_down, h, gu)
                return y

            @staticmethod
            def backward(ctx, grad):
                x, w_gate, w_up, w_down, h, gu = ctx.saved_tensors
                dx, dw_gu, dwd = gated_bwd(grad, None, x, w_gate, w_up, w_down, h, gu, ctx.activation)
                dwg, dwu = dw_gu.unbind(0)  # (dw_gate, dw_up) come as one [2, I, H] tensor (one batched GEMM)
                return dx, dwg, dwu, dwd, None

        class ActAndMul(Function):
            @staticmethod
            def forward(ctx, gate, up, activation):
                ctx.activation = activation
                ctx.save_for_backward(gate, up)
                return mul_fwd(gate, up, activation)

            @staticmethod
            def backward(ctx, grad):
                gate, up = ctx.saved_tensors
                dgate, dup = mul_bwd(grad, gate, up, ctx.activation)
                return dgate, dup, None

        self.linear, self.mlp, self.gated_mlp = Linear.apply, Mlp.apply, Gated.apply
        self.act_and_mul = ActAndMul.apply


def formulas(ns) -> dict:
    """{op name: (backward, setup_context)} for the registered forward ops of namespace object `ns`."""

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
        grad = grads[-1] if grads[-1] is not None else outputs[-1].new_zeros(outputs[-1].shape)
        hidden = [] if all(g is None for g in grads[:-1]) else [
            _empty_like_none(g, o) for g, o in zip(grads[:-1], outputs)
        ]  # fmt: skip
        result = ns.cuda_mlp_backward(
            grad, hidden, x, list(weights), list(biases), list(outputs), ctx.activation
        )
        dx, dweights, dbiases = result[0], list(result[1 : 1 + n]), list(result[1 + n :])
        return dx, dweights, (dbiases if ctx.has_bias else []), None

    def setup_gated(ctx, inputs, output):
        x, w_gate, w_up, w_down, activation = inputs
        ctx.activation = activation
        ctx.set_materialize_grads(False)
        ctx.mark_non_differentiable(output[2])
        ctx.save_for_backward(x, w_gate, w_up, w_down, output[0], output[1], output[2])

    def backward_gated(ctx, grads):
        grad_y, grad_h, _ = grads
        x, w_gate, w_up, w_down, y, h, gu = ctx.saved_tensors
        grad_y = grad_y if grad_y is not None else y.new_zeros(y.shape)
        dx, dw_gu, dwd = ns.cuda_gated_mlp_backward(
            grad_y, grad_h, x, w_gate, w_up, w_down, h, gu, ctx.activation
        )
        dwg, dwu = dw_gu.unbind(0)
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
