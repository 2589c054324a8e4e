"""Serving speed (issue #11, Deliver 4): the hub and nginx serving the same files, in one run.

One kernel repo of small (16 KiB) and large (2 MiB) files is published to a hub; the same bytes are laid out
for a plain nginx file server. `wrk` (32 connections) downloads them from each setup in turn:

  nginx-static   nginx serving the files from a folder (sendfile): the ceiling (run first and last)
  hub-1          `kernel-hub serve` alone, 1 worker (the embedded default; starlette FileResponse)
  hub-N          `kernel-hub serve --workers N`
  nginx+hub-N    the recommended deployment: nginx in front, `serve --workers N --accel-redirect /_blobs`
                 (the hub authorises and checks, nginx streams the blob)
  old-hub-1      optional (`--old-src DIR`: a checkout from before #11), the hub as it was

It prints req/s, MB/s, p50/p99 per setup and file size, and the ratios the goals name; the raw numbers go to
`--out` (JSON). Needs nginx and wrk (`apt-get install -y nginx wrk`).

    python bench/bench_serve.py --duration 10 --workers 4 --old-src /tmp/pre-11 [--out serve.json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness

REPO_ROOT = harness.REPO_ROOT

from registry.commands.serve import ServeProcess
from tests.servers import free_ports
from tests.servers.nginx import Nginx
from tests.servers.nginx_accel import ACCEL_PREFIX, accel_conf

REPO = "bench/files"
SIZES = {"16KiB": (16 * 1024, 100), "2MiB": (2 * 1024 * 1024, 16)}  # name -> (bytes per file, files)


def make_files(root: Path) -> dict[str, list[str]]:
    """The benchmark files under `root` (random bytes); size name -> repo paths."""
    paths: dict[str, list[str]] = {}
    for name, (size, count) in SIZES.items():
        for i in range(count):
            rel = f"{name}/f{i}.bin"
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_bytes(os.urandom(size))
            paths.setdefault(name, []).append(rel)
    return paths


def publish(url: str, token: str, root: Path) -> None:
    from huggingface_hub import HfApi

    api = HfApi(endpoint=url, token=token)
    api.create_repo(REPO, repo_type="kernel", exist_ok=True)
    api.upload_folder(folder_path=root, repo_id=REPO, repo_type="kernel")


def wrk(url_base: str, paths: list[str], duration: int, connections: int, work: Path) -> dict:
    """One wrk run cycling through `paths`; req/s, MB/s, latency percentiles and non-2xx answers."""
    script = work / "paths.lua"
    items = ",".join(json.dumps(p) for p in paths)
    script.write_text(
        f"local paths = {{{items}}}\nlocal i = 0\n"
        "request = function()\n  i = i + 1\n  return wrk.format('GET', paths[(i % #paths) + 1])\nend\n"
    )
    out = subprocess.run(
        ["wrk", "-t2", f"-c{connections}", f"-d{duration}s", "--latency", "-s", str(script), url_base],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return {
        "req_s": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),
        "mb_s": _mb(re.search(r"Transfer/sec:\s+([\d.]+\w+)", out).group(1)),
        "p50_ms": _ms(re.search(r"\s50%\s+([\d.]+\w+)", out).group(1)),
        "p99_ms": _ms(re.search(r"\s99%\s+([\d.]+\w+)", out).group(1)),
        "errors": int(m.group(1)) if (m := re.search(r"Non-2xx or 3xx responses: (\d+)", out)) else 0,
        "socket_errors": (m := re.search(r"Socket errors: (.*)", out)) and m.group(1) or "",
    }


def _mb(text: str) -> float:
    value, unit = float(re.match(r"[\d.]+", text).group()), re.search(r"[A-Za-z]+", text).group()
    return value * {"B": 1e-6, "KB": 1024 / 1e6, "MB": 1024**2 / 1e6, "GB": 1024**3 / 1e6}[unit]


def _ms(text: str) -> float:
    value, unit = float(re.match(r"[\d.]+", text).group()), re.search(r"[a-z]+", text).group()
    return value * {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 6e4}[unit]


def measure(
    name: str, base: str, prefix: str, paths: dict[str, list[str]], args, work: Path, out: dict
) -> None:
    for size, rels in paths.items():
        r = wrk(base, [prefix + p for p in rels], args.duration, args.connections, work)
        out.setdefault(name, {})[size] = r
        print(
            f"{name:14s} {size:6s} {r['req_s']:9.0f} req/s {r['mb_s']:8.1f} MB/s  p50 {r['p50_ms']:7.1f} ms  "
            f"p99 {r['p99_ms']:7.1f} ms  non-2xx {r['errors']} {r['socket_errors']}",
            flush=True,
        )


def save(bench: str, args, results: dict, ratios: dict, **more_meta) -> None:
    """The results with what they were measured on (nginx, files, ratios) to the CSV and `args.out`."""
    nginx = subprocess.run(["nginx", "-v"], check=False, capture_output=True, text=True).stderr.strip()
    sizes = {k: {"bytes": s, "files": n} for k, (s, n) in SIZES.items()}
    harness.save_hub_run(bench, args, results, ("req_s", "mb_s", "p50_ms", "p99_ms"), nginx=nginx,
                         sizes=sizes, ratios=ratios, **more_meta)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--duration", type=int, default=10, help="seconds per wrk run")
    p.add_argument("--connections", type=int, default=32)
    p.add_argument("--workers", type=int, default=4, help="hub workers of hub-N and nginx+hub-N")
    p.add_argument("--old-src", type=Path, help="a checkout from before #11, measured as old-hub-1")
    p.add_argument("--out", type=Path, help="this run's report (JSON)")
    p.add_argument("--csv", type=Path, help="append results here ($BENCH_CSV)")
    args = p.parse_args(argv)
    for tool in ("wrk", "nginx"):
        if not shutil.which(tool) and not Path(f"/usr/sbin/{tool}").exists():
            sys.exit(f"bench_serve: {tool} is not installed (apt-get install -y nginx wrk)")

    work = Path(tempfile.mkdtemp(prefix="bench-serve-"))
    work.chmod(0o755)  # nginx's workers (another user) read the files and the blobs below it
    files = work / "files"
    paths = make_files(files)
    data = work / "data"
    results: dict = {}
    resolve = f"/kernels/{REPO}/resolve/main/"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}

    def hub(*extra: str, src: Path = REPO_ROOT) -> ServeProcess:
        return ServeProcess(data, *extra, cwd=src, env={**env, "PYTHONPATH": str(src)}).start()

    first = hub()
    token = harness.hub_token(data, "bench", env=env)
    publish(first.url, token, files)
    first.stop()

    def nginx_static(name: str) -> None:
        static = Nginx.files(files, workers="auto").start()
        try:
            measure(name, static.url, "/", paths, args, work, results)
        finally:
            static.destroy()

    nginx_static("nginx-static")
    if args.old_src:
        old = hub(src=args.old_src)
        try:
            measure("old-hub-1", old.url, resolve, paths, args, work, results)
        finally:
            old.stop()
    for workers in (1, args.workers):
        h = hub("--workers", str(workers))
        try:
            measure(f"hub-{workers}", h.url, resolve, paths, args, work, results)
        finally:
            h.stop()
    h = hub("--workers", str(args.workers), "--accel-redirect", ACCEL_PREFIX)
    port = free_ports(1)[0]
    front = Nginx(
        accel_conf([h.url.removeprefix("http://")], data / "blobs", port), port, workers="auto"
    ).start()
    try:
        measure(f"nginx+hub-{args.workers}", front.url, resolve, paths, args, work, results)
    finally:
        front.destroy()
        h.stop()

    nginx_static("nginx-static-2")  # again at the end: the machine's load drifts during a run

    best = f"nginx+hub-{args.workers}"
    ceiling = {  # the better of the two nginx runs: the ratios are not flattered by a slow one
        size: max(results[n][size][k] for n in ("nginx-static", "nginx-static-2"))
        for size, k in (("2MiB", "mb_s"), ("16KiB", "req_s"))
    }
    ratios = {
        "large_mb_s_vs_nginx": results[best]["2MiB"]["mb_s"] / ceiling["2MiB"],
        "small_req_s_vs_nginx": results[best]["16KiB"]["req_s"] / ceiling["16KiB"],
    }
    if "old-hub-1" in results:
        ratios["small_req_s_vs_old_hub"] = (
            results[best]["16KiB"]["req_s"] / results["old-hub-1"]["16KiB"]["req_s"]
        )
        ratios["large_mb_s_vs_old_hub"] = results[best]["2MiB"]["mb_s"] / results["old-hub-1"]["2MiB"]["mb_s"]
    print("ratios: " + ", ".join(f"{k} {v:.2f}" for k, v in ratios.items()))
    save("serve", args, results, ratios)
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
