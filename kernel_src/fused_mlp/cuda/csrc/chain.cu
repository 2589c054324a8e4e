// The persistent layer-chain kernel of chain.h. One program per SM (or per tile when there are fewer); per
// layer a program takes 8-column tiles (tile, tile + grid, ...: up to 4 / m_tiles of them, which share one
// read of the layer's input), its 8 warps split K into 32-wide blocks of two mma.sync m16n8k16 steps (rows in
// 16-row tiles, fp32 accumulators), sum their partial tiles through shared memory, and apply bias +
// activation (or act(g) * u, storing g and u too for training) while storing. Activations move through
// global memory (L2) between layers: a program needs every column of the previous layer, so layers are
// separated by a grid barrier (cooperative launch: the driver guarantees all programs are resident). Every
// layer's weight slices and biases go global -> shared with cp.async when the kernel starts, one commit group
// per layer, so a layer's weights wait in shared memory when the barrier before it opens.
#include "chain.h"
#include "warp_mma.cuh"

#include <cooperative_groups.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

namespace fused_mlp {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kTileN = 8;    // output columns per tile: mma's N

// Row pitch (elements) of a weight slice in shared memory: the row length padded to 32 mod 64 elements, so
// the 16-byte reads of two adjacent rows by a quarter warp fall in different halves of the 32 banks.
__host__ __device__ constexpr int slice_pitch(int k) { return k + ((32 - k % 64) + 64) % 64; }

struct LayerArgs {
  const void* w;
  const void* w_up;
  const void* bias;
  void* out;
  void* gu;
  int n, k, act, tiles;
  int smem_off, tile_bytes;  // this layer's slices in a program's shared memory; bytes per tile
  int bias_off;              // its tiles' biases (16 bytes each) in shared memory
};

struct ChainArgs {
  const void* x;
  int m, count, red_off;  // red_off: the cross-warp reduction area
  LayerArgs l[kMaxChainLayers];
};

// Copy this program's weight slices of layer L (tiles blockIdx.x, +grid, ...) into shared memory: 8 rows of
// w per tile (then 8 of w_up when gated), rows slice_pitch(k) elements apart.
__device__ void prefetch_layer(const LayerArgs& L, unsigned char* smem) {
  const int chunks = L.k / 8;  // 16-byte pieces per row
  const int rows = L.w_up ? 2 * kTileN : kTileN;
  const int pitch = slice_pitch(L.k);
  for (int j = 0, tile = blockIdx.x; tile < L.tiles; ++j, tile += gridDim.x) {
    uint16_t* dst = reinterpret_cast<uint16_t*>(smem + L.smem_off + j * L.tile_bytes);
    for (int c = threadIdx.x; c < rows * chunks; c += kThreads) {
      const int r = c / chunks, q = c - r * chunks;
      const void* w = r < kTileN ? L.w : L.w_up;
      const long long row = static_cast<long long>(tile) * kTileN + (r % kTileN);
      cp_async16(dst + r * pitch + q * 8, static_cast<const uint16_t*>(w) + row * L.k + q * 8);
    }
    if (L.bias != nullptr && threadIdx.x == 0)
      cp_async16(smem + L.bias_off + j * 16, static_cast<const uint16_t*>(L.bias) + static_cast<long long>(tile) * kTileN);
  }
}

// Lane (g, t)'s piece of the activations at column kk of its rows (16 bytes in a 32-wide block, 8 in the
// 16-wide tail block; zeros past the last row, or when `live` is false).
template <int MT, typename V>
__device__ __forceinline__ void load_piece(V (&av)[MT][2], const uint16_t* in, int k, int m, int kk, bool live, int g) {
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = i * 16 + g + half * 8;
      av[i][half] = row < m && live ? __ldcg(reinterpret_cast<const V*>(in + static_cast<long long>(row) * k + kk))
                                    : V{};
    }
}

// The MMAs of one K block for every tile of the program (and both halves when gated): S = 2 steps of 16 for a
// 16-byte piece, 1 for the 8-byte tail. Step s uses the piece's words 2s, 2s+1 of both operands (A rows g and
// g + 8, B row g), the same permuted K order on both sides.
template <typename T, int MT, int TG, typename V>
__device__ __forceinline__ void mma_block(float (&acc)[TG][MT][2][4], const V (&av)[MT][2], const uint16_t* ws,
                                          int tstride, int pitch, int g, int kk, int ntiles, bool gated) {
  constexpr int S = sizeof(V) / 8;
#pragma unroll
  for (int j = 0; j < TG; ++j) {
    if (j >= ntiles) break;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (h == 1 && !gated) break;
      const V bv = *reinterpret_cast<const V*>(ws + j * tstride + (h * kTileN + g) * pitch + kk);
      const uint32_t* b = reinterpret_cast<const uint32_t*>(&bv);
#pragma unroll
      for (int i = 0; i < MT; ++i) {
        const uint32_t* a0 = reinterpret_cast<const uint32_t*>(&av[i][0]);
        const uint32_t* a1 = reinterpret_cast<const uint32_t*>(&av[i][1]);
#pragma unroll
        for (int st = 0; st < S; ++st)
          mma16816<T>(acc[j][i][h], a0[2 * st], a1[2 * st], a0[2 * st + 1], a1[2 * st + 1], b[2 * st], b[2 * st + 1]);
      }
    }
  }
}

// One layer for all of this program's tiles (at most TG): each warp takes K blocks warp, warp + 8, ... .
// Inside a block the K order is permuted the same way for both operands (a dot product does not care): lane
// (g, t) reads 8 (or, in a 16-wide tail block, 4) consecutive elements of its rows at t * 8, whole 16-byte
// pieces, so the activations (read by every program) cost one L2 sector request per 32 bytes, and they are
// read once per program and layer whatever its number of tiles.
template <typename T, int MT, int TG>
__device__ void layer(const ChainArgs& a, const LayerArgs& L, const uint16_t* in, const unsigned char* smem,
                      float* red, int pending) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int k = L.k, pitch = slice_pitch(k), m = a.m;
  const bool gated = L.w_up != nullptr;
  int ntiles = 0;
  for (int tile = blockIdx.x; tile < L.tiles && ntiles < TG; tile += gridDim.x) ++ntiles;
  float acc[TG][MT][2][4];
#pragma unroll
  for (int j = 0; j < TG; ++j)
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int r = 0; r < 4; ++r) acc[j][i][h][r] = 0.f;
  const uint16_t* ws = reinterpret_cast<const uint16_t*>(smem + L.smem_off);
  const int tstride = L.tile_bytes / 2;  // elements between a program's tiles in shared memory
  const int blocks32 = k / 32;
  // A warp's activations for its next D blocks are in flight at once (requested before waiting for this layer's
  // weights, then each buffer refilled as soon as it is multiplied): one L2 round trip per D blocks, not per block.
  constexpr int D = 4 / MT;
  uint4 buf[D][MT][2];
#pragma unroll
  for (int d = 0; d < D; ++d) {
    const int kb = warp + d * kWarps;
    load_piece<MT>(buf[d], in, k, m, kb * 32 + t * 8, kb < blocks32, g);
  }
  cp_async_wait(pending);
  __syncthreads();
  for (int kb0 = warp; kb0 < blocks32; kb0 += D * kWarps) {
#pragma unroll
    for (int d = 0; d < D; ++d) {
      const int kb = kb0 + d * kWarps, next = kb + D * kWarps;
      if (kb < blocks32) mma_block<T, MT, TG>(acc, buf[d], ws, tstride, pitch, g, kb * 32 + t * 8, ntiles, gated);
      load_piece<MT>(buf[d], in, k, m, next * 32 + t * 8, next < blocks32, g);
    }
  }
  if (k % 32 != 0 && warp == blocks32 % kWarps) {  // the last 16 columns of K
    uint2 tail[MT][2];
    load_piece<MT>(tail, in, k, m, blocks32 * 32 + t * 4, true, g);
    mma_block<T, MT, TG>(acc, tail, ws, tstride, pitch, g, blocks32 * 32 + t * 4, ntiles, gated);
  }
  // red: [warp][TG][MT][h][lane][4] partial tiles; then each thread sums output elements over the warps.
  const int halves = gated ? 2 : 1;
#pragma unroll
  for (int j = 0; j < TG; ++j)
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if (h >= halves) break;
        float4* dst = reinterpret_cast<float4*>(red + ((((warp * TG + j) * MT + i) * halves + h) * 32 + lane) * 4);
        *dst = make_float4(acc[j][i][h][0], acc[j][i][h][1], acc[j][i][h][2], acc[j][i][h][3]);
      }
  __syncthreads();
  const Act act = static_cast<Act>(L.act);
  const long long n = L.n;
  T* out = static_cast<T*>(L.out);
  for (int e = threadIdx.x; e < ntiles * MT * 128; e += kThreads) {
    const int j = e / (MT * 128), i = (e >> 7) % MT, ln = (e >> 2) & 31, r = e & 3;
    const int row = i * 16 + (ln >> 2) + (r >= 2 ? 8 : 0);
    if (row >= m) continue;
    const long long col = static_cast<long long>(blockIdx.x + j * gridDim.x) * kTileN + (ln & 3) * 2 + (r & 1);
    float z[2] = {0.f, 0.f};
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float* part = red + ((((w * TG + j) * MT + i) * halves) * 32 + ln) * 4 + r;
      z[0] += part[0];
      if (gated) z[1] += part[128];  // h = 1: the next [lane][4] block
    }
    if (gated) {
      out[row * n + col] = from_f<T>(act_fwd(z[0], act) * z[1]);
      if (L.gu != nullptr) {
        T* gu = static_cast<T*>(L.gu);
        gu[row * n + col] = from_f<T>(z[0]);
        gu[static_cast<long long>(m) * n + row * n + col] = from_f<T>(z[1]);
      }
    } else {
      if (L.bias != nullptr) z[0] += to_f(reinterpret_cast<const T*>(smem + L.bias_off + j * 16)[col % kTileN]);
      out[row * n + col] = from_f<T>(act_fwd(z[0], act));
    }
  }
  __syncthreads();  // red is reused by the next layer
}

template <typename T, int MT>
__global__ void __launch_bounds__(kThreads, 1) chain_kernel(const ChainArgs a) {
  constexpr int TG = 4 / MT;
  extern __shared__ __align__(16) unsigned char smem[];
  for (int l = 0; l < a.count; ++l) {
    prefetch_layer(a.l[l], smem);
    cp_async_commit();
  }
  float* red = reinterpret_cast<float*>(smem + a.red_off);
  for (int l = 0; l < a.count; ++l) {
    layer<T, MT, TG>(a, a.l[l], static_cast<const uint16_t*>(l == 0 ? a.x : a.l[l - 1].out), smem, red,
                     a.count - 1 - l);
    if (l + 1 < a.count) cooperative_groups::this_grid().sync();
  }
}

using KernelFn = void (*)(const ChainArgs);

// The chain kernel for (dtype, row tiles): its host stub and its function on `device`, prepared once per
// (kernel, device) with its dynamic shared-memory limit raised to the device's opt-in maximum.
struct ChainKernel {
  KernelFn stub;
  cudaFunction_t function;
};
ChainKernel chain_kernel_on(bool bf16, int m_tiles, int device) {
  static const KernelFn stubs[6] = {chain_kernel<__nv_bfloat16, 1>, chain_kernel<__nv_bfloat16, 2>,
                                    chain_kernel<__nv_bfloat16, 4>, chain_kernel<__half, 1>,
                                    chain_kernel<__half, 2>,        chain_kernel<__half, 4>};
  static std::atomic<cudaFunction_t> functions[6][kMaxDevices] = {};
  const int which = variant_index(bf16, m_tiles);
  const void* stub = reinterpret_cast<const void*>(stubs[which]);
  return {stubs[which], prepared_function(stub, functions[which][device], device, "chain")};
}

// Tiles one program takes per layer at most (chain_kernel's TG): 4 at <= 16 rows, 2 at <= 32, 1 at <= 64.
int tiles_per_program(int m_tiles) { return 4 / m_tiles; }

// Shared-memory layout of a chain on `grid` programs: fills smem_off / tile_bytes / tiles; returns the total.
size_t layout(const ChainLayer* layers, int count, int grid, int m_tiles, LayerArgs* out, int* red_off) {
  size_t at = 0;
  bool gated = false;
  for (int l = 0; l < count; ++l) {
    const ChainLayer& c = layers[l];
    LayerArgs& L = out[l];
    L.tiles = static_cast<int>(c.n / kTileN);
    L.tile_bytes = static_cast<int>((c.w_up ? 2 : 1) * kTileN * slice_pitch(static_cast<int>(c.k)) * 2);
    const size_t per = static_cast<size_t>((L.tiles + grid - 1) / grid);
    L.smem_off = static_cast<int>(at);
    at += per * L.tile_bytes;
    L.bias_off = static_cast<int>(at);
    at += c.bias ? per * 16 : 0;
    gated = gated || c.w_up != nullptr;
  }
  *red_off = static_cast<int>(at);
  return at + static_cast<size_t>(kWarps) * tiles_per_program(m_tiles) * m_tiles * (gated ? 2 : 1) * 128 * sizeof(float);
}

}  // namespace

ChainPlan plan_chain(const Ctx& c, long long m, const ChainLayer* layers, int count, ScalarType dtype, int align_x) {
  ChainPlan p;
  long long weight_bytes = 0;  // the largest layer's, gate and up together (paths.py); past 8 layers: refused below
  for (int l = 0; l < std::min(count, kMaxChainLayers); ++l)
    weight_bytes = std::max(weight_bytes, layers[l].n * layers[l].k * (layers[l].w_up != nullptr ? 2 : 1));
  weight_bytes *= static_cast<long long>(element_bytes(dtype));
  if (choose_impl(Step::Chain, c.op, c.sm, m, weight_bytes, c.captured) != Impl::Persistent) return p;
  if ((dtype != ScalarType::BFloat16 && dtype != ScalarType::Half) || m < 1 || m > kMaxChainRows || count < 1 ||
      count > kMaxChainLayers || align_x < 16 || c.sm < 80 || c.device >= kMaxDevices)
    return p;
  long long tiles = 0;
  for (int l = 0; l < count; ++l) {
    const ChainLayer& L = layers[l];
    if (L.n <= 0 || L.k <= 0 || L.n % kTileN != 0 || L.k % 16 != 0 || L.n * L.k >= (1ll << 31) ||
        m * L.n >= (1ll << 31) || !aligned16(L.w) || !aligned16(L.w_up) || !aligned16(L.bias))
      return p;
    tiles = std::max(tiles, L.n / kTileN);
  }
  p.m_tiles = m <= 16 ? 1 : m <= 32 ? 2 : 4;
  // One program per SM (or per tile, when fewer): spreading the weight slices over every SM measured faster
  // than fewer programs reading the input less often (bench/BENCHMARKS.md).
  p.grid = static_cast<int>(std::min<long long>(tiles, c.sms));
  LayerArgs args[kMaxChainLayers];
  int red_off = 0;
  p.smem = layout(layers, count, p.grid, p.m_tiles, args, &red_off);
  p.run = (tiles + p.grid - 1) / p.grid <= tiles_per_program(p.m_tiles) &&
          static_cast<long long>(p.smem) <= smem_optin(c.device);
  return p;
}

void run_chain(const ChainPlan& p, const Ctx& c, const void* x, long long m, const ChainLayer* layers, int count,
               ScalarType dtype) {
  ChainArgs a{};
  a.x = x;
  a.m = static_cast<int>(m);
  a.count = count;
  layout(layers, count, p.grid, p.m_tiles, a.l, &a.red_off);
  for (int l = 0; l < count; ++l) {
    const ChainLayer& s = layers[l];
    LayerArgs& L = a.l[l];
    L.w = s.w, L.w_up = s.w_up, L.bias = s.bias, L.out = s.out, L.gu = s.gu;
    L.n = static_cast<int>(s.n), L.k = static_cast<int>(s.k), L.act = static_cast<int>(s.act);
  }
  const ChainKernel kernel = chain_kernel_on(dtype == ScalarType::BFloat16, p.m_tiles, c.device);
  void* params[] = {&a};
  launch_own_kernel(reinterpret_cast<const void*>(kernel.stub), kernel.function, static_cast<unsigned>(p.grid),
                    kThreads, static_cast<unsigned>(p.smem), params, true, c.stream, "chain");
}

}  // namespace fused_mlp
