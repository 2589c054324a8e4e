"""The stable-ABI CUDA extension of a build.toml package: its `[torch]` and `[kernel.*]` sources -> `_C.abi3.so`.

Compiled with nvcc against a CUDA torch's headers (no GPU needed) as one abi3 library on the torch stable
ABI (`-DTORCH_TARGET_VERSION`), loaded unchanged by every torch >= the target. The op namespace of the build
(`_build_info.OPS_NAMESPACE`) is passed as `TORCH_EXTENSION_NAME`, as kernel-builder does, so the sources
register `STABLE_TORCH_LIBRARY(TORCH_EXTENSION_NAME, m)` and two builds never collide. The library goes to
`<package>/_C.abi3.so`; the package loads it with `torch.ops.load_library`. A library that needs torch C++
symbols is refused (it would load only in the torch it was built against). fused_mlp's extension has its own
recipe, build/cuda/, for its embedded Triton cubins and its full ABI checks (glibc, NEEDED, archs).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from registry import constants
from registry.spec.arch import parse_sm
from registry.spec.package import KernelPackage

from .errors import BuildError

EXTENSION_FILE = "_C.abi3.so"
_TIMEOUT_S = 1800

_SETUP = """
import sys
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension
sources, defines, out, tmp = {sources!r}, {defines!r}, {out!r}, {tmp!r}
setup(
    name="kernel_ext",
    ext_modules=[CUDAExtension(  # the name becomes TORCH_EXTENSION_NAME: the build's op namespace
        name={namespace!r}, sources=sources, py_limited_api=True,
        extra_compile_args={{"cxx": ["-O3", "-std=c++17", *defines], "nvcc": ["-O3", "-std=c++17", *defines]}},
        extra_link_args=["-Wl,--strip-all"],
    )],
    cmdclass={{"build_ext": BuildExtension.with_options(use_ninja=False)}},
    script_args=["-q", "build_ext", "--build-lib", out, "--build-temp", tmp],
)
"""


def torch_arch_list(archs: list[str], ptx: list[str]) -> str:
    """TORCH_CUDA_ARCH_LIST for SASS `archs` (+PTX where listed): sm_90a -> 9.0a, sm_120 -> 12.0+PTX."""
    return ";".join(parse_sm(a).dotted(ptx=a in ptx) for a in archs)


def torch_target_hex(version: str) -> str:
    """torch's TORCH_TARGET_VERSION constant for "2.11": 0x020b000000000000."""
    major, minor = (int(p) for p in version.split(".")[:2])
    return f"0x{major:02x}{minor:02x}000000000000"


# Mangled C++ names in torch's namespaces (c10::, at::, torch::, caffe2::): a library that needs one is tied to
# the torch it was compiled against, not on the stable ABI (which offers only the C shim, aoti_torch_*).
_TORCH_CXX = re.compile(r"^_ZN?K?(3c10|2at|5torch|6caffe2)")


def torch_cxx_symbols(readelf_dyn_syms: str) -> list[str]:
    """The undefined torch C++ symbols in `readelf -W --dyn-syms` output ([] = stable ABI only)."""
    found = []
    for line in readelf_dyn_syms.splitlines():
        cols = line.split()
        if len(cols) >= 8 and cols[0].rstrip(":").isdigit() and cols[6] == "UND":
            name = cols[7].split("@")[0]
            if _TORCH_CXX.match(name):
                found.append(name)
    return sorted(set(found))


def stable_abi_problem(library: Path) -> str | None:
    """Why `library` is not on the torch stable ABI, or None; a note instead when readelf is missing."""
    readelf = shutil.which("readelf")
    if readelf is None:
        return None
    out = subprocess.run(
        [readelf, "-W", "--dyn-syms", str(library)], capture_output=True, text=True, check=False
    )
    cxx = torch_cxx_symbols(out.stdout)
    if not cxx:
        return None
    return (
        f"it uses torch C++ symbols ({', '.join(cxx[:3])}{', ...' if len(cxx) > 3 else ''}), so it would load only "
        "in the torch it was built against: use the stable API (torch/csrc/stable/*.h, STABLE_TORCH_LIBRARY)"
    )


def _torch_cuda(python: str) -> str | None:
    proc = subprocess.run(
        [python, "-c", "import torch; print(torch.version.cuda)"], capture_output=True, text=True, check=False
    )
    out = proc.stdout.strip().splitlines()
    return out[-1] if proc.returncode == 0 and out and out[-1] != "None" else None


def find_toolchain(cuda: str) -> tuple[str, Path] | str:
    """(a python with a CUDA `cuda` torch, CUDA_HOME with nvcc), or why this machine cannot compile."""
    major = cuda.split(".")[0]
    home = Path(constants.cuda_home() or f"/usr/local/cuda-{major}.0")
    if not (home / "bin" / "nvcc").exists():
        nvcc = shutil.which("nvcc")
        if nvcc is None:
            return f"no nvcc ({home}/bin/nvcc does not exist, none on PATH): install CUDA {cuda} or set CUDA_HOME"
        home = Path(nvcc).resolve().parent.parent
    tried = []
    for python in dict.fromkeys(p for p in (constants.cuda_python(), sys.executable) if p):
        version = _torch_cuda(python)
        if version and version.split(".")[0] == major:
            return python, home
        tried.append(f"{python}: torch {'for CUDA ' + version if version else 'without CUDA'}")
    return (
        f"no python with a CUDA {major} torch (tried {'; '.join(tried)}): set {constants.CUDA_PYTHON} to one "
        "(`make venv-cuda` makes .venv-cuda)"
    )


def unavailable_reason(cuda: str) -> str | None:
    found = find_toolchain(cuda)
    return found if isinstance(found, str) else None


def build_extension(
    pkg: KernelPackage, package_dir: Path, namespace: str, archs: list[str], ptx: list[str], scratch: Path
) -> str:
    """Compile pkg's CUDA sources into `package_dir/_C.abi3.so`; returns the note recorded in metadata."""
    found = find_toolchain(pkg.cuda)
    if isinstance(found, str):
        raise BuildError(f"cannot build the CUDA extension: {found}")
    python, home = found
    # The library is linked stripped: the symbol table would carry nvcc's temp file names (pid-numbered)
    # and the build folder, so two builds of the same sources would differ.
    work = Path(scratch) / "cuda-ext" / pkg.python_name
    shutil.rmtree(work, ignore_errors=True)
    (work / "out").mkdir(parents=True)
    defines = ["-DUSE_CUDA", f"-DTORCH_TARGET_VERSION={torch_target_hex(pkg.torch_target)}"]
    sources = [str(p) for p in pkg.cuda_sources]
    code = _SETUP.format(
        namespace=namespace, sources=sources, defines=defines, out=str(work / "out"), tmp=str(work / "tmp")
    )
    env = {
        **os.environ,
        constants.CUDA_HOME: str(home),
        constants.PATH: os.pathsep.join(
            [str(Path(python).parent), str(home / "bin"), constants.search_path()]
        ),
        "TORCH_CUDA_ARCH_LIST": torch_arch_list(archs, ptx),
        constants.MAX_JOBS: constants.max_jobs("2"),
    }
    try:
        proc = subprocess.run(
            [python, "-c", code],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise BuildError(f"nvcc build of {pkg.name} did not finish within {_TIMEOUT_S} s") from None
    built = sorted((work / "out").glob(f"{namespace}*.so"))
    if proc.returncode != 0 or not built:
        lines = (proc.stdout + proc.stderr).strip().splitlines()
        errors = [ln for ln in lines if "error" in ln][:20]
        raise BuildError(
            f"nvcc build of {pkg.name}'s CUDA sources failed (exit {proc.returncode}):\n"
            + "\n".join(errors + lines[-20:])
        )
    problem = stable_abi_problem(built[0])
    if problem:
        raise BuildError(f"the CUDA extension of {pkg.name} is not on the torch stable ABI: {problem}")
    shutil.copyfile(built[0], Path(package_dir) / EXTENSION_FILE)
    return (
        f"CUDA extension {EXTENSION_FILE} from {len(sources)} source(s) for {', '.join(archs)} "
        f"(PTX: {', '.join(ptx) or 'none'}), torch stable ABI >= {pkg.torch_target}"
    )
