// The kernel of gate_up_sm90.h. Persistent and warp-specialized: one CTA per SM (pairs of CTAs in a cluster
// of 2 with multicast), warpgroup 0 the producer (one thread issuing TMA loads into a 4-stage ring of shared
// memory, mbarrier full/empty per stage), warpgroups 1 and 2 the consumers (64 rows of the tile each, one
// wgmma m64n256k16 chain per 16 of K into 128 fp32 accumulators per thread). Tiles are walked in the same
// order by producer and consumers, so the producer fills the next tile's stages during the epilogue.
#include "gate_up_sm90.h"

#include <cudaTypedefs.h>

#include <algorithm>
#include <atomic>
#include <type_traits>

#include "sm90.cuh"

namespace fused_mlp {
namespace {

constexpr int kBM = 128, kBN = 128, kThreads = 384;

// Tuning knobs of one kernel instance: K per stage (64: 128-byte swizzle, 32: 64-byte), ring depth, whether a
// stage is released right after its MMAs (wait 0) or one stage later (wait 1, keeps the tensor pipe fed), and
// the epilogue (0: accurate activation, 1: fast tanh/exp approximations, 2: no stores: timing only, 3: the
// result through shared memory (128-byte swizzled 64 x 64 boxes, conflict-free from the accumulator layout) and
// TMA stores that run while the next tile's main loop starts).
template <int BK, int STAGES, bool WAIT0, int EPI, bool SHARE = true, bool LOADS = true, int ACT = -1, int PART = 0>
struct Cfg {
  static constexpr int kPart = PART;  // timing only: 1 loads only x's tile, 2 only the weights' (else all)
  static constexpr int kAct = ACT;  // >= 0: the activation fixed at compile time (one activation's code inlined)
  static constexpr bool kLoads = LOADS;  // false: timing only, the MMAs run on whatever shared memory holds
  static constexpr int kBK = BK, kStages = STAGES, kEpi = EPI;
  static constexpr bool kWait0 = WAIT0;
  static constexpr bool kShare = SHARE;  // clusters: multicast the weight tile (else each CTA loads its own)
  static constexpr int kRowBytes = BK * 2;  // = the swizzle span
  static constexpr int kABytes = kBM * BK * 2;
  static constexpr int kHalfBytes = kBN * BK * 2;  // the gate (or up) half of the B tile
  static constexpr int kStageBytes = kABytes + 2 * kHalfBytes;
  static constexpr int kOutBytes = EPI == 3 ? kBM * kBN * 2 : 0;  // two consumer halves of 64 x 128
  static constexpr size_t kSmemBytes = size_t(STAGES) * kStageBytes + kOutBytes + 1024 + 2 * STAGES * sizeof(uint64_t);
};
constexpr int kMaxDevices = 64;

template <typename T>
__device__ __forceinline__ void store_pair(T* p, float a, float b);
template <>
__device__ __forceinline__ void store_pair<__nv_bfloat16>(__nv_bfloat16* p, float a, float b) {
  *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(a, b);
}
template <>
__device__ __forceinline__ void store_pair<__half>(__half* p, float a, float b) {
  *reinterpret_cast<__half2*>(p) = __floats2half2_rn(a, b);
}

// act(z) with hardware approximations (tanh.approx, ex2.approx): relative error ~2^-11, below the 16-bit
// output's rounding; gelu (erf) stays exact.
__device__ __forceinline__ float act_fast(float z, Act a) {
  switch (a) {
    case Act::Relu: return fmaxf(z, 0.f);
    case Act::Gelu: return 0.5f * z * (1.f + erff(z * 0.70710678118654752f));
    case Act::GeluTanh: {
      float t;
      asm("tanh.approx.f32 %0, %1;" : "=f"(t) : "f"(0.79788456080286536f * fmaf(0.044715f * z, z * z, z)));
      return 0.5f * z * (1.f + t);
    }
    case Act::Silu: return __fdividef(z, 1.f + __expf(-z));
    default: return z;
  }
}

template <typename T, int kCluster, typename C>
__global__ void __launch_bounds__(kThreads, 1)
    gate_up_sm90_kernel(const __grid_constant__ CUtensorMap tx, const __grid_constant__ CUtensorMap tg,
                        const __grid_constant__ CUtensorMap tu, const __grid_constant__ CUtensorMap th,
                        T* __restrict__ h, int m, int n, int k, int act_code) {
#if defined(FUSED_MLP_SM90)
  using namespace sm90;
  constexpr int kBK = C::kBK, kStages = C::kStages, kStageBytes = C::kStageBytes;
  extern __shared__ unsigned char smem_raw[];
  // The swizzle needs 1024-byte aligned tiles; the offset is the same in every CTA (multicast relies on it).
  unsigned char* smem = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  unsigned char* out_tile = smem + kStages * kStageBytes;  // EPI 3 only
  uint64_t* full = reinterpret_cast<uint64_t*>(out_tile + C::kOutBytes);
  uint64_t* empty = full + kStages;
  const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
  const unsigned rank = kCluster > 1 ? cluster_rank() : 0;
  constexpr int kPeers = C::kShare ? kCluster : 1;  // CTAs whose consumers release a stage
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], 2 * kPeers);  // both consumer warpgroups of every CTA that receives the stage
    }
    fence_barrier_init();
  }
  if (kCluster > 1) cluster_sync(); else __syncthreads();

  const int m_tiles = (m + kBM - 1) / kBM, n_tiles = (n + kBN - 1) / kBN, k_tiles = (k + kBK - 1) / kBK;
  const int m_units = (m_tiles + kCluster - 1) / kCluster;  // a cluster's CTAs take adjacent row tiles
  const int units = m_units * n_tiles;
  const int cluster_id = blockIdx.x / kCluster, clusters = gridDim.x / kCluster;

  if (wg == 0) {
    regs_dec<40>();  // CUTLASS's split for one producer and two consumer warpgroups: 40 + 2 x 232
    if (tid == 0) {
      int s = 0;
      unsigned phase = 0;
      for (int u = cluster_id; u < units; u += clusters) {
        const int n0 = (u / m_units) * kBN, m0 = ((u % m_units) * kCluster + rank) * kBM;
        for (int kt = 0; kt < k_tiles; ++kt) {
          mbar_wait(&empty[s], phase ^ 1);
          unsigned char* st = smem + s * kStageBytes;
          if (!C::kLoads) {
            mbar_arrive(&full[s]);
            if (++s == kStages) s = 0, phase ^= 1;
            continue;
          }
          if (C::kPart) {  // timing only: part of the stage's bytes (1: the x tile, 2: the weight tiles)
            mbar_expect_tx(&full[s], C::kPart == 1 ? C::kABytes : 2 * C::kHalfBytes);
            if (C::kPart == 1) tma_load_2d(st, &tx, &full[s], kt * kBK, m0);
            else {
              tma_load_2d(st + C::kABytes, &tg, &full[s], kt * kBK, n0);
              tma_load_2d(st + C::kABytes + C::kHalfBytes, &tu, &full[s], kt * kBK, n0);
            }
            if (++s == kStages) s = 0, phase ^= 1;
            continue;
          }
          mbar_expect_tx(&full[s], kStageBytes);
          tma_load_2d(st, &tx, &full[s], kt * kBK, m0);
          if (kPeers == 1) {
            tma_load_2d(st + C::kABytes, &tg, &full[s], kt * kBK, n0);
            tma_load_2d(st + C::kABytes + C::kHalfBytes, &tu, &full[s], kt * kBK, n0);
          } else {  // rank 0 brings the gate half to both CTAs, rank 1 the up half
            tma_load_2d_multicast(st + C::kABytes + rank * C::kHalfBytes, rank ? &tu : &tg, &full[s], kt * kBK, n0,
                                  uint16_t((1 << kCluster) - 1));
          }
          if (++s == kStages) s = 0, phase ^= 1;
        }
      }
    }
  } else {
    regs_inc<232>();
    const Act act = C::kAct >= 0 ? static_cast<Act>(C::kAct) : static_cast<Act>(act_code);
    const int c = wg - 1, warp = tid / 32, lane = tid % 32;
    float d[128];
    int s = 0;
    unsigned phase = 0;
    for (int u = cluster_id; u < units; u += clusters) {
      const int n0 = (u / m_units) * kBN, m0 = ((u % m_units) * kCluster + rank) * kBM;
      int prev = -1;
      for (int kt = 0; kt < k_tiles; ++kt) {
        mbar_wait(&full[s], phase);
        const unsigned char* a = smem + s * kStageBytes + c * (64 * C::kRowBytes);
        const unsigned char* b = smem + s * kStageBytes + C::kABytes;
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < kBK / 16; ++kk)
          wgmma_m64n256k16<T>(d, smem_desc<C::kRowBytes>(a + kk * 32), smem_desc<C::kRowBytes>(b + kk * 32),
                              (kt | kk) != 0);
        wgmma_commit();
        if (C::kWait0) {  // release this stage as soon as its MMAs are done
          wgmma_wait<0>();
          if (tid == 0)
            for (int r = 0; r < kPeers; ++r) mbar_arrive_cluster(&empty[s], kPeers == 1 ? rank : r);
        } else {  // the previous stage's MMAs are done once at most this stage's group is pending
          wgmma_wait<1>();
          if (prev >= 0 && tid == 0)
            for (int r = 0; r < kPeers; ++r) mbar_arrive_cluster(&empty[prev], kPeers == 1 ? rank : r);
          prev = s;
        }
        if (++s == kStages) s = 0, phase ^= 1;
      }
      if (!C::kWait0) {
        wgmma_wait<0>();
        if (prev >= 0 && tid == 0)
          for (int r = 0; r < kPeers; ++r) mbar_arrive_cluster(&empty[prev], kPeers == 1 ? rank : r);
      }
      // Accumulator layout of m64nNk16: warp w holds rows 16w + lane/4 (+8), columns 8j + 2(lane%4) (+1) in
      // d[4j .. 4j+3]; chunks j < 16 are gate columns, j + 16 the up columns of the same outputs.
      if constexpr (C::kEpi == 3) {
        unsigned char* out = out_tile + c * (64 * kBN * 2);  // this warpgroup's rows: boxes of columns 0-63, 64-127
        if (tid == 0) bulk_wait_read<0>();  // the previous tile's stores have read the buffer
        named_bar_sync(1 + c, 128);
#pragma unroll
        for (int j = 0; j < 16; ++j) {
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) {
            const int rl = warp * 16 + lane / 4 + 8 * hh;
            const float v0 = act_fwd(d[4 * j + 2 * hh], act) * d[64 + 4 * j + 2 * hh];
            const float v1 = act_fwd(d[4 * j + 2 * hh + 1], act) * d[64 + 4 * j + 2 * hh + 1];
            // 128-byte swizzle: 16-byte chunk (j % 8) of row rl sits at chunk (j % 8) ^ (rl % 8)
            unsigned char* at = out + (j >> 3) * (64 * 128) + rl * 128 + (((j & 7) ^ (rl & 7)) << 4) + 4 * (lane % 4);
            store_pair<T>(reinterpret_cast<T*>(at), v0, v1);
          }
        }
        fence_proxy_async_smem();
        named_bar_sync(1 + c, 128);
        if (tid == 0) {  // TMA clips rows and columns past m and n
          tma_store_2d(&th, out, n0, m0 + c * 64);
          tma_store_2d(&th, out + 64 * 128, n0 + 64, m0 + c * 64);
          bulk_commit();
        }
        continue;
      }
      const int row = m0 + c * 64 + warp * 16 + lane / 4;
#pragma unroll
      for (int j = 0; j < 16; ++j) {
        const int col = n0 + 8 * j + 2 * (lane % 4);
        if (col >= n) continue;
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          const int r = row + 8 * hh;
          if (r >= m) continue;
          const float g0 = d[4 * j + 2 * hh], g1 = d[4 * j + 2 * hh + 1];
          const float u0 = d[64 + 4 * j + 2 * hh], u1 = d[64 + 4 * j + 2 * hh + 1];
          if (C::kEpi == 2) {  // timing only: keeps the MMAs, stores nothing for finite values
            if (g0 != g0) store_pair<T>(h + static_cast<long long>(r) * n + col, u0, u1);
            continue;
          }
          const float v0 = (C::kEpi == 1 ? act_fast(g0, act) : act_fwd(g0, act)) * u0;
          const float v1 = (C::kEpi == 1 ? act_fast(g1, act) : act_fwd(g1, act)) * u1;
          store_pair<T>(h + static_cast<long long>(r) * n + col, v0, v1);
        }
      }
    }
  }
  if (C::kEpi == 3 && wg > 0 && threadIdx.x % 128 == 0) sm90::bulk_wait<0>();  // stores done before the CTA exits
  // No CTA leaves while its cluster peer may still arrive on its barriers.
  if (kCluster > 1) cluster_sync();
#endif
}

PFN_cuTensorMapEncodeTiled_v12000 encode_fn() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess)
      p = nullptr;
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  return fn;
}

// A [rows, k] row-major 16-bit matrix read in boxes of box_rows x bk with a (2 * bk)-byte swizzle; zeros past
// its edges.
CUtensorMap tensor_map(const void* base, long long rows, long long k, bool half, int box_rows, int bk) {
  CUtensorMap map;
  const cuuint64_t dims[2] = {cuuint64_t(k), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(k) * 2};
  const cuuint32_t box[2] = {cuuint32_t(bk), cuuint32_t(box_rows)};
  const cuuint32_t elem[2] = {1, 1};
  const CUresult r = encode_fn()(&map, half ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2,
                                 const_cast<void*>(base), dims, strides, box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                 bk == 64 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B,
                                 CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  STD_TORCH_CHECK(r == CUDA_SUCCESS, "fused_mlp.gated_mlp: cuTensorMapEncodeTiled failed (", int(r),
                  "); check the operands (16-byte aligned, row strides multiples of 8)");
  return map;
}

// Per (kernel, device): shared memory raised once, and the grid (CTAs resident at once, whole clusters).
template <typename T, int kCluster, typename C>
int prepared_grid(int device) {
  static std::atomic<int> grids[kMaxDevices] = {};
  if (device >= 0 && device < kMaxDevices) {
    const int g = grids[device].load(std::memory_order_acquire);
    if (g > 0) return g;
  }
  auto kernel = gate_up_sm90_kernel<T, kCluster, C>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(C::kSmemBytes));
  int grid = 0;
  if (err == cudaSuccess) {
    if (kCluster == 1) {
      err = cudaDeviceGetAttribute(&grid, cudaDevAttrMultiProcessorCount, device);
    } else {
      cudaLaunchConfig_t cfg = {};
      cudaLaunchAttribute attr;
      attr.id = cudaLaunchAttributeClusterDimension;
      attr.val.clusterDim.x = kCluster, attr.val.clusterDim.y = 1, attr.val.clusterDim.z = 1;
      cfg.gridDim = dim3(kCluster), cfg.blockDim = dim3(kThreads), cfg.dynamicSmemBytes = C::kSmemBytes;
      cfg.attrs = &attr, cfg.numAttrs = 1;
      int clusters = 0;
      err = cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg);
      grid = clusters * kCluster;
    }
  }
  STD_TORCH_CHECK(err == cudaSuccess && grid > 0, "fused_mlp.gated_mlp: preparing the sm_90a gate/up kernel failed: ",
                  cudaGetErrorString(err), "; it needs an sm_90a GPU");
  if (device >= 0 && device < kMaxDevices) grids[device].store(grid, std::memory_order_release);
  return grid;
}

template <typename T, int kCluster, typename C>
void launch(const void* x, const void* wg, const void* wu, void* h, long long m, long long i, long long k, Act act,
            cudaStream_t stream, int device) {
  const bool half = std::is_same<T, __half>::value;
  const CUtensorMap tx = tensor_map(x, m, k, half, kBM, C::kBK);
  const CUtensorMap tg = tensor_map(wg, i, k, half, kBN, C::kBK);
  const CUtensorMap tu = tensor_map(wu, i, k, half, kBN, C::kBK);
  const CUtensorMap th = tensor_map(h, m, i, half, 64, 64);  // the output in 64 x 64 boxes (EPI 3)
  const long long tiles = ((m + kBM - 1) / kBM + kCluster - 1) / kCluster * ((i + kBN - 1) / kBN);
  long long grid = prepared_grid<T, kCluster, C>(device);
  grid = std::min(grid, tiles * kCluster);
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr;
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = kCluster, attr.val.clusterDim.y = 1, attr.val.clusterDim.z = 1;
  cfg.gridDim = dim3(unsigned(grid)), cfg.blockDim = dim3(kThreads), cfg.dynamicSmemBytes = C::kSmemBytes;
  cfg.stream = stream, cfg.attrs = &attr, cfg.numAttrs = 1;
  const cudaError_t err = cudaLaunchKernelEx(&cfg, gate_up_sm90_kernel<T, kCluster, C>, tx, tg, tu, th,
                                             static_cast<T*>(h), int(m), int(i), int(k), int(act));
  STD_TORCH_CHECK(err == cudaSuccess, "fused_mlp.gated_mlp: launching the sm_90a gate/up kernel failed: ",
                  cudaGetErrorString(err));
}

// The instances a variant number selects (bench/sm90/gate_up_proto.cu sweeps them).
template <typename T>
void launch_variant(int variant, const void* x, const void* wg, const void* wu, void* h, long long m, long long i,
                    long long k, Act act, cudaStream_t stream, int device) {
  switch (variant) {
    case 0: return launch<T, 1, Cfg<64, 4, false, 0>>(x, wg, wu, h, m, i, k, act, stream, device);
    case 1: return launch<T, 1, Cfg<64, 4, true, 0>>(x, wg, wu, h, m, i, k, act, stream, device);
    case 2: return launch<T, 1, Cfg<32, 9, false, 0>>(x, wg, wu, h, m, i, k, act, stream, device);
    case 3: return launch<T, 1, Cfg<32, 9, true, 0>>(x, wg, wu, h, m, i, k, act, stream, device);
    case 4: return launch<T, 2, Cfg<32, 9, false, 0>>(x, wg, wu, h, m, i, k, act, stream, device);
    case 5: return launch<T, 2, Cfg<64, 4, true, 0>>(x, wg, wu, h, m, i, k, act, stream, device);
    case 6: return launch<T, 1, Cfg<64, 4, false, 1>>(x, wg, wu, h, m, i, k, act, stream, device);
    case 7: return launch<T, 1, Cfg<64, 4, false, 2>>(x, wg, wu, h, m, i, k, act, stream, device);
    case 8: return launch<T, 1, Cfg<32, 9, true, 1>>(x, wg, wu, h, m, i, k, act, stream, device);
    case 9: return launch<T, 1, Cfg<32, 9, true, 2>>(x, wg, wu, h, m, i, k, act, stream, device);
    case 10: return launch<T, 2, Cfg<64, 4, false, 0>>(x, wg, wu, h, m, i, k, act, stream, device);
    case 11: return launch<T, 2, Cfg<64, 4, false, 0, false>>(x, wg, wu, h, m, i, k, act, stream, device);
    case 13: return launch<T, 1, Cfg<64, 4, false, 2, true, false>>(x, wg, wu, h, m, i, k, act, stream, device);
    case 14: return launch<T, 1, Cfg<64, 4, true, 2, true, false>>(x, wg, wu, h, m, i, k, act, stream, device);
    case 12: return launch<T, 2, Cfg<64, 4, false, 2>>(x, wg, wu, h, m, i, k, act, stream, device);
    case 15: return launch<T, 1, Cfg<64, 4, false, 3>>(x, wg, wu, h, m, i, k, act, stream, device);
    case 16: return launch<T, 2, Cfg<64, 4, false, 3>>(x, wg, wu, h, m, i, k, act, stream, device);
    // gelu_tanh compiled in (other activations give wrong results): TMA-store / direct-store epilogue
    case 17: return launch<T, 1, Cfg<64, 4, false, 3, true, true, 3>>(x, wg, wu, h, m, i, k, act, stream, device);
    case 18: return launch<T, 1, Cfg<64, 4, false, 0, true, true, 3>>(x, wg, wu, h, m, i, k, act, stream, device);
    case 19: return launch<T, 1, Cfg<64, 4, false, 3, true, true, 0>>(x, wg, wu, h, m, i, k, act, stream, device);
    case 20: return launch<T, 2, Cfg<64, 4, false, 3, true, true, 3>>(x, wg, wu, h, m, i, k, act, stream, device);
    case 21: return launch<T, 2, Cfg<64, 4, false, 3, false, true, 3>>(x, wg, wu, h, m, i, k, act, stream, device);
    case 22: return launch<T, 1, Cfg<64, 4, true, 3, true, true, 3>>(x, wg, wu, h, m, i, k, act, stream, device);
    // v17 with the loads left out (timing only): the MMA side plus the epilogue
    case 23: return launch<T, 1, Cfg<64, 4, false, 3, true, false, 3>>(x, wg, wu, h, m, i, k, act, stream, device);
    // v17 / v20 with K 32 per stage and 8 stages: a consumer holds half the bytes, the producer has 144 KB of
    // slack instead of 96 (latency tolerance of the loads)
    case 24: return launch<T, 1, Cfg<32, 8, false, 3, true, true, 3>>(x, wg, wu, h, m, i, k, act, stream, device);
    case 25: return launch<T, 2, Cfg<32, 8, false, 3, true, true, 3>>(x, wg, wu, h, m, i, k, act, stream, device);
    // v17 with a ring of 3 stages (sensitivity to the loads' lead), and loading only x's / only the weights' tiles
    case 26: return launch<T, 1, Cfg<64, 3, false, 3, true, true, 3>>(x, wg, wu, h, m, i, k, act, stream, device);
    case 27: return launch<T, 1, Cfg<64, 4, false, 3, true, true, 3, 1>>(x, wg, wu, h, m, i, k, act, stream, device);
    case 28: return launch<T, 1, Cfg<64, 4, false, 3, true, true, 3, 2>>(x, wg, wu, h, m, i, k, act, stream, device);
    default: STD_TORCH_CHECK(false, "fused_mlp: no sm_90a gate/up variant ", variant);
  }
}

template <typename T>
int grid_variant(int variant, int device) {
  switch (variant) {
    case 4: return prepared_grid<T, 2, Cfg<32, 9, false, 0>>(device);
    case 5: return prepared_grid<T, 2, Cfg<64, 4, true, 0>>(device);
    case 10: return prepared_grid<T, 2, Cfg<64, 4, false, 0>>(device);
    case 20: return prepared_grid<T, 2, Cfg<64, 4, false, 3, true, true, 3>>(device);
    case 21: return prepared_grid<T, 2, Cfg<64, 4, false, 3, false, true, 3>>(device);
    case 25: return prepared_grid<T, 2, Cfg<32, 8, false, 3, true, true, 3>>(device);
    default: return prepared_grid<T, 1, Cfg<64, 4, false, 0>>(device);
  }
}

}  // namespace

int gate_up_sm90_grid(int variant, bool half, int device) {
  return half ? grid_variant<__half>(variant, device) : grid_variant<__nv_bfloat16>(variant, device);
}

bool gate_up_sm90_fits(int sm, long long k, long long i, bool aligned) {
  return sm == 90 && aligned && k % 8 == 0 && i % 8 == 0 && k > 0 && i > 0 && encode_fn() != nullptr;
}

void launch_gate_up_sm90(const void* x, const void* wg, const void* wu, void* h, long long m, long long i, long long k,
                         Act act, bool half, int variant, cudaStream_t stream, int device) {
  if (half) launch_variant<__half>(variant, x, wg, wu, h, m, i, k, act, stream, device);
  else launch_variant<__nv_bfloat16>(variant, x, wg, wu, h, m, i, k, act, stream, device);
}

}  // namespace fused_mlp
