"""Our kernels in a transformers model, through the stock `kernels` route, and a report of what ran where.

    with use_kernel_mapping(mlp_kernel_mapping(model, "acme/fused-mlp", version=1)):
        kernelize(model, mode=Mode.INFERENCE)
    print(kernel_report(model))

`mlp_kernel_mapping` marks the model's MLP block classes for `kernels.kernelize` (the stock hook for classes
that do not carry one: `replace_kernel_forward_from_hub`) and returns the layer mapping to our repo: gated
blocks (`gate_proj`, `up_proj`, `down_proj`, `act_fn`: Llama, Qwen2, Mistral, Gemma2) get `layers.GatedMLP`,
GPT-2's block `layers.GPT2MLP`. A class that transformers already marks for hub kernels keeps its name and is
mapped to our layer. The layers read the module's own parameters: nothing is copied at kernelize time.

`kernel_report` then asks the loader's speed check at the user's shapes (`shape_speed.timed_verdicts`) about
each replaced module's widths, activation and dtype: our op against the package's eager reference (what the
module's own forward computes) at the decode-to-prefill row buckets of `shape_speed.ROWS`, timed once per GPU
and cached like get_kernel's verdicts. A module whose kernel is slower at some buckets runs its own forward for the
calls of those buckets and ours for the others (`row_dispatch`: a decode step at one row can stay eager while
batched decode and prefill run our kernel); slower at every bucket, it gets its own forward back, as `kernelize`
gives a module without a kernel. Modules of one class and shape share a verdict.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from types import MethodType, ModuleType

import torch
from torch import nn

from registry.spec import presets

from . import row_dispatch
from .check import cache_key
from .shape_speed import Shape, case_rows, shape_forward, shape_inputs, timed_verdicts

GATED, GPT2 = "GatedMLP", "GPT2MLP"
# The activation modules (class names, torch's and transformers') that our layers map to one of the API's
# activations: fused_mlp.layers reads the same ones (tests/loader/test_transformers_models.py keeps them equal).
# A block whose activation is not among them (e.g. relu2's ReLUSquaredActivation) keeps its own forward.
ACTIVATION_CLASSES = frozenset(
    ("ReLU", "SiLU", "SiLUActivation", "GELU", "GELUActivation", "GELUTanh", "PytorchGELUTanh",
     "NewGELUActivation", "GELUTanhActivation")
)  # fmt: skip


def layer_for(module: nn.Module) -> str | None:
    """Which of our layers runs `module`'s block, or None when none fits it (its shape or its activation)."""
    layer = _layer_by_shape(module)
    return layer if layer is not None and _runs_activation(module, layer) else None


def _layer_by_shape(module: nn.Module) -> str | None:
    if type(module).__name__ == "GPT2MLP" and all(hasattr(module, a) for a in ("c_fc", "c_proj", "act")):
        return GPT2
    projs = [getattr(module, name, None) for name in ("gate_proj", "up_proj", "down_proj")]
    if all(isinstance(p, nn.Linear) and p.bias is None for p in projs) and hasattr(module, "act_fn"):
        return GATED
    return None


def _activation_of(module: nn.Module, layer: str) -> str | nn.Module:
    """What the layer reads the activation from: GatedMLP a string or module `activation` before `act_fn`."""
    if layer == GPT2:
        return module.act
    act = getattr(module, "activation", None)
    return act if isinstance(act, str | nn.Module) else module.act_fn


def _activation_name(act: str | nn.Module) -> str:
    return act if isinstance(act, str) else type(act).__name__


def _runs_activation(module: nn.Module, layer: str) -> bool:
    act = _activation_of(module, layer)
    return act in presets.ACTIVATIONS if isinstance(act, str) else _activation_name(act) in ACTIVATION_CLASSES


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
    that our layers cannot run (a gated block with biases, an activation the ops lack such as squared ReLU) is
    left to its own forward by kernelize.
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
        acts = sorted(
            {_activation_name(_activation_of(m, lay)) for m in model.modules() if (lay := _layer_by_shape(m))}
        )
        *most, last = [a for a in presets.ACTIVATIONS if a != "none"]
        raise ValueError(
            f"{type(model).__name__} has no MLP block our layers run (gated gate_proj/up_proj/down_proj "
            f"without biases, or GPT-2's c_fc/c_proj, with a {', '.join(most)} or {last} activation"
            + (f"; its blocks use {', '.join(acts)}" if acts else "")
            + "): nothing to kernelize"
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
    """One row bucket: the kernels our op launched there, µs of our op and of the eager reference."""

    rows: int
    path: str
    kernel_us: float
    fallback_us: float
    ratio: float  # kernel / fallback, as the speed check decides it
    wins: bool  # not slower than the fallback here, within the speed check's margin

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
    shape: str  # the speed check's shape key, e.g. `gated_mlp 2048x8192 silu bfloat16`
    rows: tuple[RowSpeed, ...]
    pays: bool  # not slower than the eager reference (beyond the speed check's margin) at any row bucket
    restored: bool  # the modules run their own forward again, at every row count
    cached: bool  # the verdict came from the speed cache (timed before on this GPU)
    own_at: tuple[int, ...]  # row buckets where they run their own forward (row_dispatch), else ours

    def verdict(self) -> str:
        if self.pays:
            return "runs our kernel"
        slow = ", ".join(
            f"M={r.rows} ({r.kernel_us:.1f} vs {r.fallback_us:.1f} µs)" for r in self.rows if not r.wins
        )
        if self.restored:
            return f"keeps its own forward: kernel slower at {slow}"
        if self.own_at:
            ours = ", ".join(f"M={r.rows}" for r in self.rows if r.rows not in self.own_at)
            return f"runs our kernel at {ours}; its own forward where the kernel is slower: {slow}"
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
                f"[{m.variant}, {m.backend}] {m.shape} on {m.device}: {m.verdict()}"
                f"{' (cached)' if m.cached else ''}"
            )
            for r in m.rows:
                lines.append(
                    f"    M={r.rows:<5} {r.path:<40} kernel {r.kernel_us:9.1f} µs  eager {r.fallback_us:9.1f} µs  "
                    f"x{r.speedup:.2f}"
                )
        return "\n".join(lines) if lines else "no module runs a kernel"

    def to_dict(self) -> dict:
        from dataclasses import asdict

        return {"modules": [asdict(m) for m in self.modules]}

    def restore_slower(self, model: nn.Module) -> list[str]:
        """Give the modules whose kernel does not pay their own forward where it loses (what `restore=True`
        does); their names."""
        slower = {n: m for m in self.modules if not m.pays for n in m.names}
        for name, module in model.named_modules():
            if name in slower:
                _keep_own_where_slower(module, slower[name].rows)
        return sorted(slower)


def _keep_own_where_slower(module: nn.Module, rows: tuple[RowSpeed, ...]) -> tuple[int, ...]:
    """Own forward at the row buckets where the kernel lost, ours at the others (row_dispatch); the own-forward
    buckets."""
    lost = tuple(r.rows for r in rows if not r.wins)
    if len(lost) == len(rows):
        _own_forward(module)
    elif lost:
        row_dispatch.install(module, frozenset(lost), tuple(r.rows for r in rows))
    return lost


def _own_forward(module: nn.Module) -> None:
    module.forward = MethodType(
        type(module).forward, module
    )  # what kernelize does for a module without a kernel


def replaced_modules(model: nn.Module) -> list[tuple[str, nn.Module, ModuleType, str]]:
    """(name, module, kernel package, layer name) of each module whose forward `kernelize` replaced by a layer
    of a kernel package."""
    found = []
    for name, module in model.named_modules():
        fwd = row_dispatch.kernel_forward(module) or module.__dict__.get("forward")
        if not isinstance(fwd, MethodType) or fwd.__func__ is type(module).forward:
            continue
        pkg = sys.modules.get(fwd.__func__.__module__.rpartition(".")[0])
        if pkg is None or not hasattr(pkg, "reference"):
            continue
        found.append((name, module, pkg, fwd.__func__.__qualname__.partition(".")[0]))
    return found


def kernel_report(model: nn.Module, *, restore: bool = True) -> KernelReport:
    """The speed check at each replaced module's shape (module docstring); with `restore`, a module whose kernel
    is slower at some row buckets runs its own forward at those (row_dispatch), and at every row count when the
    kernel is slower at all of them."""
    groups: dict[tuple, list] = {}
    for name, module, pkg, layer in replaced_modules(model):
        p = next(module.parameters())
        key = (type(module), layer, id(pkg), _widths(module), p.dtype, p.device)
        groups.setdefault(key, []).append((name, module, pkg, layer))
    reports = []
    for (cls, layer, _, widths, dtype, dev), members in groups.items():
        _, module, pkg, _ = members[0]
        device = dev.type
        repo, variant, revision = _origin(pkg)
        shape = _shape(pkg, module, layer, dtype)
        v = timed_verdicts(
            pkg, pkg.reference, [shape], key=cache_key(revision, variant, device), device=device
        )
        verdict = v[shape]
        speeds = tuple(
            RowSpeed(rows, _path(pkg, shape, rows, device), c.kernel_us, c.fallback_us, c.ratio, c.passed)
            for c in verdict.cases
            for rows in [case_rows(c)]
        )
        own_at = ()
        if restore and not verdict.faster:
            for _, mod, _, _ in members:
                own_at = _keep_own_where_slower(mod, speeds)
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
                shape.key,
                speeds,
                verdict.faster,
                bool(speeds) and len(own_at) == len(speeds),
                verdict.cached,
                own_at,
            )
        )
    return KernelReport(tuple(reports))


def _widths(module: nn.Module) -> tuple[int, ...]:
    if hasattr(module, "gate_proj"):
        return (module.gate_proj.in_features, module.gate_proj.out_features)
    return tuple(module.c_fc.weight.shape) + (module.c_proj.weight.shape[1],)


def _shape(pkg: ModuleType, module: nn.Module, layer: str, dtype: torch.dtype) -> Shape:
    """The speed check's shape of `module`'s block: op, widths, activation (as our layer reads it), dtype."""
    name = str(dtype).removeprefix("torch.")
    if layer == GATED:
        return Shape("gated_mlp", _widths(module), pkg.layers.activation_of(module.act_fn), name)
    return Shape("mlp", _widths(module), pkg.layers.activation_of(module.act), name, bias=True, kmajor=True)


def _origin(pkg: ModuleType) -> tuple[str, str, str]:
    """(repo@revision, variant directory, revision) of a kernel package that `kernels` loaded."""
    from kernels import get_loaded_kernels

    where = Path(pkg.__file__).parent  # <variant>/<package>/__init__.py, or <variant>/__init__.py
    variant = where.name if (where / "metadata.json").exists() else where.parent.name
    for loaded in get_loaded_kernels():
        if loaded.module is pkg and loaded.repo_info is not None:
            rev = loaded.repo_info.revision
            return f"{loaded.repo_info.repo_id}@{rev[:12]}", variant, rev
    return "local", variant, str(where)


def _backend(pkg: ModuleType, device: str) -> str:
    if device == "cuda":
        return pkg.BACKEND
    return "triton (interpreter)" if getattr(pkg, "INTERPRET", False) else "reference"


def _path(pkg: ModuleType, shape: Shape, rows: int, device: str) -> str:
    """What our op ran at `rows` rows of `shape`: on a GPU the kernels it launched (one call under the profiler,
    so the decode rule, the path table and every fallback show as they happen), else the backend's name."""
    backend = _backend(pkg, device)
    if device != "cuda":
        return backend
    from torch.profiler import ProfilerActivity, profile

    a = shape_inputs(shape, rows, device)
    with torch.no_grad():
        shape_forward(shape, a, pkg)  # compiles and plans outside the profile
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            shape_forward(shape, a, pkg)
            torch.cuda.synchronize()
    names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    kernels = [_short_kernel(n) for n in names if not n.startswith(("Memcpy", "Memset"))]
    return f"{backend}: " + " + ".join(dict.fromkeys(kernels)) if kernels else backend


def _short_kernel(name: str) -> str:
    """A kernel's name without its template arguments and parameter list (cuBLAS's names run to 200 chars)."""
    base = name.split("<", 1)[0].split("(", 1)[0].strip()
    return base.rsplit(" ", 1)[-1].rsplit("::", 1)[-1][:48]
