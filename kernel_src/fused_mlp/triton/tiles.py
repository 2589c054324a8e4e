"""Triton helpers shared by the GEMM kernels: grouped tile order and the dot step."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def grouped_tile(tile, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    """(pid_m, pid_n) of output tile number `tile`, GROUP_M row-tiles at a time so neighbours share L2 data."""
    num_pid_in_group = GROUP_M * num_pid_n
    first_pid_m = (tile // num_pid_in_group) * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((tile % num_pid_in_group) % group_size_m)
    pid_n = (tile % num_pid_in_group) // group_size_m
    return pid_m, pid_n


@triton.jit
def tile_ids(M, N, BM: tl.constexpr, BN: tl.constexpr, GROUP_M: tl.constexpr):
    """(pid_m, pid_n) of this program when the grid has one program per output tile."""
    return grouped_tile(tl.program_id(0), tl.cdiv(M, BM), tl.cdiv(N, BN), GROUP_M)


@triton.jit
def mma(a, b, acc, UPCAST: tl.constexpr, PRECISION: tl.constexpr):
    """acc + a @ b; UPCAST widens operands to fp32 first (bf16 dots are wrong in the interpreter)."""
    if UPCAST:
        a = a.to(tl.float32)
        b = b.to(tl.float32)
    return tl.dot(a, b, acc, input_precision=PRECISION)


@triton.jit
def prefetch_rows_l2(ptr, rows, stride, K, LINES: tl.constexpr):
    """Ask L2 for elements [0, K) of each row `rows` of `ptr` (row stride `stride`), 128-byte lines,
    LINES lines per row at a time. A hint: it writes no registers and cannot fault."""
    line: tl.constexpr = 1024 // ptr.dtype.element_ty.primitive_bitwidth  # elements per 128 bytes
    offs = tl.arange(0, LINES) * line
    for k0 in range(0, K, LINES * line):
        cols = tl.minimum(k0 + offs, K - 1)
        tl.inline_asm_elementwise(
            "prefetch.global.L2 [$1];",
            "=r,l",
            [ptr + rows[:, None] * stride + cols[None, :]],
            dtype=tl.int32,
            is_pure=False,
            pack=1,
        )
