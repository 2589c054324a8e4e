// Fused gate/up GEMM with the act(g)*u epilogue.
// fp16/bf16: tensor cores through WMMA (m16n16k16, fp32 accumulation), a 3-stage cp.async pipeline,
// 8 warps; each warp owns the same sub-tile of the gate and of the up product, so element t of
// both accumulator fragments is the same (row, col) and the epilogue is register-local.
// fp32: a plain SIMT tile kernel (exact fp32, as torch computes it by default).
#include "gate_up.h"

#include <mma.h>

#include <cstdlib>

namespace fused_mlp {
namespace {

using namespace nvcuda;

constexpr int kBN = 128, kBK = 32, kStages = 3, kWarpsM = 2, kWarpsN = 4, kThreads = 32 * kWarpsM * kWarpsN;
constexpr int kLds = kBK + 8;  // shared-memory row stride (elements): breaks bank conflicts, keeps 16 B rows
constexpr int kLdc = kBN + 4;  // fp32 staging row stride for the epilogue

template <int BM>
constexpr int smem_bytes() {
  constexpr int pipe = kStages * (BM + 2 * kBN) * kLds * 2;
  constexpr int stage = BM * kLdc * 4;
  return pipe > stage ? pipe : stage;
}

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int src_bytes = valid ? 16 : 0;  // 0: fill the 16 bytes with zeros
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// Copies rows [row0, row0+ROWS) x cols [k0, k0+kBK) of a row-major [rows, k] matrix into smem,
// zero-filling outside the matrix. kVec: 16-byte cp.async (needs k % 8 == 0 and 16 B alignment).
template <typename T, int ROWS, bool kVec>
__device__ __forceinline__ void load_tile(T* smem, const T* g, long long rows, long long k, long long row0,
                                          long long k0) {
  if constexpr (kVec) {
    constexpr int chunks = ROWS * (kBK / 8);
#pragma unroll
    for (int c = threadIdx.x; c < chunks; c += kThreads) {
      const int r = c / (kBK / 8), col = (c % (kBK / 8)) * 8;
      const long long gr = row0 + r, gc = k0 + col;
      const bool valid = gr < rows && gc < k;
      cp_async16(smem + r * kLds + col, valid ? g + gr * k + gc : g, valid);
    }
  } else {
    for (int e = threadIdx.x; e < ROWS * kBK; e += kThreads) {
      const int r = e / kBK, col = e % kBK;
      const long long gr = row0 + r, gc = k0 + col;
      smem[r * kLds + col] = (gr < rows && gc < k) ? g[gr * k + gc] : from_f<T>(0.f);
    }
  }
}

template <typename T, int BM, bool kVec>
__global__ void __launch_bounds__(kThreads) gate_up_wmma_kernel(const T* __restrict__ x, const T* __restrict__ wg,
                                                                const T* __restrict__ wu, T* __restrict__ h,
                                                                long long m, long long n, long long k, Act act) {
  constexpr int WM = BM / kWarpsM, WN = kBN / kWarpsN, FM = WM / 16, FN = WN / 16;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* smem = reinterpret_cast<T*>(smem_raw);
  constexpr int stage_elems = (BM + 2 * kBN) * kLds;

  const long long row0 = static_cast<long long>(blockIdx.y) * BM, col0 = static_cast<long long>(blockIdx.x) * kBN;
  const int warp = threadIdx.x / 32, wm = warp / kWarpsN, wn = warp % kWarpsN;

  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc_g[FM][FN], acc_u[FM][FN];
#pragma unroll
  for (int i = 0; i < FM; ++i)
#pragma unroll
    for (int j = 0; j < FN; ++j) {
      wmma::fill_fragment(acc_g[i][j], 0.f);
      wmma::fill_fragment(acc_u[i][j], 0.f);
    }

  auto load_stage = [&](int stage, long long kt) {
    T* s = smem + stage * stage_elems;
    const long long k0 = kt * kBK;
    load_tile<T, BM, kVec>(s, x, m, k, row0, k0);
    load_tile<T, kBN, kVec>(s + BM * kLds, wg, n, k, col0, k0);
    load_tile<T, kBN, kVec>(s + (BM + kBN) * kLds, wu, n, k, col0, k0);
  };

  const long long k_tiles = (k + kBK - 1) / kBK;
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < k_tiles) load_stage(s, s);
    cp_async_commit();
  }

  for (long long kt = 0; kt < k_tiles; ++kt) {
    cp_async_wait<kStages - 2>();
    __syncthreads();
    const long long next = kt + kStages - 1;
    if (next < k_tiles) load_stage(static_cast<int>(next % kStages), next);
    cp_async_commit();

    const T* s = smem + (kt % kStages) * stage_elems;
    const T* sa = s + (wm * WM) * kLds;
    const T* sg = s + BM * kLds + (wn * WN) * kLds;
    const T* su = s + (BM + kBN) * kLds + (wn * WN) * kLds;
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a[FM];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> bg[FN], bu[FN];
#pragma unroll
      for (int i = 0; i < FM; ++i) wmma::load_matrix_sync(a[i], sa + i * 16 * kLds + kk, kLds);
#pragma unroll
      for (int j = 0; j < FN; ++j) {
        wmma::load_matrix_sync(bg[j], sg + j * 16 * kLds + kk, kLds);
        wmma::load_matrix_sync(bu[j], su + j * 16 * kLds + kk, kLds);
      }
#pragma unroll
      for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int j = 0; j < FN; ++j) {
          wmma::mma_sync(acc_g[i][j], a[i], bg[j], acc_g[i][j]);
          wmma::mma_sync(acc_u[i][j], a[i], bu[j], acc_u[i][j]);
        }
    }
  }
  cp_async_wait<0>();
  __syncthreads();

  // Epilogue: act(g) * u in registers, staged through shared memory for coalesced stores.
  float* stage = reinterpret_cast<float*>(smem_raw);
#pragma unroll
  for (int i = 0; i < FM; ++i)
#pragma unroll
    for (int j = 0; j < FN; ++j) {
#pragma unroll
      for (int t = 0; t < acc_g[i][j].num_elements; ++t)
        acc_g[i][j].x[t] = act_fwd(acc_g[i][j].x[t], act) * acc_u[i][j].x[t];
      wmma::store_matrix_sync(stage + (wm * WM + i * 16) * kLdc + wn * WN + j * 16, acc_g[i][j], kLdc,
                              wmma::mem_row_major);
    }
  __syncthreads();

  const bool vec_out = kVec && (n % 8 == 0);
  if (vec_out) {
    for (int c = threadIdx.x; c < BM * kBN / 8; c += kThreads) {
      const int r = c / (kBN / 8), col = (c % (kBN / 8)) * 8;
      const long long gr = row0 + r, gc = col0 + col;
      if (gr < m && gc < n) {
        alignas(16) T v[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) v[e] = from_f<T>(stage[r * kLdc + col + e]);
        *reinterpret_cast<uint4*>(h + gr * n + gc) = *reinterpret_cast<const uint4*>(v);
      }
    }
  } else {
    for (int e = threadIdx.x; e < BM * kBN; e += kThreads) {
      const int r = e / kBN, col = e % kBN;
      const long long gr = row0 + r, gc = col0 + col;
      if (gr < m && gc < n) h[gr * n + gc] = from_f<T>(stage[r * kLdc + col]);
    }
  }
}

// fp32: 64x64 output tile of both products, 16-deep k slices, each thread a 4x4 block of each.
constexpr int kFB = 64, kFK = 16;
__global__ void __launch_bounds__(256) gate_up_f32_kernel(const float* __restrict__ x, const float* __restrict__ wg,
                                                          const float* __restrict__ wu, float* __restrict__ h,
                                                          long long m, long long n, long long k, Act act) {
  __shared__ float sa[kFK][kFB + 4], sg[kFK][kFB + 4], su[kFK][kFB + 4];
  const long long row0 = static_cast<long long>(blockIdx.y) * kFB, col0 = static_cast<long long>(blockIdx.x) * kFB;
  const int tr = threadIdx.x / 16, tc = threadIdx.x % 16;
  float ag[4][4] = {}, au[4][4] = {};
  for (long long k0 = 0; k0 < k; k0 += kFK) {
    for (int e = threadIdx.x; e < kFB * kFK; e += 256) {
      const int r = e / kFK, c = e % kFK;
      const long long gk = k0 + c;
      sa[c][r] = (row0 + r < m && gk < k) ? x[(row0 + r) * k + gk] : 0.f;
      sg[c][r] = (col0 + r < n && gk < k) ? wg[(col0 + r) * k + gk] : 0.f;
      su[c][r] = (col0 + r < n && gk < k) ? wu[(col0 + r) * k + gk] : 0.f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kFK; ++kk) {
      float a[4], bg[4], bu[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        a[i] = sa[kk][tr * 4 + i];
        bg[i] = sg[kk][tc * 4 + i];
        bu[i] = su[kk][tc * 4 + i];
      }
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          ag[i][j] = fmaf(a[i], bg[j], ag[i][j]);
          au[i][j] = fmaf(a[i], bu[j], au[i][j]);
        }
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const long long r = row0 + tr * 4 + i, c = col0 + tc * 4 + j;
      if (r < m && c < n) h[r * n + c] = act_fwd(ag[i][j], act) * au[i][j];
    }
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) % 16) == 0; }

template <typename T, int BM, bool kVec>
void launch_wmma(const T* x, const T* wg, const T* wu, T* h, long long m, long long n, long long k, Act act,
                 cudaStream_t stream) {
  constexpr int bytes = smem_bytes<BM>();
  auto kernel = gate_up_wmma_kernel<T, BM, kVec>;
  const cudaError_t attr = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  STD_TORCH_CHECK(attr == cudaSuccess, "fused_mlp.gated_mlp: cannot reserve ", bytes,
                  " bytes of shared memory: ", cudaGetErrorString(attr));
  const dim3 grid(ceil_div(n, kBN), ceil_div(m, BM));
  kernel<<<grid, kThreads, bytes, stream>>>(x, wg, wu, h, m, n, k, act);
}

// 64-row tiles (128 registers, two blocks per SM) up to this many rows, 128-row tiles (232 registers,
// one block per SM, more reuse) above. FUSED_MLP_GATE_UP_ROWS64 overrides it, for tuning on new GPUs.
long long rows_limit_for_64_row_tiles() {
  static const long long limit = [] {
    const char* env = std::getenv("FUSED_MLP_GATE_UP_ROWS64");
    return env ? std::atoll(env) : 2048ll;
  }();
  return limit;
}

template <typename T>
void launch_wmma_tiles(const T* x, const T* wg, const T* wu, T* h, long long m, long long n, long long k, Act act,
                       cudaStream_t stream) {
  const bool vec = k % 8 == 0 && aligned16(x) && aligned16(wg) && aligned16(wu) && aligned16(h);
  const bool small = m <= rows_limit_for_64_row_tiles();
  if (vec && small) launch_wmma<T, 64, true>(x, wg, wu, h, m, n, k, act, stream);
  else if (vec) launch_wmma<T, 128, true>(x, wg, wu, h, m, n, k, act, stream);
  else if (small) launch_wmma<T, 64, false>(x, wg, wu, h, m, n, k, act, stream);
  else launch_wmma<T, 128, false>(x, wg, wu, h, m, n, k, act, stream);
}

}  // namespace

void gate_up(const void* x, const void* w_gate, const void* w_up, void* h, long long m, long long i,
             long long k, Act act, ScalarType dtype, cudaStream_t stream) {
  if (m == 0 || i == 0) return;
  switch (dtype) {
    case ScalarType::Half:
      launch_wmma_tiles(static_cast<const __half*>(x), static_cast<const __half*>(w_gate),
                        static_cast<const __half*>(w_up), static_cast<__half*>(h), m, i, k, act, stream);
      break;
    case ScalarType::BFloat16:
      launch_wmma_tiles(static_cast<const __nv_bfloat16*>(x), static_cast<const __nv_bfloat16*>(w_gate),
                        static_cast<const __nv_bfloat16*>(w_up), static_cast<__nv_bfloat16*>(h), m, i, k, act,
                        stream);
      break;
    case ScalarType::Float:
      gate_up_f32_kernel<<<dim3(ceil_div(i, kFB), ceil_div(m, kFB)), 256, 0, stream>>>(
          static_cast<const float*>(x), static_cast<const float*>(w_gate), static_cast<const float*>(w_up),
          static_cast<float*>(h), m, i, k, act);
      break;
    default:
      STD_TORCH_CHECK(false, "fused_mlp.gated_mlp: unsupported dtype ", torch::headeronly::toString(dtype),
                      "; use float32, float16 or bfloat16");
  }
  check_launch("gated_mlp");
}

}  // namespace fused_mlp
