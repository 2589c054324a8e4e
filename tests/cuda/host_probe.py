"""Host-only probes of the CUDA launcher's C++ (tests/cuda/cpp/*.cu): compiled with nvcc against a generated
table (build/cuda/embed_cubins.py's triton_table.gen.cpp) and triton_launch.cu, run with no GPU, so tests read
the choices C++ makes. Needs the CUDA toolchain (KERNEL_HUB_CUDA_PYTHON: nvcc and CUDA torch headers)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "build" / "cuda"))
import build_variant

CSRC = REPO / "kernel_src" / "fused_mlp" / "cuda" / "csrc"


def compile_probe(probe: str, gen_source: Path, out: Path, namespace: str) -> Path:
    """tests/cuda/cpp/`probe` linked with triton_launch.cu and `gen_source` into the executable `out`."""
    tools = build_variant.find_toolchain(os.environ.get("KERNEL_HUB_CUDA_PYTHON"))
    torch_dir = subprocess.run([tools.python, "-c", "import torch, os; print(os.path.dirname(torch.__file__))"],
                               capture_output=True, text=True, check=True).stdout.split()[-1]  # fmt: skip
    cmd = [str(tools.cuda_home / "bin" / "nvcc"), "-std=c++17", "-O1", "--expt-relaxed-constexpr", "-DUSE_CUDA",
           "-DTORCH_TARGET_VERSION=0x020b000000000000", f"-DFUSED_MLP_NS={namespace}", f"-I{CSRC}",
           f"-I{torch_dir}/include", str(REPO / "tests" / "cuda" / "cpp" / probe), str(CSRC / "triton_launch.cu"),
           str(gen_source), "-o", str(out), f"-L{tools.cuda_home / 'lib64'}", "-lcudart"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def run_probe(probe: Path, stdin: str = "", **env: str) -> str:
    """The probe's stdout (it must exit 0); `env` added to this process's environment."""
    result = subprocess.run([str(probe)], input=stdin, capture_output=True, text=True,
                            env={**os.environ, **env}, check=False)  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout
