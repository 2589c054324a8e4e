"""Time to first result of a fresh process: registry.get_kernel (AOT cubins) vs Triton JIT vs stock kernels.

Run on a CUDA machine from the repo root: `python tests/loader/time_to_first_result.py [--out DIR]`
(tests/loader/test_loader_gpu.py runs it under `pytest -m gpu`).
It starts an embedded hub, builds the noarch variants with AOT cubins for this device's arch only,
publishes `org/fused-mlp` v1, then times fresh subprocesses from spawn to the first synchronized
`mlp` result (fp16, 3 layers, M=16). Each subprocess gets an empty TRITON_CACHE_DIR; the number of
files Triton wrote there afterwards shows whether anything was JIT-compiled. `FUSED_MLP_AOT=0`
makes the same package ignore its cubins (the Triton JIT path). Exits 1 when a promise fails:
get_kernel must pick torch-cuda, pass (or reuse) its check, and reach the first result with no JIT.
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

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO_ROOT), str(REPO_ROOT / "kernel_src")]

REPO = "org/fused-mlp"
CHILD_TIMEOUT_S = 150
VARIANTS = ["torch-cuda", "torch-cpu", "torch-universal"]

# One fresh process: import torch, load, build inputs, first result; prints one JSON line.
CHILD = r"""
import json, os, time
T0 = float(os.environ["BENCH_T0"])
t = time.time(); import torch; import torch.nn.functional as F; t_import = time.time() - t
mode, repo = os.environ["BENCH_MODE"], os.environ["BENCH_REPO"]
t = time.time(); info = {}
if mode == "registry":
    import registry
    check = None if os.environ["BENCH_CHECK"] == "none" else "once"
    m = registry.get_kernel(repo, version=1, check=check)
    info = {k: m.__kernel_info__[k] for k in ("source", "variant", "reason", "detail")}
    info["check"] = m.__kernel_info__["check"]["status"]
    info["check_summary"] = m.__kernel_info__["check"].get("summary")
    info["speed"] = m.__kernel_info__["speed"].get("summary") or m.__kernel_info__["speed"]["status"]
elif mode == "kernels":
    import kernels
    m = kernels.get_kernel(repo, version=1, trust_remote_code=True)
    info = {"module": m.__name__}
t_load = time.time() - t
g = torch.Generator(device="cuda").manual_seed(0)
dims = [1024, 4096, 4096, 1024]
x = torch.randn(16, dims[0], device="cuda", dtype=torch.float16, generator=g)
ws = [torch.randn(o, i, device="cuda", dtype=torch.float16, generator=g) * i**-0.5 for i, o in zip(dims, dims[1:])]
bs = [torch.randn(o, device="cuda", dtype=torch.float16, generator=g) for o in dims[1:]]

def eager(x, ws, bs, act):
    for i, (w, b) in enumerate(zip(ws, bs)):
        x = F.linear(x, w, b)
        x = F.gelu(x, approximate="tanh") if i < len(ws) - 1 else x
    return x

fn = eager if mode == "eager" else m.mlp
torch.cuda.synchronize()
t = time.time(); out = fn(x, ws, bs, "gelu_tanh"); torch.cuda.synchronize(); t_first = time.time() - t
total = time.time() - T0
ref = eager(x.float(), [w.float() for w in ws], [b.float() for b in bs], "gelu_tanh")
err = float((out.float() - ref).norm() / ref.norm())
names = [f for _, _, fs in os.walk(os.environ["TRITON_CACHE_DIR"]) for f in fs]
# Kernel JIT leaves .ttir/.ttgir/.llir/.ptx/.cubin (+ .json/.source); the host-side C modules Triton builds
# for any launch, AOT or not (cuda_utils, __triton_launcher), are .so files.
jit = sorted(f for f in names if not f.endswith(".so"))
print(json.dumps({"total_s": total, "import_torch_s": t_import, "load_s": t_load, "first_call_s": t_first,
                  "triton_cache_files": len(names), "jit_kernel_files": len(jit), "jit_examples": jit[:4],
                  "host_modules": sorted(f for f in names if f.endswith(".so")), "rel_error": err, "info": info}))
"""


def run_child(mode: str, repo: str, env: dict, work: Path, name: str, check: str = "once") -> dict:
    """Spawn one fresh interpreter with an empty TRITON_CACHE_DIR; its JSON report plus the scenario name."""
    cache = Path(tempfile.mkdtemp(prefix=f"triton-{name}-", dir=work))
    child_env = {
        **env,
        "BENCH_MODE": mode,
        "BENCH_REPO": repo,
        "BENCH_CHECK": check,
        "TRITON_CACHE_DIR": str(cache),
        "BENCH_T0": repr(time.time()),
    }
    try:
        cmd = [sys.executable, "-c", CHILD]
        proc = subprocess.run(
            cmd, env=child_env, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        return {"name": name, "error": f"timed out after {CHILD_TIMEOUT_S} s"}
    if proc.returncode != 0:
        return {"name": name, "error": proc.stderr[-3000:]}
    return {"name": name, **json.loads(proc.stdout.strip().splitlines()[-1])}


def device_matrix(work: Path, arch: str) -> Path:
    """build/matrix.toml with the Triton variant's AOT archs narrowed to this device's arch (faster build)."""
    text = (REPO_ROOT / "build" / "matrix.toml").read_text()
    line = text.index("archs = [", text.index("[variants.torch-cuda]"))
    end = text.index("\n", line)
    path = work / "matrix.toml"
    path.write_text(text[:line] + f'archs = ["{arch}"]' + text[end:])
    return path


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=None, help="folder for ttfr.json (default: print only)")
    args = parser.parse_args()

    import torch
    import triton

    from registry.client.resolve import current_env
    from registry.commands.demo import embedded_hub, hub_admin
    from registry.publisher.build import build
    from registry.publisher.publish import publish

    env_info = current_env()
    if env_info.gpu_arch is None:
        print("no CUDA device: this benchmark needs one", file=sys.stderr)
        return 2
    aot_arch = {"sm_90": "sm_90a", "sm_100": "sm_100a"}.get(env_info.gpu_arch, env_info.gpu_arch)
    work = Path(tempfile.mkdtemp(prefix="ttfr-"))
    t = time.time()
    dist = work / "dist" / "fused-mlp"
    result = build(
        REPO_ROOT / "kernel_src" / "fused_mlp",
        dist,
        device_matrix(work, aot_arch),
        only=VARIANTS,
    )
    print(
        f"build ({aot_arch} cubins): {time.time() - t:.1f} s; "
        + "; ".join(f"{v.name}: {v.notes}" for v in result.variants)
    )

    with embedded_hub(work / "hub", work / "serve.log") as url:
        token = hub_admin("token", "create", "--user", "bench", "--write", "org", "--data", str(work / "hub"))
        hub_admin("org", "create", "org", "--trusted", "--member", "bench", "--data", str(work / "hub"))
        published = publish(REPO, dist, 1, endpoint=url, token=token, key_path=work / "key.pem")
        print(f"published {REPO} v1 -> {published.commit}")
        path = os.pathsep.join(
            [str(REPO_ROOT), str(REPO_ROOT / "kernel_src"), os.environ.get("PYTHONPATH", "")]
        )
        base = {**os.environ, "HF_ENDPOINT": url, "HF_TOKEN": token, "PYTHONPATH": path}
        base.pop("HF_HUB_DISABLE_TELEMETRY", None)
        cache = {**base, "KERNELS_CACHE": str(work / "kernels-cache")}
        jit = {**cache, "FUSED_MLP_AOT": "0"}
        # The comparisons first (check=None), then the check itself, then the normal fresh process.
        scenarios = [
            ("eager", base, "eager-pytorch", "none"),
            ("registry", cache, "registry-aot-nocheck", "none"),  # includes the first download + verify
            ("kernels", cache, "stock-kernels-aot", "none"),
            ("kernels", jit, "stock-kernels-jit", "none"),
            ("registry", jit, "registry-jit-nocheck", "none"),
            ("registry", cache, "registry-first-check", "once"),  # runs the check (JITs its fwd/bwd kernels)
            ("registry", cache, "registry-aot", "once"),  # check cached: the normal fresh process
        ]
        runs = []
        for mode, env, name, check in scenarios:
            runs.append(run_child(mode, REPO, env, work, name, check))
            print(json.dumps(runs[-1]), flush=True)
            if args.out:  # written after every run, so a time-out still leaves the finished ones
                args.out.mkdir(parents=True, exist_ok=True)
                (args.out / "ttfr.json").write_text(json.dumps({"runs": runs}, indent=1))
    header = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "gpu": torch.cuda.get_device_name(),
        "arch": env_info.gpu_arch,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "driver_cuda": env_info.driver_cuda,
        "python": env_info.python,
    }
    print_table(header, runs)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "ttfr.json").write_text(json.dumps({"env": header, "runs": runs}, indent=1))
    problems = promises(runs)
    for p in problems:
        print(f"FAILED: {p}")
    return 1 if problems else 0


def promises(runs: list[dict]) -> list[str]:
    """What must hold: torch-cuda chosen and checked, AOT first result with zero JIT, JIT path really JITs."""
    by = {r["name"]: r for r in runs}
    problems = [f"{r['name']} crashed: {r['error']}" for r in runs if "error" in r]
    aot, first, jit = (
        by.get("registry-aot", {}),
        by.get("registry-first-check", {}),
        by.get("registry-jit-nocheck", {}),
    )
    if "info" in aot:
        if (aot["info"]["source"], aot["info"]["variant"]) != ("hub", "torch-cuda"):
            problems.append(
                f"registry-aot loaded {aot['info']['source']}/{aot['info']['variant']}: {aot['info']['reason']}"
            )
        if aot["info"]["check"] != "passed (cached)":
            problems.append(f"registry-aot check: {aot['info']['check']}")
    for name in ("registry-aot", "registry-aot-nocheck"):
        if by.get(name, {}).get("jit_kernel_files"):
            problems.append(f"{name} JIT-compiled kernels: {by[name]['jit_examples']} in TRITON_CACHE_DIR")
    if "info" in first and first["info"]["check"] != "passed":
        problems.append(f"first check: {first['info']['check']}: {first['info'].get('check_summary')}")
    if "jit_kernel_files" in jit and not jit["jit_kernel_files"]:
        problems.append("FUSED_MLP_AOT=0 wrote no Triton cache files: the JIT comparison measured no JIT")
    problems += [
        f"{r['name']} rel. error {r['rel_error']:.2e} > 1e-2" for r in runs if r.get("rel_error", 0) > 1e-2
    ]
    return problems


def print_table(header: dict, runs: list[dict]) -> None:
    print("\n" + ", ".join(f"{k} {v}" for k, v in header.items()))
    print("time to first result of a fresh process (mlp fp16, 16x1024 -> 4096 -> 4096 -> 1024, gelu_tanh)")
    cols = f"{'scenario':<22} {'total s':>8} {'import s':>9} {'load s':>7} {'1st call s':>10} {'JIT files':>9} {'host .so':>8} {'rel err':>8}  path"
    print(cols)
    print("-" * len(cols))
    for r in runs:
        if "error" in r:
            print(f"{r['name']:<22} ERROR {r['error'].strip().splitlines()[-1]}")
            continue
        info = r["info"]
        path = (
            f"{info['source']}/{info['variant']}, check {info['check']}, aot={info['detail'].get('aot')}"
            if "source" in info
            else info.get("module", "torch eager")
        )
        print(
            f"{r['name']:<22} {r['total_s']:>8.2f} {r['import_torch_s']:>9.2f} {r['load_s']:>7.2f} "
            f"{r['first_call_s']:>10.3f} {r['jit_kernel_files']:>9} {len(r['host_modules']):>8} {r['rel_error']:>8.1e}  {path}"
        )


if __name__ == "__main__":
    sys.exit(main())
