"""Pure layers for `kernels.kernelize`: no __init__, no state; forward reads the replaced module's own
parameters and calls the package's public ops.

FusedMLP fits a module whose nn.Linear children (in registration order) form the chain, with one
activation module (nn.ReLU, nn.GELU, nn.SiLU) or a string attribute `activation`.
GatedMLP fits modules with `gate_proj`, `up_proj`, `down_proj` (bias-free nn.Linear) and `act_fn`
(or a string attribute `activation`), as in Llama/Gemma/Qwen MLP blocks.
GPT2MLP fits transformers' GPT2MLP (Conv1D `c_fc`, `act`, Conv1D `c_proj`, `dropout`).
All three can run under torch.compile (the ops are torch.library custom ops there) and have a backward.
"""

from __future__ import annotations

import torch
from torch import nn

from . import gated_mlp, mlp

# Activation module class name -> our activation name (covers torch.nn and transformers' classes).
_ACT_BY_CLASS = {
    "ReLU": "relu",
    "SiLU": "silu",
    "SiLUActivation": "silu",
    "GELUActivation": "gelu",
    "GELUTanh": "gelu_tanh",
    "PytorchGELUTanh": "gelu_tanh",
    "NewGELUActivation": "gelu_tanh",
    "GELUTanhActivation": "gelu_tanh",
}


def activation_of(module: nn.Module) -> str:
    """Our activation name for an activation module, or a ValueError naming the class."""
    if isinstance(module, nn.GELU):
        return "gelu_tanh" if module.approximate == "tanh" else "gelu"
    name = type(module).__name__
    if name not in _ACT_BY_CLASS:
        raise ValueError(
            f"activation module {name} is not supported by fused_mlp; use ReLU, GELU, SiLU or set a "
            "string attribute `activation` on the module"
        )
    return _ACT_BY_CLASS[name]


def _module_activation(module: nn.Module, default: str) -> str:
    """The module's `activation` string, else its first known activation child, else `default`."""
    act = getattr(module, "activation", None)
    if isinstance(act, str):
        return act
    if isinstance(act, nn.Module):
        return activation_of(act)
    act_fn = getattr(module, "act_fn", None)
    if isinstance(act_fn, nn.Module):
        return activation_of(act_fn)
    for child in module.modules():
        if child is not module and not isinstance(child, (nn.Linear, nn.Sequential, nn.ModuleList)):
            return activation_of(child)
    return default


class FusedMLP(nn.Module):
    """Linear → act → … → Linear as one fused `mlp` call."""

    can_torch_compile = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        linears = [m for m in self.modules() if isinstance(m, nn.Linear)]
        if not linears:
            raise ValueError(f"FusedMLP needs nn.Linear children; {type(self).__name__} has none")
        biases = [m.bias for m in linears]
        return mlp(
            x,
            [m.weight for m in linears],
            None if all(b is None for b in biases) else biases,
            _module_activation(self, "relu"),
        )


class GatedMLP(nn.Module):
    """down_proj(act(gate_proj(x)) * up_proj(x)) as one fused `gated_mlp` call."""

    can_torch_compile = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        projs = (self.gate_proj, self.up_proj, self.down_proj)
        if any(p.bias is not None for p in projs):
            raise ValueError(
                "GatedMLP fuses bias-free projections only; this module's projections have biases"
            )
        return gated_mlp(
            x,
            self.gate_proj.weight,
            self.up_proj.weight,
            self.down_proj.weight,
            _module_activation(self, "gelu_tanh"),
        )


class GPT2MLP(nn.Module):
    """dropout(c_proj(act(c_fc(x)))) of transformers' GPT2MLP as one fused `mlp` call.

    Conv1D keeps its weight as [in, out] (x @ W + b) where the ops take [out, in]: each weight goes in as its
    transpose, a view of the module's own parameter, which `mlp` reads in place as a K-major weight (no copy,
    forward or backward; the weight's gradient comes back in the parameter's [in, out] layout). The CUDA
    backend runs such layers on cuBLASLt; the Triton backend on its K-major kernel (or cuBLAS / the Hopper
    kernel where its tables say so).
    """

    can_torch_compile = True

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        fc, proj = self.c_fc, self.c_proj
        h = mlp(
            hidden_states, [fc.weight.t(), proj.weight.t()], [fc.bias, proj.bias], activation_of(self.act)
        )
        return self.dropout(h)
