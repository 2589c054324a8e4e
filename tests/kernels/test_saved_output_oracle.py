"""The float64 oracle of a relu-chain backward given its own saved outputs (kernel_numerics.relu_chain_backward64)
and its bound SAME_SAVED_TOL: the oracle is autograd's answer, a correct 16-bit backward passes, and the bound
catches one row's gradient, or one row's share of a weight gradient, gone wrong (the size of the defects the GPU check hunts)."""

import itertools

import pytest
import torch
from kernel_numerics import SAME_SAVED_TOL, randn, rel_err, relu_chain_backward64, relu_chain_outputs


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
