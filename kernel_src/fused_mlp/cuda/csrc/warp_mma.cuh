// Device pieces the persistent chain kernels (chain.cu: forward, chain_backward.cu: backward) share: cp.async
// copies into shared memory, the m16n8k16 tensor-core MMA, the transposing 8x8 shared-memory load; and on the
// host the device's opt-in shared-memory limit, their operand-alignment test and kernel preparation.
#pragma once

#include "common.cuh"
#include "gemm.h"

#include <atomic>
#include <cstdint>

namespace fused_mlp {

constexpr int kMaxDevices = 64;

__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(src));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

// Wait until at most `pending` commit groups are in flight (the PTX takes an immediate).
__device__ __forceinline__ void cp_async_wait(int pending) {
  switch (pending) {
    case 0: asm volatile("cp.async.wait_group 0;\n" ::); break;
    case 1: asm volatile("cp.async.wait_group 1;\n" ::); break;
    case 2: asm volatile("cp.async.wait_group 2;\n" ::); break;
    case 3: asm volatile("cp.async.wait_group 3;\n" ::); break;
    case 4: asm volatile("cp.async.wait_group 4;\n" ::); break;
    case 5: asm volatile("cp.async.wait_group 5;\n" ::); break;
    case 6: asm volatile("cp.async.wait_group 6;\n" ::); break;
    default: asm volatile("cp.async.wait_group 7;\n" ::); break;
  }
}

template <typename T>
__device__ __forceinline__ void mma16816(float* d, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                         uint32_t b1);

template <>
__device__ __forceinline__ void mma16816<__nv_bfloat16>(float* d, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                                        uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

template <>
__device__ __forceinline__ void mma16816<__half>(float* d, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                                 uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// The B fragment of one m16n8k16 step from 16 rows (K) of 8 16-bit elements (N) in shared memory, each
// lane 0-15 naming one row (`row`: 16 bytes): lanes 0-7 rows 0-7 of K, lanes 8-15 rows 8-15 (the other lanes'
// addresses are not read). .trans hands lane (g, t) K rows 2t, 2t+1 (b0) and 2t+8, 2t+9 (b1) of column g,
// which is the MMA's K-major B operand. The rows need not be contiguous: a caller may permute K.
__device__ __forceinline__ void ldmatrix_x2_trans(uint32_t& b0, uint32_t& b1, const void* row) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n" : "=r"(b0), "=r"(b1) : "r"(s));
}

// The device's opt-in maximum of dynamic shared memory per block (-1 if it cannot be read), cached.
inline int smem_optin(int device) {
  static std::atomic<int> cache[kMaxDevices] = {};
  int v = cache[device].load(std::memory_order_relaxed);
  if (v == 0) {
    if (cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess) {
      cudaGetLastError();
      v = -1;
    }
    cache[device].store(v, std::memory_order_relaxed);
  }
  return v;
}

// Whether an operand the persistent kernels read with 16-byte copies can take them (null: absent, so yes).
inline bool aligned16(const void* p) { return p == nullptr || alignment_of(p) >= 16; }

// Index of a (dtype, row tiles) instantiation in a persistent kernel's table of six: bf16 then fp16, 1/2/4 tiles.
inline int variant_index(bool bf16, int m_tiles) { return (bf16 ? 0 : 3) + (m_tiles == 1 ? 0 : m_tiles == 2 ? 1 : 2); }

// The function of kernel `stub` on `device`, prepared once per (kernel, device) in `slot` with its dynamic
// shared-memory limit raised to the device's opt-in maximum.
inline cudaFunction_t prepared_function(const void* stub, std::atomic<cudaFunction_t>& slot, int device, const char* what) {
  cudaFunction_t f = slot.load(std::memory_order_acquire);
  if (f == nullptr) {
    cudaError_t err = cudaFuncSetAttribute(stub, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_optin(device));
    if (err == cudaSuccess) err = cudaGetFuncBySymbol(&f, stub);
    STD_TORCH_CHECK(err == cudaSuccess, "fused_mlp: preparing the ", what, " kernel on device ", device, " failed: ",
                    cudaGetErrorString(err));
    slot.store(f, std::memory_order_release);
  }
  return f;
}

}  // namespace fused_mlp
