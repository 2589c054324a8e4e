"""GPU arch notation and which built code runs on which device.

Two spellings name one compute capability: `sm_90a` (build archs, `build/matrix.toml`, our metadata
`archs`) and `9.0a` (kernels' `backend.archs`, torch's TORCH_CUDA_ARCH_LIST). Suffix `a` = arch-specific
(runs on exactly that cc), `f` = family-specific. The rules: SASS for `sm_XY` runs on X.Z with Z >= Y
(same major), `sm_XYa` only on exactly X.Y; PTX for `sm_XY` is JIT-compiled for any cc >= X.Y.

The kernel package keeps its own copy, `kernel_src/fused_mlp/arch.py` (the CUDA recipe `build/cuda/` reads it):
both run without kernel-hub installed (docs/ARCHITECTURE.md); tests/test_arch_notation.py checks they agree.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# `sm_` + major + one minor digit + optional suffix; the non-greedy major makes sm_100a = 10.0a.
SM_PATTERN = r"sm_(\d+?)(\d)([af]?)"
_SM_RE = re.compile(SM_PATTERN)
_DOTTED_RE = re.compile(r"(\d+)\.(\d+)([af]?)")


@dataclass(frozen=True, order=True)
class Arch:
    """A CUDA compute capability as named in builds: sm_90 / sm_90a / sm_100f, or 9.0 / 9.0a."""

    major: int
    minor: int
    suffix: str = ""  # "a" = arch-specific (runs on exactly this cc), "f" = family-specific

    @property
    def name(self) -> str:
        """`sm_90a`."""
        return f"sm_{self.major}{self.minor}{self.suffix}"

    def dotted(self, ptx: bool = False) -> str:
        """`9.0a`, the notation of kernels' backend.archs and TORCH_CUDA_ARCH_LIST (`+PTX` when `ptx`)."""
        return f"{self.major}.{self.minor}{self.suffix}" + ("+PTX" if ptx else "")

    def same_cc(self, other: Arch) -> bool:
        """Same compute capability, whatever the suffixes."""
        return (self.major, self.minor) == (other.major, other.minor)


def parse_arch(text: str) -> Arch:
    """`sm_90a` or `9.0a` -> Arch(9, 0, "a"); raises ValueError on anything else."""
    text = text.strip().lower()
    m = _SM_RE.fullmatch(text) or _DOTTED_RE.fullmatch(text)
    if not m:
        raise ValueError(f"GPU arch {text!r} is neither sm_XY[a|f] nor X.Y[a|f]")
    return Arch(int(m.group(1)), int(m.group(2)), m.group(3))


def parse_sm(text: str) -> Arch:
    """Only the build spelling `sm_XY[a|f]` (what build/matrix.toml lists); raises ValueError otherwise."""
    m = _SM_RE.fullmatch(text)
    if not m:
        raise ValueError(f"GPU arch {text!r} is not of the form sm_<major><minor>[a|f] (e.g. sm_90a)")
    return Arch(int(m.group(1)), int(m.group(2)), m.group(3))


def sass_runs_on(build: Arch, device: Arch) -> bool:
    """SASS for sm_XY runs on X.Z with Z >= Y (same major); sm_XYa only on exactly X.Y."""
    if build.suffix == "a":
        return build.same_cc(device)
    return build.major == device.major and device.minor >= build.minor


def ptx_runs_on(build: Arch, device: Arch) -> bool:
    """PTX for sm_XY is JIT-compiled by the driver for any cc >= X.Y; arch-specific PTX only for X.Y."""
    if build.suffix == "a":
        return build.same_cc(device)
    return (device.major, device.minor) >= (build.major, build.minor)
