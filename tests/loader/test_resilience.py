"""A dead hub, a damaged cache and a wrong `version` type: get_kernel keeps serving what it verified, repairs
what it can, and says what it could not.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hub_process import HubProcess
from loader_paths import NAMESPACE

from registry import KernelLoadError, get_kernel
from registry.publisher.publish import publish

QUIET = {"check": None, "speed_check": None}

# Load (online, hub alive), then the caller's code kills the hub; load again: each result is printed.
LOAD_KILL_LOAD = """
import json, os, signal, warnings, registry
kw = dict(version=1, backend="cpu", fallback=None)
first = registry.get_kernel({repo!r}, **kw).__kernel_info__
os.kill({pid}, signal.SIGKILL)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    second = registry.get_kernel({repo!r}, **kw).__kernel_info__
print(json.dumps([first, second, [str(w.message) for w in caught]]))
"""


def test_a_killed_hub_serves_the_cached_checked_version_with_a_warning(
    publisher, hub_env, tmp_path, run_python
):
    own = HubProcess(tmp_path / "hub").start()  # a hub of its own: this test kills it
    try:
        token = own.token("resilient", write=[NAMESPACE])
        own.org(NAMESPACE, trusted=True, members=("resilient",))
        dist = publisher.build("dead-hub", variants=["torch-cpu"])
        repo = f"{NAMESPACE}/dead-hub"
        commit = publish(repo, dist, 1, endpoint=own.url, token=token, key_path=tmp_path / "k.pem").commit
        env = {**hub_env, "HF_ENDPOINT": own.url, "TRITON_INTERPRET": "0"}
        first, second, caught = run_python(LOAD_KILL_LOAD.format(repo=repo, pid=own.proc.pid), env)
    finally:
        own.stop()
    assert (first["variant"], first["offline"], first["check"]["status"]) == ("torch-cpu", False, "passed")
    assert (second["variant"], second["commit"], second["offline"]) == ("torch-cpu", commit, True)
    assert second["offline_reason"].startswith(
        f"{own.url} is unreachable ("
    )  # refused, or reset (keep-alive)
    assert (second["check"]["status"], second["speed"]["status"]) == ("passed (cached)", "passed (cached)")
    assert second["trust"]["publisher"] == "recorded" and second["trust"]["keys"] == "pinned"
    assert any(f"{own.url} is unreachable" in w and "using the cache" in w for w in caught), caught


def test_a_damaged_cache_file_is_downloaded_again_else_refused(hub_env, fused_mlp_v1, monkeypatch):
    repo, _, _ = fused_mlp_v1
    first = get_kernel(repo, version=1, backend="cpu", fallback=None, **QUIET)
    reference = Path(first.__file__).with_name("reference.py")  # a link into the cache's blobs
    blob = reference.resolve()
    blob.write_bytes(blob.read_bytes() + b"# damaged on disk\n")

    info = get_kernel(repo, version=1, backend="cpu", fallback=None, **QUIET).__kernel_info__
    assert info["variant"] == "torch-cpu" and info["verification"]["repaired"] == ["fused_mlp/reference.py"]
    assert b"# damaged on disk" not in reference.read_bytes()

    # Offline there is nothing to repair it from: refused with the reason, and without a fallback it raises.
    damaged = reference.resolve()
    damaged.write_bytes(damaged.read_bytes() + b"# damaged again\n")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(KernelLoadError) as err:
        get_kernel(repo, version=1, backend="cpu", fallback=None, **QUIET)
    text = str(err.value)
    assert "refused torch-cpu: digest mismatch: changed file fused_mlp/reference.py" in text
    assert "(in the cache; cannot download them again: offline (HF_HUB_OFFLINE=1))" in text


def test_version_must_be_an_int(hub_env, fused_mlp_v1):
    with pytest.raises(
        TypeError, match=r"version must be an int \(the N of branch vN\), not str '1': use version=1"
    ):
        get_kernel(fused_mlp_v1[0], version="1")
    with pytest.raises(TypeError, match="not float"):
        get_kernel(fused_mlp_v1[0], version=1.0)
