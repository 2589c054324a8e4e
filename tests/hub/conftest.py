"""Helpers for the hub tests: file trees to upload, a snapshot of a repo's whole state, raw HTTP."""

from __future__ import annotations

import hashlib
import json
import os
import socket
from pathlib import Path

import httpx2
import pytest

BIG_SIZE = 20 * 1000 * 1000


def make_tree(root: Path, n_small: int = 300, big_size: int = BIG_SIZE) -> dict[str, str]:
    """`n_small` small files in nested folders, one random `big.bin`, a README; returns path -> sha256."""
    files: dict[str, bytes] = {
        f"data/d{i % 7}/sub{i % 3}/f{i}.txt": f"file {i}\n".encode() * (i % 5 + 1) for i in range(n_small)
    }
    files["README.md"] = b"---\nlicense: apache-2.0\n---\n# test tree\n"
    files["big.bin"] = os.urandom(big_size)
    for rel, data in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    return {rel: hashlib.sha256(data).hexdigest() for rel, data in files.items()}


def tiny_kernel_tree(
    root: Path, module_id: str, variants=("torch-cpu", "torch-universal"), offset: int = 1
) -> Path:
    """A pure-Python kernel `tiny_kernel` with `add(xs)` returning xs + offset, per variant folder."""
    for variant in variants:
        pkg = root / "build" / variant / "tiny_kernel"
        pkg.mkdir(parents=True, exist_ok=True)
        (pkg / "__init__.py").write_text(
            f"VARIANT = {variant!r}\n\n\ndef add(xs):\n    return [x + {offset} for x in xs]\n"
        )
        backend = variant.split("-", 1)[1]
        meta = {
            "id": f"{module_id}_{variant.replace('-', '_')}",
            "name": "tiny-kernel",
            "version": 1,
            "license": "apache-2.0",
            "python-depends": [],
            "backend": {"type": "cpu" if backend == "universal" else backend},
        }
        (root / "build" / variant / "metadata.json").write_text(json.dumps(meta))
    return root


def repo_state(url: str, repo: str, token: str | None = None, t: str = "kernels") -> dict:
    """Everything a reader can see: refs, and the recursive tree + commits of every ref."""
    h = {"authorization": f"Bearer {token}"} if token else {}
    refs = httpx2.get(f"{url}/api/{t}/{repo}/refs", headers=h).json()
    state = {"refs": refs, "trees": {}, "commits": {}}
    for ref in refs["branches"] + refs["tags"]:
        c = ref["targetCommit"]
        state["trees"][c] = _all_pages(f"{url}/api/{t}/{repo}/tree/{c}?recursive=true", h)
        state["commits"][c] = [x["id"] for x in _all_pages(f"{url}/api/{t}/{repo}/commits/{c}", h)]
    return state


def _all_pages(url: str, headers: dict) -> list:
    out = []
    while url:
        r = httpx2.get(url, headers=headers)
        r.raise_for_status()
        out += r.json()
        url = r.links.get("next", {}).get("url")
    return out


@pytest.fixture
def http(hub):
    with httpx2.Client(base_url=hub.url, timeout=60) as client:
        yield client


def temp_files(data_dir: Path) -> list[Path]:
    """Temp files under `<data>/blobs/tmp` (the per-process folders' lock files not counted)."""
    root = data_dir / "blobs" / "tmp"
    return [p for p in root.rglob("*") if p.is_file() and not p.name.endswith(".lock")]


def raw_request(url: str, data: bytes, timeout: float = 30) -> tuple[int, dict[str, str], bytes]:
    """Send raw bytes to the hub at `url` and read the answer: (status, lower-cased headers, body).

    For what an HTTP client library refuses to send (control characters, broken heads, stalls).
    Status 0 means the server closed the connection without an answer.
    """
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.sendall(data)
        return read_answer(s)


def read_answer(s: socket.socket) -> tuple[int, dict[str, str], bytes]:
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = s.recv(65536)
        if not chunk:
            return 0, {}, buf
        buf += chunk
    head, _, body = buf.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    want = int(headers.get("content-length", "0"))
    while len(body) < want:
        chunk = s.recv(65536)
        if not chunk:
            break
        body += chunk
    return status, headers, body
