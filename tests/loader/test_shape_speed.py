"""The speed check at the user's shapes (`get_kernel(..., shapes=...)`, `shape_speed.kernel_wins`): CPU builds
loaded with backend="cpu" in fresh interpreters with TRITON_INTERPRET=0, as in test_speed_check.py."""

from __future__ import annotations

import re

import pytest
from loader_paths import NAMESPACE

from registry.client.shape_speed import Shape, as_shape, shape_inputs

NO_INTERPRETER = {"TRITON_INTERPRET": "0"}
GATED = ("gated_mlp", (1024, 4096), "silu", "float32")
# Correct numbers, but 10 ms of waiting per call at hidden size 1024 only: the standard shapes pass.
SLOW_AT_1024 = (
    "return (_GPU_OPS if x.is_cuda else _CPU_OPS).gated_mlp(x, w_gate, w_up, w_down, activation)",
    (
        "if x.shape[-1] == 1024:\n"
        "        __import__('time').sleep(0.01)\n"
        "    return (_GPU_OPS if x.is_cuda else _CPU_OPS).gated_mlp(x, w_gate, w_up, w_down, activation)"
    ),
)
LOAD = """
import json, registry
from registry.client.shape_speed import kernel_wins
k = registry.get_kernel({repo!r}, version=1, backend="cpu", fallback="eager", shapes=[{shape!r}])
again = registry.get_kernel({repo!r}, version=1, backend="cpu", fallback="eager", shapes=[{shape!r}])
print(json.dumps([k.__kernel_info__, again.__kernel_info__, kernel_wins(k, {shape!r})]))
"""


def test_the_users_shape_is_timed_recorded_and_cached(hub_env, fused_mlp_v1, run_python):
    repo, _, _ = fused_mlp_v1
    info, again, wins = run_python(LOAD.format(repo=repo, shape=GATED), {**hub_env, **NO_INTERPRETER})
    assert (info["source"], info["variant"]) == ("hub", "torch-cpu"), info["reason"]
    (verdict,) = info["speed"]["shapes"]
    assert verdict["shape"] == "gated_mlp 1024x4096 silu float32" and verdict["faster"] is True
    assert [c["workload"] for c in verdict["cases"]] == ["gated_mlp M=1", "gated_mlp M=16"]
    assert all(c["kernel_us"] > 0 and c["fallback_us"] > 0 for c in verdict["cases"])
    assert (
        again["speed"]["shapes"][0]["cached"] is True
        and again["speed"]["shapes"][0]["cases"] == verdict["cases"]
    )
    assert wins is True


def test_a_build_slow_only_at_the_users_shape_is_refused_there(hub_env, publisher, run_python):
    dist = publisher.build("slow-at-1024", variants=["torch-cpu"], patch={"__init__.py": SLOW_AT_1024})
    publisher.publish("slow-at-1024", dist)
    repo, env = f"{NAMESPACE}/slow-at-1024", {**hub_env, **NO_INTERPRETER}
    info, _, wins = run_python(LOAD.format(repo=repo, shape=GATED), env)
    assert info["source"] == "fallback-eager", info
    pattern = (
        r"torch-cpu: slower than eager at the given shapes: gated_mlp 1024x4096 silu float32 gated_mlp M=1"
    )
    assert re.match(pattern, info["reason"]), info["reason"]
    assert wins is False  # the fallback is the baseline: a module keeps its own forward


def test_shapes_are_validated_with_what_to_pass():
    assert as_shape(("linear", [768, 3072], "gelu")) == Shape("linear", (768, 3072), "gelu")
    assert as_shape({"op": "mlp", "dims": (8, 16, 8), "activation": "relu", "bias": True}).key == (
        "mlp 8x16x8 relu+bias bfloat16"
    )
    assert as_shape("llama-3-8b") == Shape("gated_mlp", (4096, 14336), "silu")
    assert as_shape("gpt2", "float16") == Shape("mlp", (768, 3072, 768), "gelu_tanh", "float16", bias=True)
    conv = Shape("mlp", (8, 16, 8), "gelu_tanh", "float32", bias=True, kmajor=True)
    assert conv.key == "mlp 8x16x8 gelu_tanh+bias float32 kmajor" and conv != as_shape(
        conv.__dict__ | {"kmajor": False}
    )
    w = shape_inputs(conv, 2, "cpu")["ws"][0]  # [out, in] as the transpose of an [in, out] tensor
    assert w.shape == (16, 8) and w.stride() == (1, 16)
    with pytest.raises(ValueError, match="gated_mlp takes row-major"):
        Shape("gated_mlp", (8, 16), "silu", kmajor=True)
    with pytest.raises(ValueError, match="gated_mlp takes \\(hidden, intermediate\\)"):
        Shape("gated_mlp", (1, 2, 3), "silu")
    with pytest.raises(ValueError, match="use one of"):
        Shape("conv", (1, 2), "silu")
    with pytest.raises(ValueError, match="Shape gated_mlp 8x16: activation 'swiglu' is not one of .*silu"):
        as_shape(("gated_mlp", (8, 16), "swiglu"))
    with pytest.raises(TypeError, match="use float16, bfloat16 or float32"):
        Shape("linear", (1, 2), "none", dtype="int8")


# Right numbers at every row count; 10 ms of waiting per one-row call; counts its calls.
SLOW_AT_ONE_ROW = (
    SLOW_AT_1024[0],
    (
        "gated_mlp.calls = getattr(gated_mlp, 'calls', 0) + 1\n"
        "    if x.numel() == x.shape[-1]:\n"
        "        __import__('time').sleep(0.01)\n"
        "    return (_GPU_OPS if x.is_cuda else _CPU_OPS).gated_mlp(x, w_gate, w_up, w_down, activation)"
    ),
)
DISPATCH = """
import json, registry
from registry.client.shape_speed import REFERENCE_ATTR, as_shape, shape_forward, shape_inputs
from tests.kernels.kernel_numerics import rel_err
k = registry.get_kernel({repo!r}, version=1, backend="cpu", fallback="eager", shapes=[{shape!r}])
own, s, calls = k.gated_mlp.__wrapped__, as_shape({shape!r}), {{}}  # the package's op, behind the dispatch
for rows in (1, 4, 16, 40):
    a = shape_inputs(s, rows, "cpu")
    before = getattr(own, "calls", 0)
    got = shape_forward(s, a, k)
    calls[rows] = [getattr(own, "calls", 0) - before, rel_err(got, shape_forward(s, a, getattr(k, REFERENCE_ATTR)))]
print(json.dumps([k.__kernel_info__, calls]))
"""


def test_a_build_slow_at_one_bucket_serves_the_others(hub_env, publisher, run_python):
    """Slower than eager at one row only: get_kernel serves the kernel, and its op sends one-row calls of the
    user's shape to the fallback and every other row count to the kernel (rows between buckets follow the one
    above; past the last, the last)."""
    dist = publisher.build("slow-at-one-row", variants=["torch-cpu"], patch={"__init__.py": SLOW_AT_ONE_ROW})
    publisher.publish("slow-at-one-row", dist)
    repo, env = f"{NAMESPACE}/slow-at-one-row", {**hub_env, **NO_INTERPRETER}
    info, calls = run_python(DISPATCH.format(repo=repo, shape=GATED), env)
    assert (info["source"], info["variant"]) == ("hub", "torch-cpu"), info["reason"]
    (verdict,) = info["speed"]["shapes"]
    assert [c["passed"] for c in verdict["cases"]] == [False, True], verdict
    assert info["speed"]["fallback_at"] == ["gated_mlp 1024x4096 silu float32: the fallback at M=1"], info[
        "speed"
    ]
    kernel_calls = {int(rows): n for rows, (n, _) in calls.items()}
    assert kernel_calls == {1: 0, 4: 1, 16: 1, 40: 1}, calls
    assert all(err <= 1e-5 for _, err in calls.values()), calls
