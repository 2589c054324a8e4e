// Elementwise kernels: activations, act(gate)*up and their gradients, and the bias gradient.
#pragma once

#include "common.cuh"

namespace fused_mlp {

// z <- act(z), n elements.
void act_inplace(void* z, long long n, Act act, ScalarType dtype, cudaStream_t stream);
// out = act(gate) * up, n elements.
void act_and_mul(const void* gate, const void* up, void* out, long long n, Act act, ScalarType dtype,
                 cudaStream_t stream);
// dgate = dout * up * act'(gate), dup = dout * act(gate).
void act_and_mul_backward(const void* dout, const void* gate, const void* up, void* dgate, void* dup,
                          long long n, Act act, ScalarType dtype, cudaStream_t stream);
// dz = dy * act'(z); for relu `saved` may be the output y (same sign pattern as z).
void act_backward(const void* dy, const void* saved, void* dz, long long n, Act act, ScalarType dtype,
                  cudaStream_t stream);
// dst += src, n elements.
void add_inplace(void* dst, const void* src, long long n, ScalarType dtype, cudaStream_t stream);
// db[N] = sum over rows of dz[M,N] (fp32 accumulation).
void column_sum(const void* dz, void* db, long long m, long long n, ScalarType dtype, cudaStream_t stream);

}  // namespace fused_mlp
