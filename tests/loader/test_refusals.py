"""A variant with a tampered blob, a wrong signature or wrong numbers is refused; the fallback takes over.

`backend="cpu"` makes the CPU build the candidate kernel on this GPU-less machine (as in `kernels`), so
verification and the check run on a real download; under TRITON_INTERPRET=1 its ops run the Triton
kernels through the interpreter.
"""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from huggingface_hub import hf_hub_download
from loader_paths import NAMESPACE

from registry import KernelLoadError, get_kernel
from registry.spec.signing import generate_key, key_id, load_private_key, public_key_b64


def test_cpu_build_passes_the_check_as_the_kernel(hub_env, fused_mlp_v1):
    repo, commit, _ = fused_mlp_v1
    # speed_check=None: under TRITON_INTERPRET=1 the CPU build runs the Triton interpreter, far slower than
    # eager (tests/loader/test_speed_check.py times it without the interpreter)
    m = get_kernel(repo, version=1, backend="cpu", fallback=None, speed_check=None)
    info = m.__kernel_info__
    assert (info["source"], info["variant"], info["commit"]) == ("hub", "torch-cpu", commit)
    assert info["check"]["status"] == "passed", info["check"]
    assert info["speed"] == {"status": "skipped (speed_check=None)"}
    again = get_kernel(repo, version=1, backend="cpu", speed_check=None).__kernel_info__
    assert again["check"]["status"] == "passed (cached)"


def test_tampered_blob_is_refused_and_the_fallback_used(hub_env, publisher):
    dist = publisher.build("tampered", variants=["torch-cpu", "torch-cuda"])
    publisher.publish("tampered", dist)
    target = dist / "build" / "torch-cpu" / "fused_mlp" / "_build_info.py"
    original = target.read_bytes()
    publisher.tamper(
        "tampered",
        "build/torch-cpu/fused_mlp/_build_info.py",
        original.replace(b"OPS_NAMESPACE", b"OPS_NAMESPACX", 1),
    )

    repo = f"{NAMESPACE}/tampered"
    info = get_kernel(repo, version=1, backend="cpu", fallback="eager").__kernel_info__
    assert info["source"] == "fallback-eager" and info["reference_variant"] == "torch-cuda"
    assert info["reason"].startswith("torch-cpu: digest mismatch: changed file fused_mlp/_build_info.py")

    with pytest.raises(KernelLoadError) as err:
        get_kernel(repo, version=1, backend="cpu", fallback=None)
    text = str(err.value)
    assert "refused torch-cpu: digest mismatch: changed file fused_mlp/_build_info.py" in text
    assert "reject torch-cuda: " in text and "fallback=None" in text


def test_wrong_signature_is_refused_and_the_fallback_used(hub_env, publisher, tmp_path):
    dist = publisher.build("badsig", variants=["torch-cpu", "torch-cuda"])
    publisher.publish("badsig", dist)
    repo = f"{NAMESPACE}/badsig"

    def published(name: str) -> bytes:
        path = hf_hub_download(
            repo, f"build/torch-cpu/{name}", repo_type="kernel", revision="v1", cache_dir=tmp_path
        )
        return Path(path).read_bytes()

    sig, meta = published("metadata.json.sig"), published("metadata.json")
    registered = key_id(public_key_b64(load_private_key(publisher.key)))
    assert sig.decode().splitlines()[0] == registered
    forged = f"{registered}\n{base64.b64encode(generate_key().sign(meta)).decode()}\n".encode()
    publisher.tamper("badsig", "build/torch-cpu/metadata.json.sig", forged)

    info = get_kernel(repo, version=1, backend="cpu", fallback="eager").__kernel_info__
    assert info["source"] == "fallback-eager" and info["reference_variant"] == "torch-cuda"
    assert info["reason"] == (
        f"torch-cpu: signature: metadata.json does not match its signature by key {registered}: "
        "the file was changed after signing (downloaded again: the hub serves these bytes)"
    )


def test_kernel_with_wrong_numbers_fails_the_check_and_the_fallback_is_used(hub_env, publisher):
    wrong = (
        "return (_GPU_OPS if x.is_cuda else _CPU_OPS).mlp(x, weights, biases, activation)",
        "return 1.02 * (_GPU_OPS if x.is_cuda else _CPU_OPS).mlp(x, weights, biases, activation)",
    )
    dist = publisher.build("wrong-numbers", variants=["torch-cpu"], patch={"__init__.py": wrong})
    publisher.publish("wrong-numbers", dist)

    info = get_kernel(
        f"{NAMESPACE}/wrong-numbers", version=1, backend="cpu", fallback="eager"
    ).__kernel_info__
    assert info["source"] == "fallback-eager" and info["reference_variant"] == "torch-cpu"
    assert info["reason"].startswith("torch-cpu: check failed: FAILED: ")
    assert "first failure: mlp[" in info["reason"]
