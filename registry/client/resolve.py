"""Which build variant of a kernel fits an environment: a pure function of variant metadata + `Env`.

`kernels`' own rules decide torch / CUDA / CPU / OS compatibility (we call its parser and checker, so
our answer never disagrees with the stock client on those); on top we add what `kernels` skips: the
GPU arch of the device against the variant's `archs` (SASS exact-or-same-major, PTX <= device,
`a`-suffixed archs exact), the driver's CUDA version, Triton for the noarch `torch-cuda` variant and
whether an ahead-of-time cubin matches. CPU / universal builds hold only the eager reference, so they
are "the kernel" only when `backend="cpu"` is asked for explicitly; otherwise they serve as the source
of the fallback's reference code. Used by the loader, `kernel-hub variants` and the compatibility matrix.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import hashlib
import importlib.metadata
import json
import platform
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.version import InvalidVersion, Version

from registry.atomic import write_atomic
from registry.spec.arch import Arch, parse_arch, ptx_runs_on, sass_runs_on
from registry.spec.variant import ArchTarget, arch_targets

from .gpu import current_gpu

if TYPE_CHECKING:
    from kernels.variants import Variant


def _kernels():
    """kernels' backends and variants modules, imported on first use: `import kernels` costs ~0.2 s (it
    imports huggingface_hub.hf_api), and a load whose decision is cached (`cached_resolution`) needs neither."""
    import kernels.backends
    import kernels.variants

    return kernels.backends, kernels.variants


NO_CUDA_DEVICE = "no CUDA device"


@dataclass(frozen=True)
class Env:
    """Everything the decision depends on; `current_env()` reads it from this process."""

    os: str
    cpu: str
    python: str
    torch: str | None
    cuda: str | None
    gpu_arch: str | None  # "sm_90" from the device capability; None when no CUDA device
    triton: str | None
    cxx11_abi: bool = True
    driver_cuda: str | None = None


def fingerprint(env: Env) -> str:
    """Stable id of a machine environment: readable prefix + sha256 of every Env field (record file names)."""
    canonical = json.dumps(dataclasses.asdict(env), sort_keys=True).encode()
    device = env.gpu_arch or "cpu"
    return f"{device}-{env.cpu}-py{env.python}-{hashlib.sha256(canonical).hexdigest()[:12]}"


@dataclass(frozen=True)
class Verdict:
    variant: str
    accepted: bool
    reason: str
    detail: dict = field(default_factory=dict, compare=False, hash=False)


@dataclass(frozen=True)
class Resolution:
    chosen: str | None
    verdicts: tuple[Verdict, ...]
    fallback_reason: str | None
    references: tuple[str, ...] = ()  # variants to take the fallback's reference from, best first

    @property
    def accepted(self) -> tuple[str, ...]:
        """Accepted variants, most preferred first (the loader tries them in this order)."""
        return tuple(v.variant for v in self.verdicts if v.accepted)


def match_arch(targets: list[ArchTarget], device: Arch) -> tuple[str | None, str]:
    """(name of the code that will run, how): SASS preferred over PTX, the closest arch first."""
    sass = sorted((t.arch for t in targets if t.sass and sass_runs_on(t.arch, device)), reverse=True)
    if sass:
        return sass[0].name, "sass"
    ptx = sorted((t.arch for t in targets if t.ptx and ptx_runs_on(t.arch, device)), reverse=True)
    if ptx:
        return ptx[0].name, "ptx"
    return None, ""


def _describe_targets(targets: list[ArchTarget]) -> str:
    parts = []
    for t in targets:
        kinds = "+".join(k for k, on in (("sass", t.sass), ("ptx", t.ptx)) if on)
        parts.append(f"{t.arch.name}({kinds})")
    return ", ".join(parts) or "none"


def _is_cuda(v: Variant) -> bool:
    backends, variants = _kernels()
    if isinstance(v, variants.NoarchVariant):
        return v.arch.backend_name == "cuda"
    return isinstance(v.arch.backend, backends.CUDA)


def _is_cpu_reference(v: Variant) -> bool:
    """CPU and universal builds: pure-Python copies of the package whose CPU path is the eager reference."""
    backends, variants = _kernels()
    if isinstance(v, variants.NoarchVariant):
        return v.arch.backend_name in ("cpu", "universal")
    return isinstance(v.arch.backend, backends.CPU)


def _major_minor(text: str | None) -> Version | None:
    if not text:
        return None
    try:
        v = Version(text.split("+")[0])
    except InvalidVersion:
        return None
    return Version(f"{v.major}.{v.minor}")


def _kernels_rules(v: Variant, env: Env, backend: str | None) -> str | None:
    """Rejection reason from `kernels`' own checks (torch, CUDA minor, CPU, OS, ABI), or None."""
    backends, variants = _kernels()
    if backend == "cpu" or env.cuda is None:
        selected = backends.CPU()
    else:
        selected = backends.CUDA(version=_major_minor(env.cuda))
    cxx11 = env.cxx11_abi if env.os == "linux" else None
    torch = _major_minor(env.torch)
    decisions = variants._check_variants([v], selected, env.cpu, env.os, torch, cxx11, None, None)
    if not decisions:  # kernels drops arch variants on free-threaded Python < 3.15 without a decision
        return "arch kernels are not supported on free-threaded Python < 3.15"
    decision = decisions[0]
    return None if isinstance(decision, variants.VariantAccepted) else decision.reason


def _cuda_rules(v: Variant, metadata: Mapping, env: Env) -> tuple[str | None, dict]:
    """Device checks for a CUDA variant on a machine that has a device: (rejection reason or None, detail)."""
    _, variants = _kernels()
    device = parse_arch(env.gpu_arch)
    detail: dict = {"device_arch": device.name}
    if isinstance(v, variants.ArchVariant) and env.driver_cuda:
        needed, driver = v.arch.backend.version, _major_minor(env.driver_cuda)
        if driver is not None and needed > driver:
            return (
                f"built for CUDA {needed}, the driver supports CUDA {driver} only: update the driver",
                detail,
            )
    try:
        targets = arch_targets(metadata)
    except (ValueError, KeyError, TypeError) as e:
        return f"metadata archs are malformed ({e})", detail
    detail["archs"] = _describe_targets(targets)
    if isinstance(v, variants.NoarchVariant):
        # Triton sources JIT for any device Triton supports; AOT cubins (SASS) skip the JIT when they match.
        if not env.triton:
            return "Triton is not installed (pip install triton)", detail
        # AOT cubins are the SASS entries of our `archs` key (kernels' backend.archs only states the JIT range).
        # Unlike CUDA C++ SASS they are used on their exact arch only: fused_mlp.triton.aot loads the device's
        # own folder, and their tile configs assume that arch's shared memory (sm_80 has 164 KB, sm_86 100 KB).
        cubin_arch = next(
            (
                a["arch"]
                for a in metadata.get("archs") or []
                if a.get("sass", True) and parse_arch(a["arch"]).same_cc(device)
            ),
            None,
        )
        aot_tritons = list(metadata.get("triton") or [])
        aot = cubin_arch is not None and env.triton in aot_tritons
        detail.update(triton=env.triton, aot=aot, aot_arch=cubin_arch if aot else None)
        # "+PTX" entries of a Triton build state where its JIT works (e.g. 8.0+PTX: bf16 tl.dot needs Ampere).
        jit_floor = [t.arch for t in targets if t.ptx]
        if not aot and jit_floor and not any(ptx_runs_on(a, device) for a in jit_floor):
            return (
                f"no AOT cubin for {device.name} and the Triton JIT needs {min(jit_floor).name} or newer",
                detail,
            )
        if not aot:
            why = (
                f"no AOT cubin for {device.name} (have {detail['archs']})"
                if cubin_arch is None
                else f"AOT cubins are for Triton {', '.join(aot_tritons) or 'none'}, running {env.triton}"
            )
            detail["jit_reason"] = why
        return None, detail
    if not targets:
        return "metadata lists no GPU archs for this CUDA build", detail
    code_arch, how = match_arch(targets, device)
    if code_arch is None:
        return f"no code for {device.name}: built for {detail['archs']}", detail
    detail.update(code_arch=code_arch, code=how)
    return None, detail


def _verdict(name: str, metadata: Mapping, env: Env, backend: str | None) -> tuple[Verdict, Variant | None]:
    _, variants = _kernels()
    try:
        v = variants.parse_variant(name)
    except ValueError as e:
        return Verdict(name, False, f"not a variant name kernels understands ({e})"), None
    if _is_cuda(v) and env.gpu_arch is None:
        return Verdict(name, False, NO_CUDA_DEVICE), v
    reason = _kernels_rules(v, env, backend)
    if reason is not None:
        return Verdict(name, False, reason), v
    if _is_cuda(v):
        reason, detail = _cuda_rules(v, metadata, env)
        if reason is not None:
            return Verdict(name, False, reason, detail), v
        if isinstance(v, variants.NoarchVariant):
            how = f"AOT cubin {detail['aot_arch']}" if detail["aot"] else "Triton JIT"
        else:
            how = f"{detail['code'].upper()} {detail['code_arch']}"
        return Verdict(name, True, f"fits {detail['device_arch']} ({how})", detail), v
    if _is_cpu_reference(v) and backend != "cpu":
        return Verdict(name, False, "CPU build: holds the eager reference (fallback source), not a kernel"), v
    return Verdict(name, True, "fits (CPU backend requested)" if backend == "cpu" else "fits"), v


def resolve_variant(variants: Mapping[str, dict], env: Env, *, backend: str | None = None) -> Resolution:
    """Decide every variant for `env`; the chosen one is the most preferred accepted one.

    Preference: stable-ABI > torch-versioned arch builds > noarch (`torch-cuda`) > universal (kernels'
    order). `backend="cpu"` makes CPU builds eligible as the kernel (as in `kernels`); by default they
    are rejected and, with no CUDA device, the result is the fallback with reason "no CUDA device".
    """
    _, kv = _kernels()
    verdicts: dict[str, Verdict] = {}
    names: dict[Variant, str] = {}
    for name in sorted(variants):
        verdict, v = _verdict(name, variants[name] or {}, env, backend)
        verdicts[name] = verdict
        if verdict.accepted:
            names[v] = name
    order = [names[d.variant] for d in kv._sort_variants([kv.VariantAccepted(v) for v in names])]
    ordered = [verdicts[n] for n in order] + [vd for n, vd in verdicts.items() if not vd.accepted]
    chosen = order[0] if order else None
    why_not = None if chosen else _fallback_reason(ordered, env, backend)
    return Resolution(chosen, tuple(ordered), why_not, tuple(reference_sources(variants)))


RESOLUTION_FORMAT = 2  # the cached file's layout


@functools.cache  # the code does not change while the process runs: read it once, not on every load
def _rules_digest() -> str:
    """sha256 of the code that decides (this module and the arch rules): a changed rule is a new decision."""
    h = hashlib.sha256()
    for path in (Path(__file__), Path(__file__).parents[1] / "spec" / "arch.py"):
        try:
            h.update(path.read_bytes())
        except OSError:  # no source files (a frozen install): the package version has to do
            try:
                h.update(importlib.metadata.version("kernel-hub").encode())
            except importlib.metadata.PackageNotFoundError:
                h.update(b"unknown")
    return h.hexdigest()


def cached_resolution(
    variants: Mapping[str, dict], env: Env, backend: str | None, commit: str, folder: Path
) -> Resolution:
    """`resolve_variant` of a commit's variants, remembered in `folder` per (commit, variant names, Env, backend,
    kernels version, the deciding code): a commit never changes, so a warm load decides without importing
    kernels at all."""
    try:
        kernels_version = importlib.metadata.version("kernels")
    except importlib.metadata.PackageNotFoundError:
        kernels_version = None
    key = json.dumps(
        [
            RESOLUTION_FORMAT,
            _rules_digest(),
            commit,
            sorted(variants),
            dataclasses.asdict(env),
            backend,
            kernels_version,
        ],
        sort_keys=True,
    )
    path = folder / f"{hashlib.sha256(key.encode()).hexdigest()}.json"
    try:
        saved = json.loads(path.read_text())
        verdicts = tuple(Verdict(**v) for v in saved["verdicts"])
        return Resolution(saved["chosen"], verdicts, saved["fallback_reason"], tuple(saved["references"]))
    except (OSError, ValueError, KeyError, TypeError):
        pass  # not decided yet here, or an unreadable file: decide again
    resolution = resolve_variant(variants, env, backend=backend)
    saved = {
        "chosen": resolution.chosen,
        "verdicts": [dataclasses.asdict(v) for v in resolution.verdicts],
        "fallback_reason": resolution.fallback_reason,
        "references": list(resolution.references),
    }
    try:
        write_atomic(path, json.dumps(saved).encode())
    except OSError:
        pass  # a read-only cache decides every time
    return resolution


def _fallback_reason(verdicts: list[Verdict], env: Env, backend: str | None) -> str:
    if not verdicts:
        return "the revision has no build variants"
    if env.gpu_arch is None and backend != "cpu":
        return NO_CUDA_DEVICE
    return "no variant fits this machine: " + "; ".join(f"{v.variant}: {v.reason}" for v in verdicts)


def trace_lines(resolution: Resolution, attempts: list[str]) -> list[str]:
    """Human-readable decision trace: every variant's verdict, then every refused attempt."""
    lines = [f"{'accept' if v.accepted else 'reject'} {v.variant}: {v.reason}" for v in resolution.verdicts]
    return lines + [f"refused {a}" for a in attempts]


def reference_sources(variants: Mapping[str, dict]) -> list[str]:
    """Variants to take the fallback's reference package from, best first: pure-Python builds, then the rest.

    Every variant ships the same package (incl. `reference.py`); CPU/universal ones import without a GPU
    toolchain, then `torch-cuda` (Triton sources), then compiled builds.
    """

    _, kv = _kernels()

    def rank(name: str) -> tuple[int, str]:
        try:
            v = kv.parse_variant(name)
        except ValueError:
            return 9, name
        if isinstance(v, kv.NoarchVariant):
            return {"cpu": 0, "universal": 1, "cuda": 2}.get(v.arch.backend_name, 3), name
        return 4, name

    return sorted(variants, key=rank)


def current_env() -> Env:
    """The Env of this process: platform, Python, torch, the current CUDA device, Triton, driver."""
    os_name = platform.system().lower()
    cpu = platform.machine()
    cpu = {"arm64": "aarch64", "AMD64": "x86_64"}.get(cpu, cpu)
    python = ".".join(platform.python_version_tuple()[:2])
    torch_version = cuda = gpu_arch = driver = None
    cxx11 = True
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        torch_version = torch.__version__.split("+")[0]
        cuda = torch.version.cuda
        cxx11 = bool(torch.compiled_with_cxx11_abi())
        gpu = current_gpu()  # NVML when certain: no CUDA initialisation on a warm load
        if gpu is not None:
            gpu_arch = Arch(gpu[1], gpu[2]).name
            driver = _driver_cuda_version()
    try:
        triton = importlib.metadata.version("triton")
    except importlib.metadata.PackageNotFoundError:
        triton = None
    return Env(os_name, cpu, python, torch_version, cuda, gpu_arch, triton, cxx11, driver)


def _driver_cuda_version() -> str | None:
    """CUDA version the installed driver supports (e.g. "13.0"), from libcuda; None when it cannot be read."""
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
        raw = ctypes.c_int(0)
        if libcuda.cuDriverGetVersion(ctypes.byref(raw)) != 0:
            return None
    except (OSError, AttributeError):
        return None
    return f"{raw.value // 1000}.{(raw.value % 1000) // 10}" if raw.value > 0 else None
