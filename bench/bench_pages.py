"""Size and speed of the hub's kernel page with 3 published versions (goal, issue #14: < 50 KB, < 100 ms).

Run from the repo root: `python bench/bench_pages.py [--runs 50] [--out FILE] [--csv FILE]`. It starts `kernel-hub serve`
(SQLite + files in a temp dir, the compatibility matrix of build/matrix.toml on its pages), builds the
demo's variants (no AOT), publishes them as v1, v2 and v3 of `org/fused-mlp`, then fetches
`/kernels/org/fused-mlp` once cold (first render: the matrix is built) and `--runs` times warm, over HTTP
from this process, and a version page the same way. Prints one line per page and writes the raw JSON.
Exits 1 when a goal is missed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import urllib.request
from importlib import metadata
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness

REPO_ROOT = harness.REPO_ROOT

from registry.commands.demo import DEFAULT_VARIANTS, REPO
from registry.commands.serve import ServeProcess

GOAL_BYTES = 50_000
GOAL_MS = 100.0


def fetch(url: str) -> tuple[float, int]:
    """(milliseconds, bytes) of one GET, the whole body read."""
    t = time.perf_counter()
    with urllib.request.urlopen(url, timeout=60) as r:
        size = len(r.read())
    return (time.perf_counter() - t) * 1000, size


def measure(url: str, runs: int) -> dict:
    cold_ms, size = fetch(url)
    warm = sorted(fetch(url)[0] for _ in range(runs))
    return {
        "url": url,
        "bytes": size,
        "cold_ms": round(cold_ms, 2),
        "median_ms": round(statistics.median(warm), 2),
        "p90_ms": round(warm[int(0.9 * (len(warm) - 1))], 2),
        "runs": runs,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=50, help="warm fetches per page")
    ap.add_argument(
        "--variant",
        action="append",
        dest="variants",
        metavar="NAME",
        help="variants to publish (repeatable; default: the demo's; torch-cpu alone breaks every GPU promise)",
    )
    ap.add_argument("--out", type=Path, help="this run's report (JSON)")
    ap.add_argument("--csv", type=Path, help="append results here ($BENCH_CSV)")
    args = ap.parse_args()
    variants = args.variants or DEFAULT_VARIANTS

    from registry.publisher.build import build
    from registry.publisher.publish import publish

    with tempfile.TemporaryDirectory(prefix="bench-pages-") as tmp:
        work = Path(tmp)
        hub = ServeProcess(work / "data", cwd=REPO_ROOT).start()
        try:
            token = harness.hub_token(work / "data", "bench", "--write", "org")
            dist = build(
                REPO_ROOT / "kernel_src" / "fused_mlp",
                work / "dist" / "fused-mlp",
                aot=False,
                only=variants,
            ).out
            for n in (1, 2, 3):
                publish(REPO, dist, n, endpoint=hub.url, token=token, key_path=work / "key.pem")
            pages = {
                "kernel page (3 versions)": measure(f"{hub.url}/kernels/{REPO}", args.runs),
                "version page (v1)": measure(f"{hub.url}/kernels/{REPO}/tree/v1", args.runs),
            }
        finally:
            hub.stop()

    ok = all(p["bytes"] < GOAL_BYTES and p["median_ms"] < GOAL_MS for p in pages.values())
    for name, p in pages.items():
        print(f"{name}: {p['bytes'] / 1000:.1f} KB, cold {p['cold_ms']:.0f} ms, warm median {p['median_ms']:.1f} ms "
              f"(p90 {p['p90_ms']:.1f}, {p['runs']} runs)")  # fmt: skip
    print(
        f"goal < {GOAL_BYTES / 1000:.0f} KB and < {GOAL_MS:.0f} ms (warm median): {'met' if ok else 'MISSED'}"
    )
    versions = {p: metadata.version(p) for p in ("starlette", "uvicorn", "jinja2", "markdown-it-py")}
    harness.save_hub_run("pages", args, {"hub": pages}, ("bytes", "cold_ms", "median_ms", "p90_ms"),
                         versions=versions, variants=variants, met=ok)  # fmt: skip
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
