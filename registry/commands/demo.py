"""`kernel-hub demo [--data DIR]`: the whole path on the embedded default hub, start to finish.

Starts `kernel-hub serve` (SQLite + files in DIR) on a free 127.0.0.1 port, builds the kernel, publishes
it as `org/fused-mlp` v1, loads it with `registry.get_kernel`, and prints which path was taken and why,
the check result, and a small eager-vs-loaded timing table. On a machine without a CUDA device this
shows the torch.compile fallback ("no CUDA device"). The demo's own files (publisher key, dist, kernel
cache, server log) live in DIR/demo/.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from registry import constants

from .serve import ServeProcess

REPO = "org/fused-mlp"
USER = "demo"
# The noarch variants build in seconds on any machine; the CUDA C++ variant takes minutes (add it with --variant).
DEFAULT_VARIANTS = ["torch-cuda", "torch-cpu", "torch-universal"]


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "demo",
        help="local hub + build + publish + get_kernel, with the path taken and a timing table",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--data", type=Path, default=Path(".hub-data"), help="hub data dir (default .hub-data)")
    p.add_argument(
        "--source", type=Path, default=Path("kernel_src/fused_mlp"), help="kernel package to build"
    )
    p.add_argument(
        "--matrix", type=Path, help="build matrix (default: build/matrix.toml here or in a parent folder)"
    )
    p.add_argument("--no-aot", action="store_true", help="skip Triton AOT cubins (faster build, JIT on GPU)")
    p.add_argument(
        "--variant",
        action="append",
        dest="variants",
        metavar="NAME",
        help=f"variants to build (repeatable; default: {', '.join(DEFAULT_VARIANTS)})",
    )
    p.set_defaults(func=run)


def hub_admin(*args: str) -> str:
    """Run a `kernel-hub` admin sub-command in a subprocess; its stdout, or SystemExit with its stderr."""
    proc = subprocess.run(
        [sys.executable, "-m", "registry.cli", *args], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise SystemExit(f"kernel-hub {' '.join(args[:2])} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout.strip()


@contextmanager
def embedded_hub(data: Path, log_path: Path):
    """A `kernel-hub serve` subprocess on a free port; yields its URL and stops it on exit."""
    hub = ServeProcess(data, log_path=log_path).start(timeout_s=30)
    try:
        yield hub.url
    finally:
        hub.stop()


def _step(text: str) -> None:
    print(f"\n== {text}", flush=True)


def run(args: argparse.Namespace) -> int:
    data = args.data.resolve()
    work = data / "demo"
    work.mkdir(parents=True, exist_ok=True)
    # The kernel cache of this demo, so a rerun shows the cached check and never mixes with the user's cache.
    os.environ[constants.KERNELS_CACHE] = str(work / "cache")
    os.environ.pop(constants.HF_HUB_OFFLINE, None)

    _step(f"hub: kernel-hub serve --data {data}")
    with embedded_hub(data, work / "serve.log") as url:
        print(f"listening on {url} (log: {work / 'serve.log'})")
        token = hub_admin(
            "token", "create", "--user", USER, "--write", REPO.split("/")[0], "--data", str(data)
        )
        hub_admin("org", "create", REPO.split("/")[0], "--trusted", "--member", USER, "--data", str(data))
        dist = work / "dist" / "fused-mlp"
        _build(args, dist)
        _publish(dist, url, token, work / "publisher.pem")
        module = _load(url, token)
    print_timings(module)
    return 0


def _build(args: argparse.Namespace, dist: Path) -> None:
    from registry.publisher.build import build

    _step(f"build {args.source} -> {dist}")
    t0 = time.perf_counter()
    result = build(
        args.source, dist, args.matrix, aot=not args.no_aot, only=args.variants or DEFAULT_VARIANTS
    )
    for v in result.variants:
        print(f"  {v.status:8} {v.name}" + "".join(f"\n           {n}" for n in v.notes))
    print(f"  ({time.perf_counter() - t0:.1f} s)")


def _publish(dist: Path, url: str, token: str, key: Path) -> None:
    from registry.publisher.publish import publish

    _step(f"publish {REPO} v1 to {url}")
    result = publish(
        REPO, dist, 1, endpoint=url, token=token, key_path=key, update=True
    )  # a rerun with new code
    state = "unchanged (same content as the current v1)" if result.unchanged else f"v1 -> {result.commit}"
    print(f"  {state}; signed by key {result.key_id}; variants: {', '.join(result.variants)}")


def _load(url: str, token: str):
    from registry import get_kernel

    _step(f"get_kernel({REPO!r}, version=1)")
    t0 = time.perf_counter()
    module = get_kernel(REPO, version=1, endpoint=url, token=token)
    info = module.__kernel_info__
    print(f"  loaded in {time.perf_counter() - t0:.1f} s")
    where = f"variant {info['variant']}" if info["variant"] else f"reference from {info['reference_variant']}"
    print(f"  path:   {info['source']} ({where}, commit {info['commit'][:12]})")
    print(f"  reason: {info['reason']}")
    print(f"  check:  {info['check'].get('summary') or info['check']['status']}")
    print("  trace:")
    for line in info["trace"]:
        print(f"    {line}")
    return module


def print_timings(module) -> None:
    """Median time per call, eager reference vs the loaded module, for a few MLP shapes on this device."""
    import torch

    reference = module.reference if hasattr(module, "reference") else None
    if reference is None:
        return
    device = "cuda" if torch.cuda.is_available() and module.__kernel_info__["source"] == "hub" else "cpu"
    dtype = torch.float16 if device == "cuda" else torch.float32
    _step(f"timing on {device} ({str(dtype).removeprefix('torch.')}), median of 20 calls after warm-up")
    print(f"  {'op':<10} {'shape (M x K -> N)':<22} {'eager ms':>9} {'loaded ms':>10} {'speedup':>8}")
    for op, m, k, hidden, n in (
        ("mlp", 16, 512, 1024, 512),
        ("mlp", 512, 512, 1024, 512),
        ("gated_mlp", 256, 512, 1024, 512),
    ):
        x = torch.randn(m, k, device=device, dtype=dtype)
        if op == "mlp":
            ws = [
                torch.randn(o, i, device=device, dtype=dtype) * i**-0.5
                for o, i in ((hidden, k), (hidden, hidden), (n, hidden))
            ]
            bs = [torch.randn(w.shape[0], device=device, dtype=dtype) for w in ws]
            call_args = (x, ws, bs)
        else:
            call_args = tuple(
                torch.randn(o, i, device=device, dtype=dtype) * i**-0.5
                for o, i in ((hidden, k), (hidden, k), (n, hidden))
            )
            call_args = (x, *call_args)
        eager = _median_ms(getattr(reference, op), call_args, device)
        loaded = _median_ms(getattr(module, op), call_args, device)
        print(f"  {op:<10} {f'{m} x {k} -> {n}':<22} {eager:>9.3f} {loaded:>10.3f} {eager / loaded:>7.2f}x")


def _median_ms(fn, args, device: str, iters: int = 20) -> float:
    import torch

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    with torch.no_grad():
        for _ in range(3):
            fn(*args)
        sync()
        times = []
        for _ in range(iters):
            t0 = time.perf_counter()
            fn(*args)
            sync()
            times.append((time.perf_counter() - t0) * 1e3)
    return sorted(times)[len(times) // 2]
