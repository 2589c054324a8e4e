"""The hub's answer times (issues #11 and #14), each against its goal:

stall  small requests while one client sends the worst inputs (goal: p99 <= 100 ms). A hub serves a repo with a
       16 KiB file; one "small" client downloads it (and lists refs) back to back and records each latency; one
       "attacker" client loops over the inputs the fault-and-fuzz run found to stall the hub: a 7.5 MiB
       validate-yaml body, the largest accepted YAML front matter (250 KiB), paths-info with 10,000 paths, 8 MiB
       of nested JSON, a 48 MiB inline commit, a half-sent request head, an endless chunked body. Measured
       without and with the attacker, for `serve` with 1 worker (the default) and with `--workers N`.
pages  size and speed of the kernel page with 3 published versions (goal: < 50 KB, < 100 ms): the demo's
       variants (no AOT) published as v1, v2 and v3 of `org/fused-mlp` (the compatibility matrix of
       build/matrix.toml on its pages), `/kernels/org/fused-mlp` fetched once cold (first render: the matrix is
       built) and `--runs` times warm over HTTP, and a version page the same way. Exits 1 when a goal is missed.

  python bench/bench_latency.py stall --duration 20 [--out stall.json]
  python bench/bench_latency.py pages [--runs 50] [--out pages.json]
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from importlib import metadata
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness

REPO_ROOT = harness.REPO_ROOT

import httpx2

from registry.commands.serve import ServeProcess

REPO = "stall/repo"
GOAL_BYTES = 50_000
GOAL_MS = 100.0


def attacks(url: str, token: str) -> list[tuple[str, callable]]:
    """(name, one attempt) for each worst input; each returns once the hub answered or closed."""
    host, port = url.removeprefix("http://").split(":")
    front = "".join(f"k{i}: {{a: [1, 2, {i}], b: text}}\n" for i in range(8000))[: 250 * 1024]
    big_yaml = json.dumps({"content": "---\n" + "a: b\n" * (1_500_000) + "---\n"}).encode()[:7_500_000]
    blob = {"path": "big.bin", "content": base64.b64encode(os.urandom(36 << 20)).decode()}
    header = json.dumps({"key": "header", "value": {"summary": "big"}})
    commit = f"{header}\n{json.dumps({'key': 'file', 'value': blob})}\n".encode()
    ndjson = {"authorization": f"Bearer {token}", "content-type": "application/x-ndjson"}

    def post(path: str, body: bytes, headers: dict | None = None):
        headers = {"content-type": "application/json", **(headers or {})}
        return lambda: httpx2.post(url + path, content=body, headers=headers, timeout=120)

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

    many_paths = json.dumps({"paths": [f"d/{i}.bin" for i in range(10_000)]}).encode()
    return [
        ("validate-yaml 7.5 MiB", post("/api/validate-yaml", big_yaml)),
        ("validate-yaml 250 KiB front matter",
         post("/api/validate-yaml", json.dumps({"content": f"---\n{front}\n---\n"}).encode())),
        ("paths-info 10,000 paths", post(f"/api/kernels/{REPO}/paths-info/main", many_paths)),
        ("nested JSON 8 MiB", post("/api/validate-yaml", b"[" * ((8 << 20) - 16))),
        ("inline commit 48 MiB", post(f"/api/kernels/{REPO}/commit/main", commit, ndjson)),
        ("half-sent head", half_head),
        ("endless chunked body", endless_chunks),
    ]  # fmt: skip


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


def fetch(url: str) -> tuple[float, int]:
    """(milliseconds, bytes) of one GET, the whole body read."""
    t = time.perf_counter()
    with urllib.request.urlopen(url, timeout=60) as r:
        size = len(r.read())
    return (time.perf_counter() - t) * 1000, size


def page_times(url: str, runs: int) -> dict:
    """Bytes, the cold time and the warm median and p90 of `url` over `runs` fetches."""
    cold_ms, size = fetch(url)
    warm = sorted(fetch(url)[0] for _ in range(runs))
    median, p90 = statistics.median(warm), warm[int(0.9 * (len(warm) - 1))]
    return {"url": url, "bytes": size, "cold_ms": round(cold_ms, 2), "median_ms": round(median, 2),
            "p90_ms": round(p90, 2), "runs": runs}  # fmt: skip


@contextlib.contextmanager
def hub(user: str, *serve_args: str, token_options: tuple[str, ...] = ()):
    """(a `kernel-hub serve` on a fresh data dir in a temp folder, a token of a new user of it, the folder)."""
    work = Path(tempfile.mkdtemp(prefix="bench-latency-"))
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    server = ServeProcess(work / "data", *serve_args, cwd=REPO_ROOT, env=env).start()
    try:
        yield server, harness.hub_token(work / "data", user, *token_options, env=env), work
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


def stall(args) -> int:
    results = {}
    for workers in (1, args.workers):
        with hub("stall", "--workers", str(workers), "--head-timeout", "5") as (server, token, _):
            from huggingface_hub import HfApi

            api = HfApi(endpoint=server.url, token=token)
            api.create_repo(REPO, repo_type="kernel")
            api.upload_file(path_or_fileobj=os.urandom(16384), path_in_repo="small.bin", repo_id=REPO,
                            repo_type="kernel")  # fmt: skip
            r = results[f"workers-{workers}"] = measure(server.url, token, args.duration)
        for phase in ("quiet", "attacked"):
            s = r[phase]
            print(f"workers={workers} {phase:9s} n={s['n']:5d} p50 {s['p50_ms']:7.1f} ms  p99 {s['p99_ms']:7.1f} ms  "
                  f"max {s['max_ms']:7.1f} ms", flush=True)  # fmt: skip
    harness.save_hub_run("stall", args, results, ("p50_ms", "p99_ms", "max_ms"))
    return 0


def pages(args) -> int:
    from registry.commands.demo import DEFAULT_VARIANTS
    from registry.commands.demo import REPO as DEMO_REPO
    from registry.publisher.build import build
    from registry.publisher.publish import publish

    variants = args.variants or DEFAULT_VARIANTS
    with hub("bench", token_options=("--write", "org")) as (server, token, work):
        dist = build(REPO_ROOT / "kernel_src" / "fused_mlp", work / "dist", aot=False, only=variants).out
        for n in (1, 2, 3):
            publish(DEMO_REPO, dist, n, endpoint=server.url, token=token, key_path=work / "key.pem")
        found = {"kernel page (3 versions)": page_times(f"{server.url}/kernels/{DEMO_REPO}", args.runs),
                 "version page (v1)": page_times(f"{server.url}/kernels/{DEMO_REPO}/tree/v1", args.runs)}  # fmt: skip

    ok = all(p["bytes"] < GOAL_BYTES and p["median_ms"] < GOAL_MS for p in found.values())
    for name, p in found.items():
        print(f"{name}: {p['bytes'] / 1000:.1f} KB, cold {p['cold_ms']:.0f} ms, warm median {p['median_ms']:.1f} ms "
              f"(p90 {p['p90_ms']:.1f}, {p['runs']} runs)")  # fmt: skip
    print(
        f"goal < {GOAL_BYTES / 1000:.0f} KB and < {GOAL_MS:.0f} ms (warm median): {'met' if ok else 'MISSED'}"
    )
    versions = {p: metadata.version(p) for p in ("starlette", "uvicorn", "jinja2", "markdown-it-py")}
    harness.save_hub_run("pages", args, {"hub": found}, ("bytes", "cold_ms", "median_ms", "p90_ms"),
                         versions=versions, variants=variants, met=ok)  # fmt: skip
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("bench", choices=("stall", "pages"))
    p.add_argument("--duration", type=float, default=20.0, help="stall: seconds of small requests per phase")
    p.add_argument("--workers", type=int, default=2, help="stall: the workers of the second hub")
    p.add_argument("--runs", type=int, default=50, help="pages: warm fetches per page")
    p.add_argument("--variant", action="append", dest="variants", metavar="NAME",
                   help="pages: variants to publish (repeatable; default: the demo's; torch-cpu alone breaks "
                   "every GPU promise)")  # fmt: skip
    p.add_argument("--out", type=Path, help="this run's report (JSON)")
    p.add_argument("--csv", type=Path, help="append results here ($BENCH_CSV)")
    args = p.parse_args(argv)
    return stall(args) if args.bench == "stall" else pages(args)


if __name__ == "__main__":
    sys.exit(main())
