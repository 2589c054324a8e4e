"""Our kernels in a transformers model, through the stock `kernels` route, and a report of what ran where.

    with use_kernel_mapping(mlp_kernel_mapping(model, "acme/fused-mlp", version=1)):
        kernelize(model, mode=Mode.INFERENCE)
    print(kernel_report(model))

`mlp_kernel_mapping` marks the model's MLP block classes for `kernels.kernelize` (the stock hook for classes
that do not carry one: `replace_kernel_forward_from_hub`) and returns the layer mapping to our repo: gated
blocks (`gate_proj`, `up_proj`, `down_proj`, `act_fn`: Llama, Qwen2, Mistral, Gemma2) get `layers.GatedMLP`,
GPT-2's block `layers.GPT2MLP`. A class that transformers already marks for hub kernels keeps its name and is
mapped to our layer. The layers read the module's own parameters: nothing is copied at kernelize time.

`kernel_report` then times each replaced module's forward against the module's own, on its own weights, at
the row counts of decode and prefill, with the loader's speed-check timing (`speed.time_calls`); a module
whose kernel is slower than its own forward beyond the speed check's margin at any of them gets its own
forward back, as `kernelize` gives a module without a kernel. Modules of one class and shape share a verdict.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MethodType, ModuleType

import torch
from torch import nn

from .speed import DECISIVE, ROUNDS_BATCH, timing_threads
from .speed import time_calls as _time_calls
from .speed_records import MARGIN

GATED, GPT2 = "GatedMLP", "GPT2MLP"
# Rows a block sees: one decode token, a decode batch, a prefill chunk, a long prompt. CPU: small, for CI.
REPORT_ROWS = {"cuda": (1, 8, 512, 2048), "cpu": (1, 16)}


def layer_for(module: nn.Module) -> str | None:
    """Which of our layers runs `module`'s block, or None when none fits it."""
    if type(module).__name__ == "GPT2MLP" and all(hasattr(module, a) for a in ("c_fc", "c_proj", "act")):
        return GPT2
    projs = [getattr(module, name, None) for name in ("gate_proj", "up_proj", "down_proj")]
    if all(isinstance(p, nn.Linear) and p.bias is None for p in projs) and hasattr(module, "act_fn"):
        return GATED
    return None


def mlp_kernel_mapping(
    model: nn.Module,
    repo_id: str,
    *,
    version: int | None = None,
    revision: str | None = None,
    device: str | None = None,
    trust_remote_code: bool | list[str] = False,
) -> dict:
    """Mark `model`'s MLP block classes for `kernels.kernelize` and return the mapping to `repo_id`'s layers.

    `device` is the device type the mapping is for (default: that of the model's first parameter). A module
    that our layers cannot run (e.g. a gated block with biases) is left to its own forward by kernelize.
    """
    from kernels import LayerRepository, replace_kernel_forward_from_hub

    if device is None:
        device = next(model.parameters()).device.type
    names: dict[str, str] = {}  # kernel layer name the class carries -> our layer
    for module in model.modules():
        layer = layer_for(module)
        if layer is None:
            continue
        cls = type(module)
        if getattr(cls, "kernel_layer_name", None) is None:
            replace_kernel_forward_from_hub(cls, layer, condition=_fits)
        names[cls.kernel_layer_name] = layer
    if not names:
        raise ValueError(
            f"{type(model).__name__} has no MLP block our layers run (gated gate_proj/up_proj/down_proj "
            "without biases, or GPT-2's c_fc/c_proj): nothing to kernelize"
        )
    return {
        name: {
            device: LayerRepository(
                repo_id,
                layer_name=layer,
                version=version,
                revision=revision,
                trust_remote_code=trust_remote_code,
            )
        }
        for name, layer in names.items()
    }


def _fits(module: nn.Module) -> bool:
    return layer_for(module) is not None


@dataclass(frozen=True)
class RowSpeed:
    """One row count: the path the kernel takes there, µs of its forward and of the module's own."""

    rows: int
    path: str
    kernel_us: float
    own_us: float
    ratio: float  # median of paired kernel / own times

    @property
    def speedup(self) -> float:
        return 1 / self.ratio


@dataclass(frozen=True)
class ModuleReport:
    """A replaced module: where our kernel came from, how it did at each row count, and which forward runs."""

    names: tuple[str, ...]  # every module of this class and shape (one verdict for all)
    block: str  # the module's class
    layer: str  # our layer
    repo: str
    variant: str
    backend: str
    widths: tuple[int, ...]
    dtype: str
    device: str
    rows: tuple[RowSpeed, ...]
    pays: bool  # not slower than the module's own forward (beyond the speed check's margin) at any row count
    restored: bool  # the modules run their own forward again

    def verdict(self) -> str:
        if self.pays:
            return "runs our kernel"
        slow = ", ".join(
            f"M={r.rows} ({r.kernel_us:.1f} vs {r.own_us:.1f} µs)"
            for r in self.rows
            if r.ratio > 1 + MARGIN[self.device]
        )
        if self.restored:
            return f"keeps its own forward: kernel slower at {slow}"
        return f"runs our kernel although slower at {slow} (restore=False)"


@dataclass(frozen=True)
class KernelReport:
    modules: tuple[ModuleReport, ...]

    def __str__(self) -> str:
        lines = []
        for m in self.modules:
            first, n = m.names[0], len(m.names)
            lines.append(
                f"{first}{f' (+{n - 1} alike)' if n > 1 else ''}: {m.block} -> {m.layer} from {m.repo} "
                f"[{m.variant}, {m.backend}] widths {'x'.join(map(str, m.widths))} {m.dtype} on {m.device}: "
                f"{m.verdict()}"
            )
            for r in m.rows:
                lines.append(
                    f"    M={r.rows:<5} {r.path:<40} kernel {r.kernel_us:9.1f} µs  own {r.own_us:9.1f} µs  "
                    f"x{r.speedup:.2f}"
                )
        return "\n".join(lines) if lines else "no module runs a kernel"

    def to_dict(self) -> dict:
        from dataclasses import asdict

        return {"modules": [asdict(m) for m in self.modules]}

    def restore_slower(self, model: nn.Module) -> list[str]:
        """Give the modules whose kernel does not pay their own forward (what `restore=True` does); their names."""
        slower = {n for m in self.modules if not m.pays for n in m.names}
        for name, module in model.named_modules():
            if name in slower:
                _own_forward(module)
        return sorted(slower)


def _own_forward(module: nn.Module) -> None:
    module.forward = MethodType(
        type(module).forward, module
    )  # what kernelize does for a module without a kernel


def replaced_modules(model: nn.Module) -> list[tuple[str, nn.Module, ModuleType, str]]:
    """(name, module, kernel package, layer name) of each module whose forward `kernelize` replaced by a layer
    of a kernel package."""
    found = []
    for name, module in model.named_modules():
        fwd = module.__dict__.get("forward")
        if not isinstance(fwd, MethodType) or fwd.__func__ is type(module).forward:
            continue
        pkg = sys.modules.get(fwd.__func__.__module__.rpartition(".")[0])
        if pkg is None or not hasattr(pkg, "reference"):
            continue
        found.append((name, module, pkg, fwd.__func__.__qualname__.partition(".")[0]))
    return found


def kernel_report(
    model: nn.Module, rows: Sequence[int] | None = None, *, restore: bool = True
) -> KernelReport:
    """Time every replaced module against its own forward at `rows` (default REPORT_ROWS of its device); with
    `restore`, a module whose kernel is slower at any of them gets its own forward back."""
    groups: dict[tuple, list] = {}
    for name, module, pkg, layer in replaced_modules(model):
        p = next(module.parameters())
        key = (type(module), layer, id(pkg), _widths(module), p.dtype, p.device)
        groups.setdefault(key, []).append((name, module, pkg, layer))
    reports = []
    for (cls, layer, _, widths, dtype, dev), members in groups.items():
        name, module, pkg, _ = members[0]
        device = dev.type
        speeds = tuple(
            _row_speed(module, pkg, layer, m, device, dtype)
            for m in (REPORT_ROWS[device] if rows is None else rows)
        )
        keep = all(r.ratio <= 1 + MARGIN[device] for r in speeds)
        if restore and not keep:
            for _, mod, _, _ in members:
                _own_forward(mod)
        repo, variant = _origin(pkg)
        reports.append(
            ModuleReport(
                tuple(n for n, *_ in members),
                cls.__name__,
                layer,
                repo,
                variant,
                _backend(pkg, device),
                widths,
                str(dtype).removeprefix("torch."),
                device,
                speeds,
                keep,
                restore and not keep,
            )
        )
    return KernelReport(tuple(reports))


def _widths(module: nn.Module) -> tuple[int, ...]:
    if hasattr(module, "gate_proj"):
        return (module.gate_proj.in_features, module.gate_proj.out_features)
    return tuple(module.c_fc.weight.shape) + (module.c_proj.weight.shape[1],)


def _row_speed(module, pkg, layer: str, rows: int, device: str, dtype: torch.dtype) -> RowSpeed:
    """The kernel's forward against the module's own at `rows` rows, inference, on fresh inputs."""
    x = torch.randn(1, rows, _widths(module)[0], device=device, dtype=dtype)
    kernel_fwd, own_fwd = module.forward, type(module).forward
    calls = {"kernel": lambda: kernel_fwd(x), "own": lambda: own_fwd(module, x)}
    r, batch = ROUNDS_BATCH[device]
    with torch.no_grad(), timing_threads(device):
        s = _time_calls(calls, device, rounds=r, batch=batch, stop=_decided)
    ratio = statistics.median(k / o for k, o in zip(s["kernel"], s["own"]))
    return RowSpeed(
        rows,
        _path(pkg, layer, rows, device),
        round(statistics.median(s["kernel"]), 2),
        round(statistics.median(s["own"]), 2),
        round(ratio, 4),
    )


def _decided(samples: dict[str, list[float]]) -> bool:
    return samples["kernel"][-1] > DECISIVE * samples["own"][-1]


def _origin(pkg: ModuleType) -> tuple[str, str]:
    """(repo@revision, variant directory) of a kernel package that `kernels` loaded."""
    from kernels import get_loaded_kernels

    where = Path(pkg.__file__).parent  # <variant>/<package>/__init__.py, or <variant>/__init__.py
    variant = where.name if (where / "metadata.json").exists() else where.parent.name
    for loaded in get_loaded_kernels():
        if loaded.module is pkg and loaded.repo_info is not None:
            return f"{loaded.repo_info.repo_id}@{loaded.repo_info.revision[:12]}", variant
    return "local", variant


def _backend(pkg: ModuleType, device: str) -> str:
    if device == "cuda":
        return pkg.BACKEND
    return "triton (interpreter)" if getattr(pkg, "INTERPRET", False) else "reference"


_OP = {GATED: "gated_mlp", GPT2: "mlp"}


def _path(pkg: ModuleType, layer: str, rows: int, device: str) -> str:
    """The implementation of each step of the layer's op at `rows` rows, from the CUDA build's path table
    (its rows for calls one by one, at the table's sampled M at or above `rows`); else the backend's name."""
    backend = _backend(pkg, device)
    if backend != "cuda":
        return backend
    op = _OP[layer]
    info = json.loads(
        sys.modules[f"{pkg.__name__}.cuda._library"].load().cuda_build_info(torch.cuda.current_device())
    )
    steps = []
    for key, table in info["paths"].items():
        if key.startswith(f"{op}/") and not key.endswith("chain_backward"):
            at = next((row for row in table if row[0] >= rows), table[-1])
            steps.append(f"{key.partition('/')[2]}={at[1]}")
    return "cuda " + ",".join(steps)
