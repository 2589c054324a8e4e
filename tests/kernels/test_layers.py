"""layers.FusedMLP / GatedMLP run on the modules they replace (kernels' pure-layer contract)."""

import pytest
import torch
from fused_mlp import layers
from kernel_numerics import TOL, rel_err
from torch import nn


class LlamaStyleMLP(nn.Module):
    def __init__(self, hidden: int, inter: int, act: nn.Module):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inter, bias=False)
        self.up_proj = nn.Linear(hidden, inter, bias=False)
        self.down_proj = nn.Linear(inter, hidden, bias=False)
        self.act_fn = act

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


def test_layers_are_pure():
    for cls in (layers.FusedMLP, layers.GatedMLP):
        assert "__init__" not in cls.__dict__ and list(cls().parameters()) == []


@pytest.mark.parametrize("act", (nn.ReLU(), nn.GELU(approximate="tanh"), nn.SiLU()))
def test_fused_mlp_layer_matches_module(act):
    seq = nn.Sequential(nn.Linear(96, 80), act, nn.Linear(80, 48), act, nn.Linear(48, 40))
    x = torch.randn(2, 7, 96)
    with torch.no_grad():
        assert rel_err(layers.FusedMLP.forward(seq, x), seq(x)) <= TOL[torch.float32]


@pytest.mark.parametrize("act", (nn.SiLU(), nn.GELU(approximate="tanh"), nn.GELU()))
def test_gated_mlp_layer_matches_module(act):
    module = LlamaStyleMLP(96, 80, act)
    x = torch.randn(2, 7, 96)
    with torch.no_grad():
        assert rel_err(layers.GatedMLP.forward(module, x), module(x)) <= TOL[torch.float32]


def test_unknown_activation_module_is_named():
    module = LlamaStyleMLP(8, 16, nn.Tanh())
    with pytest.raises(ValueError, match="Tanh"):
        layers.GatedMLP.forward(module, torch.randn(2, 8))
