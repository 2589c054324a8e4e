"""What `get_kernel` costs and chooses on this GPU, in fresh processes against a hub: the loader stage of
bench/run_gpu.sh (issue #10's goals).

Steps, each in a fresh interpreter with its own time limit, the JSON report rewritten after every step:
1. `cold`: first-ever load (empty cache): download + verify + check + speed check.
2. `warm`: the same again (cached check and speed verdicts), `version=1` (refs + trust: a few requests).
3. `pinned`: `revision=<commit>` of the cached version: no HTTP request at all.
   `warm_profile`: `warm` again with the CUDA context made first (`cuda_context_s`) and a cProfile of get_kernel.
4. `bench`: `kernel-hub bench REPO --version 1 --no-compile` (times every variant, records it on `compat`).
5. `cold_after_bench`: first-ever load again, now ordered by the speed record.
Per load: seconds for `import torch` and from then to the loaded kernel (`get_kernel_s`: every import it needs
included; the profiled step times get_kernel alone, after a CUDA context), whether it started CUDA
(`cuda_started`), HTTP requests (huggingface_hub's client,
which kernel-hub's requests go through too), and what was chosen and why (`__kernel_info__`).

    python bench/bench_loader.py --repo acme/fused-mlp-loader --out OUT/loader.json   (HF_ENDPOINT, HF_TOKEN set)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness

REPO_ROOT = harness.REPO_ROOT

CHILD = r"""
import json, os, sys, time
t0 = time.perf_counter(); import torch; t_torch = time.perf_counter() - t0
t_start = time.perf_counter()  # get_kernel_s counts from here: the request counter's imports are a user's too
import httpx2
from huggingface_hub.utils import set_client_factory
from huggingface_hub.utils._http import hf_request_event_hook
seen = []
set_client_factory(lambda: httpx2.Client(
    event_hooks={"request": [hf_request_event_hook, lambda r: seen.append(f"{r.method} {r.url.path}")]},
    follow_redirects=True, timeout=None))
import registry
kw = json.loads(os.environ["LOAD_KWARGS"])
extra = {}
profile = os.environ.get("LOAD_PROFILE") == "1"
if profile:  # where a warm load's time goes: the CUDA context first, then a profile
    t0 = time.perf_counter(); torch.empty(1, device="cuda"); extra["cuda_context_s"] = round(time.perf_counter() - t0, 3)
    import cProfile, io, pstats
    prof = cProfile.Profile(); prof.enable()
t0 = time.perf_counter(); m = registry.get_kernel(os.environ["LOAD_REPO"], **kw); t_load = time.perf_counter() - t0
extra["cuda_started"] = torch.cuda.is_initialized()  # did get_kernel (or the kernel's import) start CUDA?
if not profile:
    t_load = time.perf_counter() - t_start
if profile:
    prof.disable(); text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("cumulative").print_stats(40)
    extra["profile"] = text.getvalue()[-12000:]
i = m.__kernel_info__
print(json.dumps({**extra,
    "import_torch_s": round(t_torch, 3), "get_kernel_s": round(t_load, 3), "requests": len(seen),
    "request_list": seen, "source": i["source"], "variant": i["variant"], "commit": i["commit"],
    "reason": i["reason"], "order": i["order"], "check": i["check"].get("status"),
    "check_summary": i["check"].get("summary"), "speed": i["speed"], "verification": i.get("verification"),
    "trust": i.get("trust"), "offline": i["offline_reason"],
}))
"""


def child(repo: str, kwargs: dict, cache: Path, timeout: float, profile: bool = False) -> dict:
    env = {**os.environ, "KERNELS_CACHE": str(cache), "LOAD_REPO": repo, "LOAD_KWARGS": json.dumps(kwargs)}
    env["LOAD_PROFILE"] = "1" if profile else "0"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    t0 = time.perf_counter()
    try:
        cmd = [sys.executable, "-c", CHILD]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    wall = round(time.perf_counter() - t0, 3)
    if proc.returncode != 0:
        return {"error": f"exit {proc.returncode}", "stderr": proc.stderr[-3000:], "wall_s": wall}
    return {**json.loads(proc.stdout.strip().splitlines()[-1]), "wall_s": wall}


def bench(repo: str, out: Path, cache: Path, timeout: float) -> dict:
    env = {**os.environ, "KERNELS_CACHE": str(cache)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    cmd = [sys.executable, "-m", "registry.cli", "bench", repo, "--version", "1", "--no-compile", "--out"]
    cmd.append(str(out))
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
        result = {"exit": proc.returncode, "table": proc.stdout, "log": proc.stderr[-3000:]}
    except subprocess.TimeoutExpired:
        result = {"error": f"timed out after {timeout:.0f} s (the record below is partial, not on the hub)"}
    result["wall_s"] = round(time.perf_counter() - t0, 3)
    if out.is_file():  # written after every workload
        result["record"] = json.loads(out.read_text())
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", required=True)
    parser.add_argument("--out", type=Path, required=True, help="JSON report (rewritten after every step)")
    parser.add_argument("--csv", type=Path, default=None, help="append results here ($BENCH_CSV)")
    parser.add_argument("--bench-timeout", type=float, default=50)
    args = parser.parse_args(argv)
    report: dict = {"environment": harness.environment(), "repo": args.repo}
    report["endpoint"] = os.environ.get("HF_ENDPOINT")
    work = Path(tempfile.mkdtemp(prefix="bench-loader-"))

    def step(name: str, result: dict) -> dict:
        report[name] = result
        args.out.write_text(json.dumps(report, indent=2))
        shown = ("get_kernel_s", "cuda_started", "requests", "variant", "source", "error", "wall_s")
        brief = {k: result.get(k) for k in shown}
        print(f"[loader] {name}: {json.dumps(brief)}", flush=True)
        return result

    # Limits per step sum to < 150 s, run_gpu.sh's limit for the whole stage.
    first = step("cold", child(args.repo, {"version": 1}, work / "cache", 30))
    step("warm", child(args.repo, {"version": 1}, work / "cache", 15))
    if first.get("commit"):
        step("pinned", child(args.repo, {"revision": first["commit"]}, work / "cache", 15))
    step("warm_profile", child(args.repo, {"version": 1}, work / "cache", 15, profile=True))
    step("bench", bench(args.repo, work / "speed.json", work / "bench-cache", args.bench_timeout))
    step("cold_after_bench", child(args.repo, {"version": 1}, work / "cache-2", 30))
    steps = {name: r for name, r in report.items() if name != "environment" and isinstance(r, dict)}
    rows = [{"case": name, "impl": r.get("variant", ""), **r} for name, r in steps.items()]
    harness.append_csv("loader", rows, ("case",), ("get_kernel_s", "requests", "wall_s"), args.csv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
