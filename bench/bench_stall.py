"""Small requests while one client sends the worst inputs (issue #11, Deliver 2; goal: p99 <= 100 ms).

A hub serves a repo with a 16 KiB file. One "small" client downloads it (and lists refs) back to back and
records each latency; one "attacker" client loops over the inputs the fault-and-fuzz run found to stall the
hub: a 7.5 MiB validate-yaml body, the largest accepted YAML front matter (250 KiB), paths-info with 10,000
paths, 8 MiB of nested JSON, a 48 MiB inline commit, a half-sent request head, an endless chunked body.
Measured without and with the attacker, for `serve` with 1 worker (the default) and with `--workers N`.

    python bench/bench_stall.py --duration 20 [--out stall.json]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness

REPO_ROOT = harness.REPO_ROOT

import httpx2

from registry.commands.serve import ServeProcess

REPO = "stall/repo"


def attacks(url: str, token: str) -> list[tuple[str, callable]]:
    """(name, one attempt) for each worst input; each returns once the hub answered or closed."""
    host, port = url.removeprefix("http://").split(":")
    auth = {"authorization": f"Bearer {token}"}
    front = "".join(f"k{i}: {{a: [1, 2, {i}], b: text}}\n" for i in range(8000))[: 250 * 1024]
    big_yaml = json.dumps({"content": "---\n" + "a: b\n" * (1_500_000) + "---\n"}).encode()[:7_500_000]
    commit_line = {
        "key": "file",
        "value": {"path": "big.bin", "content": base64.b64encode(os.urandom(36 << 20)).decode()},
    }
    commit = (
        json.dumps({"key": "header", "value": {"summary": "big"}}) + "\n" + json.dumps(commit_line) + "\n"
    ).encode()

    def post(path: str, body: bytes, headers: dict | None = None):
        def run():
            httpx2.post(
                url + path,
                content=body,
                headers={"content-type": "application/json", **(headers or {})},
                timeout=120,
            )

        return run

    def half_head():
        with socket.create_connection((host, int(port)), timeout=60) as s:
            s.sendall(b"GET /api/whoami-v2 HTTP/1.1\r\nHost: x\r\n")
            s.recv(1000)  # the hub closes it after its head timeout

    def endless_chunks():
        with socket.create_connection((host, int(port)), timeout=60) as s:
            s.sendall(b"POST /api/validate-yaml HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
            chunk = b"%x\r\n%s\r\n" % (1 << 20, b"a" * (1 << 20))
            try:
                for _ in range(200):
                    s.sendall(chunk)
            except OSError:
                pass  # cut by the hub: what should happen

    return [
        ("validate-yaml 7.5 MiB", post("/api/validate-yaml", big_yaml)),
        (
            "validate-yaml 250 KiB front matter",
            post("/api/validate-yaml", json.dumps({"content": f"---\n{front}\n---\n"}).encode()),
        ),
        (
            "paths-info 10,000 paths",
            post(
                f"/api/kernels/{REPO}/paths-info/main",
                json.dumps({"paths": [f"d/{i}.bin" for i in range(10_000)]}).encode(),
            ),
        ),
        ("nested JSON 8 MiB", post("/api/validate-yaml", b"[" * ((8 << 20) - 16))),
        (
            "inline commit 48 MiB",
            post(
                f"/api/kernels/{REPO}/commit/main", commit, {**auth, "content-type": "application/x-ndjson"}
            ),
        ),
        ("half-sent head", half_head),
        ("endless chunked body", endless_chunks),
    ]


def small_requests(url: str, duration: float) -> list[float]:
    """Latencies (ms) of back-to-back small requests for `duration` seconds."""
    out = []
    with httpx2.Client(base_url=url, timeout=120) as c:
        end = time.monotonic() + duration
        i = 0
        while time.monotonic() < end:
            path = f"/kernels/{REPO}/resolve/main/small.bin" if i % 2 else f"/api/kernels/{REPO}/refs"
            t0 = time.perf_counter()
            r = c.get(path)
            out.append((time.perf_counter() - t0) * 1e3)
            assert r.status_code == 200, r.text
            i += 1
    return out


def summary(lat: list[float]) -> dict:
    q = statistics.quantiles(lat, n=100)
    return {"n": len(lat), "p50_ms": q[49], "p99_ms": q[98], "max_ms": max(lat)}


def measure(url: str, token: str, duration: float) -> dict:
    quiet = summary(small_requests(url, duration))
    stop = threading.Event()
    done: dict[str, int] = {}

    def attacker():
        while not stop.is_set():
            for name, attempt in attacks(url, token):
                if stop.is_set():
                    return
                try:
                    attempt()
                except OSError:
                    pass
                done[name] = done.get(name, 0) + 1

    t = threading.Thread(target=attacker, daemon=True)
    t.start()
    time.sleep(1)
    loaded = summary(small_requests(url, duration))
    stop.set()
    t.join(timeout=120)
    return {"quiet": quiet, "attacked": loaded, "attacks_done": done}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--duration", type=float, default=20.0, help="seconds of small requests per phase")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--out", type=Path, help="this run's report (JSON)")
    p.add_argument("--csv", type=Path, help="append results here ($BENCH_CSV)")
    args = p.parse_args(argv)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    results = {}
    for workers in (1, args.workers):
        data = Path(tempfile.mkdtemp(prefix="bench-stall-")) / "data"
        hub = ServeProcess(
            data, "--workers", str(workers), "--head-timeout", "5", cwd=REPO_ROOT, env=env
        ).start()
        try:
            token = harness.hub_token(data, "stall", env=env)
            from huggingface_hub import HfApi

            api = HfApi(endpoint=hub.url, token=token)
            api.create_repo(REPO, repo_type="kernel")
            api.upload_file(
                path_or_fileobj=os.urandom(16384), path_in_repo="small.bin", repo_id=REPO, repo_type="kernel"
            )
            r = results[f"workers-{workers}"] = measure(hub.url, token, args.duration)
            for phase in ("quiet", "attacked"):
                s = r[phase]
                print(
                    f"workers={workers} {phase:9s} n={s['n']:5d} p50 {s['p50_ms']:7.1f} ms  p99 {s['p99_ms']:7.1f} ms  max {s['max_ms']:7.1f} ms",
                    flush=True,
                )
        finally:
            hub.stop()
            shutil.rmtree(data.parent, ignore_errors=True)
    harness.save_hub_run("stall", args, results, ("p50_ms", "p99_ms", "max_ms"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
