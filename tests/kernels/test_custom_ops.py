"""The ops are real torch custom ops: opcheck passes, and torch.compile(fullgraph=True) over them has no
graph break, differentiates them, and does not recompile across batch sizes."""

import os

import fused_mlp
import fused_mlp.reference as ref
import pytest
import torch
from fused_mlp._build_info import OPS_NAMESPACE
from kernel_numerics import TOL, randn, rel_err

pytestmark = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1", reason="runs the Triton kernels on CPU: set TRITON_INTERPRET=1"
)


def _ops():
    return getattr(torch.ops, OPS_NAMESPACE)


def test_opcheck_every_op():
    ops = _ops()
    x = randn(5, 32, dtype=torch.float32, grad=True)
    w1, w2 = (
        randn(48, 32, dtype=torch.float32, scale=0.2, grad=True),
        randn(16, 48, dtype=torch.float32, grad=True),
    )
    b1 = randn(48, dtype=torch.float32, grad=True)
    g, u = randn(5, 48, dtype=torch.float32, grad=True), randn(5, 48, dtype=torch.float32, grad=True)
    wg, wu = randn(48, 32, dtype=torch.float32, grad=True), randn(48, 32, dtype=torch.float32, grad=True)
    cases = [
        (ops.triton_linear, (x, w1, b1, "gelu_tanh")),
        (ops.triton_linear, (x, w1, None, "relu")),
        (ops.triton_mlp, (x, [w1, w2], [b1], [0], "silu")),
        (ops.triton_gated_mlp, (x, wg, wu, w2, "gelu")),
        (ops.triton_act_and_mul, (g, u, "silu")),
        (ops.triton_act_and_mul_backward, (g.detach(), g.detach(), u.detach(), "gelu_tanh")),
        (ops.triton_activation_backward, (g.detach(), u.detach(), "gelu")),
    ]
    for op, args in cases:
        torch.library.opcheck(op, args)


def test_compile_fullgraph_no_recompile_across_batch_sizes():
    torch._dynamo.reset()
    w1, w2 = (
        randn(48, 32, dtype=torch.float32, scale=0.2, grad=True),
        randn(16, 48, dtype=torch.float32, grad=True),
    )
    b1, b2 = randn(48, dtype=torch.float32, grad=True), randn(16, dtype=torch.float32, grad=True)
    wg, wu, wd = (
        randn(*s, dtype=torch.float32, scale=0.2, grad=True) for s in ((24, 16), (24, 16), (16, 24))
    )

    def model(x):
        h = fused_mlp.mlp(x, [w1, w2], [b1, b2], "gelu_tanh")
        return fused_mlp.gated_mlp(h, wg, wu, wd, "silu") + fused_mlp.linear(h, wd.t(), None, "relu").sum()

    def model_ref(x):
        h = ref.mlp(x, [w1, w2], [b1, b2], "gelu_tanh")
        return ref.gated_mlp(h, wg, wu, wd, "silu") + ref.linear(h, wd.t(), None, "relu").sum()

    compiled = torch.compile(model, fullgraph=True, dynamic=True, backend="aot_eager")
    try:
        for i, rows in enumerate((7, 13, 29)):
            x = randn(rows, 32, dtype=torch.float32, grad=True)
            out = compiled(x)
            expected = model_ref(x)
            assert rel_err(out, expected) <= TOL[torch.float32]
            (gx,) = torch.autograd.grad(out.sum(), [x])
            (gx_ref,) = torch.autograd.grad(expected.sum(), [x])
            assert rel_err(gx, gx_ref) <= TOL[torch.float32]
            torch._dynamo.config.error_on_recompile = True  # from the second batch size on
    finally:
        torch._dynamo.config.error_on_recompile = False
