"""Ahead-of-time cubins at run time: find the shipped cubin for a launch so the user's first call does
not JIT. The build side (compiling them) is `aot_build`.

Layout (docs/CONTRACTS.md): cubins/<triton-version>/<arch>.zip holding <kernel>-<hash>.cubin + .json (what
a built variant ships: one file per arch, so a loader fetches only its GPU's), or the same files loose in
cubins/<triton-version>/<arch>/ (compile_all's output); the .json is Triton's kernel metadata plus
`fused_mlp_spec` (kernel, dtype, constexprs, warps, stages, params). A bundle entry is extracted to a
private temp folder on first use (Triton's CompiledKernel reads files).
A cubin is used only when the running Triton version and the device arch match its folder and the
launch meets the alignment the cubin was compiled for; anything else goes to the JIT.
"""

from __future__ import annotations

import atexit
import json
import shutil
import tempfile
import zipfile
from pathlib import Path

import torch
import triton

from .. import constants
from ..arch import arch_of
from .specs import AotSpec, KernelDef, ast_source

CUBIN_ROOT = Path(__file__).parent / "cubins"
DTYPE_NAMES = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}


class _Entry:
    """A shipped cubin (loose, or a member of `bundle`), turned into a launchable CompiledKernel on first use."""

    def __init__(self, json_path: Path, spec: AotSpec, bundle: Path | None = None):
        self.json_path = json_path
        self.spec = spec
        self.bundle = bundle
        self._kernel = None

    def kernel(self, kdef: KernelDef):
        if self._kernel is None:
            from triton.compiler import CompiledKernel

            path = _extract(self.bundle, self.json_path.name) if self.bundle else self.json_path
            group = {path.name: str(path), path.with_suffix(".cubin").name: str(path.with_suffix(".cubin"))}
            self._kernel = CompiledKernel(ast_source(kdef, self.spec), group, self.spec.file_stem())
        return self._kernel


def _spec(data: bytes) -> AotSpec:
    s = json.loads(data)["fused_mlp_spec"]
    return AotSpec(s["kernel"], s["dtype"], tuple(s["consts"]), s["num_warps"], s["num_stages"])


def load_index(root: Path, triton_version: str, arch: str) -> dict[tuple, _Entry]:
    """Spec key -> entry for every cubin in root/<triton_version>/<arch>/ or <arch>.zip (empty when none)."""
    folder, bundle = root / triton_version / arch, root / triton_version / f"{arch}.zip"
    index = {}
    if folder.is_dir():
        for path in sorted(folder.glob("*.json")):
            if path.with_suffix(".cubin").is_file():
                spec = _spec(path.read_bytes())
                index[spec.key()] = _Entry(path, spec)
    elif bundle.is_file():
        with zipfile.ZipFile(bundle) as z:
            names = set(z.namelist())
            for name in sorted(n for n in names if n.endswith(".json")):
                if name.removesuffix(".json") + ".cubin" in names:
                    spec = _spec(z.read(name))
                    index[spec.key()] = _Entry(Path(name), spec, bundle)
    return index


_SCRATCH: list[Path] = []


def _extract(bundle: Path, json_name: str) -> Path:
    """Write a bundle member's .json + .cubin to this process's temp folder; returns the .json path."""
    if not _SCRATCH:
        _SCRATCH.append(Path(tempfile.mkdtemp(prefix="fused_mlp_cubins_")))
        atexit.register(shutil.rmtree, _SCRATCH[0], True)
    out = _SCRATCH[0] / bundle.parent.name / bundle.stem
    out.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(bundle) as z:
        for name in (json_name, json_name.removesuffix(".json") + ".cubin"):
            (out / name).write_bytes(z.read(name))
    return out / json_name


_INDEX: dict[int, dict[tuple, _Entry]] = {}
_DISABLED = constants.aot_disabled()


def _device_index(device: torch.device) -> dict[tuple, _Entry]:
    idx = device.index if device.index is not None else torch.cuda.current_device()
    if idx not in _INDEX:
        _INDEX[idx] = load_index(
            CUBIN_ROOT, triton.__version__, arch_of(torch.cuda.get_device_capability(idx))
        )
    return _INDEX[idx]


def _aligned(kdef: KernelDef, args: tuple) -> bool:
    """Whether the launch meets the divisibility the cubin assumes (16-byte pointers, `i32:16` ints)."""
    for (_, kind), value in zip(kdef.params, args):
        if kind == "ptr":
            if value.data_ptr() % 16:
                return False
        elif kind == "i32:16" and value % 16:
            return False
    return True


def find(kdef: KernelDef, args: tuple, consts: tuple, num_warps: int, num_stages: int):
    """The shipped CompiledKernel for this launch, or None (then the caller JITs)."""
    first = args[0]
    if _DISABLED or not first.is_cuda:
        return None
    index = _device_index(first.device)
    if not index:
        return None
    entry = index.get((kdef.name, DTYPE_NAMES[first.dtype], consts, num_warps, num_stages))
    if entry is None or not _aligned(kdef, args):
        return None
    return entry.kernel(kdef)
