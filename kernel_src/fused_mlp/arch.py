"""GPU arch notation of the kernel package: parse `sm_90a` / `9.0a`, name a device's arch, compare.

Every arch string the package reads goes through here (config tables, PDL, the CUDA backend's build record,
the AOT build's Triton target; build/cuda/ loads this file by path). The package ships without kernel-hub, so
it keeps its own copy of registry/spec/arch.py's rules; tests/test_arch_notation.py checks that they agree.
Stdlib only: the build reads it without torch.

Suffix `a` = arch-specific (SASS and PTX run on exactly that compute capability), `f` = family-specific.
SASS for `sm_XY` runs on X.Z with Z >= Y (same major); PTX for `sm_XY` on any cc >= X.Y.
"""

from __future__ import annotations

import re
from typing import NamedTuple

# `sm_` + major + one minor digit + optional suffix; the non-greedy major makes sm_100a = 10.0a.
_SM_RE = re.compile(r"sm_(\d+?)(\d)([af]?)")
_DOTTED_RE = re.compile(r"(\d+)\.(\d+)([af]?)")

# Capabilities whose Triton cubins (target 90 / 100) are arch-specific (wgmma, tcgen05): our name for them
# carries the `a`.
_ARCH_SPECIFIC_CCS = ((9, 0), (10, 0))


class Arch(NamedTuple):
    """A compute capability as builds name it: `sm_90a` = Arch(9, 0, "a")."""

    major: int
    minor: int
    suffix: str = ""

    @property
    def cc(self) -> tuple[int, int]:
        """(major, minor), what torch.cuda.get_device_capability returns."""
        return self.major, self.minor

    @property
    def number(self) -> int:
        """major * 10 + minor: Triton's GPUTarget arch and the path table's SM code (sm_100a -> 100)."""
        return self.major * 10 + self.minor

    @property
    def name(self) -> str:
        """`sm_90a`."""
        return f"sm_{self.major}{self.minor}{self.suffix}"

    def dotted(self, ptx: bool = False) -> str:
        """`9.0a`, torch's TORCH_CUDA_ARCH_LIST notation (`+PTX` when `ptx`)."""
        return f"{self.major}.{self.minor}{self.suffix}" + ("+PTX" if ptx else "")


def parse_arch(text: str) -> Arch:
    """`sm_90a` or `9.0a` -> Arch(9, 0, "a"); ValueError on anything else."""
    text = text.strip().lower()
    m = _SM_RE.fullmatch(text) or _DOTTED_RE.fullmatch(text)
    if not m:
        raise ValueError(f"GPU arch {text!r} is neither sm_XY[a|f] nor X.Y[a|f]")
    return Arch(int(m.group(1)), int(m.group(2)), m.group(3))


def is_arch(text: str) -> bool:
    """Whether `text` names a GPU arch (not a table key such as "default" or "interpreter")."""
    try:
        parse_arch(text)
    except ValueError:
        return False
    return True


def arch_of(capability: tuple[int, int] | None) -> str:
    """Our arch name for a device capability (`sm_90a` for (9, 0), `sm_86`); None = "interpreter" (CPU)."""
    if capability is None:
        return "interpreter"
    major, minor = capability
    return Arch(major, minor, "a" if (major, minor) in _ARCH_SPECIFIC_CCS else "").name


def at_least(arch: str, cc: tuple[int, int]) -> bool:
    """Whether `arch` ("sm_100a") is a GPU of compute capability `cc` or newer; False for non-arch names."""
    return is_arch(arch) and parse_arch(arch).cc >= cc


def sass_runs_on(build: str | Arch, device_cc: tuple[int, int]) -> bool:
    """SASS for sm_XY runs on X.Z with Z >= Y (same major); sm_XYa only on exactly X.Y."""
    b = parse_arch(build) if isinstance(build, str) else build
    if b.suffix == "a":
        return device_cc == b.cc
    return device_cc[0] == b.major and device_cc[1] >= b.minor


def ptx_runs_on(build: str | Arch, device_cc: tuple[int, int]) -> bool:
    """PTX for sm_XY is JIT-compiled by the driver for any cc >= X.Y; arch-specific PTX only for X.Y."""
    b = parse_arch(build) if isinstance(build, str) else build
    if b.suffix == "a":
        return device_cc == b.cc
    return device_cc >= b.cc
