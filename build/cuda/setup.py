"""setuptools recipe for the CUDA fused-MLP extension: one `_C.abi3.so` on the torch stable ABI.

Serves build_variant.py (`kernel-hub build`) and cibuildwheel on GitHub. Environment variables, each
defaulting to what build/matrix.toml and kernel_src/fused_mlp/_build_info.py say (build_variant.extension_env):
  FUSED_MLP_CSRC        folder holding the .cu sources
  FUSED_MLP_NS          torch op namespace baked into the binary (OPS_NAMESPACE)
  TORCH_TARGET_VERSION  lowest torch the binary runs on, as torch's 0xMMmm000000000000 constant
  TORCH_CUDA_ARCH_LIST  the arch list in torch's syntax
  FUSED_MLP_GEN         folder with the generated triton_table.gen.cpp (embed_cubins.py: Triton cubins + the
                        path table); unset: a table without cubins is generated here (cuBLASLt/CUDA only)
The CUDA libraries (cudart, cublasLt) are linked by soname with no rpath: torch has loaded them by
the time torch.ops.load_library opens this file.
"""

import os
import sys
import tomllib
from pathlib import Path

import torch
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))
import build_variant
import embed_cubins

matrix = tomllib.loads((REPO / "build" / "matrix.toml").read_text())
defaults = build_variant.extension_env(REPO / "kernel_src" / "fused_mlp", build_variant.cuda_plan(matrix))
env = {key: os.environ.get(key) or value for key, value in defaults.items()}
os.environ["TORCH_CUDA_ARCH_LIST"] = env["TORCH_CUDA_ARCH_LIST"]  # what torch's cpp_extension reads
csrc = Path(env["FUSED_MLP_CSRC"])
gen = os.environ.get("FUSED_MLP_GEN")
if (
    not gen
):  # cibuildwheel builds without the AOT step: the path table alone, every Triton row on its fallback
    gen = str(Path.cwd() / "build" / "fused_mlp_gen")
    note = "built by setup.py alone: no Triton cubins embedded"
    print(embed_cubins.write_sources(Path(gen), csrc.parent.parent, None, None, note).note)
cuda_libs = Path(torch.__file__).parent.parent / "nvidia" / "cu13"
defines = [
    "-DUSE_CUDA",
    f"-DTORCH_TARGET_VERSION={env['TORCH_TARGET_VERSION']}",
    f"-DFUSED_MLP_NS={env['FUSED_MLP_NS']}",
]

setup(
    name="fused-mlp-cuda",
    version=os.environ.get("FUSED_MLP_VERSION", "0.0.0"),
    packages=[],
    ext_modules=[
        CUDAExtension(
            name="fused_mlp.cuda._C",
            sources=sorted(str(p) for p in csrc.glob("*.cu")) + [str(Path(gen) / embed_cubins.GEN_SOURCE)],
            include_dirs=[str(csrc), str(cuda_libs / "include")],
            library_dirs=[str(cuda_libs / "lib")],
            # stdc++ first, so its symbols bind to libstdc++ with their versions, not to torch's copies.
            libraries=["stdc++", ":libcublasLt.so.13"],
            extra_compile_args={
                "cxx": ["-O3", "-std=c++17", *defines],
                "nvcc": ["-O3", "-std=c++17", "--expt-relaxed-constexpr", *defines],
            },
            extra_link_args=["-Wl,--as-needed", f"-Wl,--version-script={HERE / 'exports.map'}"],
            py_limited_api=True,
        )
    ],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)},
    options={"bdist_wheel": {"py_limited_api": "cp310"}},
)
