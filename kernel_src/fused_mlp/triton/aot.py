"""Ahead-of-time cubins: compile every shipped kernel config for an arch (the builder), and find them
at launch so the user's first call does not JIT.

Layout (docs/CONTRACTS.md): cubins/<triton-version>/<arch>/<kernel>-<hash>.cubin + .json, where the
.json is Triton's kernel metadata plus `fused_mlp_spec` (kernel, dtype, constexprs, warps, stages).
A cubin is used only when the running Triton version and the device arch match its folder and the
launch meets the alignment the cubin was compiled for; anything else goes to the JIT.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import torch
import triton

from .configs import AOT_ARCHS, GATE_UP, LINEAR, arch_of, elementwise_config, table_rows, uses_pdl

CUBIN_ROOT = Path(__file__).parent / "cubins"
_DTYPE_NAMES = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}
DEFAULT_DTYPES = ("bf16", "fp16")
_ACTS = (0, 1, 2, 3, 4)
_GATED_ACTS = (1, 2, 3, 4)


@dataclass(frozen=True)
class AotSpec:
    """One compiled specialization: kernel name, pointer dtype, constexpr values, launch options."""

    kernel: str
    dtype: str
    consts: tuple
    num_warps: int
    num_stages: int

    def key(self) -> tuple:
        return (self.kernel, self.dtype, tuple(self.consts), self.num_warps, self.num_stages)

    def file_stem(self) -> str:
        digest = hashlib.sha256(repr(self.key()).encode()).hexdigest()[:16]
        return f"{self.kernel}-{digest}"


def _kernel_defs() -> dict:
    from .act_and_mul import ACT_AND_MUL
    from .gated import GATE_UP as GATE_UP_KERNEL
    from .linear import LINEAR as LINEAR_KERNEL

    return {k.name: k for k in (LINEAR_KERNEL, GATE_UP_KERNEL, ACT_AND_MUL)}


def shipped_specs(arch: str, dtypes: Iterable[str] = DEFAULT_DTYPES) -> list[AotSpec]:
    """Every inference-forward specialization we ship for `arch`: each config of the arch's tables,
    each activation, with/without bias, K a multiple of BK (EVEN_K). Backward kernels use the JIT."""
    specs = []
    for dtype in dtypes:
        for bound, cfg in table_rows(LINEAR, arch):
            pdl = uses_pdl(arch, bound or 1 << 30)
            for act in _ACTS:
                for has_bias in (True, False):
                    consts = (has_bias, act, True, False, "tf32", pdl, cfg.BM, cfg.BN, cfg.BK, cfg.GROUP_M)
                    specs.append(AotSpec("linear_kernel", dtype, consts, cfg.num_warps, cfg.num_stages))
        for bound, cfg in table_rows(GATE_UP, arch):
            pdl = uses_pdl(arch, bound or 1 << 30)
            for act in _GATED_ACTS:
                consts = (act, True, False, "tf32", pdl, cfg.BM, cfg.BN, cfg.BK, cfg.GROUP_M)
                specs.append(AotSpec("gate_up_kernel", dtype, consts, cfg.num_warps, cfg.num_stages))
        ew = elementwise_config(arch)
        for act in _ACTS:
            specs.append(AotSpec("act_and_mul_kernel", dtype, (act, ew.BLOCK), ew.num_warps, 1))
    return list(dict.fromkeys(specs))


def _source(kdef, spec: AotSpec):
    """The ASTSource Triton compiles (and its launcher is built from) for `spec`."""
    from triton.compiler import ASTSource

    signature, attrs = {}, {}
    for i, (name, kind) in enumerate(kdef.params):
        signature[name] = f"*{spec.dtype}" if kind == "ptr" else "i32"
        if kind in ("ptr", "i32:16"):
            attrs[(i,)] = [["tt.divisibility", 16]]
    for name in kdef.constexprs:
        signature[name] = "constexpr"
    constexprs = dict(zip(kdef.constexprs, spec.consts))
    return ASTSource(fn=kdef.fn, signature=signature, constexprs=constexprs, attrs=attrs)


def _compile_to(args: tuple[AotSpec, str, str]) -> list[str]:
    """Compile one spec for `arch` into `folder`; returns the two written paths (worker entry point)."""
    from triton.backends.compiler import GPUTarget

    spec, arch, folder = args
    kdef = _kernel_defs()[spec.kernel]
    compiled = triton.compile(
        _source(kdef, spec),
        target=GPUTarget("cuda", AOT_ARCHS[arch], 32),
        options={
            "num_warps": spec.num_warps,
            "num_stages": spec.num_stages,
            "launch_pdl": bool(dict(zip(kdef.constexprs, spec.consts)).get("PDL", False)),
        },
    )
    meta = json.loads(json.dumps(compiled.metadata._asdict(), default=vars))
    # The libdevice path is where the build machine's Triton lives; it is not needed to launch a cubin, and
    # keeping only the file name makes the build reproducible across machines (same source, same digests).
    meta["extern_libs"] = [[name, os.path.basename(path)] for name, path in meta.get("extern_libs") or []]
    meta["fused_mlp_spec"] = {"kernel": spec.kernel, "dtype": spec.dtype, "consts": list(spec.consts),
                              "num_warps": spec.num_warps, "num_stages": spec.num_stages}  # fmt: skip
    stem = Path(folder) / spec.file_stem()
    stem.with_suffix(".cubin").write_bytes(compiled.asm["cubin"])
    stem.with_suffix(".json").write_text(json.dumps(meta, sort_keys=True))
    return [str(stem.with_suffix(".cubin")), str(stem.with_suffix(".json"))]


def compile_all(
    out_dir: Path,
    arch: str,
    triton_version: str | None = None,
    *,
    dtypes: Iterable[str] = DEFAULT_DTYPES,
    kernels: Iterable[str] | None = None,
    jobs: int | None = None,
) -> list[Path]:
    """Compile every shipped spec for `arch` into out_dir/<triton version>/<arch>/; returns the files.

    out_dir is the variant's `fused_mlp/triton/cubins`; `kernels` limits it to those kernel names
    (default: all); `jobs` worker processes (default: all cores). Needs no GPU. Raises when `triton_version` is
    given and differs from the installed Triton (a cubin is only valid for the Triton that built it).
    """
    if arch not in AOT_ARCHS:
        raise ValueError(f"no AOT target for arch {arch!r}; choose one of {', '.join(AOT_ARCHS)}")
    if triton_version is not None and triton_version != triton.__version__:
        raise RuntimeError(
            f"asked for cubins of Triton {triton_version} but Triton {triton.__version__} is installed; "
            f"run the build in an environment with triton=={triton_version}"
        )
    if os.environ.get("TRITON_INTERPRET") == "1":
        raise RuntimeError(
            "compile_all cannot run with TRITON_INTERPRET=1 (kernels are interpreted); unset it"
        )
    folder = Path(out_dir) / triton.__version__ / arch
    folder.mkdir(parents=True, exist_ok=True)
    wanted = None if kernels is None else set(kernels)
    specs = [s for s in shipped_specs(arch, dtypes) if wanted is None or s.kernel in wanted]
    work = [(spec, arch, str(folder)) for spec in specs]
    jobs = jobs or os.cpu_count() or 1
    if jobs == 1:
        written = [_compile_to(w) for w in work]
    else:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            written = list(pool.map(_compile_to, work))
    return [Path(p) for pair in written for p in pair]


class _Entry:
    """A shipped cubin, turned into a launchable CompiledKernel on first use."""

    def __init__(self, json_path: Path, spec: AotSpec):
        self.json_path = json_path
        self.spec = spec
        self._kernel = None

    def kernel(self, kdef):
        if self._kernel is None:
            from triton.compiler import CompiledKernel

            group = {self.json_path.name: str(self.json_path),
                     self.json_path.with_suffix(".cubin").name: str(self.json_path.with_suffix(".cubin"))}  # fmt: skip
            self._kernel = CompiledKernel(_source(kdef, self.spec), group, self.spec.file_stem())
        return self._kernel


def load_index(root: Path, triton_version: str, arch: str) -> dict[tuple, _Entry]:
    """Spec key -> entry for every cubin under root/<triton_version>/<arch> (empty when none)."""
    folder = root / triton_version / arch
    index = {}
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else ():
        s = json.loads(path.read_text())["fused_mlp_spec"]
        spec = AotSpec(s["kernel"], s["dtype"], tuple(s["consts"]), s["num_warps"], s["num_stages"])
        if path.with_suffix(".cubin").is_file():
            index[spec.key()] = _Entry(path, spec)
    return index


_INDEX: dict[int, dict[tuple, _Entry]] = {}
_DISABLED = os.environ.get("FUSED_MLP_AOT") == "0"


def _device_index(device: torch.device) -> dict[tuple, _Entry]:
    idx = device.index if device.index is not None else torch.cuda.current_device()
    if idx not in _INDEX:
        _INDEX[idx] = load_index(
            CUBIN_ROOT, triton.__version__, arch_of(torch.cuda.get_device_capability(idx))
        )
    return _INDEX[idx]


def _aligned(kdef, args: tuple) -> bool:
    """Whether the launch meets the divisibility the cubin assumes (16-byte pointers, `i32:16` ints)."""
    for (_, kind), value in zip(kdef.params, args):
        if kind == "ptr":
            if value.data_ptr() % 16:
                return False
        elif kind == "i32:16" and value % 16:
            return False
    return True


def find(kdef, args: tuple, consts: tuple, num_warps: int, num_stages: int):
    """The shipped CompiledKernel for this launch, or None (then the caller JITs)."""
    first = args[0]
    if _DISABLED or not first.is_cuda:
        return None
    index = _device_index(first.device)
    if not index:
        return None
    entry = index.get((kdef.name, _DTYPE_NAMES[first.dtype], consts, num_warps, num_stages))
    if entry is None or not _aligned(kdef, args):
        return None
    return entry.kernel(kdef)
