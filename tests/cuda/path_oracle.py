"""What the CUDA backend's path table (kernel_src/fused_mlp/cuda/paths.py) chooses for a call, worked out in
Python from the table's dicts: the oracle the tests hold the C++ search (triton_launch.cu `choose_impl`) to."""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "build" / "cuda"))
import embed_cubins


def arch_key(paths, sm: int) -> str | None:
    """The table key ("sm_90a") of compute capability `sm` (90), or None: the arch has no rows of its own."""
    archs = {a for table in (paths.PATHS, paths.GRAPH_PATHS) for a in table if a != "default"}
    return next((a for a in sorted(archs) if embed_cubins.arch_notation().parse_arch(a).number == sm), None)


def admits(row: tuple, rows: int, weight_bytes: int) -> bool:
    """Whether a table row admits `rows` rows reading `weight_bytes` of weights."""
    bound, _, *weight = row
    return (bound is None or rows <= bound) and weight_bytes >= (weight[0] if weight else 0)


def choose(paths, op: str, step: str, sm: int, rows: int, weight_bytes: int, captured: bool,
           disabled: tuple[str, ...] | None = None) -> str:  # fmt: skip
    """The implementation of `step` of `op` on `sm`: the arch's rows, else the default arch's; the op's own key,
    else the step's; the graph table when captured and the arch has graph rows, else the stream table. An
    implementation in `disabled` (default: FUSED_MLP_CUDA_DISABLE) gives the step's fallback."""
    if disabled is None:
        disabled = tuple(v for v in os.environ.get("FUSED_MLP_CUDA_DISABLE", "").split(",") if v)
    for arch in (arch_key(paths, sm), "default"):
        tables = [t[arch] for t in ((paths.GRAPH_PATHS,) if captured else ()) + (paths.PATHS,) if arch in t]
        for keys in tables:
            for key in (f"{op}/{step}", step):
                if key in keys:
                    impl = next(row[1] for row in keys[key] if admits(row, rows, weight_bytes))
                    return paths.FALLBACK[step] if impl in disabled else impl
    raise AssertionError(f"no row for {op}/{step} on sm {sm}")


def weight_bounds(paths, sm: int) -> list[int]:
    """The distinct min weight bytes of the rows `sm` searches (its own and the default arch's), ascending."""
    archs = (arch_key(paths, sm), "default")
    return sorted({row[2] for t in (paths.PATHS, paths.GRAPH_PATHS) for a in archs for rows in t.get(a, {}).values()
                   for row in rows if len(row) == 3})  # fmt: skip


# A test table (appended to paths.py by package_with_rows): rows with a weight bound on a step's key, an op's key,
# the graph table and the default arch, and rows whose M bounds do not grow (ordered search decides).
WEIGHT_ROWS = """
PATHS["sm_90a"]["gate_up"] = ((256, "triton"), (2048, "split", LARGE_WEIGHT_BYTES), (None, "tma"))
PATHS["sm_90a"]["mlp/linear"] = ((1024, "cublaslt", 4 * LARGE_WEIGHT_BYTES), (1024, "triton"), (None, "cublaslt"))
GRAPH_PATHS["sm_90a"]["chain"] = ((1, "persistent"), (64, "persistent", LARGE_WEIGHT_BYTES), (None, "layers"))
PATHS["default"]["linear"] = ((None, "tma", LARGE_WEIGHT_BYTES), (None, "cublaslt"))
PATHS["default"]["chain"] = ((8, "persistent", 1 << 40), (None, "layers"))
"""


def package_with_rows(root: Path, extra: str) -> Path:
    """A package dir whose cuda/paths.py is the kernel package's with `extra` (Python over its names, e.g. rows
    set on PATHS) appended: what embed_cubins.load_paths / write_sources read, for a test table."""
    source = (embed_cubins.PACKAGE / "cuda" / "paths.py").read_text()
    (root / "cuda").mkdir(parents=True, exist_ok=True)
    (root / "cuda" / "paths.py").write_text(f"{source}\n{extra}\n")
    return root
