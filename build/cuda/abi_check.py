"""ABI rules for the CUDA extension, checked on the built `_C.abi3.so` without a GPU.

Rules (what `kernels` requires of a torch-stable-ABI variant, plus our arch promise):
- no glibc symbol above 2.28, no GLIBCXX above 3.4.24, no CXXABI above 1.3.11 (manylinux_2_28);
- no C++ torch symbols (c10::, at::, torch::): only the C shim (aoti_torch_*, torch_*);
- dynamic dependencies only on torch, its CUDA libraries and the base system libraries; no RPATH;
- SASS for exactly the matrix's archs and PTX for exactly its `ptx` archs.
Pure functions decide from tool output; `run_checks` gathers that output (readelf, cuobjdump,
kernel_abi_check in the CUDA build python) and returns one result per rule.
"""

from __future__ import annotations

import fnmatch
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

MAX_VERSIONS = {"GLIBC": (2, 28), "GLIBCXX": (3, 4, 24), "CXXABI": (1, 3, 11)}
ALLOWED_NEEDED = (
    "libtorch.so", "libtorch_cpu.so", "libtorch_cuda.so", "libc10.so", "libc10_cuda.so",
    "libcudart.so.13", "libcublasLt.so.13", "libcublas.so.13",
    "libstdc++.so.6", "libgcc_s.so.1", "libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0",
    "librt.so.1", "ld-linux-x86-64.so.2",
)  # fmt: skip
# Mangled names of C++ symbols in torch's namespaces: _ZN[K]<len><name>...
TORCH_CXX = re.compile(r"^_ZN?K?(3c10|2at|5torch|6caffe2)")


@dataclass(frozen=True)
class CheckResult:
    name: str
    ok: bool
    detail: str

    def as_dict(self) -> dict:
        return {"name": self.name, "ok": self.ok, "detail": self.detail}


@dataclass(frozen=True)
class Symbol:
    name: str
    version: str | None  # "GLIBC_2.14" or None
    undefined: bool


def parse_dynsyms(readelf_out: str) -> list[Symbol]:
    """Symbols of `readelf -W --dyn-syms` output."""
    syms = []
    for line in readelf_out.splitlines():
        cols = line.split()
        if len(cols) < 8 or not cols[0].rstrip(":").isdigit():
            continue
        name, _, version = cols[7].partition("@")
        syms.append(Symbol(name, version.lstrip("@") or None, cols[6] == "UND"))
    return syms


def parse_needed(readelf_dynamic: str) -> tuple[list[str], list[str]]:
    """(NEEDED sonames, RPATH/RUNPATH values) of `readelf -d` output."""
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", readelf_dynamic)
    paths = re.findall(r"\((?:RPATH|RUNPATH)\)\s+Library r(?:un)?path: \[([^\]]+)\]", readelf_dynamic)
    return needed, paths


def version_violations(symbols: list[Symbol]) -> list[str]:
    """'name@VERSION' for every undefined symbol whose version is above MAX_VERSIONS."""
    bad = []
    for s in symbols:
        if not (s.undefined and s.version):
            continue
        family, _, number = s.version.partition("_")
        limit = MAX_VERSIONS.get(family)
        if limit and number and tuple(int(p) for p in number.split(".")) > limit:
            bad.append(f"{s.name}@{s.version}")
    return sorted(bad)


def torch_cxx_symbols(symbols: list[Symbol]) -> list[str]:
    """Undefined C++ symbols from torch's namespaces (the stable ABI allows only the C shim)."""
    return sorted(s.name for s in symbols if s.undefined and TORCH_CXX.match(s.name))


def needed_violations(needed: list[str]) -> list[str]:
    return [lib for lib in needed if not any(fnmatch.fnmatch(lib, pat) for pat in ALLOWED_NEEDED)]


def parse_cuobjdump_archs(elf_dump: str, ptx_list: str) -> tuple[set[str], set[str]]:
    """(SASS archs from `cuobjdump -elf` 'arch = sm_90a' lines, PTX archs from `cuobjdump --list-ptx`)."""
    sass = set(re.findall(r"^arch = (sm_\w+)$", elf_dump, flags=re.MULTILINE))
    ptx = set(re.findall(r"\.(sm_\w+)\.ptx", ptx_list))
    return sass, ptx


def arch_result(sass: set[str], ptx: set[str], want_sass: list[str], want_ptx: list[str]) -> CheckResult:
    ok = sass == set(want_sass) and ptx == set(want_ptx)
    detail = f"SASS {sorted(sass)}, PTX {sorted(ptx)}"
    if not ok:
        detail += f"; the matrix asks for SASS {sorted(want_sass)}, PTX {sorted(want_ptx)}"
    return CheckResult("archs", ok, detail)


def _run(cmd: list[str]) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return proc.stdout


def kernel_abi_check(so: Path, python: str) -> CheckResult:
    """The `kernel-abi-check` package's manylinux_2_28 and Python 3.10 abi3 checks, run in `python`."""
    code = (
        "import sys, kernel_abi_check as k; o = k.ObjectFile(sys.argv[1]); "
        "bad = o.check_manylinux('manylinux_2_28') + o.check_python_abi('3.10'); print('\\n'.join(map(repr, bad)))"
    )
    out = _run([python, "-c", code, str(so)]).strip()
    return CheckResult("kernel-abi-check manylinux_2_28 + abi3 3.10", not out, out or "no violations")


def run_checks(
    so: Path, cuobjdump: str, python: str, want_sass: list[str], want_ptx: list[str]
) -> list[CheckResult]:
    """Every ABI and arch rule on `so`; `python` has kernel_abi_check installed."""
    symbols = parse_dynsyms(_run(["readelf", "-W", "--dyn-syms", str(so)]))
    needed, paths = parse_needed(_run(["readelf", "-d", str(so)]))
    too_new = version_violations(symbols)
    cxx = torch_cxx_symbols(symbols)
    foreign = needed_violations(needed)
    sass, ptx = parse_cuobjdump_archs(
        _run([cuobjdump, "-elf", str(so)]), _run([cuobjdump, "--list-ptx", str(so)])
    )
    return [
        CheckResult("symbol versions <= GLIBC 2.28 / GLIBCXX 3.4.24 / CXXABI 1.3.11", not too_new,
                    ", ".join(too_new) or "ok"),
        CheckResult("no C++ torch symbols (C shim only)", not cxx, ", ".join(cxx[:20]) or "ok"),
        CheckResult("dependencies: torch, its CUDA libraries, system", not foreign and not paths,
                    f"needed {needed}" + (f"; unexpected {foreign}" if foreign else "")
                    + (f"; rpath {paths}" if paths else "")),
        kernel_abi_check(so, python),
        arch_result(sass, ptx, want_sass, want_ptx),
    ]  # fmt: skip
