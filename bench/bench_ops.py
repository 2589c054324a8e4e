"""The ops table: every implementation of every case of the real-model shape suite, side by side, in one run.

Cases: the presets of `registry.spec.presets` (llama-3-8b, qwen2.5-7b, llama-3.2-1b, gemma-2-2b, gpt2,
bert-large and the project's mlp-3x1024 and geglu-768-3072) at each row count M, forward, and forward +
backward at the training sizes; `--presets/--rows/--train-rows/--dtypes` pick a part of it.
Implementations: ours (each loaded kernel, harness.py) and every anchor (harness.implementations: eager,
eager in a CUDA graph, cuBLASLt epilogues, torch.compile, max-autotune with --max-autotune, Liger), plus
`cublas_gemms_only` (the block's GEMMs alone by cuBLAS: the reference of the %-of-cuBLAS column, not an
anchor) and the floor = max(FLOPs / peak, bytes / bandwidth) of the card. Each row: wall µs per call in a
stream and GPU µs per call replayed in a graph (medians of interleaved rounds), error against float64.

    python bench/bench_ops.py --variant-dir dist/fused-mlp/build/<variant>=label ... [--json out.json]
    python bench/bench_ops.py --hub URL --repo acme/fused-mlp=cuda --presets llama-3-8b --rows 1,16,512
"""

from __future__ import annotations

import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness

from registry.spec import presets
from registry.spec.presets import Case


def cublas_gemms(case: Case, dtype) -> Callable[[], object]:
    """The block's GEMMs alone, by cuBLAS (`torch.mm`, gate|up as one [M, 2I] GEMM) on fresh operands;
    forward + backward adds each layer's dgrad and wgrad GEMM."""
    p, m = case.preset, case.rows
    gated = [(2 * p.intermediate, p.hidden), (p.hidden, p.intermediate)]
    dims = gated if p.op == "gated_mlp" else p.weight_shapes

    def rnd(*shape):
        return torch.randn(*shape, device="cuda", dtype=dtype)

    layers = [(rnd(m, k), rnd(n, k) * k**-0.5, rnd(m, n)) for n, k in dims]

    def run():
        for x, w, dy in layers:
            out = torch.mm(x, w.t())
            if case.train:
                torch.mm(dy, w)
                torch.mm(dy.t(), x)
        return out

    return run


def bench_case(
    case: Case, kernels: dict, compile_modes: tuple[str, ...], skip: set[str], rounds: int
) -> list[dict]:
    """Every implementation of `case`, prepared first (built, checked against float64, captured), then timed in
    `rounds` interleaved rounds, each in a rotated order: clocks drift with heat over a run, so timing one
    implementation after another would favour whichever runs first (BENCHMARKS.md, "Method")."""
    torch.manual_seed(0)
    dtype, p = harness.dtype_of(case.dtype), case.preset
    a = harness.inputs(p, case.rows, dtype, case.train)
    expected = harness.reference64(p, a)
    elem = torch.empty((), dtype=dtype).element_size()
    iters, repeat = (100 if case.rows <= 1024 else 30), 20
    done, timed = [], []  # rows with an error; (row, call, replay or None) to time
    builders = harness.implementations(p, a, kernels, case.train, compile_modes)
    if compile_modes == ("default",):
        builders["cublas_gemms_only"] = lambda: cublas_gemms(case, dtype)
    for name, build in builders.items():
        if name in skip:
            continue
        row = {"preset": p.name, "rows": case.rows, "dtype": case.dtype, "train": case.train, "case": case.label,
               "impl": name, "floor_us": harness.floor_us(case, elem)}  # fmt: skip
        t0 = time.perf_counter()
        try:
            forward = build()
            if name == "cublas_gemms_only":
                call = forward
            else:
                if not case.train:
                    with torch.no_grad():
                        row["rel_err"] = harness.rel_err(forward(), expected)
                call = harness.as_call(case, a, forward)
            timed.append((row, call, harness.graphed_or_none(call, repeat)))
            if name == "eager" and "eager_cuda_graph" not in skip:  # captured once by the user: replay = both
                timed.append(
                    ({**row, "impl": "eager_cuda_graph", "same_gpu_as": "eager"}, harness.graphed(call), None)
                )
        except Exception as exc:  # noqa: BLE001  (one implementation failing must not stop the table)
            row["error"] = f"{type(exc).__name__}: {exc}"[:400]
            traceback.print_exc()
            done.append(row)
        row["seconds"] = round(time.perf_counter() - t0, 2)
    walls = {id(r): [] for r, _, _ in timed}
    gpus = {id(r): [] for r, _, _ in timed}
    for r in range(rounds if timed else 0):
        order = timed[r % len(timed) :] + timed[: r % len(timed)]
        # Replays in a pass of their own, before the wall loops, so each follows GPU-bound work: a replay right
        # after a host-bound wall loop starts on a GPU that idled half the time.
        for row, _, replay in order:
            if replay is not None:
                gpus[id(row)].append(harness.replay_us(replay, repeat, replays=3))
        for row, call, _ in order:
            walls[id(row)].append(harness.stream_us(call, iters, rounds=1))
    by_impl = {row["impl"]: row for row, _, _ in timed}
    for row, _, _ in timed:
        row["wall_us"], row["wall_spread"] = harness.median_spread(walls[id(row)])
        source = by_impl[row.pop("same_gpu_as")] if "same_gpu_as" in row else row
        row["gpu_us"], row["gpu_spread"] = harness.median_spread(gpus[id(source)])
        print(format_row(row), flush=True)
    torch.cuda.synchronize()
    return [row for row, _, _ in timed] + done


def format_row(r: dict) -> str:
    if "error" in r:
        return f"{r['case']:<40} {r['impl']:<22} ERROR {r['error'][:100]}"
    gpu, err = r.get("gpu_us"), r.get("rel_err")  # no rel_err: a training row (tests/cuda checks gradients)
    return (f"{r['case']:<40} {r['impl']:<22} wall {r['wall_us']:8.1f}  gpu {'-' if gpu is None else f'{gpu:8.1f}'}"
            f"  floor {r['floor_us']:7.1f}  err {'-' if err is None else f'{err:.1e}'}")  # fmt: skip


def table(rows: list[dict]) -> str:
    """Markdown: one line per case, one column per implementation (`wall / gpu` µs), the floor, per kernel of
    ours its GPU time as % of the block's cuBLAS GEMMs and % of the floor, and the fastest anchor's GPU time."""
    impls = list(dict.fromkeys(r["impl"] for r in rows))
    ours = [i for i in impls if i.startswith("ours:")]
    extra = [f"{i}: % of cuBLAS GEMMs / % of floor" for i in ours] + ["best anchor (GPU)"]
    out = ["| case | " + " | ".join(impls + ["floor"] + extra) + " |"]
    out.append("|---" * (len(impls) + len(extra) + 2) + "|")
    for case in dict.fromkeys(r["case"] for r in rows):
        mine = [r for r in rows if r["case"] == case]
        by = {r["impl"]: r for r in mine if "error" not in r}
        cells = []
        for i in impls:
            r = by.get(i)
            failed = any(x["impl"] == i for x in mine)
            gpu = r and r.get("gpu_us")
            cells.append(f"{r['wall_us']:.1f} / {gpu and f'{gpu:.1f}' or '–'}" if r else "error" if failed else "–")  # fmt: skip
        floor = mine[0]["floor_us"]
        cells.append(f"{floor:.1f}")
        ref = (by.get("cublas_gemms_only") or {}).get("gpu_us")
        for i in ours:
            gpu = (by.get(i) or {}).get("gpu_us")
            of_ref = f"{100 * ref / gpu:.0f}%" if ref and gpu else "–"
            cells.append(f"{of_ref} / {100 * floor / gpu:.0f}%" if gpu else "–")
        anchors = {
            i: r["gpu_us"] for i, r in by.items() if i in harness.ANCHORS and r.get("gpu_us") is not None
        }
        best = min(anchors, key=anchors.get) if anchors else None
        cells.append(f"{best} {anchors[best]:.1f}" if best else "–")
        out.append(f"| {case} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = harness.tool_parser(__doc__)
    parser.add_argument("--presets", default=",".join(presets.names()), help="comma list: names, OP:DIMS:ACT")
    parser.add_argument("--rows", default=",".join(map(str, presets.ROWS)), help="forward row counts M")
    parser.add_argument(
        "--train-rows", default=",".join(map(str, presets.TRAIN_ROWS)), help="fwd+bwd M ('' none)"
    )
    parser.add_argument("--dtypes", default="bf16", help="comma list of bf16, fp16")
    parser.add_argument("--max-autotune", default="", help="cases (label prefixes, comma list) to also time "
                        "with torch.compile max-autotune: it autotunes every GEMM shape for minutes")  # fmt: skip
    parser.add_argument(
        "--skip", default="", help="comma list of implementations to leave out (e.g. compile)"
    )
    parser.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds per case")
    args = parser.parse_args(argv)
    ints = lambda s: [int(v) for v in s.split(",") if v]
    cases = list(presets.suite(args.presets.split(","), ints(args.rows), [harness.DTYPES[d] for d in args.dtypes.split(",")],
                               ints(args.train_rows)))  # fmt: skip
    kernels = harness.load_kernels(args)
    report = {"environment": harness.environment(), "kernels": harness.describe(kernels), "rows": []}
    skip = set(args.skip.split(","))
    for case in cases:
        rows = bench_case(case, kernels, ("default",), skip, args.rounds)
        report["rows"] += rows
        harness.write_json(args.json, report)
        harness.append_csv("ops", rows, ("case",), ("wall_us", "gpu_us", "rel_err"), args.csv)
    # max-autotune last: it takes the longest, and every other row is recorded before it starts.
    wanted = [s for s in args.max_autotune.split(",") if s]  # "llama-3-8b M=1" is not also M=16
    slow = [c for c in cases if any(c.label == s or c.label.startswith(s + " ") for s in wanted)]
    for case in slow:
        rows = bench_case(case, {}, ("max-autotune",), skip | {"eager", "eager_cuda_graph", "cublaslt_epilogue", "liger"},
                          args.rounds)  # fmt: skip
        report["rows"] += rows
        harness.write_json(args.json, report)
        harness.append_csv("ops", rows, ("case",), ("wall_us", "gpu_us", "rel_err"), args.csv)
    print(table(report["rows"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
