"""GEMM launches on plain 2-D tensors: the Hopper kernels (hopper.py) where the arch's tables and TMA's
alignment rules allow, else the portable pointer kernels (linear.py, gated.py).

Callers hand in allocated outputs; nothing here checks shapes or dtypes (forward.py / backward.py do).
"""

from __future__ import annotations

import torch
import triton

from .. import constants
from ..arch import arch_of
from .configs import (
    GATE_UP,
    LINEAR,
    PDL_PREFETCH,
    GemmConfig,
    TmaConfig,
    cdiv,
    decode_config,
    gemm_config,
    tma_config,
    uses_pdl,
)
from .gated import GATE_UP as GATE_UP_KERNEL
from .gated import gate_up_consts as ptr_gate_up_consts
from .hopper import TMA_GATE_UP, TMA_GEMM, gemm_consts
from .hopper import gate_up_consts as tma_gate_up_consts
from .launch import launch
from .linear import LINEAR as LINEAR_KERNEL
from .linear import LINEAR_KMAJOR, linear_consts
from .specs import KernelDef

INTERPRET = constants.interpret()  # CPU tensors run on the interpreter
# The interpreter runs persistent kernels on this many programs, so CPU tests walk several tiles each.
_INTERPRETER_PROGRAMS = 4
_ARCHS: dict[int, str] = {}
_SMS: dict[int, int] = {}


def _index(t: torch.Tensor) -> int:
    return t.device.index if t.device.index is not None else torch.cuda.current_device()


def device_arch(t: torch.Tensor) -> str:
    """Arch name of t's device (cached per device), "interpreter" for CPU tensors."""
    if not t.is_cuda:
        return "interpreter"
    index = _index(t)
    if index not in _ARCHS:
        _ARCHS[index] = arch_of(torch.cuda.get_device_capability(index))
    return _ARCHS[index]


def num_programs(t: torch.Tensor, tiles: int) -> int:
    """Persistent grid size: one program per SM of t's device (at most one per tile)."""
    if not t.is_cuda:
        return min(tiles, _INTERPRETER_PROGRAMS)
    index = _index(t)
    if index not in _SMS:
        _SMS[index] = torch.cuda.get_device_properties(index).multi_processor_count
    return min(tiles, _SMS[index])


def dot_flags(t: torch.Tensor) -> tuple[bool, str]:
    """(upcast operands to fp32, tl.dot input precision) for t's dtype and device."""
    upcast = (not t.is_cuda) and t.dtype == torch.bfloat16
    exact = t.dtype == torch.float32 and not (t.is_cuda and torch.backends.cuda.matmul.allow_tf32)
    return upcast, "ieee" if exact else "tf32"


def tma_ok(*tensors: torch.Tensor | None) -> bool:
    """Whether TMA may address these 2-D tensors: 16-byte aligned bases and row strides (also of 1-row
    tensors: the kernel builds its descriptors with them), unit column stride. A (g, u)-style pair of
    planes passes plane 0; plane 1 then starts M x row stride later, aligned as well."""
    present = [t for t in tensors if t is not None]
    size = present[0].element_size()
    return all(
        t.data_ptr() % 16 == 0 and t.stride(-1) == 1 and (t.stride(0) * size) % 16 == 0 for t in present
    )


def gate_up_fits(wg: torch.Tensor, wu: torch.Tensor) -> bool:
    """Whether `tma_gate_up_kernel` can read the two weights as planes of one 3D TMA tensor: one row stride,
    distinct bases (the same tensor twice has no second plane) less than 2**40 bytes apart (TMA's largest
    stride; allocations from different memory pools can lie further apart)."""
    return wg.stride(0) == wu.stride(0) and 0 < abs(wu.data_ptr() - wg.data_ptr()) < 1 << 40


def _torch_scratch(size: int, alignment: int, stream: int | None) -> torch.Tensor:
    """Triton's global-scratch allocator (TMA descriptors built in the kernel live there)."""
    return torch.empty(size, dtype=torch.int8, device="cuda")


def _ensure_allocator() -> None:
    """Give Triton a scratch allocator in this thread's context unless the user set one (autograd runs
    backward on its own thread, where a context variable set at import would not be seen)."""
    from triton.runtime import _allocation

    if _allocation._allocator.get() is _allocation._NULL_ALLOCATOR:
        triton.set_allocator(_torch_scratch)


def tma_gemm(
    a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, M: int, N: int, K: int, cfg: TmaConfig, *,
    a_t: bool = False, b_t: bool = False, b2: torch.Tensor | None = None, bias: torch.Tensor | None = None,
    aux: torch.Tensor | None = None, act: int = 0, epi: int = 0, rows: int | None = None,
) -> None:  # fmt: skip
    """One `tma_gemm_kernel` launch (docs/CONTRACTS.md "Kernel families"); unused pointers get `c`.
    `rows` = the op's row count (default M): it decides PDL (`configs.uses_pdl`) like the config row."""
    upcast, precision = dot_flags(a)
    pdl = uses_pdl(device_arch(a), M if rows is None else rows)
    b2_, aux_ = (b if b2 is None else b2), (c if aux is None else aux)
    args = (a, b, b2_, c, c if bias is None else bias, aux_,
            M, N, K, a.stride(0), b.stride(0), b2_.stride(0), c.stride(0), aux_.stride(0))  # fmt: skip
    consts = gemm_consts(cfg, a_t=a_t, b_t=b_t, dual=b2 is not None, has_bias=bias is not None, act=act, epi=epi,
                         pdl=pdl, upcast=upcast, precision=precision)  # fmt: skip
    grid = (num_programs(a, cdiv(M, cfg.BM) * cdiv(N, cfg.BN)),)
    _ensure_allocator()
    launch(TMA_GEMM, grid, args, consts, cfg.num_warps, cfg.num_stages)


def tma_gate_up(
    x: torch.Tensor, wg: torch.Tensor, wu: torch.Tensor, h: torch.Tensor, gu: torch.Tensor | None,
    act: int, cfg: TmaConfig,
) -> None:  # fmt: skip
    """One `tma_gate_up_kernel` launch: h = act(x wg^T) * (x wu^T), plus g, u into gu [2, M, N] when given."""
    M, K = x.shape
    N = wg.shape[0]
    upcast, precision = dot_flags(x)
    gu_ = h if gu is None else gu[0]
    args = (x, wg, wu, h, gu_, M, N, K, x.stride(0), wg.stride(0), wu.stride(0), h.stride(0), gu_.stride(0))
    consts = tma_gate_up_consts(cfg, act=act, store_gu=gu is not None, pdl=uses_pdl(device_arch(x), M),
                                up_first=wu.data_ptr() < wg.data_ptr(), upcast=upcast, precision=precision)  # fmt: skip
    grid = (num_programs(x, cdiv(M, cfg.BM) * cdiv(N, cfg.BN)),)
    _ensure_allocator()
    launch(TMA_GATE_UP, grid, args, consts, cfg.num_warps, cfg.num_stages)


def _prefetch(x: torch.Tensor, pdl: bool) -> bool:
    """Whether a pointer-kernel launch prefetches its weights (PDL launches on the GPU; the interpreter
    cannot run the prefetch's inline PTX)."""
    return pdl and PDL_PREFETCH and x.is_cuda


def ptr_linear(
    x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, act: int, out: torch.Tensor, cfg: GemmConfig,
    kernel: KernelDef = LINEAR_KERNEL,
) -> None:  # fmt: skip
    """One portable `linear_kernel` launch: out = act(x @ w^T + b); `kernel` GEMV_LINEAR: the decode kernel
    (same arguments and grid; it never prefetches). A K-major w (`is_kmajor`) runs `linear_kmajor_kernel`."""
    M, K = x.shape
    N = w.shape[0]
    upcast, precision = dot_flags(x)
    pdl = uses_pdl(device_arch(x), M)
    w_stride = w.stride(0)
    if is_kmajor(w):
        kernel, w_stride = LINEAR_KMAJOR, w.stride(1)
    args = (x, w, x if b is None else b, out, M, N, K, x.stride(0), w_stride, out.stride(0))
    consts = linear_consts(cfg, has_bias=b is not None, act=act, even_k=K % cfg.BK == 0, pdl=pdl,
                           prefetch=_prefetch(x, pdl) and kernel is LINEAR_KERNEL, upcast=upcast,
                           precision=precision)  # fmt: skip
    grid = (cdiv(M, cfg.BM) * cdiv(N, cfg.BN),)
    launch(kernel, grid, args, consts, cfg.num_warps, cfg.num_stages)


def is_kmajor(w: torch.Tensor) -> bool:
    """Whether a [N, K] weight is K-major: the transpose view of a [K, N] tensor whose rows are unit-stride
    (transformers' Conv1D keeps [in, out]); forward.layer_weight hands the GEMMs only such weights or
    row-major ones."""
    return w.stride(-1) != 1


def vendor_linear(
    x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, activation: str, out: torch.Tensor | None = None
) -> torch.Tensor:
    """act(x @ w^T + b) on cuBLAS for activation "none" or "relu" (configs.cublas_linear): one aten call,
    with the bias + relu epilogue fused by cuBLASLt when there is a bias. Without `out`, cuBLAS's call
    allocates the result (an `out=` call costs an allocation of ours plus its own output checks)."""
    o = {} if out is None else {"out": out}
    if b is None:
        y = torch.mm(x, w.t(), **o)
        return y.relu_() if activation == "relu" else y
    if activation == "relu":
        return torch._addmm_activation(b, x, w.t(), **o)
    return torch.addmm(b, x, w.t(), **o)


def ptr_gate_up(
    x: torch.Tensor, wg: torch.Tensor, wu: torch.Tensor, act: int, h: torch.Tensor, cfg: GemmConfig,
    kernel: KernelDef = GATE_UP_KERNEL,
) -> None:  # fmt: skip
    """One portable `gate_up_kernel` launch: h = act(x wg^T) * (x wu^T); `kernel` GEMV_GATE_UP: the decode
    kernel (same arguments and grid; it never prefetches)."""
    M, K = x.shape
    N = wg.shape[0]
    upcast, precision = dot_flags(x)
    pdl = uses_pdl(device_arch(x), M)
    args = (x, wg, wu, h, M, N, K, x.stride(0), wg.stride(0), wu.stride(0), h.stride(0))
    consts = ptr_gate_up_consts(cfg, act=act, even_k=K % cfg.BK == 0, pdl=pdl, prefetch=_prefetch(x, pdl) and kernel is GATE_UP_KERNEL,
                                upcast=upcast, precision=precision)  # fmt: skip
    grid = (cdiv(M, cfg.BM) * cdiv(N, cfg.BN),)
    launch(kernel, grid, args, consts, cfg.num_warps, cfg.num_stages)


def hopper_config(role: str, x: torch.Tensor, rows: int, cols: int) -> TmaConfig | None:
    """The arch table's Hopper config for `role` at a rows x cols output, or None. Exact fp32 (TF32 off)
    never gets one: its dot runs on FMAs, and a wgmma-sized tile of those spills (portable kernel / cuBLAS)."""
    if dot_flags(x)[1] == "ieee":
        return None
    return tma_config(role, device_arch(x), rows, x.element_size(), cols, num_programs(x, 1 << 30))


def pick(role: str, x: torch.Tensor, rows: int, cols: int, cfg: GemmConfig | TmaConfig | None):
    """The config a forward GEMM of `role` ("linear" or "gate_up") runs with: `cfg` when given (tuning),
    else the arch's Hopper table row, else the portable table's row."""
    return cfg or hopper_config(role, x, rows, cols) or portable(role, x, rows)


def portable(role: str, x: torch.Tensor, rows: int) -> GemmConfig:
    """The portable kernel's config for a forward role (when TMA's rules rule the Hopper kernel out)."""
    return gemm_config(LINEAR if role == "linear" else GATE_UP, device_arch(x), rows, x.element_size())


def decode(role: str, x: torch.Tensor, rows: int, cols: int, weight_bytes: int) -> GemmConfig | None:
    """The decode kernels' config (decode.py) for a forward of `role` at `rows` rows reading `weight_bytes`
    of weights, or None (the table's other paths). Never for exact fp32 (TF32 off): the portable kernels and
    cuBLAS keep that precision's tiles."""
    if dot_flags(x)[1] == "ieee" and x.is_cuda:
        return None
    sms = num_programs(x, 1 << 30)
    return decode_config(role, device_arch(x), rows, weight_bytes, x.element_size(), cols, sms)
