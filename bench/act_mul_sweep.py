"""act_and_mul on [M, 3072] bf16 gelu_tanh, every candidate in one process on the GPU: the built stable-ABI
variant forced to each of its implementations (CUDA C++ and the AOT Triton cubin), torch.compile of the eager
expression, and the Triton kernel (kernel_src's source, JIT) at several BLOCK / num_warps, each with a fresh
output per call (what an op does) and with one preallocated output (what bench/cuda_proto's standalone harness
does, which measured the same CUDA kernel ~1.3 µs faster than the op on 2026-12-04; for the Triton kernel the two
made no difference), and forms of that kernel that differ from the shipped one in one thing each (int32 offsets,
no mask where BLOCK divides n, the tanh GELU as x·sigmoid(2·inner) with one fast divide, as the CUDA kernel has it
since 2026-12-04), to find what torch.compile's kernel (~1 µs faster at 8192 rows) does differently. GPU µs per
call from graph replay.

    PYTHONPATH=kernel_src python bench/act_mul_sweep.py --variant-dir DIR=stable-abi [--json out.json]
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from fused_mlp.triton.activations import activate

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness

ROWS = (1024, 4096, 8192)
CONFIGS = ((1024, 4), (2048, 4), (2048, 8), (4096, 8), (4096, 16), (8192, 8), (8192, 16), (16384, 16))
# (BLOCK, warps, int64 offsets, mask, sigmoid-form GELU): the shipped kernel is (1024, 4, True, True, True), the
# one before 2026-12-04 (8192, 16, True, True, False)
FORMS = (
    (1024, 4, False, True, False),
    (1024, 4, False, False, False),
    (1024, 4, False, False, True),
    (1024, 4, True, True, True),
    (2048, 4, False, False, True),
    (4096, 8, False, False, True),
    (512, 4, False, False, True),
)


@triton.jit
def _act_mul_form(g_ptr, u_ptr, out_ptr, n, BLOCK: tl.constexpr, I64: tl.constexpr, MASK: tl.constexpr,
                  SIGMOID: tl.constexpr):  # fmt: skip
    """gelu_tanh(g) * u in one of the forms FORMS lists (a candidate, not shipped)."""
    if I64:
        offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    else:
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if MASK:
        g = tl.load(g_ptr + offs, mask=offs < n, other=0.0).to(tl.float32)
        u = tl.load(u_ptr + offs, mask=offs < n, other=0.0).to(tl.float32)
    else:
        g = tl.load(g_ptr + offs).to(tl.float32)
        u = tl.load(u_ptr + offs).to(tl.float32)
    if SIGMOID:  # the shipped form (activations.activate) since 2026-12-04
        a = activate(g, 3)
    else:  # the form shipped before: 0.5 g (1 + tanh(inner)), tanh through exp with an exact divide
        inner = 0.7978845608028654 * (g + 0.044715 * g * g * g)
        e = tl.exp(-2.0 * tl.abs(inner))
        t = (1.0 - e) / (1.0 + e)
        a = 0.5 * g * (1.0 + tl.where(inner < 0.0, -t, t))
    y = (a * u).to(out_ptr.dtype.element_ty)
    if MASK:
        tl.store(out_ptr + offs, y, mask=offs < n)
    else:
        tl.store(out_ptr + offs, y)


def candidates(m: int, label: str, kernel, compiled, act_and_mul_kernel) -> tuple[dict, torch.Tensor]:
    """name -> call for M=m rows (fresh inputs), and the float64 result they must all match."""
    g = torch.randn(m, 3072, device="cuda", dtype=torch.bfloat16)
    u = torch.randn(m, 3072, device="cuda", dtype=torch.bfloat16)
    n, kept = g.numel(), torch.empty_like(g)
    calls = {
        f"{label} {impl}": (impl, lambda: kernel.act_and_mul(g, u, "gelu_tanh"))
        for impl in ("cuda", "triton")
    }
    calls["torch.compile"] = (None, lambda: compiled(g, u))

    def jit(block: int, warps: int, fresh: bool):
        def call():
            out = torch.empty_like(g) if fresh else kept
            act_and_mul_kernel[((n + block - 1) // block,)](g, u, out, n, ACT=3, BLOCK=block, num_warps=warps)
            return out

        return call

    def form(block: int, warps: int, i64: bool, mask: bool, sigmoid: bool):
        def call():
            out = torch.empty_like(g)
            grid = ((n + block - 1) // block,)
            _act_mul_form[grid](
                g, u, out, n, BLOCK=block, I64=i64, MASK=mask, SIGMOID=sigmoid, num_warps=warps
            )
            return out

        return call

    for block, warps, i64, mask, sigmoid in FORMS:
        if mask or n % block == 0:
            name = f"form {block}x{warps} {'i64' if i64 else 'i32'} {'mask' if mask else 'nomask'}"
            calls[f"{name} {'sigmoid' if sigmoid else 'tanh-exp'}"] = (
                None,
                form(block, warps, i64, mask, sigmoid),
            )
    for block, warps in CONFIGS:
        for fresh in (True, False):
            calls[f"triton jit {block}x{warps} {'fresh' if fresh else 'same'} out"] = (
                None,
                jit(block, warps, fresh),
            )
    return calls, F.gelu(g.double(), approximate="tanh") * u.double()


def main(argv: list[str] | None = None) -> int:
    got = harness.parse_and_load_cuda(harness.tool_parser(__doc__), argv, "act_mul_sweep")
    if got is None:
        return 2
    args, label, kernel = got
    ns = getattr(torch.ops, kernel.OPS_NAMESPACE)
    from fused_mlp.triton.act_and_mul import act_and_mul_kernel

    compiled = torch.compile(lambda g, u: F.gelu(g, approximate="tanh") * u)
    rows = []
    for m in ROWS:
        calls, expected = candidates(m, label, kernel, compiled, act_and_mul_kernel)
        for name, (impl, fn) in calls.items():
            if impl:
                ns.cuda_set_path("act_and_mul", impl)
            try:
                out = fn()
                row = {
                    "rows": m,
                    "impl": name,
                    "gpu_us": harness.gpu_us(fn),
                    "rel_diff": harness.rel_err(out, expected),
                }
            finally:
                ns.cuda_set_path("act_and_mul", "table")
            rows.append(row)
            print(row, flush=True)
    harness.write_json(args.json, {"environment": harness.environment(), "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
