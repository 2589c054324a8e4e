"""Print (and write as summary.md) the tables of one benchmark run from its JSON files in a folder:
host.json (host_cost.py), paths.json (bench_paths.py), ops.json (bench_ops.py), model.json (bench_model.py),
tests.log (pytest), then the goals of #9 and #15 checked against them (goals.py). Missing files are skipped.

    python bench/summary.py OUT_DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def summarize(folder: Path) -> str:
    import bench_model
    import bench_ops
    import goals

    parts = []
    env = None
    for name in ("ops.json", "model.json", "host.json", "paths.json"):
        if (folder / name).is_file():
            env = json.loads((folder / name).read_text()).get("environment")
            break
    if env:
        parts.append(
            f"{env['date']}: {env['gpu']}, torch {env['torch']}, triton {env['triton']}, CUDA {env['cuda']}, "
            f"Python {env['python']}"
        )
    kernels = next((json.loads((folder / n).read_text()).get("kernels") for n in ("ops.json", "host.json")
                    if (folder / n).is_file()), None)  # fmt: skip
    for label, k in (kernels or {}).items():
        build = k.get("cuda_build") or {}
        parts.append(f"{label}: backend {k['backend']}, {k.get('source', 'dir')}/{k.get('variant', '-')}"
                     + (f", {build['entries_for_device']} Triton cubins for sm_{build['sm']}" if build else ""))  # fmt: skip
    if (folder / "tests.log").is_file():
        lines = [
            ln for ln in (folder / "tests.log").read_text().splitlines() if " passed" in ln or " failed" in ln
        ]
        parts.append("GPU tests: " + " | ".join(lines[-2:]))
    if (folder / "host.json").is_file():
        host = json.loads((folder / "host.json").read_text())
        rows = ["| host µs per call (M=16, bf16) | µs |", "|---|---|"]
        rows += [f"| {k} | {v:.2f} |" for k, v in host["host_us"].items() if v is not None]
        parts.append("\n".join(rows))
    best = (
        json.loads((folder / "paths.json").read_text()).get("best")
        if (folder / "paths.json").is_file()
        else None
    )
    if (folder / "paths.json").is_file() and best is None:
        parts.append("path sweep incomplete (stopped or timed out): its rows so far are in paths.json")
    if best is not None:
        rows = ["| step | M | fastest in a graph | GPU µs (graph) | fastest in a stream | wall µs (stream) |",
                "|---|---|---|---|---|---|"]  # fmt: skip
        for b in best:
            gpu = ", ".join(f"{k} {v}" for k, v in b["us"].items())
            wall = ", ".join(f"{k} {v}" for k, v in b.get("wall_us", {}).items())
            rows.append(
                f"| {b['step']} | {b['rows']} | {b['best']} | {gpu} | {b.get('best_wall', '–')} | {wall} |"
            )
        parts.append("\n".join(rows))
    if (folder / "ops.json").is_file():
        ops = json.loads((folder / "ops.json").read_text())
        parts.append(
            "ops, µs per call: wall (stream of calls) / GPU (graph replay)\n" + bench_ops.table(ops["rows"])
        )

    if (folder / "model.json").is_file():
        model = json.loads((folder / "model.json").read_text())
        parts.append(
            f"model, {model['layers']} layers, µs per forward\n" + bench_model.table(model["results"])
        )
    labels = set()
    for name, key in (("ops.json", "rows"), ("model.json", "results")):
        if (folder / name).is_file():
            rows = json.loads((folder / name).read_text())[key]
            labels |= {r["impl"] for r in rows if r["impl"].startswith("ours:")}
    for label in sorted(
        labels
    ):  # the stable-ABI variant first (what get_kernel picks on the H200), then the fallback
        parts.append(goals.goals_table(folder, label))
    return "\n\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    folder = Path((argv or sys.argv[1:])[0])
    text = summarize(folder)
    (folder / "summary.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
