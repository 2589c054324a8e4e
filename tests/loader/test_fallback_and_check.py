"""The compile fallback keeps one graph across batch sizes; the check fails wrong kernels and caches passes."""

from __future__ import annotations

import types

import pytest
import torch
from fused_mlp import reference

from registry.client.check import CheckCache, CheckCrashed, cache_key, checked, run_check
from registry.client.fallback import build_fallback

API = ["linear", "mlp", "gated_mlp", "act_and_mul"]


def test_compiled_fallback_does_not_recompile_for_new_batch_sizes():
    fb = build_fallback(reference, API, "compile", "fallback_under_test")
    w, b = torch.randn(24, 40), torch.randn(24)
    fb.linear(torch.randn(5, 40), w, b, "silu")
    fb.gated_mlp(torch.randn(2, 5, 40), torch.randn(56, 40), torch.randn(56, 40), torch.randn(24, 56))
    w_gate, w_up, w_down = torch.randn(56, 40), torch.randn(56, 40), torch.randn(24, 56)
    with torch.compiler.set_stance("fail_on_recompile"):
        for m in (7, 33, 130):
            x = torch.randn(m, 40)
            torch.testing.assert_close(fb.linear(x, w, b, "silu"), reference.linear(x, w, b, "silu"))
        # Every leading dim is dynamic (sizes >= 2: torch specialises 0 and 1, one extra graph each).
        for batch, seq in ((3, 9), (2, 17), (4, 2)):
            x = torch.randn(batch, seq, 40)
            torch.testing.assert_close(
                fb.gated_mlp(x, w_gate, w_up, w_down),
                reference.gated_mlp(x, w_gate, w_up, w_down),
                rtol=1e-4,
                atol=1e-4,
            )


def test_fallback_refuses_an_incomplete_reference():
    with pytest.raises(AttributeError, match="lacks public op"):
        build_fallback(types.SimpleNamespace(linear=reference.linear), API, "eager", "x")
    with pytest.raises(ValueError, match="fallback mode 'jit'"):
        build_fallback(reference, API, "jit", "x")


def _module(**overrides) -> types.SimpleNamespace:
    return types.SimpleNamespace(**{**{name: getattr(reference, name) for name in API}, **overrides})


@pytest.mark.parametrize(
    ("op", "wrong", "direction"),
    [
        (
            "linear",
            lambda x, w, b=None, activation="none": (
                reference.linear(x, w, b, "gelu_tanh" if activation == "gelu" else activation) * 1.01
            ),
            "forward",
        ),
        (
            "gated_mlp",
            lambda x, g, u, d, activation="gelu_tanh": reference.gated_mlp(x, g, u, d, activation) + 1e-2,
            "forward",
        ),
        # right forward, gradient of `up` off by 5%
        (
            "act_and_mul",
            lambda g, u, activation: reference.act_and_mul(g, u, activation) + 0.05 * (u - u.detach()),
            "backward",
        ),
        ("mlp", lambda x, ws, bs=None, activation="relu": reference.mlp(x, ws, None, activation), "forward"),
    ],
    ids=["scaled", "shifted", "wrong-grad", "bias-dropped"],
)
def test_check_fails_wrong_kernels(op, wrong, direction):
    result = run_check(_module(**{op: wrong}), reference, API, "cpu")
    assert not result.passed
    failed = {(c.op, c.direction) for c in result.cases if not c.passed}
    assert (op, direction) in failed and {c.op for c in result.cases if not c.passed} == {op}


def test_a_kernel_without_autograd_crashes_the_check():
    detached = _module(act_and_mul=lambda g, u, activation: reference.act_and_mul(g, u, activation).detach())
    with pytest.raises(CheckCrashed, match=r"act_and_mul\[3x37x80 gelu_tanh\] torch.float32: RuntimeError"):
        run_check(detached, reference, API, "cpu")


def test_check_fails_on_nan_and_passes_the_reference():
    nan = _module(act_and_mul=lambda g, u, activation: reference.act_and_mul(g, u, activation) * float("nan"))
    assert "first failure: act_and_mul" in run_check(nan, reference, API, "cpu").summary()
    ok = run_check(_module(), reference, API, "cpu")
    assert ok.passed and len(ok.cases) == 2 * 2 * 5  # fwd+bwd x fp32/fp16 x 5 cases


def test_check_modes_and_cache(tmp_path):
    cache = CheckCache(tmp_path)
    key = cache_key("c" * 40, "torch-cpu", "cpu")
    calls = []

    def counting(*args, **kwargs):
        calls.append(1)
        return reference.linear(*args, **kwargs)

    module = _module(linear=counting)
    first = checked(module, reference, API, device="cpu", key=key, mode="once", cache=cache)
    n = len(calls)
    assert first.passed and not first.cached and n > 0
    again = checked(module, reference, API, device="cpu", key=key, mode="once", cache=cache)
    assert again.cached and len(calls) == n and again.cases == first.cases
    assert not checked(module, reference, API, device="cpu", key=key, mode="always", cache=cache).cached
    assert checked(module, reference, API, device="cpu", key=key, mode=None, cache=cache) is None
    bad = _module(linear=lambda *a, **k: reference.linear(*a, **k) * 2)
    other = cache_key("d" * 40, "torch-cpu", "cpu")
    assert not checked(bad, reference, API, device="cpu", key=other, mode="once", cache=cache).passed
    assert cache.get(other) is None  # failures are never cached
