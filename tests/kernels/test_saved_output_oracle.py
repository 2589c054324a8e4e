"""The float64 oracles of a relu-chain and a gated-MLP backward given their own saved outputs
(kernel_numerics.relu_chain_backward64, gated_backward64) and their bound SAME_SAVED_TOL: the oracle is autograd's answer, a correct 16-bit backward passes, and the bound
catches one row's gradient, or one row's share of a weight gradient, gone wrong (the size of the defects the GPU check hunts)."""

import itertools

import pytest
import torch
from kernel_numerics import (
    ACT64,
    ACTIVATIONS,
    SAME_SAVED_TOL,
    gated_backward64,
    randn,
    rel_err,
    relu_chain_backward64,
    relu_chain_outputs,
)


def params(dtype, rows=17, dims=(96, 160, 64, 48)):
    x = randn(rows, dims[0], dtype=dtype, grad=True)
    ws = [randn(o, i, dtype=dtype, scale=i**-0.5, grad=True) for i, o in itertools.pairwise(dims)]
    bs = [randn(o, dtype=dtype, grad=True) for o in dims[1:]]
    return x, ws, bs


@pytest.mark.parametrize("last_relu", (False, True))
def test_oracle_is_autograd_in_float64(last_relu):
    x, ws, bs = params(torch.float64)
    outs = relu_chain_outputs(x, ws, bs, last_relu)
    dy = torch.randn_like(outs[-1])
    want = torch.autograd.grad(outs[-1], (x, *ws, *bs), dy)
    got = relu_chain_backward64(dy, x, ws, [o.detach() for o in outs], last_relu=last_relu)
    for i, (g, w) in enumerate(zip(got, want)):
        assert rel_err(g, w) < 1e-12, f"gradient {i}"


@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float16))
def test_bound_passes_a_correct_backward_and_catches_one_wrong_row(dtype):
    x, ws, bs = params(dtype)
    outs = relu_chain_outputs(x, ws, bs)
    dy = randn(*outs[-1].shape, dtype=dtype)
    want = relu_chain_backward64(dy, x, ws, [o.detach() for o in outs], store=dtype)
    # CPU autograd in dtype: a correct backward
    got = torch.autograd.grad(outs[-1], (x, *ws, *bs), dy, retain_graph=True)
    for i, (g, w) in enumerate(zip(got, want)):
        assert rel_err(g, w) <= SAME_SAVED_TOL[dtype], f"correct backward, gradient {i}"
    dx = got[0].clone()
    dx[16] *= 1.2  # one row of 17 off by 20%
    assert rel_err(dx, want[0]) > SAME_SAVED_TOL[dtype]
    (dw,) = torch.autograd.grad(outs[-1][:16], ws[1], dy[:16])  # row 17's share of a weight gradient lost
    assert rel_err(dw, want[2]) > SAME_SAVED_TOL[dtype]


def gated_params(dtype, rows=17, hidden=96, inter=208, out=80):
    x = randn(rows, hidden, dtype=dtype, grad=True)
    wg = randn(inter, hidden, dtype=dtype, scale=hidden**-0.5, grad=True)
    wu = randn(inter, hidden, dtype=dtype, scale=hidden**-0.5, grad=True)
    wd = randn(out, inter, dtype=dtype, scale=inter**-0.5, grad=True)
    return x, wg, wu, wd


def gated_forward(x, wg, wu, wd, activation):
    """y, and what the op saves: h = act(g) u and the (g, u) planes [2, M, I], in the inputs' dtype."""
    g, u = x @ wg.T, x @ wu.T
    h = ACT64[activation](g) * u
    return h @ wd.T, h, torch.stack((g, u))


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_oracle_activations_are_the_reference_ones(activation):
    """kernel_numerics keeps its own copy (tests/cuda/check_paths.py loads it without fused_mlp): it must not drift."""
    from fused_mlp.reference import apply_activation

    z = torch.linspace(-8, 8, 1001, dtype=torch.float64)
    assert torch.equal(ACT64[activation](z), apply_activation(z, activation))


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_gated_oracle_is_autograd_in_float64(activation):
    x, wg, wu, wd = gated_params(torch.float64)
    y, h, gu = gated_forward(x, wg, wu, wd, activation)
    dy = torch.randn_like(y)
    want = torch.autograd.grad(y, (x, wg, wu, wd), dy)
    got = gated_backward64(dy, x, wg, wu, wd, h.detach(), gu.detach(), activation)
    for i, (g, w) in enumerate(zip((got[0], got[1][0], got[1][1], got[2]), want)):
        assert rel_err(g, w) < 1e-12, f"{activation} gradient {i}"


@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float16))
def test_gated_bound_passes_a_correct_backward_and_catches_one_wrong_row(dtype):
    x, wg, wu, wd = gated_params(dtype)
    y, h, gu = gated_forward(x, wg, wu, wd, "gelu_tanh")
    dy = randn(*y.shape, dtype=dtype)
    want = gated_backward64(dy, x, wg, wu, wd, h.detach(), gu.detach(), "gelu_tanh", store=dtype)
    got = torch.autograd.grad(y, (x, wg, wu, wd), dy, retain_graph=True)  # CPU autograd in dtype: correct
    for i, (g, w) in enumerate(
        zip((got[0], got[1], got[2], got[3]), (want[0], want[1][0], want[1][1], want[2]))
    ):
        assert rel_err(g, w) <= SAME_SAVED_TOL[dtype], f"correct backward, gradient {i}"
    dx = got[0].clone()
    dx[16] *= 1.2  # one row of 17 off by 20%
    assert rel_err(dx, want[0]) > SAME_SAVED_TOL[dtype]
    (dwu,) = torch.autograd.grad(y[:16], wu, dy[:16])  # row 17's share of dw_up lost
    assert rel_err(dwu, want[1][1]) > SAME_SAVED_TOL[dtype]
