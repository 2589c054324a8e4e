"""The CUDA backend's cuBLASLt plans by real operand alignment (gemm.h: alignment_of up to 256 bytes, as torch's
own cuBLASLt calls report it; fresh buffers planned at kFreshAlign = 256).

- Operands at every alignment from 16 to 256 bytes (slices of a larger buffer) give the float64 result,
  forward and backward, on the cuBLASLt path and on the table's own paths: each alignment is its own plan.
- An allocator whose blocks are only 16-byte aligned (a pluggable allocator in a child process, since an
  allocator must be chosen before the first CUDA allocation) still gets correct results: gemm_run sees that
  a fresh buffer is less aligned than planned and runs a plan for its real alignment.
Runs against a built variant, as tests/cuda/test_cuda_gpu.py."""

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parents[1] / "kernels"))
import fused_mlp.reference as ref
from fused_mlp import cuda as cuda_backend
from kernel_numerics import as64, assert_close, randn
from path_forcing import forced
from test_cuda_gpu import check_grads

OK, WHY = cuda_backend.available() if torch.cuda.is_available() else (False, "no CUDA device")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not OK, reason=f"CUDA backend unavailable: {WHY}")]
if OK:
    from fused_mlp.cuda import ops
DEV = "cuda"


def at_offset(shape, offset_bytes: int, dtype, scale=1.0, grad=False) -> torch.Tensor:
    """A fresh normal tensor whose data starts `offset_bytes` after a 512-byte aligned block."""
    n = 1
    for s in shape:
        n *= s
    skip = offset_bytes // torch.empty((), dtype=dtype).element_size()
    base = randn(n + skip, dtype=dtype, device=DEV, scale=scale)
    t = base[skip:].view(*shape)
    assert t.data_ptr() % 512 == offset_bytes % 512
    return t.detach().requires_grad_(grad)


@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float16))
@pytest.mark.parametrize("offset", (16, 32, 64, 128, 256))
@pytest.mark.parametrize("impl", ("cublaslt", "table"))
def test_every_operand_alignment_forward_and_backward(dtype, offset, impl):
    """mlp (gelu_tanh: cuBLASLt's GELU_BIAS epilogue; relu's gradient flips on rounding, see test_cuda_gpu)
    and gated_mlp with x, every weight and bias `offset` bytes past a 512-byte boundary,
    forward and backward against float64, at a row count where the table runs cuBLASLt (1100) and one where
    it runs Triton or the chain kernel (16)."""
    with forced("linear", impl):
        for rows in (16, 1100):
            x = at_offset((rows, 256), offset, dtype, grad=True)
            ws = [
                at_offset((o, i), offset, dtype, scale=i**-0.5, grad=True)
                for i, o in ((256, 384), (384, 256))
            ]
            bs = [at_offset((o,), offset, dtype, grad=True) for o in (384, 256)]
            out = ops.mlp(x, ws, bs, "gelu_tanh")
            p64 = as64(x, *ws, *bs)
            expected = ref.mlp(p64[0], p64[1:3], p64[3:], "gelu_tanh")
            what = f"mlp rows={rows} offset={offset} linear={impl}"
            assert_close(out, expected, dtype, what)
            check_grads(out, (x, *ws, *bs), expected, p64, dtype, what)

            x = at_offset((rows, 256), offset, dtype, grad=True)
            wg, wu = (at_offset((512, 256), offset, dtype, scale=256**-0.5, grad=True) for _ in range(2))
            wd = at_offset((256, 512), offset, dtype, scale=512**-0.5, grad=True)
            out = ops.gated_mlp(x, wg, wu, wd, "gelu_tanh")
            p64 = as64(x, wg, wu, wd)
            expected = ref.gated_mlp(*p64, "gelu_tanh")
            what = f"gated rows={rows} offset={offset} linear={impl}"
            assert_close(out, expected, dtype, what)
            check_grads(out, (x, wg, wu, wd), expected, p64, dtype, what)


# A CUDA allocator for torch.cuda.memory.CUDAPluggableAllocator whose blocks start 16 bytes past cudaMalloc's
# (256-byte aligned) address. cudaMalloc/cudaFree come from the CUDA runtime torch has already loaded.
ALLOCATOR_C = r"""
#include <dlfcn.h>
#include <stddef.h>
#include <sys/types.h>
typedef int (*malloc_fn)(void**, size_t);
typedef int (*free_fn)(void*);
static malloc_fn cuda_malloc;
static free_fn cuda_free;
static void* runtime(void) {
  const char* names[] = {"libcudart.so.13", "libcudart.so.12", "libcudart.so", 0};
  for (int i = 0; names[i]; ++i) {
    void* h = dlopen(names[i], RTLD_NOW | RTLD_NOLOAD);
    if (!h) h = dlopen(names[i], RTLD_NOW);
    if (h) return h;
  }
  return RTLD_DEFAULT;
}
void* off16_malloc(ssize_t size, int device, void* stream) {
  void* p = 0;
  if (!cuda_malloc) {
    void* h = runtime();
    cuda_malloc = (malloc_fn)dlsym(h, "cudaMalloc");
    cuda_free = (free_fn)dlsym(h, "cudaFree");
  }
  if (!cuda_malloc || cuda_malloc(&p, (size_t)size + 256) != 0) return 0;
  return (char*)p + 16;
}
void off16_free(void* ptr, ssize_t size, int device, void* stream) {
  if (ptr && cuda_free) cuda_free((char*)ptr - 16);
}
"""

CHILD = """
import json, sys, torch
sys.path.insert(0, {numerics!r})
alloc = torch.cuda.memory.CUDAPluggableAllocator({so!r}, "off16_malloc", "off16_free")
torch.cuda.memory.change_current_allocator(alloc)
import fused_mlp.reference as ref
from fused_mlp.cuda import ops
from kernel_numerics import as64, rel_err, randn
out = {{}}
for rows in (16, 1100, 4096):
    for dtype in (torch.bfloat16, torch.float16):
        x = randn(rows, 1024, dtype=dtype, device="cuda", grad=True)
        assert x.data_ptr() % 256 == 16, hex(x.data_ptr())
        ws = [randn(1024, 1024, dtype=dtype, device="cuda", scale=1024**-0.5, grad=True) for _ in range(3)]
        bs = [randn(1024, dtype=dtype, device="cuda", grad=True) for _ in range(3)]
        y = ops.mlp(x, ws, bs, "gelu_tanh")
        p64 = as64(x, *ws, *bs)
        want = ref.mlp(p64[0], p64[1:4], p64[4:], "gelu_tanh")
        up = torch.randn(want.shape, dtype=torch.float64, device="cuda")
        got_g = torch.autograd.grad(y, [x, *ws], up.to(dtype))
        want_g = torch.autograd.grad(want, [p64[0], *p64[1:4]], up)
        wg, wu = (randn(3072, 768, dtype=dtype, device="cuda", scale=768**-0.5, grad=True) for _ in range(2))
        wd = randn(768, 3072, dtype=dtype, device="cuda", scale=3072**-0.5, grad=True)
        xg = randn(rows, 768, dtype=dtype, device="cuda", grad=True)
        yg = ops.gated_mlp(xg, wg, wu, wd, "gelu_tanh")
        q64 = as64(xg, wg, wu, wd)
        wantg = ref.gated_mlp(*q64, "gelu_tanh")
        upg = torch.randn(wantg.shape, dtype=torch.float64, device="cuda")
        got_gg = torch.autograd.grad(yg, [xg, wg, wu, wd], upg.to(dtype))
        want_gg = torch.autograd.grad(wantg, q64, upg)
        with torch.no_grad():  # the relu epilogue, forward (its gradient flips on rounding: test_cuda_gpu)
            relu_err = rel_err(ops.mlp(x, ws, bs, "relu"), ref.mlp(p64[0], p64[1:4], p64[4:], "relu"))
        errs = [relu_err, rel_err(y, want)] + [rel_err(a, b) for a, b in zip(got_g, want_g)]
        errs += [rel_err(yg, wantg)] + [rel_err(a, b) for a, b in zip(got_gg, want_gg)]
        out[f"{{rows}} {{dtype}}"] = errs
print("ERRS", json.dumps(out))
"""


def test_allocator_with_16_byte_aligned_blocks_still_gives_correct_results(tmp_path):
    """Outputs and scratch from an allocator that aligns blocks to 16 bytes only (planned as 256): every op,
    forward and backward, at 16/1100/4096 rows, within the dtype's tolerance of float64."""
    from kernel_numerics import TOL

    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.fail("no C compiler (cc/gcc) to build the test allocator; install gcc (Triton needs one too)")
    so = tmp_path / "off16.so"
    (tmp_path / "off16.c").write_text(ALLOCATOR_C)
    subprocess.run(
        [cc, "-shared", "-fPIC", "-O1", "-o", str(so), str(tmp_path / "off16.c"), "-ldl"], check=True
    )
    code = CHILD.format(numerics=str(Path(__file__).parents[1] / "kernels"), so=str(so))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env,
                          timeout=300, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    errs = json.loads(proc.stdout.split("ERRS")[-1])
    tol = {"torch.bfloat16": TOL[torch.bfloat16], "torch.float16": TOL[torch.float16]}
    for case, values in errs.items():
        bound = tol[case.split()[1]]
        assert all(v <= bound for v in values), (case, values, bound)  # NaN compares False: never passes
