// PROTOTYPE, not built into the extension (bench/RESULTS.md "Session 23": at best a tie with the Triton Hopper
// kernel the tables launch, variant 17; "Session 24": behind it since that kernel's cheaper GELU, 124-126 vs 140+ µs). The gated MLP's gate/up step as one Hopper GEMM written for sm_90a (CUDA C++, TMA + wgmma): h = act(x wg^T) *
// (x wu^T) with [M, 2I] never leaving the SM. Each output tile of 128 rows x 128 columns is one GEMM with a
// 256-wide B operand (128 gate rows above 128 up rows of the weights, loaded as two TMA boxes), so a thread's
// accumulators hold g and u of the same output element and the epilogue is thread-local.
#pragma once

#include <cuda_runtime.h>

#include "common.cuh"

namespace fused_mlp {

// Whether the kernel can take a call: an sm_90 device, 16-bit floats, K and I multiples of 8 (TMA's 16-byte
// row strides), 16-byte aligned x, wg, wu and h.
bool gate_up_sm90_fits(int sm, long long k, long long i, bool aligned);

// h[M, I] = act(x[M, K] wg[I, K]^T) * (x wu^T) on `stream`. `cluster` 1 or 2: pairs of CTAs on adjacent row
// tiles share each weight tile (each loads one half and multicasts it to both), halving weight traffic from L2.
void launch_gate_up_sm90(const void* x, const void* wg, const void* wu, void* h, long long m, long long i, long long k,
                         Act act, bool half, int variant, cudaStream_t stream, int device);

}  // namespace fused_mlp
