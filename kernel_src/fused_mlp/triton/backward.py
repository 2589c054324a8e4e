"""Backward compositions on 2-D rows: Hopper kernels where fusion or speed pays (dgrad epilogues that apply
act' or produce dg / du from the saved pre-activations, the gated dX as one dual GEMM), torch matmuls
(cuBLAS) where the arch's table row is None or TMA's rules rule the Hopper kernel out.

No autograd here: `autograd` (eager training) calls these directly; `custom_ops` wraps them as ops whose
fake kernels give shapes, or passes its registered ops in (`chain_grads`' act_grad) so compile traces ops only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from .activations import ACT_CODES
from .forward import act_and_mul_backward, activation_backward
from .gemm import hopper_config, is_kmajor, tma_gemm, tma_ok
from .hopper import EPI_ACT, EPI_ACT_GRAD, EPI_GATED_GRAD


def wgrad_rows(dz: torch.Tensor, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """out[N, K] = dz[M, N]^T @ x[M, K] (the weight gradient)."""
    rows, n = dz.shape
    cfg = hopper_config("wgrad", dz, n, x.shape[1])
    if cfg is not None and tma_ok(dz, x, out):
        tma_gemm(dz, x, out, n, x.shape[1], rows, cfg, a_t=True, b_t=True, rows=rows)
    else:
        torch.mm(dz.t(), x, out=out)
    return out


def dgrad_rows(
    dz: torch.Tensor,
    w: torch.Tensor,
    out: torch.Tensor,
    pre: torch.Tensor | None = None,
    activation: str = "none",
) -> torch.Tensor:
    """out[M, K] = (dz[M, N] @ w[N, K]) * act'(pre) (pre = the previous layer's saved pre-activation;
    None: no activation between the layers)."""
    rows, n = dz.shape
    cfg = hopper_config("dgrad", dz, rows, w.shape[1])
    if cfg is not None and tma_ok(dz, w, out, pre):
        epi = EPI_ACT if pre is None else EPI_ACT_GRAD
        tma_gemm(dz, w, out, rows, w.shape[1], n, cfg, b_t=True, aux=pre, act=ACT_CODES[activation], epi=epi)
    else:
        torch.mm(dz, w, out=out)
        if pre is not None:
            out.copy_(activation_backward(out, pre, activation))
    return out


def gated_backward_rows(
    dy: torch.Tensor, x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor,
    h: torch.Tensor, gu: torch.Tensor, activation: str,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    """(dx, (dw_gate, dw_up) as one [2, I, H] tensor, dw_down) of y = (act(x wg^T) * (x wu^T)) wd^T for
    upstream dy, from the forward's h = act(g) * u and gu = (g, u) [2, M, I]:

    1. (dg, du) [2, M, I] = the gated epilogue of dy @ w_down (Hopper: g, u read in the epilogue, dh never
       reaches HBM), else dh = dy @ w_down and one elementwise pass;
    2. dw_down = dy^T @ h;  3. (dw_gate, dw_up) = (dg, du)^T @ x (one batched GEMM);
    4. dx = dg @ w_gate + du @ w_up (Hopper: one dual GEMM).
    """
    rows, n = x.shape[0], w_gate.shape[0]
    dgu = torch.empty((2, rows, n), device=x.device, dtype=x.dtype)
    cfg = hopper_config("gated_dgrad", dy, rows, n)
    if cfg is not None and tma_ok(dy, w_down, dgu[0], gu[0]):
        tma_gemm(dy, w_down, dgu[0], rows, n, dy.shape[1], cfg, b_t=True, aux=gu[0], act=ACT_CODES[activation],
                 epi=EPI_GATED_GRAD)  # fmt: skip
    else:
        act_and_mul_backward(dy @ w_down, gu[0], gu[1], activation, outs=(dgu[0], dgu[1]))
    dw_down = wgrad_rows(dy, h, torch.empty_like(w_down))
    dw_gu = torch.empty((2, n, x.shape[1]), device=x.device, dtype=x.dtype)
    if hopper_config("wgrad", dy, n, x.shape[1]) is not None:
        wgrad_rows(dgu[0], x, dw_gu[0])
        wgrad_rows(dgu[1], x, dw_gu[1])
    else:
        torch.matmul(dgu.transpose(1, 2), x, out=dw_gu)
    dx = torch.empty_like(x)
    cfg = hopper_config("dual", dy, rows, x.shape[1])
    if cfg is not None and tma_ok(dgu[0], w_gate, w_up, dx):
        tma_gemm(dgu[0], w_gate, dx, rows, x.shape[1], n, cfg, b_t=True, b2=w_up)
    else:
        torch.mm(dgu[0], w_gate, out=dx)
        dx.addmm_(dgu[1], w_up)
    return dx, dw_gu, dw_down


def chain_grads(
    grad: torch.Tensor, inputs: Sequence[torch.Tensor], pres: Sequence[torch.Tensor | None],
    weights: Sequence[torch.Tensor], has_bias: Sequence[bool], activation: str,
    act_grad: Callable[[torch.Tensor, torch.Tensor, str], torch.Tensor], need_dx: bool = True,
    need_dw: Sequence[bool] | None = None,
) -> tuple[torch.Tensor | None, list[torch.Tensor | None], list[torch.Tensor | None]]:  # fmt: skip
    """(dx, dweights, dbiases) of the layer chain z_i = h_i @ W_i^T + b_i, h_{i+1} = act(z_i), no activation
    after the last layer, for the upstream gradient `grad` of the last z (all 2-D rows):

    - `inputs[i]` = h_i (h_0 = x); `pres[i]` (i < n - 1) = what act' reads: z_i, or h_{i+1} for relu (its
      derivative needs only the sign), unused for "none";
    - `act_grad(g, pre, activation)` = g * act'(pre): the direct kernel in eager training, the registered op
      in the compiled path (whose backward must consist of ops);
    - dx is None when not `need_dx` (layer 0's dgrad GEMM is skipped), and dweights[i] is None when
      `need_dw[i]` is False (a frozen weight: its GEMM is skipped).
    The GEMMs run on torch (cuBLAS): every backward role of the Hopper tables is None (configs.py). A K-major
    weight (forward.layer_weight) is read in place, and its gradient comes back K-major too, so autograd hands
    the parameter behind the view a gradient in the parameter's own layout.
    """
    n = len(weights)
    dweights: list[torch.Tensor | None] = [None] * n
    dbiases: list[torch.Tensor | None] = [None] * n
    g: torch.Tensor | None = grad
    for i in range(n - 1, -1, -1):
        dz = g if i == n - 1 or activation == "none" else act_grad(g, pres[i], activation)
        if need_dw is None or need_dw[i]:  # in the weight's own layout: a K-major weight's as (x^T dz)^T
            dweights[i] = (inputs[i].t() @ dz).t() if is_kmajor(weights[i]) else dz.t() @ inputs[i]
        dbiases[i] = dz.sum(0) if has_bias[i] else None
        g = dz @ weights[i] if i > 0 or need_dx else None
    return g, dweights, dbiases


def linear_grads(
    grad: torch.Tensor, x2: torch.Tensor, weight: torch.Tensor, has_bias: bool, pre: torch.Tensor | None,
    activation: str, act_grad: Callable[[torch.Tensor, torch.Tensor, str], torch.Tensor], need_dx: bool = True,
    need_dw: bool = True,
) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:  # fmt: skip
    """(dx, dw, db) of out = act(x2 @ W^T + b) for upstream `grad` (2-D rows): act' on the output first (`pre`:
    what act' reads, unused for "none"), then chain_grads of the one layer."""
    dz = grad if activation == "none" else act_grad(grad, pre, activation)
    dx, (dw,), (db,) = chain_grads(dz, [x2], [], [weight], [has_bias], "none", act_grad, need_dx, [need_dw])
    return dx, dw, db
