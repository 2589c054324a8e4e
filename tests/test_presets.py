"""The real-model shape suite (`registry.spec.presets`): the widths, the expansion to cases, the errors."""

from __future__ import annotations

import dataclasses

import pytest

from registry.client import workloads
from registry.spec import presets
from registry.spec.presets import Case, Preset


def test_the_model_presets_have_the_models_widths():
    llama = presets.get("llama-3-8b")
    assert (llama.op, llama.hidden, llama.intermediate) == ("gated_mlp", 4096, 14336)
    assert llama.activation == "silu"
    assert llama.weight_shapes == ((14336, 4096), (14336, 4096), (4096, 14336))
    # The decode step reads 352 MB of bf16 weights (issue 40's weight-read floor).
    assert llama.weight_bytes(2) == 3 * 4096 * 14336 * 2 == 352_321_536
    assert presets.get("qwen2.5-7b").widths == (3584, 18944)
    assert presets.get("llama-3.2-1b").widths == (2048, 8192)
    assert presets.get("gemma-2-2b").activation == "gelu_tanh"
    gpt2, bert = presets.get("gpt2"), presets.get("bert-large")
    assert (gpt2.op, gpt2.weight_shapes, gpt2.bias) == ("mlp", ((3072, 768), (768, 3072)), True)
    assert gpt2.weight_bytes(2) == 2 * (2 * 768 * 3072 + 3072 + 768)
    assert (bert.widths, bert.activation, bert.intermediate) == ((1024, 4096, 1024), "gelu", 4096)
    assert llama.flops(16) == 2 * 16 * 3 * 4096 * 14336 and llama.flops(16, train=True) == 3 * llama.flops(16)


def test_the_projects_own_shapes_match_the_standard_workloads():
    mlp, gated = presets.get("mlp-3x1024"), presets.get("geglu-768-3072")
    assert mlp.widths == (workloads.DEFAULT_DIMS["mlp"][0],) * 4 and mlp.activation == "relu" and mlp.bias
    assert gated.widths == workloads.DEFAULT_DIMS["gated"] and gated.activation == "gelu_tanh"


def test_activations_are_the_ones_the_ops_take():
    from fused_mlp import reference

    assert presets.ACTIVATIONS == reference.ACTIVATIONS  # the registry's copy of the API's list
    assert {p.activation for p in presets.PRESETS} <= set(reference.ACTIVATIONS)


def test_suite_is_every_row_count_and_dtype_forward_and_three_training_sizes():
    cases = list(presets.suite(["llama-3-8b"]))
    fwd = [c for c in cases if not c.train]
    assert sorted({c.rows for c in fwd}) == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192]
    assert {c.dtype for c in cases} == {"bfloat16", "float16"}
    assert sorted({c.rows for c in cases if c.train}) == [16, 512, 4096]
    assert len(cases) == (14 + 3) * 2 == len(set(cases))
    everything = list(presets.suite())
    assert len(everything) == len(presets.PRESETS) * 34
    assert {c.preset for c in everything} == set(presets.PRESETS)
    assert Case(presets.get("gpt2"), 16, "float16", True).label == "gpt2 M=16 float16 fwd+bwd"
    small = list(presets.suite([presets.get("gpt2")], rows=(1,), dtypes=("bfloat16",), train_rows=()))
    assert [c.label for c in small] == ["gpt2 M=1 bfloat16"]


def test_a_shape_spec_names_a_block_outside_the_suite():
    nemo = presets.get("gated_mlp:5120x14336:silu")
    assert (nemo.op, nemo.widths, nemo.activation, nemo.bias) == ("gated_mlp", (5120, 14336), "silu", False)
    assert nemo.weight_bytes(2) == 3 * 5120 * 14336 * 2 and nemo.name == "gated_mlp:5120x14336:silu"
    chain = presets.get("mlp:768x3072x768:gelu_tanh+bias")
    assert (chain.weight_shapes, chain.bias) == (((3072, 768), (768, 3072)), True)
    case = next(presets.suite([nemo], rows=(3,), dtypes=("float16",), train_rows=()))
    assert case.label == "gated_mlp:5120x14336:silu M=3 float16"
    for bad, said in (
        ("gated_mlp:5120x14336x4096:silu", "do not fit op gated_mlp"),
        ("gated_mlp:5120x14336:silu+bias", "gated_mlp takes no biases"),
        ("conv:64x64:relu", "op must be one of"),
        ("mlp:64x0x64:relu", "every width must be positive"),
        ("mlp:64:relu", "OP:DIMS:ACTIVATION"),
        ("gated_mlp:5120x14336", "OP:DIMS:ACTIVATION"),
        (
            "gated_mlp:5120x14336:swiglu",
            "activation 'swiglu' is not one of none, relu, gelu, gelu_tanh, silu",
        ),
    ):
        with pytest.raises(ValueError, match=said):
            presets.get(bad)


def test_unknown_name_lists_every_preset():
    with pytest.raises(ValueError, match="unknown shape preset 'llama-8b'") as e:
        presets.get("llama-8b")
    assert all(name in str(e.value) for name in presets.names())
    with pytest.raises(ValueError, match="llama-8b"):
        list(presets.suite(["gpt2", "llama-8b"]))


def test_names_are_unique_and_presets_are_frozen():
    assert len(set(presets.names())) == len(presets.PRESETS) == 8
    with pytest.raises(dataclasses.FrozenInstanceError):
        presets.get("gpt2").widths = (1, 2)


@pytest.mark.parametrize(
    ("kwargs", "what"),
    [
        ({"op": "linear", "widths": (4, 4)}, "op must be one of"),
        ({"op": "gated_mlp", "widths": (4, 8, 4)}, "do not fit"),
        ({"op": "mlp", "widths": (4,)}, "do not fit"),
        ({"op": "gated_mlp", "widths": (4, 8), "bias": True}, "no biases"),
        ({"op": "mlp", "widths": (4, 8), "activation": "gelu_new"}, "activation 'gelu_new' is not one of"),
    ],
)
def test_malformed_presets_are_refused(kwargs, what):
    with pytest.raises(ValueError, match=what):
        Preset("x", **{"activation": "silu", **kwargs})
