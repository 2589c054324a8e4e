"""Fetch only what this machine runs: a cold load of the torch-cuda variant on one GPU downloads the package and
that arch's cubin bundle (one file per Triton version and arch), not the other archs', in a few dozen
requests, and the skipped bundles stay covered by the signed digest list.

This machine has no GPU: the loader is told it runs on an sm_90 device (its `current_env`), and the test
stops before import. The bundles here are stand-in bytes in the published layout (the loader never opens
them); a real bundle is built and read by the kernel's finder in tests/publish/test_build_variants.py.
"""

from __future__ import annotations

import json
import platform

import httpx2
import pytest
import triton
from huggingface_hub.utils import set_client_factory
from huggingface_hub.utils._http import default_client_factory, hf_request_event_hook
from loader_paths import NAMESPACE

from registry.client import plan, verify
from registry.client.resolve import Env
from registry.publisher.aot import bundle_cubins
from registry.spec.digest import ALGORITHM, hash_variant
from registry.spec.variant import metadata_bytes

ARCHS = {"sm_80": "sm_80", "sm_89": "sm_89", "sm_90a": "sm_90a", "sm_100a": "sm_100a", "sm_120": "sm_120a"}


@pytest.fixture
def requests_made():
    """Every HTTP request huggingface_hub's shared client sends (kernel-hub's requests go through it too)."""
    seen: list[str] = []

    def factory() -> httpx2.Client:
        hooks = [hf_request_event_hook, lambda r: seen.append(f"{r.method} {r.url.path}")]
        return httpx2.Client(event_hooks={"request": hooks}, follow_redirects=True, timeout=None)

    set_client_factory(factory)
    yield seen
    set_client_factory(default_client_factory)


def _multi_arch(publisher) -> str:
    """torch-cuda with one cubin bundle per matrix arch, metadata re-digested, published (signed) as v1."""
    dist = publisher.build("multi-arch", variants=["torch-cuda"])
    vdir = dist / "build" / "torch-cuda"
    loose = publisher.work / "multi-arch" / "loose" / triton.__version__
    for arch in ARCHS:
        (loose / arch).mkdir(parents=True)
        for n in range(3):
            stem = f"linear_kernel-{arch}{n:02d}"
            (loose / arch / f"{stem}.cubin").write_bytes(f"stand-in cubin {arch} {n}".encode() * 64)
            (loose / arch / f"{stem}.json").write_text(
                json.dumps({"fused_mlp_spec": {"kernel": "linear_kernel"}})
            )
        bundle_cubins(loose / arch, vdir / "fused_mlp" / "triton" / "cubins")
    csrc = vdir / "fused_mlp" / "cuda" / "csrc"  # build sources, as the CUDA variant ships them
    csrc.mkdir(parents=True)
    (csrc / "ops.cu").write_text("// compiled into the extension, never read at run time\n")
    (csrc / "common.cuh").write_text("#pragma once\n")
    meta = json.loads((vdir / "metadata.json").read_text())
    meta["digest"] = {"algorithm": ALGORITHM, "files": hash_variant(vdir)}
    meta["archs"] = [{"arch": a, "sass": True, "ptx": False} for a in ARCHS.values()]
    meta["triton"] = [triton.__version__]
    (vdir / "metadata.json").write_bytes(metadata_bytes(meta))
    publisher.publish("multi-arch", dist)
    return f"{NAMESPACE}/multi-arch"


def test_a_cold_load_on_one_gpu_fetches_its_arch_only(hub_env, publisher, monkeypatch, requests_made):
    repo = _multi_arch(publisher)
    h100 = Env("linux", platform.machine(), ".".join(platform.python_version_tuple()[:2]), "2.11.0", "13.0",
               "sm_90", triton.__version__)  # fmt: skip
    monkeypatch.setattr(plan, "current_env", lambda: h100)
    requests_made.clear()

    load = plan.plan_load(repo, 1, None)
    assert (load.device, load.order) == ("cuda", ("torch-cuda",))
    path, verification = verify.fetch_verified(load, "torch-cuda")

    bundles = sorted(p.name for p in path.rglob("*.zip"))
    assert bundles == ["sm_90a.zip"]
    assert not (path / "fused_mlp" / "cuda" / "csrc").exists()
    # 4 other bundles and 2 build sources: listed, signed, skipped
    assert verification["skipped"] == 6 and verification["signed_by"]
    listed = json.loads((path / "metadata.json").read_text())["digest"]["files"]
    assert sum(f.endswith(".zip") for f in listed) == 5
    assert len(requests_made) <= 40, requests_made
    assert not any(r.startswith("HEAD ") for r in requests_made)  # one GET per file, no per-file HEAD
