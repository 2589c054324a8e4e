"""The eager reference is the oracle: check it against plain torch.nn modules once, in float64."""

import fused_mlp.reference as ref
import pytest
import torch
from torch import nn


def test_mlp_matches_nn_sequential():
    torch.manual_seed(0)
    seq = nn.Sequential(nn.Linear(12, 20), nn.GELU(approximate="tanh"), nn.Linear(20, 7)).double()
    x = torch.randn(3, 5, 12, dtype=torch.float64)
    out = ref.mlp(x, [seq[0].weight, seq[2].weight], [seq[0].bias, seq[2].bias], "gelu_tanh")
    torch.testing.assert_close(out, seq(x))


def test_gated_mlp_is_swiglu_with_silu():
    torch.manual_seed(0)
    x, wg, wu, wd = (torch.randn(*s, dtype=torch.float64) for s in ((4, 8), (16, 8), (16, 8), (8, 16)))
    expected = (nn.functional.silu(x @ wg.T) * (x @ wu.T)) @ wd.T
    torch.testing.assert_close(ref.gated_mlp(x, wg, wu, wd, "silu"), expected)


def test_unknown_activation_names_the_choices():
    with pytest.raises(ValueError, match="gelu_tanh"):
        ref.linear(torch.randn(2, 3), torch.randn(4, 3), activation="tanh")


def test_bias_count_must_match_layers():
    with pytest.raises(ValueError, match="2 weights but 1 biases"):
        ref.mlp(torch.randn(2, 3), [torch.randn(3, 3), torch.randn(3, 3)], [torch.randn(3)])
