"""The speed check on the shapes a package's reference declares (`speed_cases`), not the fused-MLP workloads."""

from __future__ import annotations

import time
import types

import pytest
import torch

from registry.client.speed import SpeedCheckCrashed, run_speed_check


def _module(name: str, fn) -> types.ModuleType:
    m = types.ModuleType(name)
    m.scale = fn
    return m


def _reference() -> types.ModuleType:
    ref = _module("reference", lambda x, alpha=2.0: alpha * x)
    ref.speed_cases = lambda device, dtype: [
        {
            "op": "scale",
            "name": "256x256",
            "args": (torch.randn(256, 256, dtype=dtype),),
            "kwargs": {"alpha": 3.0},
        }
    ]
    return ref


def test_a_kernel_as_fast_as_its_reference_passes_at_the_declared_shape():
    ref = _reference()
    result = run_speed_check(_module("kernel", ref.scale), ref, ["scale"], "cpu")
    assert result.passed and [c.workload for c in result.cases] == ["scale 256x256"]


def test_a_kernel_that_waits_is_refused_at_the_declared_shape():
    def sleepy(x, alpha=2.0):
        time.sleep(0.01)
        return alpha * x

    result = run_speed_check(_module("kernel", sleepy), _reference(), ["scale"], "cpu")
    assert not result.passed and result.reason().startswith("slower than eager on cpu: scale 256x256 ")


def test_a_wrong_result_at_the_declared_shape_is_refused():
    kernel = _module("kernel", lambda x, alpha=2.0: alpha * x + 1)
    with pytest.raises(SpeedCheckCrashed, match=r"scale 256x256: wrong result: relative error"):
        run_speed_check(kernel, _reference(), ["scale"], "cpu")
