"""Measure every implementation of every step of the CUDA variant, per row count: the numbers behind the
path table (kernel_src/fused_mlp/cuda/paths.py).

For a loaded stable-ABI kernel (harness.py), each step is forced to each implementation in turn
(`torch.ops.<ns>.cuda_set_path`) and a whole public op that exercises it is timed (GPU µs per call from
graph replay): `linear` through `mlp` 3x1024 relu (+bias) and a K=3072 `linear` (the gated down
projection's shape), `gate_up` through `gated_mlp` H=768 I=3072 (inference, and the training forward that also
stores (g, u)), `act_and_mul` on [M, 3072], `chain` (the
whole op in one persistent kernel, or layer by layer) through both `mlp` and `gated_mlp`, `chain_backward`
(the whole backward in one persistent kernel, or cuBLASLt GEMMs per layer) through a forward + backward of
`mlp` 3x1024 relu, of a relu `linear` 768->3072 and of `gated_mlp` H=768 I=3072 gelu_tanh. The printout
ends with the fastest implementation per (step, M) by GPU time (paths.GRAPH_PATHS: calls captured in a
graph) and, up to M=2048 where calls are host-bound, by wall time of a stream of calls (paths.PATHS): copy
the changes into paths.py. Forcing a step forces it in every op (the table can also choose per op).

    python bench/bench_paths.py --variant-dir DIR=cuda [--steps chain,linear] [--json out.json]

`--decode` sweeps the Triton decode kernels instead (kernel_src/fused_mlp/triton/decode.py, from PYTHONPATH, no
variant loaded): their tiles at real models' widths and 1-64 rows against cuBLAS, the backend's current path and
a device copy (the floor), then the gated MLP with the best tiles (`--tables`: the shipped tables only). Weights
rotate over copies past L2, as a model's layers read theirs from HBM. Chosen: bench/BENCHMARKS.md "Decode".

    python bench/bench_paths.py --decode --json OUT.json [--quick] [--tables] [--dtype fp16]
"""

from __future__ import annotations

import itertools
import math
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness

ROWS = (1, 16, 64, 256, 1024, 2048, 4096, 8192)
HOST_BOUND_ROWS = 2048
IMPLS = {
    "linear": ("triton", "tma", "cublaslt"),
    "gate_up": ("triton", "tma", "split"),
    "act_and_mul": ("triton", "cuda"),
    "chain": ("persistent", "layers"),
    "chain_backward": ("persistent", "layers"),
}
# The persistent chain kernels take 1-64 rows (else they run layers: the same numbers as `layers`).
STEP_ROWS = {"chain": (1, 8, 16, 32, 48, 64), "chain_backward": (1, 8, 16, 32, 48, 64)}


def problems(step: str, m: int, kernel, dt: torch.dtype) -> dict:
    """name -> call exercising `step` at M=m."""

    def r(*shape, scale=1.0):
        return torch.randn(*shape, device="cuda", dtype=dt) * scale

    def mlp3():  # x, weights and biases of mlp 3x1024
        return r(m, 1024), [r(1024, 1024, scale=1024**-0.5) for _ in range(3)], [r(1024) for _ in range(3)]

    if step == "linear":
        x, ws, bs = mlp3()
        h, wd = r(m, 3072), r(768, 3072, scale=3072**-0.5)
        return {"mlp 3x1024 relu": lambda: kernel.mlp(x, ws, bs, "relu"),
                "linear 3072->768": lambda: kernel.linear(h, wd, None, "none")}  # fmt: skip
    if step == "gate_up":
        x, wg, wu, wd = r(m, 768), r(3072, 768, scale=768**-0.5), r(3072, 768, scale=768**-0.5), r(768, 3072)
        # the training forward, which also stores (g, u)
        train = getattr(torch.ops, kernel.OPS_NAMESPACE).cuda_gated_mlp_train
        return {"gated 768x3072": lambda: kernel.gated_mlp(x, wg, wu, wd, "gelu_tanh"),
                "gated 768x3072 training forward": lambda: train(x, wg, wu, wd, "gelu_tanh")[0]}  # fmt: skip
    if step == "chain":  # the whole ops that the linear and gate_up rows exercise
        mlp = problems("linear", m, kernel, dt)["mlp 3x1024 relu"]
        return {"mlp 3x1024 relu": mlp, **problems("gate_up", m, kernel, dt)}
    if step == "chain_backward":  # forward + backward (grad mode on inside the sweep's no_grad); returns dx
        x, ws, bs = mlp3()
        h, w1, b1 = r(m, 768), r(3072, 768, scale=768**-0.5), r(3072)
        params = [t.requires_grad_() for t in (x, *ws, *bs, h, w1, b1)]
        up, up1 = r(m, 1024), r(m, 3072)

        def step_of(forward, inputs, upstream):
            def run():
                with torch.enable_grad():
                    return torch.autograd.grad(forward(), inputs, upstream)[0]

            return run

        xg, wg, wu = r(m, 768), r(3072, 768, scale=768**-0.5), r(3072, 768, scale=768**-0.5)
        wd, upg = r(768, 3072, scale=3072**-0.5), r(m, 768)
        gated = [t.requires_grad_() for t in (xg, wg, wu, wd)]
        return {"mlp 3x1024 relu fwd+bwd": step_of(lambda: kernel.mlp(x, ws, bs, "relu"), params[:7], up),
                "linear 768->3072 relu fwd+bwd": step_of(lambda: kernel.linear(h, w1, b1, "relu"), params[7:], up1),
                "gated 768x3072 gelu_tanh fwd+bwd": step_of(lambda: kernel.gated_mlp(xg, wg, wu, wd, "gelu_tanh"), gated, upg)}  # fmt: skip
    g, u = r(m, 3072), r(m, 3072)
    return {"act_and_mul [M,3072]": lambda: kernel.act_and_mul(g, u, "gelu_tanh")}


def sweep(kernel, dt: torch.dtype, written: Callable = lambda rows: None, steps=tuple(IMPLS)) -> list[dict]:
    """Every implementation of each of `steps` at every M; `written(rows)` after each step (the JSON so far)."""
    ns = getattr(torch.ops, kernel.OPS_NAMESPACE)
    rows = []
    with torch.no_grad():
        for step in steps:
            impls = IMPLS[step]
            for m in STEP_ROWS.get(step, ROWS):
                for name, call in problems(step, m, kernel, dt).items():
                    expected = None
                    for impl in impls:
                        ns.cuda_set_path(step, impl)
                        row = {"step": step, "impl": impl, "rows": m, "problem": name}
                        try:
                            out = call()
                            expected = out if expected is None else expected
                            row.update(gpu_us=harness.gpu_us(call), rel_diff=harness.rel_err(out, expected))
                            if m <= HOST_BOUND_ROWS:  # where an implementation's host cost shows in the wall
                                row["host_us"] = harness.host_us(call, 100, 3)
                                row["wall_us"] = harness.stream_us(call, 100, 3)
                        except Exception as exc:  # noqa: BLE001
                            row = {k: row[k] for k in ("step", "impl", "rows", "problem")}
                            row["error"] = str(exc)[:300]
                        finally:
                            ns.cuda_set_path(step, "table")
                        rows.append(row)
                        print(row, flush=True)
            written(rows)
    return rows


def best(rows: list[dict]) -> list[dict]:
    """Fastest implementation per (step, M) by GPU µs summed over the step's problems, with the summed wall µs
    (stream of calls) where it was measured. Training-forward problems count apart (step "gated_mlp_train/<step>",
    as the path table keys them)."""
    totals: dict[tuple, dict[str, dict[str, float]]] = {}
    for r in rows:
        for what in ("gpu_us", "wall_us"):
            if r.get(what) is not None:
                step = f"gated_mlp_train/{r['step']}" if "training" in r["problem"] else r["step"]
                by = totals.setdefault((step, r["rows"]), {}).setdefault(what, {})
                by[r["impl"]] = by.get(r["impl"], 0.0) + r[what]
    out = []
    for (step, m), by in totals.items():
        winner = min(by["gpu_us"], key=by["gpu_us"].get)
        us = {k: round(v, 2) for k, v in by["gpu_us"].items()}
        entry = {"step": step, "rows": m, "best": winner, "us": us}
        if "wall_us" in by:
            entry["wall_us"] = {k: round(v, 2) for k, v in by["wall_us"].items()}
            entry["best_wall"] = min(by["wall_us"], key=by["wall_us"].get)
        out.append(entry)
        print(f"{step:<24} M={m:<6} best {winner:<9} " + "  ".join(f"{k} {v:.1f}" for k, v in by["gpu_us"].items())
              + ("  wall " + "  ".join(f"{k} {v:.1f}" for k, v in by["wall_us"].items()) if "wall_us" in by else ""))  # fmt: skip
    return out


# ---- --decode: the Triton decode kernels' tiles -------------------------------------------------------------
# (name, hidden, intermediate, activation): the gated presets of issue 40
DECODE_SHAPES = [
    ("llama-3-8b", 4096, 14336, "silu"),
    ("qwen2.5-7b", 3584, 18944, "silu"),
    ("llama-3.2-1b", 2048, 8192, "silu"),
    ("gemma-2-2b", 2304, 9216, "gelu_tanh"),
    ("h1024", 1024, 4096, "silu"),  # weights near a quarter of L2: where decode stops paying
    ("h768", 768, 3072, "gelu_tanh"),  # gpt2 widths: its one-row down projection trails eager
]
DECODE_ROWS = (1, 2, 4, 8, 16, 32, 64)
ACT = {"none": 0, "silu": 4, "gelu_tanh": 3}
L2_ROTATE_BYTES = 400 << 20


def candidates(m: int) -> list:
    from fused_mlp.triton.configs import GemmConfig

    bms = [b for b in (1, 2, 4, 8) if b >= m][:1] + [b for b in (16, 32, 64) if b <= max(16, m)]
    tiles = itertools.product(bms, (16, 32, 64), (128, 256, 512), ((4, 3), (4, 4), (8, 4)))
    # the multiply-and-reduce path (BM < 16) holds BN*BM*BK products
    return [GemmConfig(bm, bn, bk, 1, *ws) for bm, bn, bk, ws in tiles if bm >= 16 or bm * bn * bk <= 32768]


def run_gemv(kind, x, w1, w2, out, act, cfg) -> None:
    from fused_mlp.triton.configs import cdiv
    from fused_mlp.triton.decode import GEMV_GATE_UP, GEMV_LINEAR
    from fused_mlp.triton.gated import gate_up_consts
    from fused_mlp.triton.launch import launch
    from fused_mlp.triton.linear import linear_consts

    (M, K), N = x.shape, w1.shape[0]
    grid, even_k = (cdiv(M, cfg.BM) * cdiv(N, cfg.BN),), K % cfg.BK == 0
    if kind == "gate_up":
        consts = gate_up_consts(cfg, act=act, even_k=even_k, pdl=True, prefetch=False)
        args = (x, w1, w2, out, M, N, K, x.stride(0), w1.stride(0), w2.stride(0), out.stride(0))
        launch(GEMV_GATE_UP, grid, args, consts, cfg.num_warps, cfg.num_stages)
    else:
        consts = linear_consts(cfg, has_bias=False, act=act, even_k=even_k, pdl=True, prefetch=False)
        args = (x, w1, x, out, M, N, K, x.stride(0), w1.stride(0), out.stride(0))
        launch(GEMV_LINEAR, grid, args, consts, cfg.num_warps, cfg.num_stages)


def rotated_us(fns: list[Callable[[], object]]) -> float:
    """GPU µs per call: every fn once per graph replay (the fns rotate over weight copies)."""
    return round(harness.replay_us(harness.graphed(lambda: [f() for f in fns]), len(fns), 5), 2)


def copy_gbps() -> float:
    """GB/s of a 1 GiB device-to-device copy (bytes read + written): the floor's bandwidth."""
    a = torch.empty(1 << 29, dtype=torch.bfloat16, device="cuda").normal_()
    b = torch.empty_like(a)
    return round(4 * a.numel() / rotated_us([lambda: b.copy_(a)] * 4) / 1e3, 1)


def record(rows: list[dict], row: dict, save: Callable[[], None], line: str) -> None:
    """One measured row: kept, printed, and the JSON so far written."""
    rows.append(row)
    print(line, flush=True)
    save()


def _compile_one(job) -> str | None:
    kind, m, n, k, act, cfg = job
    x, w, out = (torch.randn(*s, dtype=torch.bfloat16, device="cuda") for s in ((m, k), (n, k), (m, n)))
    try:
        run_gemv(kind, x, w, w, out, act, cfg)
    except Exception as exc:  # noqa: BLE001  (a failing candidate is skipped and reported)
        return f"{cfg}: {type(exc).__name__}: {str(exc)[:200]}"
    return None


def decode_sweep(args) -> int:
    """Every candidate tile per (width, kind, M), then the whole gated MLP with the best tiles; JSON as it goes."""
    t0, dt = time.time(), harness.dtype_of(args.dtype)
    torch.manual_seed(0)
    res = {**harness.environment(), "device": torch.cuda.get_device_name(), "dtype": harness.DTYPES[args.dtype]}  # fmt: skip
    res["copy_GBps"] = copy_gbps()
    bw, res["sweep"], res["mlp"] = res["copy_GBps"] * 1e3, [], []  # bw: bytes per µs
    print(f"copy {res['copy_GBps']} GB/s on {res['device']}", flush=True)
    save = lambda: harness.write_json(args.json, res)
    shapes = DECODE_SHAPES[:1] + DECODE_SHAPES[2:3] if args.quick else DECODE_SHAPES
    rows = (1, 4, 16, 64) if args.quick else DECODE_ROWS
    jobs = [] if args.tables else [(kind, m, 256, 512, ACT[act], cfg) for act, kind in (("silu", "gate_up"), ("none", "down"))
                                   for m in rows for cfg in candidates(m)]  # fmt: skip
    errs = []
    if jobs:  # JIT every specialization in parallel processes (they share Triton's disk cache)
        with ProcessPoolExecutor(14, mp_context=torch.multiprocessing.get_context("spawn")) as ex:
            errs = [e for e in ex.map(_compile_one, list(dict.fromkeys(jobs)), chunksize=4) if e]
    res["compile_errors"] = errs[:20]
    print(f"compiled {len(jobs)} in {time.time() - t0:.0f}s, {len(errs)} errors", flush=True)
    save()
    best: dict = {}
    if args.tables:
        from fused_mlp.triton.configs import decode_config

        for name, _, _, _ in shapes:
            for m in rows:
                best[(name, "gate_up", m)] = decode_config("gate_up", "sm_90a", m, 1 << 40)
                best[(name, "down", m)] = decode_config("linear", "sm_90a", m, 1 << 40)
    for name, H, I, _ in () if args.tables else shapes:
        for kind, (N, K) in (("gate_up", (I, H)), ("down", (H, I))):
            pair = kind == "gate_up"
            wbytes = N * K * 2 * (2 if pair else 1)
            ws = [tuple(torch.randn(N, K, dtype=dt, device="cuda") * K**-0.5 for _ in range(1 + pair))
                  for _ in range(max(1, math.ceil(L2_ROTATE_BYTES / wbytes)))]  # fmt: skip
            a = ACT["silu"] if pair else 0  # gelu_tanh gets silu's tile (same bytes)
            for m in rows:
                if time.time() - t0 > args.budget:
                    break
                x, out = torch.randn(m, K, dtype=dt, device="cuda"), torch.empty(m, N, dtype=dt, device="cuda")  # fmt: skip
                row = {"shape": name, "kind": kind, "M": m, "N": N, "K": K, "floor_us": round(wbytes / bw, 2)}
                if pair:
                    cat = [torch.cat(w, 0) for w in ws]
                    row["cublas_us"] = rotated_us([lambda w=w: torch.mm(x, w.t()) for w in cat])  # noqa: B023
                    eager = [lambda w=w: F.silu(x @ w[0].t()) * (x @ w[1].t()) for w in ws]  # noqa: B023
                    row["eager_us"] = rotated_us(eager)
                    del cat
                else:
                    row["cublas_us"] = rotated_us([lambda w=w: torch.mm(x, w[0].t()) for w in ws])  # noqa: B023
                times = []
                for cfg in candidates(m):
                    try:
                        calls = [lambda w=w, c=cfg: run_gemv(kind, x, w[0], w[-1], out, a, c) for w in ws]  # noqa: B023
                        times.append((rotated_us(calls), cfg))
                    except Exception:  # noqa: BLE001, S112  (a candidate that fails is skipped)
                        continue
                times.sort(key=lambda t: t[0])
                row["best"] = [[u, list(c.__dict__.values())] for u, c in times[:5]]
                row["best_GBps"] = round(wbytes / times[0][0] / 1e3, 1) if times else None
                row["best_of_copy"] = round(wbytes / times[0][0] / bw, 3) if times else None
                best[(name, kind, m)] = times[0][1] if times else None
                record(res["sweep"], row, save, f"{name:13s} {kind:7s} M={m:3d} best {times[0][0] if times else -1:8.2f} "
                       f"cublas {row['cublas_us']:8.2f} floor {row['floor_us']:8.2f} {row['best_of_copy']}")  # fmt: skip
            del ws
            torch.cuda.empty_cache()
    decode_mlp(args, res, best, shapes, rows, bw, t0, dt, save)
    res["seconds"] = round(time.time() - t0, 1)
    save()
    return 0


def decode_mlp(args, res, best, shapes, rows, bw, t0, dt, save) -> None:
    """The whole gated MLP per width and M: eager vs decode (the best tiles) vs the Triton backend's path."""
    from fused_mlp.triton import forward as tforward

    for name, H, I, act in shapes:
        wbytes = 3 * H * I * 2
        ws = [tuple(torch.randn(*s, dtype=dt, device="cuda") * s[1] ** -0.5 for s in ((I, H), (I, H), (H, I)))
              for _ in range(max(1, math.ceil(L2_ROTATE_BYTES / wbytes)))]  # fmt: skip
        actf = F.silu if act == "silu" else (lambda t: F.gelu(t, approximate="tanh"))
        for m in rows:
            if time.time() - t0 > args.budget + 60:
                break
            if best.get((name, "gate_up", m)) is None:
                continue
            x, h, y = (torch.randn(*s, dtype=dt, device="cuda") for s in ((m, H), (m, I), (m, H)))
            cg, cd = best[(name, "gate_up", m)], best[(name, "down", m)]

            def dec(w):
                run_gemv("gate_up", x, w[0], w[1], h, ACT[act], cg)  # noqa: B023
                run_gemv("down", h, w[2], None, y, 0, cd)  # noqa: B023

            eager = [lambda w=w: (actf(x @ w[0].t()) * (x @ w[1].t())) @ w[2].t() for w in ws]  # noqa: B023
            current = [lambda w=w: tforward.gated_rows(x, w[0], w[1], w[2], act) for w in ws]  # noqa: B023
            row = {"shape": name, "M": m, "floor_us": round(wbytes / bw, 2), "eager_us": rotated_us(eager),
                   "decode_us": rotated_us([lambda w=w: dec(w) for w in ws]), "current_us": rotated_us(current)}  # fmt: skip
            dec(ws[0])
            x64, (g64, u64, d64) = x.double(), (t.double() for t in ws[0])
            row["rel_err"] = harness.rel_err(y, (actf(x64 @ g64.t()) * (x64 @ u64.t())) @ d64.t())
            us = " ".join(f"{k} {row[k + '_us']:8.2f}" for k in ("eager", "decode", "current", "floor"))
            record(res["mlp"], row, save, f"MLP {name:13s} M={m:3d} {us} err {row['rel_err']:.1e}")
        del ws
        torch.cuda.empty_cache()


def main(argv: list[str] | None = None) -> int:
    parser = harness.tool_parser(__doc__)
    parser.add_argument("--dtype", default="bf16", choices=tuple(harness.DTYPES))
    parser.add_argument("--steps", default=",".join(IMPLS), help="comma list of steps (default: all)")
    parser.add_argument("--decode", action="store_true", help="sweep the Triton decode kernels' tiles")
    parser.add_argument("--quick", action="store_true", help="--decode: two widths, four row counts")
    parser.add_argument("--tables", action="store_true", help="--decode: the MLP with the shipped tables")
    parser.add_argument("--budget", type=float, default=300.0, help="--decode: seconds; stops past it")
    if parser.parse_args(argv).decode:
        return decode_sweep(parser.parse_args(argv))
    got = harness.parse_and_load_cuda(parser, argv, "bench_paths")
    if got is None:
        return 2
    args, label, kernel = got
    dt = harness.dtype_of(args.dtype)
    report = {"environment": harness.environment(), "kernels": harness.describe({label: kernel}), "rows": []}

    def written(rows: list[dict]) -> None:
        harness.write_json(args.json, {**report, "rows": rows})

    steps = tuple(args.steps.split(","))
    if unknown := set(steps) - set(IMPLS):
        parser.error(f"unknown step(s) {sorted(unknown)}; choose from {', '.join(IMPLS)}")
    rows = sweep(kernel, dt, written, steps)
    harness.write_json(args.json, {**report, "rows": rows, "best": best(rows)})
    harness.append_csv("paths", rows, ("step", "problem", "rows"), ("gpu_us", "wall_us", "host_us"), args.csv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
