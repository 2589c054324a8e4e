"""transformers models (random weights from their configs) kernelized through the stock route: our hub's
`fused-mlp` v1 mapped with `registry.client.models.mlp_kernel_mapping`, then `kernels.kernelize`. Every MLP
block runs our layer from the package the hub served; logits and one training step's gradients match a
float64 copy of the model as closely as the model's own forward does; `generate` gives the same tokens; the
report times each replaced block and gives the slower ones their own forward back. CPU: tiny configs, Triton
under the interpreter; `-m gpu`: real widths in bf16.
"""

from __future__ import annotations

import copy

import pytest
import torch
import transformers
from kernels import Mode, kernelize, use_kernel_forward_from_hub, use_kernel_mapping
from loader_paths import NAMESPACE

from registry import kernel_report, mlp_kernel_mapping
from registry.client.models import replaced_modules
from tests.conftest import point_clients_at
from tests.kernels.kernel_numerics import TOL, rel_err

TINY = {"vocab_size": 128, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64,
        "tie_word_embeddings": False}  # fmt: skip
CONFIGS = {
    "llama": lambda **kw: transformers.LlamaConfig(**{**TINY, **kw}),
    "qwen2": lambda **kw: transformers.Qwen2Config(**{**TINY, **kw}),
    "gemma2": lambda **kw: transformers.Gemma2Config(
        **{**TINY, "head_dim": 16, "hidden_activation": "gelu_pytorch_tanh", "sliding_window": 32, **kw}
    ),
    "gpt2": lambda **kw: transformers.GPT2Config(
        vocab_size=128,
        n_embd=64,
        n_layer=2,
        n_head=4,
        n_positions=64,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        **kw,
    ),
}
LAYER = {"llama": "GatedMLP", "qwen2": "GatedMLP", "gemma2": "GatedMLP", "gpt2": "GPT2MLP"}


def build(kind: str, device: str, dtype: torch.dtype, **config) -> torch.nn.Module:
    torch.manual_seed(0)
    cfg = CONFIGS[kind](**config)
    cfg._attn_implementation = "eager"
    return transformers.AutoModelForCausalLM.from_config(cfg).to(device=device, dtype=dtype)


@pytest.fixture
def repo(hub, fused_mlp_v1, tmp_path, monkeypatch) -> str:
    """The loader tests' fused-mlp v1 on the session's hub, clients pointed there."""
    point_clients_at(monkeypatch, hub.url, tmp_path / "clients")
    return fused_mlp_v1[0]


def kernelized(model, repo: str, mode=Mode.INFERENCE):
    with use_kernel_mapping(mlp_kernel_mapping(model, repo, version=1), inherit_mapping=False):
        return kernelize(model, mode=mode)


def assert_ours(model, kind: str) -> None:
    """Every MLP block runs our layer, from the package the hub served."""
    blocks = [m for m in model.modules() if type(m).__name__.endswith("MLP")]
    found = {id(m): layer for _, m, _, layer in replaced_modules(model)}
    assert blocks and all(found.get(id(b)) == LAYER[kind] for b in blocks), (len(blocks), found)
    for b in blocks:
        assert b.forward.__func__.__module__.startswith("_fused_mlp_"), b.forward.__func__.__module__


def logits_errors(kind: str, repo: str, device: str, dtype: torch.dtype, **config) -> tuple[float, float]:
    """(eager's, ours) relative error of the logits against the float64 model."""
    model = build(kind, device, dtype, **config).eval()
    ref64 = copy.deepcopy(model).double()
    ids = torch.randint(0, model.config.vocab_size, (2, 12), device=device)
    with torch.no_grad():
        want, eager = ref64(ids).logits, model(ids).logits
        kernelized(model, repo)
        assert_ours(model, kind)
        ours = model(ids).logits
    return rel_err(eager, want), rel_err(ours, want)


def grad_errors(
    kind: str, repo: str, device: str, dtype: torch.dtype, **config
) -> dict[str, tuple[float, float]]:
    """Per parameter, (eager's, ours) relative error of one training step's gradient against float64."""
    model = build(kind, device, dtype, **config).train()
    ref64 = copy.deepcopy(model).double()
    own = copy.deepcopy(model)
    ids = torch.randint(0, model.config.vocab_size, (2, 12), device=device)
    kernelized(model, repo, Mode.TRAINING)
    assert_ours(model, kind)
    for m in (model, ref64, own):
        m(ids, labels=ids).loss.backward()
    want = dict(ref64.named_parameters())
    theirs = dict(own.named_parameters())
    return {
        n: (rel_err(theirs[n].grad, want[n].grad), rel_err(p.grad, want[n].grad))
        for n, p in model.named_parameters()
        if want[n].grad is not None and want[n].grad.norm() > 0
    }


@pytest.mark.parametrize("kind", list(CONFIGS))
def test_logits_match_the_float64_model(repo, kind):
    eager, ours = logits_errors(kind, repo, "cpu", torch.float32)
    assert ours <= max(TOL[torch.float32], 2 * eager), f"{kind}: ours {ours:.2e}, eager {eager:.2e}"


@pytest.mark.parametrize("kind", list(CONFIGS))
def test_training_step_gradients_match(repo, kind):
    errs = grad_errors(kind, repo, "cpu", torch.float32)
    assert any("mlp" in n for n in errs), list(errs)
    bad = {n: e for n, e in errs.items() if not e[1] <= max(TOL[torch.float32], 2 * e[0])}
    assert not bad, f"{kind}: gradients off (eager, ours): {bad}"


@pytest.mark.parametrize("kind", ["llama", "gpt2"])
def test_generate_gives_the_same_tokens(repo, kind):
    model = build(kind, "cpu", torch.float32).eval()
    prompt = torch.randint(0, model.config.vocab_size, (1, 6))
    kw = {"max_new_tokens": 5, "do_sample": False, "pad_token_id": 0}
    want = model.generate(prompt, **kw)
    kernelized(model, repo)
    got = model.generate(prompt, **kw)
    assert got.shape == (1, 11) and torch.equal(got, want), (got, want)


def test_report_gives_slower_blocks_their_own_forward(repo):
    """Under the Triton interpreter our kernel is far slower than eager on a CPU: the report asks the speed
    check at each block's shape, says so and puts the module's own forward back (one verdict per shape)."""
    model = kernelized(build("llama", "cpu", torch.float32).eval(), repo)
    report = kernel_report(model)
    (entry,) = report.modules
    assert entry.names == ("model.layers.0.mlp", "model.layers.1.mlp"), entry.names
    assert (entry.block, entry.layer, entry.shape) == ("LlamaMLP", "GatedMLP", "gated_mlp 64x96 silu float32")
    assert entry.repo.startswith(repo + "@") and entry.variant.startswith("torch"), (
        entry.repo,
        entry.variant,
    )
    assert [r.rows for r in entry.rows] == [1, 16] and all(r.ratio > 1.25 for r in entry.rows), entry.rows
    assert (
        not entry.pays and entry.restored and "keeps its own forward: kernel slower at M=1" in str(report)
    ), str(report)
    assert replaced_modules(model) == []  # both blocks run LlamaMLP.forward again
    ids = torch.randint(0, 128, (1, 4))
    with torch.no_grad():
        model(ids)


def test_report_without_restore_keeps_the_kernels(repo):
    model = kernelized(build("gpt2", "cpu", torch.float32).eval(), repo)
    report = kernel_report(model, restore=False)
    (entry,) = report.modules
    # timed with the K-major weights its Conv1D layers pass, the layout whose paths the model runs
    assert entry.shape == "mlp 64x256x64 gelu_tanh+bias float32 kmajor", entry.shape
    assert entry.layer == "GPT2MLP" and not entry.pays and not entry.restored, entry
    assert "runs our kernel although slower at M=1" in str(report), str(report)
    assert len(replaced_modules(model)) == 2
    assert report.restore_slower(model) == ["transformer.h.0.mlp", "transformer.h.1.mlp"]
    assert replaced_modules(model) == []


# Right numbers at every row count, but 10 ms of waiting per one-row call and eager's speed at the others.
SLOW_AT_ONE_ROW = (
    "return (_GPU_OPS if x.is_cuda else _CPU_OPS).gated_mlp(x, w_gate, w_up, w_down, activation)",
    (
        "if x.numel() == x.shape[-1]:\n"
        "        __import__('time').sleep(0.01)\n"
        "    return reference.gated_mlp(x, w_gate, w_up, w_down, activation)"
    ),
)


def test_report_keeps_the_own_forward_only_where_the_kernel_loses(hub, publisher, tmp_path, monkeypatch):
    """A kernel slower at one row only: the blocks run their own forward for one-row calls (a decode step at
    batch 1) and our kernel for the others, and the report says which runs where."""
    publisher.publish(
        "mlp-slow-at-one-row", publisher.build("mlp-slow-at-one-row", patch={"__init__.py": SLOW_AT_ONE_ROW})
    )
    point_clients_at(monkeypatch, hub.url, tmp_path / "clients")
    model = kernelized(build("llama", "cpu", torch.float32).eval(), f"{NAMESPACE}/mlp-slow-at-one-row")
    report = kernel_report(model)
    (entry,) = report.modules
    assert [(r.rows, r.wins) for r in entry.rows] == [(1, False), (16, True)], str(report)
    assert entry.own_at == (1,) and not entry.restored and not entry.pays, entry
    assert "runs our kernel at M=16; its own forward where the kernel is slower: M=1" in str(report), str(
        report
    )
    assert len(replaced_modules(model)) == 2  # still ours, behind the row dispatch
    (_, _, pkg, _), _ = replaced_modules(model)
    calls, gated = [], pkg.reference.gated_mlp  # what the slowed build's op runs
    monkeypatch.setattr(pkg.reference, "gated_mlp", lambda *a: calls.append(a[0].shape) or gated(*a))
    eager = build("llama", "cpu", torch.float32).eval()
    with torch.no_grad():
        for batch, seq, want_calls in ((1, 1, 0), (1, 4, 2), (2, 1, 2)):  # rows 1: own forward; 2 and 4: ours
            ids = torch.randint(0, 128, (batch, seq))
            calls.clear()
            assert rel_err(model(ids).logits, eager(ids).logits) <= TOL[torch.float32]
            assert len(calls) == want_calls, (batch, seq, calls)


@use_kernel_forward_from_hub("SwiGLUMLP")
class MarkedMLP(torch.nn.Module):
    """A gated block its library already marks for hub kernels (as transformers' decorator does)."""

    def __init__(self, hidden: int = 32, inner: int = 48):
        super().__init__()
        self.gate_proj = torch.nn.Linear(hidden, inner, bias=False)
        self.up_proj = torch.nn.Linear(hidden, inner, bias=False)
        self.down_proj = torch.nn.Linear(inner, hidden, bias=False)
        self.act_fn = torch.nn.SiLU()

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


def test_a_block_marked_by_its_library_keeps_its_name(repo):
    model = torch.nn.Sequential(MarkedMLP())
    mapping = mlp_kernel_mapping(model, repo, version=1)
    assert list(mapping) == ["SwiGLUMLP"] and mapping["SwiGLUMLP"]["cpu"].layer_name == "GatedMLP"
    x = torch.randn(3, 32)
    with torch.no_grad():
        want = model.double()(x.double())
        model.float()
        kernelized(model, repo)
        assert [layer for *_, layer in replaced_modules(model)] == ["GatedMLP"]
        assert rel_err(model(x), want) <= TOL[torch.float32]


def test_a_model_without_our_blocks_is_refused(repo):
    with pytest.raises(ValueError, match="no MLP block our layers run"):
        mlp_kernel_mapping(torch.nn.Sequential(torch.nn.Linear(4, 4)), repo, version=1)
    relu2 = build("llama", "cpu", torch.float32, hidden_act="relu2")  # squared ReLU: no op of ours runs it
    with pytest.raises(ValueError, match="its blocks use ReLUSquaredActivation\\): nothing to kernelize"):
        mlp_kernel_mapping(relu2, repo, version=1)


def test_a_block_whose_activation_we_lack_keeps_its_own_forward(repo):
    # One model, one MLP class: the first block's activation swapped for one the ops lack. kernelize must
    # leave that block alone (its forward used to raise inside our layer) and still run ours in the other.
    model = build("llama", "cpu", torch.float32).eval()
    model.model.layers[0].mlp.act_fn = transformers.activations.ACT2FN["relu2"]
    ids = torch.randint(0, model.config.vocab_size, (2, 12))
    with torch.no_grad():
        want = copy.deepcopy(model).double()(ids).logits
        kernelized(model, repo)
        ours = {name for name, *_ in replaced_modules(model)}
        assert ours == {"model.layers.1.mlp"}, ours
        assert rel_err(model(ids).logits, want) <= TOL[torch.float32]


def test_the_mapping_claims_the_activations_our_layers_run():
    from fused_mlp import layers

    from registry.client.models import ACTIVATION_CLASSES

    assert set(ACTIVATION_CLASSES) == set(layers._ACT_BY_CLASS) | {"GELU"}  # nn.GELU: either approximation


# Real widths, bf16, on the device: Llama-3.2-1B's block (H=2048, I=8192) in 4 of its 16 layers (each test
# holds a float64 copy beside two bf16 ones), Gemma-2-2B's, GPT-2's.
REAL = {
    "llama": {"hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 4,
              "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000},
    "gemma2": {"hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 4,
               "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "vocab_size": 32000},
    "gpt2": {"n_embd": 768, "n_layer": 4, "n_head": 12, "vocab_size": 32000},
}  # fmt: skip


@pytest.mark.gpu
@pytest.mark.parametrize("kind", list(REAL))
def test_real_widths_on_the_gpu(repo, kind):
    eager, ours = logits_errors(kind, repo, "cuda", torch.bfloat16, **REAL[kind])
    assert ours <= max(TOL[torch.bfloat16], 1.5 * eager), f"{kind}: ours {ours:.2e}, eager {eager:.2e}"
    errs = grad_errors(kind, repo, "cuda", torch.bfloat16, **REAL[kind])
    bad = {n: e for n, e in errs.items() if not e[1] <= max(TOL[torch.bfloat16], 1.5 * e[0])}
    assert not bad, f"{kind}: gradients off (eager, ours): {bad}"
    model = kernelized(build(kind, "cuda", torch.bfloat16, **REAL[kind]).eval(), repo)
    report = kernel_report(model)
    assert report.modules and all(len(m.rows) == 4 for m in report.modules), str(report)
    # each bucket names the kernels our op launched there, as the profiler saw them
    assert all(r.path.partition(": ")[2] for m in report.modules for r in m.rows), str(report)
    out = model.generate(torch.randint(0, 32000, (1, 8), device="cuda"), max_new_tokens=4, do_sample=False)
    assert out.shape == (1, 12)
