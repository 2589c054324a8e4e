"""act_and_mul kernels: out = act(gate) * up, and its backward (d gate, d up), elementwise."""

from __future__ import annotations

import triton
import triton.language as tl

from .activations import activate, activate_grad
from .specs import KernelDef


@triton.jit
def act_and_mul_kernel(g_ptr, u_ptr, out_ptr, n, ACT: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    g = tl.load(g_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(u_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + offs, (activate(g, ACT) * u).to(out_ptr.dtype.element_ty), mask=mask)


ACT_AND_MUL = KernelDef(
    fn=act_and_mul_kernel,
    params=(("g_ptr", "ptr"), ("u_ptr", "ptr"), ("out_ptr", "ptr"), ("n", "i32:16")),
    constexprs=("ACT", "BLOCK"),
)


@triton.jit
def act_and_mul_backward_kernel(
    dy_ptr, g_ptr, u_ptr, dg_ptr, du_ptr, n, ACT: tl.constexpr, BLOCK: tl.constexpr
):  # fmt: skip
    """d gate = dy * u * act'(gate); d up = dy * act(gate)."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    dy = tl.load(dy_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    g = tl.load(g_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(u_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(dg_ptr + offs, (dy * u * activate_grad(g, ACT)).to(dg_ptr.dtype.element_ty), mask=mask)
    tl.store(du_ptr + offs, (dy * activate(g, ACT)).to(du_ptr.dtype.element_ty), mask=mask)


ACT_AND_MUL_BACKWARD = KernelDef(
    fn=act_and_mul_backward_kernel,
    params=(
        ("dy_ptr", "ptr"),
        ("g_ptr", "ptr"),
        ("u_ptr", "ptr"),
        ("dg_ptr", "ptr"),
        ("du_ptr", "ptr"),
        ("n", "i32"),
    ),
    constexprs=("ACT", "BLOCK"),
)
