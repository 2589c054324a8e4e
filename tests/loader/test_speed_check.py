"""The speed check on this GPU-less machine: CPU builds loaded with backend="cpu" (as in `kernels`) are timed
against the package's eager reference, the same path a GPU variant takes on a GPU.

The loads run in fresh interpreters with TRITON_INTERPRET=0: then a CPU build's ops are the eager reference
itself (an honest "as fast as its fallback"), instead of the Triton interpreter CI uses for correctness.
"""

from __future__ import annotations

import re

from loader_paths import NAMESPACE

# Correct numbers, four times the work: passes the check, must lose the speed check on mlp only.
SLOW = (
    "return (_GPU_OPS if x.is_cuda else _CPU_OPS).mlp(x, weights, biases, activation)",
    "return [(_GPU_OPS if x.is_cuda else _CPU_OPS).mlp(x, weights, biases, activation) for _ in range(4)][-1]",
)
# Correct numbers, 20 ms of waiting per call: no CPU time, but a user waits for it; the speed check must see it.
SLEEPY = (
    "return (_GPU_OPS if x.is_cuda else _CPU_OPS).gated_mlp(x, w_gate, w_up, w_down, activation)",
    (
        "__import__('time').sleep(0.02)\n"
        "    return (_GPU_OPS if x.is_cuda else _CPU_OPS).gated_mlp(x, w_gate, w_up, w_down, activation)"
    ),
)
# Right at the check's small shapes, NaN from 128 rows (the speed check's CPU shape): a broken large-tile path.
WRONG_AT_SCALE = (
    "return (_GPU_OPS if x.is_cuda else _CPU_OPS).gated_mlp(x, w_gate, w_up, w_down, activation)",
    (
        "y = (_GPU_OPS if x.is_cuda else _CPU_OPS).gated_mlp(x, w_gate, w_up, w_down, activation)\n"
        "    return y if x.reshape(-1, x.shape[-1]).shape[0] < 128 else y * float('nan')"
    ),
)
NO_INTERPRETER = {"TRITON_INTERPRET": "0"}
# Each load of `kwargs` (a list of keyword strings) in one fresh interpreter; prints every __kernel_info__.
LOADS = """
import json, registry
infos = [registry.get_kernel({repo!r}, version=1, backend="cpu", fallback="eager", **kw).__kernel_info__
         for kw in {kwargs}]
print(json.dumps(infos))
"""
US = r"[0-9.]+ µs"
# One load with the loader's progress lines (INFO, what `kernel-hub demo` shows on stderr) collected.
LOGGED = """
import json, logging, registry
lines = []
class Collect(logging.Handler):
    def emit(self, record): lines.append(record.getMessage())
logger = logging.getLogger("registry.client.loader")
logger.addHandler(Collect()); logger.setLevel(logging.INFO)
registry.get_kernel({repo!r}, version=1, backend="cpu", fallback="eager")
print(json.dumps(lines))
"""


def test_a_build_as_fast_as_eager_is_served_with_its_timings(hub_env, fused_mlp_v1, run_python):
    repo, commit, _ = fused_mlp_v1
    env = {**hub_env, **NO_INTERPRETER}
    info, again = run_python(LOADS.format(repo=repo, kwargs=[{}, {}]), env)
    assert (info["source"], info["variant"], info["commit"]) == ("hub", "torch-cpu", commit), info["reason"]
    speed = info["speed"]
    assert speed["status"] == "passed" and speed["device"] == "cpu" and speed["baseline"] == "eager"
    assert {c["workload"] for c in speed["cases"]} == {"mlp M=128", "gated_mlp M=128"}
    assert all(c["kernel_us"] > 0 and c["fallback_us"] > 0 and c["passed"] for c in speed["cases"])
    # the second load reads both verdicts from the cache files, as another process would
    assert (again["check"]["status"], again["speed"]["status"]) == ("passed (cached)", "passed (cached)")
    assert again["speed"]["cases"] == speed["cases"]

    lines = run_python(LOGGED.format(repo=repo), env)
    assert lines[0].startswith(f"{repo} v1 -> commit {commit[:12]} (http://127.0.0.1:"), lines
    assert lines[0].endswith("variants to try: torch-cpu, torch-universal"), lines
    assert lines[1:] == [
        "torch-cpu: fetching and verifying",
        "torch-cpu: checking against the eager reference on cpu (check=once)",
        "torch-cpu: check passed (cached); speed check vs the fallback (speed_check=once)",
        "torch-cpu: serving it (speed check passed (cached))",
    ]


def test_a_slower_build_loses_the_speed_check_and_the_fallback_is_served(hub_env, publisher, run_python):
    dist = publisher.build("slow", variants=["torch-cpu", "torch-universal"], patch={"__init__.py": SLOW})
    publisher.publish("slow", dist)
    repo, env = f"{NAMESPACE}/slow", {**hub_env, **NO_INTERPRETER}

    info, again, served = run_python(LOADS.format(repo=repo, kwargs=[{}, {}, {"speed_check": None}]), env)
    assert info["source"] == "fallback-eager" and info["speed"]["status"].startswith("not needed")
    pattern = (
        rf"torch-cpu: slower than eager on cpu: mlp M=128 {US} vs {US}; torch-universal: slower than eager"
    )
    assert re.match(pattern, info["reason"]), info["reason"]
    assert "gated_mlp" not in info["reason"]  # only the slowed op loses

    # The verdict is cached per (commit, variant, device, torch): the next load skips both builds at once.
    assert again["source"] == "fallback-eager"
    assert re.match(
        r"torch-cpu: slower than eager on cpu: mlp M=128 .* \(cached\); torch-universal: ", again["reason"]
    )

    lines = run_python(LOGGED.format(repo=repo), env)
    assert re.match(
        r"torch-cpu: skipped, slower than eager on cpu: mlp M=128 .* \(cached verdict\)", lines[1]
    )
    assert lines[-1].startswith("no kernel variant used (torch-cpu: slower than eager") and lines[
        -1
    ].endswith("; fallback=eager"), lines

    assert (served["source"], served["variant"]) == ("hub", "torch-cpu")
    assert served["speed"] == {"status": "skipped (speed_check=None)"}


def test_a_build_wrong_only_at_real_shapes_is_refused_by_the_speed_check(hub_env, publisher, run_python):
    """The check's shapes are small; the speed check runs real ones and compares kernel with fallback there."""
    dist = publisher.build("nan-at-scale", variants=["torch-cpu"], patch={"__init__.py": WRONG_AT_SCALE})
    publisher.publish("nan-at-scale", dist)
    repo, env = f"{NAMESPACE}/nan-at-scale", {**hub_env, **NO_INTERPRETER}
    (info,) = run_python(LOADS.format(repo=repo, kwargs=[{}]), env)
    assert info["source"] == "fallback-eager", info
    pattern = (
        r"torch-cpu: speed check: gated_mlp M=128: wrong result: (\d+) of \1 outputs are NaN or infinite"
    )
    assert re.match(pattern, info["reason"]), info["reason"]


def test_a_build_that_waits_in_its_ops_loses_the_speed_check(hub_env, publisher, run_python):
    """The speed check times the ops a user calls by the clock a user waits on, not by CPU time."""
    dist = publisher.build("sleepy", variants=["torch-cpu"], patch={"__init__.py": SLEEPY})
    publisher.publish("sleepy", dist)
    repo, env = f"{NAMESPACE}/sleepy", {**hub_env, **NO_INTERPRETER}
    (info,) = run_python(LOADS.format(repo=repo, kwargs=[{}]), env)
    assert info["source"] == "fallback-eager", info
    assert re.match(rf"torch-cpu: slower than eager on cpu: gated_mlp M=128 {US} vs {US}", info["reason"]), (
        info
    )
