"""setuptools recipe for the CUDA fused-MLP extension: one `_C.abi3.so` on the torch stable ABI.

Driven by environment variables so the same file serves `kernel-hub build` (through
build_variant.py) and cibuildwheel on GitHub:
  FUSED_MLP_CSRC        folder holding the .cu sources (kernel_src/fused_mlp/cuda/csrc)
  FUSED_MLP_NS          torch op namespace baked into the binary (fused_mlp/_build_info.py OPS_NAMESPACE)
  TORCH_TARGET_VERSION  lowest torch the binary runs on, as torch's 0xMMmm000000000000 constant
  TORCH_CUDA_ARCH_LIST  the arch list (torch's syntax), from build/matrix.toml
The CUDA libraries (cudart, cublasLt) are linked by soname with no rpath: torch has loaded them by
the time torch.ops.load_library opens this file.
"""

import os
from pathlib import Path

import torch
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension


def required_env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise SystemExit(f"build/cuda/setup.py: set {name} (see the module docstring); it is empty")
    return value


csrc = Path(required_env("FUSED_MLP_CSRC"))
namespace = required_env("FUSED_MLP_NS")
target = required_env("TORCH_TARGET_VERSION")
required_env("TORCH_CUDA_ARCH_LIST")
cuda_libs = Path(torch.__file__).parent.parent / "nvidia" / "cu13"
defines = [
    "-DUSE_CUDA",
    f"-DTORCH_TARGET_VERSION={target}",
    f"-DFUSED_MLP_NS={namespace}",
]

setup(
    name="fused-mlp-cuda",
    version=os.environ.get("FUSED_MLP_VERSION", "0.0.0"),
    packages=[],
    ext_modules=[
        CUDAExtension(
            name="fused_mlp.cuda._C",
            sources=sorted(str(p) for p in csrc.glob("*.cu")),
            include_dirs=[str(csrc), str(cuda_libs / "include")],
            library_dirs=[str(cuda_libs / "lib")],
            # stdc++ first, so its symbols bind to libstdc++ with their versions, not to torch's copies.
            libraries=["stdc++", ":libcublasLt.so.13"],
            extra_compile_args={
                "cxx": ["-O3", "-std=c++17", *defines],
                "nvcc": ["-O3", "-std=c++17", "--expt-relaxed-constexpr", *defines],
            },
            extra_link_args=["-Wl,--as-needed", f"-Wl,--version-script={Path(__file__).parent / 'exports.map'}"],
            py_limited_api=True,
        )
    ],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)},
    options={"bdist_wheel": {"py_limited_api": "cp310"}},
)
