"""One launch path for every kernel: an AOT cubin when one was shipped for this spec, else Triton's JIT."""

from __future__ import annotations

from . import aot
from .specs import KernelDef


def launch(
    kdef: KernelDef, grid: tuple[int, ...], args: tuple, consts: tuple, num_warps: int, num_stages: int
) -> None:
    """Run `kdef` on `grid` with runtime `args` and constexpr values `consts` (both in declared order)."""
    compiled = aot.find(kdef, args, consts, num_warps, num_stages)
    if compiled is not None:
        compiled[(*grid, 1, 1)[:3]](*args, *consts)  # a CompiledKernel wants all three grid dims
        return
    named = dict(zip(kdef.constexprs, consts))
    options = {"launch_pdl": True} if named.get("PDL") else {}
    kdef.fn[grid](*args, **named, num_warps=num_warps, num_stages=num_stages, **options)
