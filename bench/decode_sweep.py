"""Decode-kernel sweep (GPU): the GEMV-style kernels of fused_mlp/triton/decode.py over tile configs at the
real models' widths and few rows, against cuBLAS (torch.mm), the backend's current path and a plain device
copy (the bandwidth floor). Every time is GPU µs per call replayed in a CUDA graph; weights rotate over
enough copies to exceed L2 several times (a model's layers each read their own weights from HBM).

    python bench/decode_sweep.py OUT.json [--quick]

Writes the JSON as it goes; prints a table last. What the numbers chose: bench/BENCHMARKS.md "decode".
"""

# ruff: noqa: B023, BLE001, S112  (closures run inside graph_us right away; a failing candidate is skipped)
from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
import time
from concurrent.futures import ProcessPoolExecutor

import torch
from fused_mlp.triton.configs import GemmConfig, cdiv
from fused_mlp.triton.decode import GEMV_GATE_UP, GEMV_LINEAR
from fused_mlp.triton.gated import gate_up_consts
from fused_mlp.triton.launch import launch
from fused_mlp.triton.linear import linear_consts

# (name, hidden, intermediate, activation): the gated presets of issue 40
SHAPES = [
    ("llama-3-8b", 4096, 14336, "silu"),
    ("qwen2.5-7b", 3584, 18944, "silu"),
    ("llama-3.2-1b", 2048, 8192, "silu"),
    ("gemma-2-2b", 2304, 9216, "gelu_tanh"),
    ("h1024", 1024, 4096, "silu"),  # weights near a quarter of L2: where decode stops paying
]
ROWS = [1, 2, 4, 8, 16, 32, 64]
ACT = {"none": 0, "silu": 4, "gelu_tanh": 3}
L2_ROTATE_BYTES = 400 << 20


def bm_options(m: int) -> list[int]:
    small = [b for b in (1, 2, 4, 8) if b >= m][:1]
    return small + [b for b in (16, 32, 64) if b <= max(16, m)]


def candidates(m: int) -> list[GemmConfig]:
    out = []
    for bm, bn, bk, (w, s) in itertools.product(
        bm_options(m), (16, 32, 64), (128, 256, 512), ((4, 3), (4, 4), (8, 4))
    ):
        if bm < 16 and bm * bn * bk > 32768:  # the multiply-and-reduce path holds BN*BM*BK products
            continue
        out.append(GemmConfig(bm, bn, bk, 1, w, s))
    return out


def run_gemv(kind, x, w1, w2, out, act, cfg, pdl):
    M, K = x.shape
    N = w1.shape[0]
    grid = (cdiv(M, cfg.BM) * cdiv(N, cfg.BN),)
    if kind == "gate_up":
        consts = gate_up_consts(cfg, act=act, even_k=K % cfg.BK == 0, pdl=pdl, prefetch=False)
        args = (x, w1, w2, out, M, N, K, x.stride(0), w1.stride(0), w2.stride(0), out.stride(0))
        launch(GEMV_GATE_UP, grid, args, consts, cfg.num_warps, cfg.num_stages)
    else:
        consts = linear_consts(cfg, has_bias=False, act=act, even_k=K % cfg.BK == 0, pdl=pdl, prefetch=False)
        args = (x, w1, x, out, M, N, K, x.stride(0), w1.stride(0), out.stride(0))
        launch(GEMV_LINEAR, grid, args, consts, cfg.num_warps, cfg.num_stages)


def graph_us(fns, reps=5) -> float:
    """GPU µs per call: every fn once per graph replay (fns rotate over weight copies)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for f in fns:
            f()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for f in fns:
            f()
    g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3 / len(fns))
    return sorted(times)[len(times) // 2]


def copy_bandwidth() -> float:
    """GB/s of a 1 GiB device-to-device copy (bytes read + written)."""
    n = 1 << 29
    a = torch.empty(n, dtype=torch.bfloat16, device="cuda").normal_()
    b = torch.empty_like(a)
    us = graph_us([lambda: b.copy_(a)] * 4)
    return 2 * (n * 2) / (us * 1e-6) / 1e9


def _compile_one(job):
    kind, M, N, K, act, cfg, dtype = job
    dt = getattr(torch, dtype)
    x = torch.randn(M, K, dtype=dt, device="cuda")
    w = torch.randn(N, K, dtype=dt, device="cuda")
    out = torch.empty(M, N, dtype=dt, device="cuda")
    try:
        run_gemv(kind, x, w, w, out, act, cfg, True)
        return None
    except Exception as e:
        return f"{cfg}: {type(e).__name__}: {str(e)[:200]}"


def precompile(jobs, procs=14):
    """JIT every specialization in parallel processes (they share Triton's disk cache)."""
    ctx = torch.multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(procs, mp_context=ctx) as ex:
        return [e for e in ex.map(_compile_one, jobs, chunksize=4) if e]


def weights(n_copies, N, K, dt, pair):
    return [
        tuple(torch.randn(N, K, dtype=dt, device="cuda") * K**-0.5 for _ in range(2 if pair else 1))
        for _ in range(n_copies)
    ]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--tables", action="store_true", help="no sweep: the whole MLP with the shipped tables")
    ap.add_argument("--dtype", default="bfloat16", help="the sweep's and the MLP's dtype")
    ap.add_argument("--budget", type=float, default=300.0, help="seconds; the sweep stops early past it")
    args = ap.parse_args()
    t0 = time.time()
    torch.manual_seed(0)
    res = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "sweep": [], "mlp": []}
    import triton

    res["triton"] = triton.__version__
    res["copy_GBps"] = round(copy_bandwidth(), 1)
    bw = res["copy_GBps"] * 1e3  # bytes per µs
    print(f"copy {res['copy_GBps']} GB/s on {res['device']}", flush=True)

    def save():
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)

    shapes = SHAPES[:1] + SHAPES[2:3] if args.quick else SHAPES
    rows = [1, 4, 16, 64] if args.quick else ROWS
    # 1) compile every candidate (bf16) for the ops' (act, kind) pairs in parallel
    jobs = []
    for act in ("silu", "none"):
        kind = "gate_up" if act != "none" else "down"
        for m in rows:
            for cfg in candidates(m):
                jobs.append((kind, m, 256, 512, ACT[act], cfg, "bfloat16"))
    if args.tables:
        jobs = []
    errs = precompile(list(dict.fromkeys(jobs))) if jobs else []
    res["compile_errors"] = errs[:20]
    print(f"compiled {len(jobs)} in {time.time() - t0:.0f}s, {len(errs)} errors", flush=True)
    save()

    best: dict = {}
    dt = getattr(torch, args.dtype)
    res["dtype"] = args.dtype
    from fused_mlp.triton.configs import decode_config

    for name, H, I, act in shapes if args.tables else ():
        for m in rows:
            best[(name, "gate_up", m)] = decode_config("gate_up", "sm_90a", m, 1 << 40)
            best[(name, "down", m)] = decode_config("linear", "sm_90a", m, 1 << 40)
    for name, H, I, act in () if args.tables else shapes:
        for kind, (N, K) in (("gate_up", (I, H)), ("down", (H, I))):
            pair = kind == "gate_up"
            wbytes = N * K * 2 * (2 if pair else 1)
            copies = max(1, math.ceil(L2_ROTATE_BYTES / wbytes))
            ws = weights(copies, N, K, dt, pair)
            a = ACT["silu"] if pair else 0  # gelu_tanh gets silu's tile (same bytes)
            for m in rows:
                if time.time() - t0 > args.budget:
                    break
                x = torch.randn(m, K, dtype=dt, device="cuda")
                out = torch.empty(m, N, dtype=dt, device="cuda")
                row = {"shape": name, "kind": kind, "M": m, "N": N, "K": K, "floor_us": round(wbytes / bw, 2)}
                if pair:
                    cat = [torch.cat(w, 0) for w in ws]
                    row["cublas_us"] = round(graph_us([lambda w=w: torch.mm(x, w.t()) for w in cat]), 2)
                    row["eager_us"] = round(
                        graph_us(
                            [
                                lambda w=w: (
                                    torch.nn.functional.silu(torch.mm(x, w[0].t())) * torch.mm(x, w[1].t())
                                )
                                for w in ws
                            ]
                        ),
                        2,
                    )
                    del cat
                else:
                    row["cublas_us"] = round(graph_us([lambda w=w: torch.mm(x, w[0].t()) for w in ws]), 2)
                times = []
                for cfg in candidates(m):
                    try:
                        us = graph_us(
                            [lambda w=w, c=cfg: run_gemv(kind, x, w[0], w[-1], out, a, c, True) for w in ws]
                        )
                    except Exception:
                        continue
                    times.append((us, cfg))
                times.sort(key=lambda t: t[0])
                row["best"] = [[round(u, 2), list(c.__dict__.values())] for u, c in times[:5]]
                row["best_GBps"] = round(wbytes / times[0][0] / 1e3, 1) if times else None
                row["best_of_copy"] = round(wbytes / times[0][0] / bw, 3) if times else None
                best[(name, kind, m)] = times[0][1] if times else None
                res["sweep"].append(row)
                print(
                    f"{name:13s} {kind:7s} M={m:3d} best {times[0][0] if times else -1:8.2f} "
                    f"cublas {row['cublas_us']:8.2f} floor {row['floor_us']:8.2f} {row['best_of_copy']}",
                    flush=True,
                )
                save()
            del ws
            torch.cuda.empty_cache()
    # 2) whole gated MLP per shape and row count: eager vs decode (best tiles) vs the Triton backend today
    from fused_mlp.triton import forward as tforward

    for name, H, I, act in shapes:
        wbytes = 3 * H * I * 2
        copies = max(1, math.ceil(L2_ROTATE_BYTES / wbytes))
        ws = [
            tuple(torch.randn(*s, dtype=dt, device="cuda") * s[1] ** -0.5 for s in ((I, H), (I, H), (H, I)))
            for _ in range(copies)
        ]
        F = torch.nn.functional
        actf = F.silu if act == "silu" else (lambda t: F.gelu(t, approximate="tanh"))
        for m in rows:
            if time.time() - t0 > args.budget + 60:
                break
            if (name, "gate_up", m) not in best or best[(name, "gate_up", m)] is None:
                continue
            x = torch.randn(m, H, dtype=dt, device="cuda")
            h = torch.empty(m, I, dtype=dt, device="cuda")
            y = torch.empty(m, H, dtype=dt, device="cuda")
            cg, cd = best[(name, "gate_up", m)], best[(name, "down", m)]
            ac = ACT[act]

            def dec(w):
                run_gemv("gate_up", x, w[0], w[1], h, ac, cg, True)
                run_gemv("down", h, w[2], None, y, 0, cd, True)

            row = {"shape": name, "M": m, "floor_us": round(wbytes / bw, 2)}
            row["eager_us"] = round(
                graph_us([lambda w=w: (actf(x @ w[0].t()) * (x @ w[1].t())) @ w[2].t() for w in ws]), 2
            )
            row["decode_us"] = round(graph_us([lambda w=w: dec(w) for w in ws]), 2)
            row["current_us"] = round(
                graph_us([lambda w=w: tforward.gated_rows(x, w[0], w[1], w[2], act) for w in ws]), 2
            )
            dec(ws[0])
            ref = (actf(x.double() @ ws[0][0].double().t()) * (x.double() @ ws[0][1].double().t())) @ ws[0][
                2
            ].double().t()
            row["rel_err"] = float((y.double() - ref).norm() / ref.norm())
            res["mlp"].append(row)
            print(
                f"MLP {name:13s} M={m:3d} eager {row['eager_us']:8.2f} decode {row['decode_us']:8.2f} "
                f"current {row['current_us']:8.2f} floor {row['floor_us']:8.2f} err {row['rel_err']:.1e}",
                flush=True,
            )
            save()
        del ws
        torch.cuda.empty_cache()
    res["seconds"] = round(time.time() - t0, 1)
    save()


if __name__ == "__main__":
    sys.exit(main())
