"""Any kernel package, not only fused_mlp: `kernel-hub init` -> build -> publish -> get_kernel, against a real hub.

Two packages: one made by `kernel-hub init` (a Triton op, AOT cubins for one arch) and one written by hand with
a CUDA source (tests/publish/data/cuda-scale, compiled with the pinned nvcc against .venv-cuda's torch). Each
loads through our loader, checked against its own reference on its own declared cases, and through stock
`kernels`. CPU only: the loader takes the torch-cpu variant (`backend="cpu"`), whose Triton op runs in
Triton's interpreter under TRITON_INTERPRET=1.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import torch

from registry import get_kernel
from registry.publisher.cuda_ext import unavailable_reason
from registry.spec.package import read_package

ROOT = Path(__file__).resolve().parents[2]
CUDA_PACKAGE = Path(__file__).parent / "data" / "cuda-scale"
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "kernel_src")])}


def cli(*args: str, cwd: Path, env: dict | None = None) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "registry.cli", *args],
        cwd=cwd,
        env=env or ENV,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def trusted_org(hub) -> tuple[str, str]:
    org = f"any{uuid.uuid4().hex[:8]}"
    token = hub.token(f"{org}-user", write=[org])
    hub.org(org, trusted=True, members=(f"{org}-user",))
    return org, token


def publish(hub, org: str, token: str, name: str, dist: Path, work: Path) -> str:
    out = cli("publish", f"{org}/{name}", str(dist), "--version", "1", "--endpoint", hub.url, "--token", token,
              "--key", str(work / "key.pem"), cwd=work)  # fmt: skip
    assert f"{org}/{name} v1 -> " in out
    return f"{org}/{name}"


def assert_checked_on_its_own_cases(info: dict, op: str) -> None:
    assert info["variant"] == "torch-cpu", info["reason"]
    check = info["check"]
    assert check["status"] == "passed", check.get("summary")
    assert {(c["op"], c["dtype"], c["direction"]) for c in check["cases"]} == {
        (op, dt, d) for dt in ("float32", "float16") for d in ("forward", "backward")
    }


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="needs TRITON_INTERPRET=1 (CPU CI)")
def test_init_build_publish_load(hub, hub_env, tmp_path):
    cli("init", "my-kernel", "--dir", str(tmp_path), cwd=tmp_path)
    project = tmp_path / "my-kernel"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"], cwd=project,
                          env=ENV, capture_output=True, text=True, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr

    out = cli("build", str(project), "--out", str(tmp_path / "dist"), "--arch", "sm_80", cwd=tmp_path)
    assert "3 AOT cubins for triton" in out
    triton = tmp_path / "dist" / "build" / "torch-cuda"
    meta = json.loads((triton / "metadata.json").read_text())
    assert meta["api"]["__all__"] == ["scaled_add"] and meta["api"]["reference"] == "reference"
    assert [a["arch"] for a in meta["archs"]] == ["sm_80"] and meta["backend"]["type"] == "cuda"
    assert sorted(p.name for p in (triton / "my_kernel" / "cubins").rglob("*.zip")) == ["sm_80.zip"]
    assert "my_kernel/cubins/" + meta["triton"][0] + "/sm_80.zip" in meta["digest"]["files"]
    assert not (tmp_path / "dist" / "build" / "torch-cpu" / "my_kernel" / "cubins").exists()
    # no PATH: the package in the folder it runs in; same sources, same bytes (cubins included)
    cli("build", "--out", str(tmp_path / "again"), "--arch", "sm_80", cwd=project)
    for variant in ("torch-cuda", "torch-cpu", "torch-universal"):
        rel = f"build/{variant}/metadata.json"
        assert (tmp_path / "again" / rel).read_bytes() == (tmp_path / "dist" / rel).read_bytes()

    org, token = trusted_org(hub)
    repo = publish(hub, org, token, "my-kernel", tmp_path / "dist", tmp_path)
    m = get_kernel(repo, version=1, backend="cpu")
    assert_checked_on_its_own_cases(m.__kernel_info__, "scaled_add")
    x, y = torch.randn(5, 33), torch.randn(5, 33)
    torch.testing.assert_close(m.scaled_add(x, y, 0.25), x + 0.25 * y)

    import kernels

    stock = kernels.get_kernel(repo, version=1, trust_remote_code=True)
    assert stock.__name__ == json.loads((tmp_path / "dist/build/torch-cpu/metadata.json").read_text())["id"]
    torch.testing.assert_close(stock.scaled_add(x, y, -1.0), x - y)


CUDA_WHY = unavailable_reason(read_package(CUDA_PACKAGE).cuda)


@pytest.mark.skipif(CUDA_WHY is not None, reason=f"cannot compile CUDA here: {CUDA_WHY}")
def test_hand_written_cuda_package_builds_its_extension_and_loads(hub, hub_env, tmp_path):
    source = tmp_path / "cuda-scale"
    shutil.copytree(CUDA_PACKAGE, source)
    out = cli("build", str(source), "--out", str(tmp_path / "dist"), "--require-cuda", cwd=tmp_path)
    variant = read_package(CUDA_PACKAGE).stable_abi_variant
    assert "CUDA extension _C.abi3.so from 2 source(s) for sm_80" in out
    vdir = tmp_path / "dist" / "build" / variant
    meta = json.loads((vdir / "metadata.json").read_text())
    assert (meta["backend"], meta["torch_stable_abi"]) == ({"type": "cuda", "archs": ["8.0"]}, "2.11")
    namespace = "cuda_scale_" + meta["id"][-8:]  # OPS_NAMESPACE: the python name + the build hash
    so = (vdir / "cuda_scale" / "_C.abi3.so").read_bytes()
    assert so.startswith(b"\x7fELF") and namespace.encode() in so  # ops under the build's namespace
    for cpu in ("torch-cpu", "torch-universal"):  # the extension ships in the CUDA variant only
        assert sorted(p.name for p in (tmp_path / "dist" / "build" / cpu / "cuda_scale").iterdir()) == [
            "__init__.py", "_build_info.py", "reference.py"
        ]  # fmt: skip

    org, token = trusted_org(hub)
    repo = publish(hub, org, token, "cuda-scale", tmp_path / "dist", tmp_path)
    m = get_kernel(repo, version=1, backend="cpu")
    assert_checked_on_its_own_cases(m.__kernel_info__, "scale")
    assert f"reject {variant}: no CUDA device" in m.__kernel_info__["trace"]
    speed = m.__kernel_info__["speed"]  # timed at the shape its reference declares, not fused-MLP workloads
    assert speed["status"] == "passed" and [c["workload"] for c in speed["cases"]] == ["scale 1024x1024"]
    x = torch.randn(4, 9)
    torch.testing.assert_close(m.scale(x, 3.0), 3.0 * x)

    import kernels

    stock = kernels.get_kernel(repo, version=1, trust_remote_code=True)
    torch.testing.assert_close(stock.scale(x), 2.0 * x)


KB_INIT = """import torch

__all__ = ["relu"]


def relu(x: torch.Tensor) -> torch.Tensor:
    return torch.relu(x)
"""


def kernel_builder_dist(root: Path) -> Path:
    """What kernel-builder writes for a pure-Python kernel: build/<variant>/{kb_relu/, metadata.json}, no digests."""
    for variant in ("torch-universal", "torch-cpu"):
        vdir = root / "build" / variant
        (vdir / "kb_relu").mkdir(parents=True)
        (vdir / "kb_relu" / "__init__.py").write_text(KB_INIT)
        meta = {"id": f"_kb_relu_{variant.replace('-', '_')}_0a1b2c3", "name": "kb-relu", "version": 1,
                "license": "apache-2.0", "python-depends": [], "backend": {"type": "cpu"}}  # fmt: skip
        (vdir / "metadata.json").write_text(json.dumps(meta, indent=2))
    return root


def test_kernel_builder_output_publishes_unchanged_and_loads_with_stock_kernels(hub, hub_env, tmp_path):
    from huggingface_hub import hf_hub_download

    dist = kernel_builder_dist(tmp_path / "kb")
    org, token = trusted_org(hub)
    repo = publish(hub, org, token, "kb-relu", dist, tmp_path)
    files = {}
    for rel in ("build/torch-cpu/kb_relu/__init__.py", "build/torch-cpu/metadata.json"):
        path = hf_hub_download(repo, rel, revision="v1", repo_type="kernel", endpoint=hub.url)
        files[rel] = Path(path).read_bytes()
    assert files["build/torch-cpu/kb_relu/__init__.py"] == KB_INIT.encode()  # as kernel-builder built it
    meta = json.loads(files["build/torch-cpu/metadata.json"])
    assert meta["id"] == "_kb_relu_torch_cpu_0a1b2c3" and meta["api"]["__all__"] == ["relu"]
    assert "kb_relu/__init__.py" in meta["digest"]["files"] and meta["build"]["kind"] == "kernel-builder"

    import kernels

    stock = kernels.get_kernel(repo, version=1, trust_remote_code=True)
    x = torch.randn(4, 7)
    torch.testing.assert_close(stock.relu(x), torch.relu(x))


def test_mirror_copies_every_version_between_two_hubs_with_signatures_kept(hub, hub_env, tmp_path):
    """...and moves a target vN that holds another build only with --update, uploading nothing without it."""
    import httpx2
    from hub_process import HubProcess
    from huggingface_hub import HfApi, hf_hub_download, hf_hub_url

    cli("init", "mirrored", "--dir", str(tmp_path), cwd=tmp_path)
    cli("build", str(tmp_path / "mirrored"), "--out", str(tmp_path / "dist"), "--no-aot", cwd=tmp_path)
    org, token = trusted_org(hub)
    source = publish(hub, org, token, "mirrored", tmp_path / "dist", tmp_path)
    cli("publish", source, str(tmp_path / "dist"), "--version", "2", "--endpoint", hub.url, "--token", token,
        "--key", str(tmp_path / "key.pem"), cwd=tmp_path)  # fmt: skip
    ours = HubProcess(tmp_path / "mirror-hub").start()
    try:
        mirror_token = ours.token(f"{org}-user", write=[org])
        ours.org(org, trusted=True, members=(f"{org}-user",))
        argv = ["mirror", source, "--from", hub.url, "--endpoint", ours.url, "--token", mirror_token]
        first = cli(*argv, cwd=tmp_path)
        assert f"{source} v1 -> " in first and f"{source} v2 -> " in first and "(unchanged)" not in first
        again = cli(*argv, cwd=tmp_path)
        assert again.count("(unchanged)") == 2  # a second run finds the same trees and leaves them
        for rel in ("build/torch-cpu/metadata.json", "build/torch-cpu/metadata.json.sig"):
            original, copy = (
                Path(hf_hub_download(source, rel, revision="v1", repo_type="kernel", endpoint=url,
                                     cache_dir=tmp_path / name)).read_bytes()
                for url, name in ((hub.url, "a"), (ours.url, "b"))
            )  # fmt: skip
            assert copy == original
        m = get_kernel(source, version=1, backend="cpu", endpoint=ours.url)
        assert m.__kernel_info__["verification"]["signed_by"]  # the original publisher's key, via the mirror
        assert_checked_on_its_own_cases(m.__kernel_info__, "scaled_add")

        # The source moves v1 to a new build: mirroring it again moves the target's v1 only with --update.
        with (tmp_path / "mirrored" / "mirrored" / "__init__.py").open("a") as f:
            f.write("# a compatible update\n")
        cli("build", str(tmp_path / "mirrored"), "--out", str(tmp_path / "dist2"), "--no-aot", cwd=tmp_path)
        cli("publish", source, str(tmp_path / "dist2"), "--version", "1", "--update", "--endpoint", hub.url,
            "--token", token, "--key", str(tmp_path / "key.pem"), cwd=tmp_path)  # fmt: skip
        target = HfApi(endpoint=ours.url, token=mirror_token)
        before = {b.name: b.target_commit for b in target.list_repo_refs(source, repo_type="kernel").branches}
        refused = subprocess.run([sys.executable, "-m", "registry.cli", *argv], cwd=tmp_path, env=ENV,
                                 capture_output=True, text=True, check=False)  # fmt: skip
        lines = [
            line for line in refused.stderr.splitlines() if line.startswith("kernel-hub")
        ]  # not progress bars
        assert refused.returncode == 1 and len(lines) == 1, refused.stderr
        assert "v1 (" in lines[0] and "v2" not in lines[0] and "--update" in lines[0], lines[0]
        after = {b.name: b.target_commit for b in target.list_repo_refs(source, repo_type="kernel").branches}
        assert after == before  # nothing moved, not even the unchanged v2
        moved = cli(*argv, "--update", cwd=tmp_path)
        assert (
            f"{source} v2 -> {before['v2']} (unchanged)" in moved
            and f"{source} v1 -> {before['v1']}" not in moved
        )
        url = lambda endpoint: hf_hub_url(source, "build/torch-cpu/metadata.json", revision="v1",
                                          repo_type="kernel", endpoint=endpoint)  # fmt: skip
        assert httpx2.get(url(ours.url)).content == httpx2.get(url(hub.url)).content
    finally:
        ours.stop()


def test_mirror_of_a_repo_the_source_lacks_names_the_source_hub(hub, hub_env, tmp_path):
    org, token = trusted_org(hub)
    unreachable = "http://127.0.0.1:9"
    for source_url, said in ((hub.url, "answered 404"), (unreachable, "cannot reach the source hub")):
        proc = subprocess.run([sys.executable, "-m", "registry.cli", "mirror", f"{org}/missing", "--from", source_url,
                               "--endpoint", hub.url, "--token", token], cwd=tmp_path, env=ENV,
                              capture_output=True, text=True, check=False)  # fmt: skip
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 1 and len(lines) == 1, proc.stderr
        assert said in lines[0] and source_url in lines[0] and "--from" in lines[0], lines[0]
    from huggingface_hub import HfApi

    target = HfApi(endpoint=hub.url, token=token)
    assert not target.repo_exists(f"{org}/missing", repo_type="kernel")  # nothing was made on the target
