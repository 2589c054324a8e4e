// The gated MLP's first half as one kernel: h[M,I] = act(x @ w_gate^T) * (x @ w_up^T).
// Gate and up tiles of the same output block are accumulated side by side and combined in the
// epilogue, so the [M, 2I] intermediate never leaves the chip.
#pragma once

#include "common.cuh"

namespace fused_mlp {

void gate_up(const void* x, const void* w_gate, const void* w_up, void* h, long long m, long long i,
             long long k, Act act, ScalarType dtype, cudaStream_t stream);

}  // namespace fused_mlp
