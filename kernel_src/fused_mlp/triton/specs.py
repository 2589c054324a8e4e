"""What one compiled kernel specialization is, shared by the launcher, the AOT loader and the AOT build:
a kernel's parameter list (`KernelDef`), one specialization of it (`AotSpec`), and the Triton source that
compiles or loads it. No kernel module, launcher or build code is imported here (no import cycles)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class KernelDef:
    """A Triton kernel plus its parameter list: runtime params as (name, kind), then constexpr names.

    kind is "ptr" (tensor in the op's dtype, compiled as 16-byte aligned), "i32" (no assumption), or
    "i32:16" (AOT cubins assume a multiple of 16; a launch whose value is not one uses the JIT).
    docs/CONTRACTS.md "Kernel families" documents each family for launchers outside Python.
    """

    fn: Any
    params: tuple[tuple[str, str], ...]
    constexprs: tuple[str, ...]

    @property
    def name(self) -> str:
        return self.fn.__name__ if hasattr(self.fn, "__name__") else self.fn.fn.__name__


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


def ast_source(kdef: KernelDef, spec: AotSpec):
    """The ASTSource Triton compiles `spec` from (and rebuilds a shipped cubin's launcher from)."""
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
