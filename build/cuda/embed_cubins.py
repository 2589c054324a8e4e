"""Compile the CUDA extension's table of Triton cubins and implementation paths into a C++ source.

The CUDA variant launches Triton kernels from C++ (kernel_src/fused_mlp/cuda/csrc/triton_launch.cu): their
cubins, compiled ahead of time by `fused_mlp.triton.aot_build` (Triton's own compiler, no GPU needed), are
embedded in `_C.abi3.so` with their launch metadata, beside the path table of
`fused_mlp/cuda/paths.py`. Two steps:

1. `aot_rows(...)` runs in a Python that has Triton (the builder's): it compiles the cubins the path table
   needs (or reuses a folder that already holds them, e.g. the torch-cuda variant's of the same build)
   and lists each shipped row (kernel, dtype, activation, bias, row bound, tile) with its cubin's stem.
2. `write_sources(...)` (stdlib) checks each cubin's kernel parameters against what the C++ launcher
   passes (Triton 3.6 appends two scratch pointers), concatenates the cubins into one blob and writes
   `triton_table.gen.cpp`: the blob (`.incbin`), the cubin table, the path table and the code tables
   (`code_tables`: names, fallbacks, each op's steps, and static_asserts that triton_launch.h's enums agree).

With no Triton (or AOT off) `write_sources` still writes the path table and an empty cubin table: every
"triton" row then takes its step's fallback (cuBLASLt / CUDA kernels), and the build says so.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
from dataclasses import dataclass
from functools import cache
from pathlib import Path

# Arguments the C++ launcher passes to each kernel, in order (ptr = 8-byte device pointer, i32 = 4 bytes),
# before Triton's hidden global/profile scratch pointers. Must equal the kernel's KernelDef.params.
LAUNCH_SIGNATURES = {
    "linear_kernel": "ptr ptr ptr ptr i32 i32:16 i32:16 i32:16 i32:16 i32:16",
    "gate_up_kernel": "ptr ptr ptr ptr i32 i32:16 i32:16 i32:16 i32:16 i32:16 i32:16",
    "act_and_mul_kernel": "ptr ptr ptr i32:16",
    "tma_gemm_kernel": "ptr ptr ptr ptr ptr ptr i32 i32 i32 i32 i32 i32 i32 i32",
    "tma_gate_up_kernel": "ptr ptr ptr ptr ptr i32 i32 i32 i32 i32 i32 i32 i32",
    "gemv_linear_kernel": "ptr ptr ptr ptr i32 i32:16 i32:16 i32:16 i32:16 i32:16",
    "gemv_gate_up_kernel": "ptr ptr ptr ptr i32 i32:16 i32:16 i32:16 i32:16 i32:16 i32:16",
}
STEP_CODES = {"linear": 0, "gate_up": 1, "act_and_mul": 2, "chain": 3, "chain_backward": 4}
OP_CODES = {
    "linear": 0,
    "mlp": 1,
    "gated_mlp": 2,
    "act_and_mul": 3,
    "gated_mlp_train": 4,
}  # -1 in a row: every op
IMPL_CODES = {
    "triton": 0,
    "cublaslt": 1,
    "split": 2,
    "cuda": 3,
    "tma": 4,
    "persistent": 5,
    "layers": 6,
    "gemv": 7,
}
DTYPE_CODES = {"bf16": 0, "fp16": 1}
GEN_SOURCE = "triton_table.gen.cpp"
BLOB = "cubins.bin"
# The kernel package this recipe builds (setup.py builds the same one); its stdlib-only modules are read by file.
PACKAGE = Path(__file__).resolve().parents[2] / "kernel_src" / "fused_mlp"


class EmbedError(RuntimeError):
    """The cubins do not fit the launcher (kernel signature, Triton ABI) or their compile failed."""


@dataclass(frozen=True)
class EmbedSummary:
    triton: str | None  # Triton version of the embedded cubins; None when none are embedded
    archs: tuple[str, ...]
    cubins: int  # distinct cubin images
    entries: int  # table rows (an image can serve several rows)
    note: str


def _load_file(path: Path, name: str):
    """A stdlib-only module of the kernel package, loaded by file (importing the package would import torch)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_paths(package_dir: Path):
    """The package's `cuda/paths.py` as a module, loaded by file (no torch import)."""
    return _load_file(Path(package_dir) / "cuda" / "paths.py", "fused_mlp_cuda_paths")


@cache
def arch_notation():
    """The kernel package's `arch.py` (sm_90a / 9.0a notation and rules): the one the recipe uses too."""
    return _load_file(PACKAGE / "arch.py", "fused_mlp_arch")


def wanted_kernels(paths, archs: list[str]) -> dict[str, list[list[str]]]:
    """arch -> sorted [kernel, role] pairs whose cubins the build embeds there (archs with none are left out)."""
    per_arch = paths.triton_archs()
    return {a: sorted([k, r] for k, r in per_arch[a]) for a in archs if per_arch.get(a)}


_ROWS_SCRIPT = """
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from fused_mlp.triton import aot_build as aot
from fused_mlp.triton.configs import DECODE_MIN_WEIGHT_BYTES, WAVE_FILL
want = json.loads(sys.argv[2])
own, reuse, dtypes = Path(sys.argv[3]), sys.argv[4], tuple(sys.argv[5].split(","))
triton = __import__("triton").__version__
defs = aot.kernel_defs()
out = {"triton": triton, "wave_fill": WAVE_FILL, "rows": [], "params": {}, "compiled": {}, "reused": {},
       "decode_min_bytes": {a: DECODE_MIN_WEIGHT_BYTES[a] for a in want if a in DECODE_MIN_WEIGHT_BYTES}}
for arch, pairs in want.items():
    have = Path(reuse) / triton / arch if reuse else None
    for kernel, role in pairs:
        rows = [r for r in aot.shipped_rows(arch, dtypes) if r.spec.kernel == kernel and r.role == role]
        if not rows:  # the arch's tables ship nothing for this role (e.g. no Hopper kernels there)
            continue
        if have is not None and all((have / (r.spec.file_stem() + ".cubin")).is_file() for r in rows):
            folder = have
            out["reused"].setdefault(arch, []).append(role)
        else:
            aot.compile_specs(list(dict.fromkeys(r.spec for r in rows)), arch, own / triton / arch)
            folder = own / triton / arch
            out["compiled"].setdefault(arch, []).append(role)
        out["params"][kernel] = " ".join(kind for _, kind in defs[kernel].params)
        for row in rows:
            s = row.spec
            out["rows"].append({"arch": arch, "dir": str(folder), "stem": s.file_stem(), "kernel": kernel,
                                "role": role, "dtype": s.dtype, "act": row.act, "has_bias": row.has_bias,
                                "max_rows": row.max_rows, "consts": dict(zip(defs[kernel].constexprs, s.consts))})
print(json.dumps(out))
"""


def aot_rows(
    package_dir: Path,
    python: str,
    want: dict[str, list[str]],
    own_root: Path,
    *,
    reuse: Path | None = None,
    dtypes: tuple[str, ...] = ("bf16", "fp16"),
    env: dict[str, str] | None = None,
) -> dict:
    """Cubins of the `want` [kernel, role] pairs per arch, with `python`'s Triton: a role's are taken from
    `reuse`/<triton>/<arch>/ when it holds every one (compile_all's layout, e.g. the torch-cuda variant's
    cubins of the same build), else compiled into own_root; a role the arch ships no rows for is skipped.
    Returns {"triton", "wave_fill", "rows": [...], "params", "compiled": {arch: roles}, "reused": {arch:
    roles}} for write_sources."""
    env = {k: v for k, v in (env or os.environ).items() if k != "TRITON_INTERPRET"}
    env.setdefault("TRITON_DISABLE_LINE_INFO", "1")  # line info embeds the staging path: not reproducible
    cmd = [python, "-c", _ROWS_SCRIPT, str(Path(package_dir).parent), json.dumps(want), str(own_root),
           str(reuse or ""), ",".join(dtypes)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False, timeout=3600)
    if proc.returncode != 0:
        raise EmbedError(f"Triton AOT compile for the CUDA variant failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def kernel_param_sizes(cuobjdump: str, cubin: Path) -> list[int]:
    """Byte size of each kernel parameter, in order, from the cubin's EIATTR_KPARAM_INFO records."""
    out = subprocess.run([cuobjdump, "-elf", str(cubin)], capture_output=True, text=True, check=True).stdout
    params = re.findall(
        r"Ordinal\s*:\s*0x([0-9a-f]+)\s+Offset\s*:\s*0x[0-9a-f]+\s+Size\s*:\s*0x([0-9a-f]+)", out
    )
    return [int(size, 16) for _, size in sorted((int(o, 16), s) for o, s in params)]


def check_signature(kernel: str, kinds: str, sizes: list[int]) -> None:
    """The launcher's arguments for `kernel` match its Triton definition and its compiled parameters."""
    expected = LAUNCH_SIGNATURES.get(kernel)
    if expected != kinds:
        raise EmbedError(
            f"{kernel}: the Triton kernel takes ({kinds}) but the CUDA launcher passes ({expected}); update "
            "LAUNCH_SIGNATURES and the launch in kernel_src/fused_mlp/cuda/csrc together with the kernel"
        )
    want = [8 if k == "ptr" else 4 for k in kinds.split()] + [8, 8]
    if sizes != want:
        raise EmbedError(
            f"{kernel}: the cubin's parameters are {sizes} bytes, the launcher passes {want} (its arguments "
            "plus Triton's global and profile scratch pointers); this Triton's kernel ABI is not supported"
        )


def _cc(arch: str) -> int:
    """ "sm_90a" -> 90: compute capability major*10+minor that the arch's SASS runs on."""
    return arch_notation().parse_arch(arch).number


def _row_bounds(where: str, row: tuple, last: bool) -> tuple[int, str, int]:
    """(max rows or -1 for any, implementation, min weight bytes or 0) of one path table row, checked: the
    weight bound a positive int, a key's last row (None, implementation) so that every call finds a row."""
    if not isinstance(row, tuple) or len(row) not in (2, 3):
        raise EmbedError(f"{where}: row {row!r} must be (max rows or None, impl[, min weight bytes])")
    bound, impl, *weight = row
    min_bytes = weight[0] if weight else 0
    if weight and (type(min_bytes) is not int or min_bytes <= 0):
        raise EmbedError(
            f"{where}: row {row!r}: min weight bytes must be a positive int; leave it out for any"
        )
    if last and (bound is not None or weight):
        raise EmbedError(f"{where}: the last row {row!r} must admit every call: write (None, {impl!r})")
    return -1 if bound is None else bound, impl, min_bytes


def path_rows(paths) -> list[tuple[int, int, int, int, int, int, int]]:
    """(sm, captured, op, step, max_rows, min_weight_bytes, impl) codes of both tables, in table order (what
    C++ searches); max_rows -1 admits any M, min_weight_bytes 0 any weights."""
    rows = []
    for captured, table in ((0, paths.PATHS), (1, paths.GRAPH_PATHS)):
        for arch, keys in table.items():
            sm = 0 if arch == "default" else _cc(arch)
            for key, choices in keys.items():
                op, step = paths.split_key(key)
                for i, row in enumerate(choices):
                    bound, impl, min_bytes = _row_bounds(f"{arch} {key}", row, i == len(choices) - 1)
                    rows.append((sm, captured, -1 if op is None else OP_CODES[op], STEP_CODES[step], bound,
                                 min_bytes, IMPL_CODES[impl]))  # fmt: skip
    return rows


def _enumerator(name: str) -> str:
    """ "chain_backward" -> "ChainBackward": the C++ enumerator of a code table's name (triton_launch.h)."""
    return "".join(word.capitalize() for word in name.split("_"))


def _by_code(codes: dict[str, int], what: str) -> list[str]:
    """The names of a code table in code order; the codes must be 0..n-1 (C++ indexes arrays with them)."""
    names = sorted(codes, key=codes.get)
    if [codes[n] for n in names] != list(range(len(names))):
        raise EmbedError(f"{what}: codes must be 0..{len(names) - 1}, got {codes}")
    return names


def _quoted(names: list[str]) -> str:
    """A C++ initialiser list of string literals."""
    return ", ".join(f'"{n}"' for n in names)


def code_tables(paths) -> list[str]:
    """C++ lines (inside namespace fused_mlp) for the code tables: static_asserts that triton_launch.h's enums and
    counts number steps, ops and implementations as STEP_CODES / OP_CODES / IMPL_CODES do (the hand-written enums
    cannot drift: the build fails and says which), then the names, paths.FALLBACK per step and paths.OP_STEPS per
    op, indexed by those codes, so that C++ keeps no copy of these facts."""
    steps, ops = _by_code(STEP_CODES, "STEP_CODES"), _by_code(OP_CODES, "OP_CODES")
    impls = _by_code(IMPL_CODES, "IMPL_CODES")
    if set(paths.FALLBACK) != set(steps) or set(paths.OP_STEPS) != set(ops):
        raise EmbedError(
            "paths.FALLBACK must name every step of STEP_CODES, paths.OP_STEPS every op of OP_CODES"
        )
    lines = [
        "// triton_launch.h's enums and counts must follow embed_cubins' code tables, which the arrays use."
    ]
    enums = (("Step", "kNumSteps", steps, "STEP_CODES"), ("Op", "kNumOps", ops, "OP_CODES"))
    for enum, count, names, table in (*enums, ("Impl", "kNumImpls", impls, "IMPL_CODES")):
        where = f"triton_launch.h must match embed_cubins.{table}"
        lines.append(f'static_assert({count} == {len(names)}, "{where}: {count} == {len(names)}");')
        for i, name in enumerate(names):
            member = f"{enum}::{_enumerator(name)}"
            lines.append(
                f'static_assert(static_cast<int>({member}) == {i}, "{where}: {member} == {i} ({name})");'
            )
    lines += [
        f"const char* const kStepNames[] = {{{_quoted(steps)}}};",
        f"const char* const kOpNames[] = {{{_quoted(ops)}}};",
        f"const char* const kImplNames[] = {{{_quoted(impls)}}};",
        "// paths.FALLBACK: " + ", ".join(f"{s} {paths.FALLBACK[s]}" for s in steps),
        f"const int kFallbackImpl[] = {{{', '.join(str(IMPL_CODES[paths.FALLBACK[s]]) for s in steps)}}};",
        "const int kOpSteps[][kNumSteps] = {  // paths.OP_STEPS, -1 after an op's last step",
    ]
    for op in ops:
        codes = [STEP_CODES[s] for s in paths.OP_STEPS[op]] + [-1] * (len(steps) - len(paths.OP_STEPS[op]))
        lines.append(f"  {{{', '.join(map(str, codes))}}},  // {op}: {', '.join(paths.OP_STEPS[op])}")
    lines.append("};")
    sizes = (("kStepNames", "kNumSteps"), ("kOpNames", "kNumOps"), ("kImplNames", "kNumImpls"))
    for array, count in (*sizes, ("kFallbackImpl", "kNumSteps"), ("kOpSteps", "kNumOps")):
        lines.append(
            f'static_assert(sizeof({array}) / sizeof({array}[0]) == {count}, "{array}: {count} rows");'
        )
    return lines


def decode_rules(min_bytes: dict[str, int]) -> list[str]:
    """C++ lines for configs.DECODE_MIN_WEIGHT_BYTES of the embedded archs (the decode kernels' `gemv` rule)."""
    rules = [f"  {{{_cc(arch)}, {int(n)}ll}},  // {arch}" for arch, n in sorted(min_bytes.items())]
    return [
        f"const int kNumDecodeRules = {len(rules)};",
        "const DecodeRule kDecodeRules[] = {",
        *(rules or ["  {-1, 0ll},  // none"]),
        "};",
    ]


def _step_impl_of(paths, kernel: str, role: str) -> tuple[int, int]:
    """(step, implementation) codes of the path table entry that runs `kernel` in `role`."""
    step, impl = next(key for key, value in paths.TRITON_KERNELS.items() if tuple(value) == (kernel, role))
    return STEP_CODES[step], IMPL_CODES[impl]


def write_sources(
    gen_dir: Path, package_dir: Path, aot: dict | None, cuobjdump: str | None, note: str
) -> EmbedSummary:
    """Write gen_dir/triton_table.gen.cpp (+ cubins.bin); `aot` = aot_rows' answer or None (no cubins)."""
    gen_dir = Path(gen_dir)
    gen_dir.mkdir(parents=True, exist_ok=True)
    paths = load_paths(package_dir)
    entries, blob, offsets, checked = [], bytearray(), {}, set()
    for row in (aot or {}).get("rows", []):
        folder = Path(row["dir"])
        cubin, meta_path = folder / f"{row['stem']}.cubin", folder / f"{row['stem']}.json"
        if not cubin.is_file():
            raise EmbedError(f"missing AOT cubin {cubin}: compile_all did not write it")
        meta = json.loads(meta_path.read_text())
        if (row["arch"], row["kernel"]) not in checked and cuobjdump:
            check_signature(row["kernel"], aot["params"][row["kernel"]], kernel_param_sizes(cuobjdump, cubin))
            checked.add((row["arch"], row["kernel"]))
        if (
            meta.get("profile_scratch_size", 0)
            or meta.get("launch_cooperative_grid")
            or meta.get("tmem_size", 0)
        ):
            raise EmbedError(
                f"{cubin.name}: needs profile scratch, a cooperative grid or tensor memory; not supported"
            )
        if row["stem"] not in offsets:
            blob.extend(
                b"\0" * (-len(blob) % 128)
            )  # the loader parses each image in place: keep ELF alignment
            offsets[row["stem"]] = (len(blob), cubin.stat().st_size)
            blob.extend(cubin.read_bytes())
        off, size = offsets[row["stem"]]
        c = row["consts"]
        block_n = c.get("BN", c.get("BLOCK", 0))
        step, impl = _step_impl_of(paths, row["kernel"], row["role"])
        entries.append(
            f'  {{"{meta["name"]}", {step}, {impl}, {_cc(row["arch"])}, {DTYPE_CODES[row["dtype"]]}, '
            f"{row['act']}, {int(row['has_bias'])}, {int(bool(c.get('STORE_GU', False)))}, "
            f"{-1 if row['max_rows'] is None else row['max_rows']}, "
            f"{c.get('BM', 0)}, {block_n}, {c.get('BK', 0)}, {meta['num_warps']}, {meta.get('num_ctas', 1)}, "
            f"{meta['shared']}, {meta.get('global_scratch_size', 0)}, {meta.get('global_scratch_align', 1)}, "
            f"{int(bool(meta.get('launch_pdl')))}, {off}ull, {size}ull, {int(bool(c.get('UP_FIRST', False)))}}},"
        )
    version = aot["triton"] if entries else ""
    lines = [
        "// Generated by build/cuda/embed_cubins.py (do not edit): cubins, path table, code tables.",
        '#include "triton_launch.h"',
        "",
        "namespace fused_mlp {",
    ]
    if entries:
        (gen_dir / BLOB).write_bytes(bytes(blob))
        blob_path = str((gen_dir / BLOB).resolve()).replace("\\", "\\\\").replace('"', '\\"')
        lines = [
            *lines[:3],
            (
                f'__asm__(".section .rodata.fused_mlp_cubins,\\"a\\"\\n.balign 128\\n.hidden fused_mlp_cubin_blob\\n'
                f'.globl fused_mlp_cubin_blob\\nfused_mlp_cubin_blob:\\n.incbin \\"{blob_path}\\"\\n.previous\\n");'
            ),
            'extern "C" const unsigned char fused_mlp_cubin_blob[];',
            "",
            *lines[3:],
            "const unsigned char* const kCubinBlob = fused_mlp_cubin_blob;",
        ]
    else:
        lines.append("const unsigned char* const kCubinBlob = nullptr;")
    lines += [
        f'const char kTritonVersion[] = "{version}";',
        f"const int kNumTritonCubins = {len(entries)};",
        f"const double kWaveFill = {float((aot or {}).get('wave_fill', 1.0))!r};",
        *decode_rules((aot or {}).get("decode_min_bytes", {}) if entries else {}),
        "const TritonCubin kTritonCubins[] = {",
        *(
            entries
            or [
                '  {"", -1, -1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0ull, 0ull, 0},  // none embedded'
            ]
        ),
        "};",
        "const PathRow kPathRows[] = {",
        *(f"  {{{', '.join(str(v) for v in row)}}}," for row in path_rows(paths)),
        "};",
        "const int kNumPathRows = sizeof(kPathRows) / sizeof(kPathRows[0]);",
        *code_tables(paths),
        "}  // namespace fused_mlp",
        "",
    ]
    (gen_dir / GEN_SOURCE).write_text("\n".join(lines))
    archs = tuple(sorted({r["arch"] for r in (aot or {}).get("rows", [])}))
    return EmbedSummary(version or None, archs, len(offsets), len(entries), note)
