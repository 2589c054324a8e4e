"""Stock `kernels.kernelize` swaps a model's MLP blocks for our `layers.FusedMLP` / `layers.GatedMLP`, loaded
from our hub (and from one without our extensions, as the Hugging Face Hub) via `LayerRepository(version=1)`;
the kernelized model matches eager against a float64 copy. CPU: Triton under the interpreter; the GPU
test (`-m gpu`) does the same on the device in bf16 with Triton JIT.
"""

from __future__ import annotations

import copy

import pytest
import torch
from hubs import HUB_KINDS, publish_fresh
from kernels import LayerRepository, Mode, kernelize, use_kernel_forward_from_hub, use_kernel_mapping
from torch import nn

from tests.conftest import point_clients_at
from tests.kernels.kernel_numerics import TOL, rel_err


@use_kernel_forward_from_hub("FusedMLP")
class MLP(nn.Module):
    """A two-layer GELU MLP block, as in GPT-2/BERT."""

    def __init__(self, hidden: int, inner: int):
        super().__init__()
        self.fc_in = nn.Linear(hidden, inner)
        self.act = nn.GELU(approximate="tanh")
        self.fc_out = nn.Linear(inner, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc_out(self.act(self.fc_in(x)))


@use_kernel_forward_from_hub("GatedMLP")
class LlamaMLP(nn.Module):
    """A gated SiLU MLP block, as in Llama."""

    def __init__(self, hidden: int, inner: int):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inner, bias=False)
        self.up_proj = nn.Linear(hidden, inner, bias=False)
        self.down_proj = nn.Linear(inner, hidden, bias=False)
        self.act_fn = nn.SiLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class Model(nn.Module):
    """MLP blocks of both kinds in a chain, with the norms kernelize leaves alone (no residual: it would hide
    a block's error)."""

    def __init__(self, hidden: int = 64, inner: int = 96):
        super().__init__()
        self.norm = nn.LayerNorm(hidden)
        self.blocks = nn.ModuleList([MLP(hidden, inner), LlamaMLP(hidden, inner), MLP(hidden, inner)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(self.norm(x))
        return x


@pytest.fixture(params=HUB_KINDS)
def published(request, fused_mlp_v1, tmp_path, monkeypatch) -> str:
    """The loader tests' fused-mlp dist as v1 on each kind of hub, clients pointed there; the repo id."""
    hub = request.getfixturevalue(request.param)
    repo, _, _ = publish_fresh(hub, fused_mlp_v1[2], tmp_path / "key.pem")
    point_clients_at(monkeypatch, hub.url, tmp_path / "clients")
    return repo


def _kernelized(model: nn.Module, repo: str, device: str) -> nn.Module:
    mapping = {
        name: {device: LayerRepository(repo_id=repo, layer_name=name, version=1)}
        for name in ("FusedMLP", "GatedMLP")
    }
    with use_kernel_mapping(mapping, inherit_mapping=False):
        return kernelize(model, mode=Mode.INFERENCE, device=device, use_fallback=False)


def _check(repo: str, device: str, dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    model = Model().to(device=device, dtype=dtype)
    reference = copy.deepcopy(model).double()
    x = torch.randn(3, 5, 64, device=device).to(dtype)
    with torch.no_grad():
        eager = model(x)
        kernelized = _kernelized(model, repo, device)
        out = kernelized(x)
        expected = reference(x.double())
    # Every MLP block now runs our layer's forward, from the package the hub served.
    for block in kernelized.blocks:
        layer = {MLP: "FusedMLP", LlamaMLP: "GatedMLP"}[type(block)]
        forward = block.forward.__func__
        assert forward.__qualname__ == f"{layer}.forward", forward.__qualname__
        assert forward.__module__.startswith("_fused_mlp_"), forward.__module__
    assert rel_err(eager, expected) <= TOL[dtype]
    assert rel_err(out, expected) <= TOL[dtype], f"kernelized vs float64: {rel_err(out, expected):.3e}"


def test_kernelize_swaps_in_our_layers_on_cpu(published):
    _check(published, "cpu", torch.float32)


@pytest.mark.gpu
def test_kernelize_swaps_in_our_layers_on_gpu(published):
    _check(published, "cuda", torch.bfloat16)
