"""ptxas with a pinned memory layout, so the same PTX always gives the same cubin (build time only).

Why: Triton 3.6 compiles sm_100+ with its own `ptxas-blackwell` (CUDA 12.9), whose register allocation
depends on where its heap objects land: run twice on one PTX file, it returns one of two cubins
(registers swapped, e.g. R36 <-> R40; seen on sm_100a `linear_kernel` specs). With address-space randomization off the choice is fixed, but it still moves with
anything that shifts the heap: the length of the PTX file's temporary name, the working directory, the
environment. So `run` calls the real ptxas with ASLR off (`personality(ADDR_NO_RANDOMIZE)`, what
`setarch -R` does), an empty environment, and fixed argv and file names in a fresh directory.

`aot_build.compile_specs` points Triton at this (`TRITON_PTXAS_PATH`, `TRITON_PTXAS_BLACKWELL_PATH`) through
a two-line shim: `<python> ptxas_pin.py <real ptxas> <ptxas args...>`. Stdlib only: it runs as a script.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
import tempfile

ADDR_NO_RANDOMIZE = 0x0040000
_SRC, _OUT = "kernel.ptx", "kernel.cubin"


def _no_aslr() -> None:
    """Turn address-space randomization off for this process and what it executes (Linux)."""
    libc = ctypes.CDLL(None, use_errno=True)
    current = libc.personality(0xFFFFFFFF)  # 0xffffffff only reads the persona
    if current == -1 or libc.personality(current | ADDR_NO_RANDOMIZE) == -1:
        raise OSError(ctypes.get_errno(), "personality(ADDR_NO_RANDOMIZE) refused")


def aslr_switchable() -> bool:
    """Whether this machine lets a child run with ASLR off (e.g. Docker's default seccomp profile refuses)."""
    try:
        subprocess.run([sys.executable, "-c", ""], check=True, preexec_fn=_no_aslr)
    except (subprocess.SubprocessError, OSError):
        return False
    return True


def pinned_argv(args: list[str]) -> tuple[list[str], str, str]:
    """(ptxas argv with fixed file names, the caller's PTX path, the caller's output path)."""
    src = [a for a in args if a.endswith(".ptx")]
    if len(src) != 1 or args.count("-o") != 1 or args.index("-o") + 1 >= len(args):
        raise ValueError(f"expected one .ptx input and one `-o OUT` in ptxas arguments {args}")
    out = args[args.index("-o") + 1]
    flags = [a for i, a in enumerate(args) if a != src[0] and a != "-o" and (i == 0 or args[i - 1] != "-o")]
    return ["ptxas", *flags, _SRC, "-o", _OUT], src[0], out


def run(real: str, args: list[str]) -> int:
    """Run the real ptxas on the caller's files with a pinned layout; returns its exit code."""
    if "--version" in args:  # Triton's version probe: nothing to pin
        os.execv(real, [real, *args])
    argv, src, out = pinned_argv(args)
    with tempfile.TemporaryDirectory(prefix="ptxas-pin-") as work:
        shutil.copyfile(src, os.path.join(work, _SRC))
        try:
            proc = subprocess.run(argv, executable=real, cwd=work, env={}, preexec_fn=_no_aslr, check=False)
        except subprocess.SubprocessError:  # ASLR cannot be switched off here: same inputs, no pin
            proc = subprocess.run(argv, executable=real, cwd=work, env={}, check=False)
        if proc.returncode == 0:
            shutil.copyfile(os.path.join(work, _OUT), out)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(run(sys.argv[1], sys.argv[2:]))
