"""A full disk (issue 43): the hub answers 507 InsufficientStorage saying so, which the stock client does not
retry (before: 500 "internal server error", retried 41 times over 162 s), and the failed upload leaves no
temp file behind. The blob store sits on a real 1 MiB tmpfs; `kernel-hub publish` says it in one line."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import time
from pathlib import Path

import pytest
from huggingface_hub import HfApi
from huggingface_hub.errors import HfHubHTTPError

from registry.cli import main
from registry.publisher import build as b
from tests.conftest import HubProcess


@pytest.fixture
def full_hub(tmp_path):
    blobs = tmp_path / "blobs"
    blobs.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(blobs)], check=False, capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here (needs root): {mounted.stderr.decode().strip()}")
    proc = HubProcess(tmp_path / "data", "--blobs", str(blobs))
    try:
        yield proc.start(), blobs
    finally:
        proc.stop()
        subprocess.run(["umount", str(blobs)], check=False)


def _temp_files(blobs) -> list[str]:
    return sorted(p.name for p in (blobs / "tmp").rglob("*") if p.is_file() and not p.name.startswith("."))


def test_a_full_disk_is_a_507_the_stock_client_does_not_retry(full_hub):
    hub, blobs = full_hub
    api = HfApi(endpoint=hub.url, token=hub.token("full"))
    api.create_repo("full/k", repo_type="kernel")
    started = time.monotonic()
    with pytest.raises(HfHubHTTPError) as err:
        api.upload_file(
            path_or_fileobj=b"x" * 3_000_000, path_in_repo="big.bin", repo_id="full/k", repo_type="kernel"
        )
    assert time.monotonic() - started < 20  # one answer, not a back-off
    r = err.value.response
    assert (r.status_code, r.headers["X-Error-Code"]) == (507, "InsufficientStorage")
    assert "the hub's blob storage is full (No space left on device): nothing was stored" in r.json()["error"]
    assert hub.log().count("POST /api/kernels/full/k/commit/main 507") == 1  # asked once
    assert _temp_files(blobs) == []
    assert "big.bin" not in api.list_repo_files("full/k", repo_type="kernel")

    # a small file still fits: nothing is wedged
    api.upload_file(path_or_fileobj=b"small", path_in_repo="small.txt", repo_id="full/k", repo_type="kernel")
    assert "small.txt" in api.list_repo_files("full/k", repo_type="kernel")


def test_publish_says_the_disk_is_full_in_one_line(full_hub, tmp_path):
    hub, blobs = full_hub
    token = hub.token("fullpub")
    root = Path(__file__).resolve().parents[2]
    dist = b.build(root / "kernel_src" / "fused_mlp", tmp_path / "dist", root / "build" / "matrix.toml",
                   aot=False, only=["torch-cpu"]).out  # fmt: skip
    with (
        open(blobs / "filler", "wb", buffering=0) as f,
        contextlib.suppress(OSError),
    ):  # fill it up, then leave 8 KiB
        while True:
            f.write(b"\0" * 4096)
    os.truncate(blobs / "filler", (blobs / "filler").stat().st_size - 8192)
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = main(["publish", "fullpub/fused-mlp", str(dist), "--version", "1", "--endpoint", hub.url,
                     "--token", token, "--key", str(tmp_path / "k.pem")])  # fmt: skip
    last = err.getvalue().strip().splitlines()[-1]
    assert code == 1, err.getvalue()
    assert last.startswith(
        "kernel-hub publish: the hub's storage is full (507: the hub's blob storage is full"
    )
    assert "kernel-hub gc" in last and _temp_files(blobs) == []
    branches = HfApi(endpoint=hub.url).list_repo_refs("fullpub/fused-mlp", repo_type="kernel").branches
    assert [b.name for b in branches] == ["main"]  # no v1, and the temporary branch is gone
