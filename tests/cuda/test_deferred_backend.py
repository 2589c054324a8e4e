"""On a GPU, against the built variant (FUSED_MLP_VARIANT_DIR): importing fused_mlp does not start CUDA
(a warm get_kernel must not pay torch's CUDA start-up), and the backend is chosen when CUDA starts,
whichever comes first: a CUDA tensor, or reading BACKEND."""

import os
import subprocess
import sys

import pytest

FIRST_TENSOR = """
import torch, fused_mlp
assert not torch.cuda.is_initialized(), "importing fused_mlp started CUDA"
x = torch.randn(64, 96, device="cuda", dtype=torch.bfloat16)
w = torch.randn(3, 128, 96, device="cuda", dtype=torch.bfloat16) * 0.1
wd = torch.randn(96, 128, device="cuda", dtype=torch.bfloat16) * 0.1
y = fused_mlp.gated_mlp(x, w[0], w[1], wd, "silu")
want = fused_mlp.reference.gated_mlp(*(t.double() for t in (x, w[0], w[1], wd)), "silu")
err = float((y.double() - want).norm() / want.norm())
assert err < 2e-2, err
print(fused_mlp.BACKEND)
"""
FIRST_BACKEND = """
import torch, fused_mlp
assert not torch.cuda.is_initialized()
print(fused_mlp.BACKEND)
"""


@pytest.mark.gpu
@pytest.mark.parametrize("code", (FIRST_TENSOR, FIRST_BACKEND), ids=("tensor_first", "backend_first"))
def test_import_starts_no_cuda_and_cuda_start_chooses_the_backend(code):
    if not os.environ.get("FUSED_MLP_VARIANT_DIR"):
        pytest.skip("set FUSED_MLP_VARIANT_DIR to a built stable-ABI variant")
    env = {**os.environ, "PYTHONPATH": os.environ["FUSED_MLP_VARIANT_DIR"]}
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split()[-1] == "cuda", proc.stdout
