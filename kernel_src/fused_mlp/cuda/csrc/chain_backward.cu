// The persistent backward kernel of chain.h. One program per SM (or per tile when there are fewer). When it
// starts, each program copies its column slices of every layer's weight (w[:, 8 columns] per d-input tile,
// all n rows: 16 bytes a row) into shared memory with cp.async, one commit group per layer in the order the
// layers are processed (last first). Then per layer, from the last:
// - d input: the program's 8-column tiles of d in = dz w ([M, k], K = n): its 8 warps split n into 32-wide
//   chunks, A = dz rows read from L2 (16 bytes a lane, K permuted to fit; the next chunk's in flight while
//   this one multiplies), B = the weight slice through ldmatrix.trans in the same K order, mma.sync m16n8k16
//   with fp32 accumulators; the partial tiles
//   are summed through shared memory and stored with relu' of the previous layer's saved output applied:
//   that is the previous layer's dz (or dx for the first layer). After a gated layer this is dh, and the
//   store writes that layer's dz instead: dg = dh u act'(g) and du = dh act(g) from its saved (g, u).
// - d weight: the program's 64x128 tiles of dW = dz^T in ([n, k], K = M): dz's and in's columns are staged
//   transposed in shared memory (rows padded to 16, zeros past M) so both MMA operands are K-contiguous, the
//   next tile's loads in flight while one multiplies; the tiles with column 0 also sum dz's columns: the bias
//   gradient.
// A grid barrier separates the layers (the next layer reads this one's dz); buffers other programs wrote are
// read with ld.global.cg (L2), never through L1.
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
constexpr int kTileN = 8;     // d-input columns per tile: mma's N
constexpr int kDwRows = 64;   // d-weight tile: rows (n) = 4 warps x 16
constexpr int kDwCols = 128;  // d-weight tile: columns (k) = 2 warps x 8 MMAs x 8

// The phase clock that `git show 1aded6b^:bench/probe_chain_backward.py` reads: built with
// FUSED_MLP_TRACE_PHASES defined (a probe build, never shipped), thread 0 of every program records %globaltimer at each phase's end and prints them when the kernel
// ends; otherwise phase() is empty. Phases: 0 entry, 1 prefetch issued, then per layer (from the last) its
// weight slices ready, d input done, d weight done, grid barrier passed.
#ifdef FUSED_MLP_TRACE_PHASES
// In global memory, one row per program: static shared memory would lower the dynamic limit below the opt-in
// maximum that prepared_function sets (cudaFuncSetAttribute then fails with "invalid argument").
constexpr int kPhases = 2 + 4 * kMaxChainLayers, kPhasePrograms = 1024;
__device__ unsigned long long phase_ns[kPhasePrograms][kPhases];
__device__ __forceinline__ void phase(int i) {
  if (threadIdx.x != 0 || blockIdx.x >= kPhasePrograms) return;
  unsigned long long* row = phase_ns[blockIdx.x];
  if (i == 0)  // a phase a program skips (no d-input tile) prints 0
    for (int j = 1; j < kPhases; ++j) row[j] = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(row[i]));
}
__device__ void print_phases(int count) {
  if (threadIdx.x == 0 && blockIdx.x < kPhasePrograms)
    for (int i = 0; i < 2 + 4 * count; ++i) printf("PHASE %d %d %llu\n", blockIdx.x, i, phase_ns[blockIdx.x][i]);
}
#else
__device__ __forceinline__ void phase(int) {}
__device__ __forceinline__ void print_phases(int) {}
#endif
// The first of layer l's four phases when the kernel walks `count` layers from the last.
__device__ __forceinline__ int layer_phase(int count, int l) { return 2 + 4 * (count - 1 - l); }

struct LayerArgs {
  const void* w;     // [n, k]; with w2 (a gated layer's w_up) set, rows [0, n/2) and w2's rows [n/2, n)
  const void* w2;
  const void* in;    // [M, k]
  const void* dz;    // [M, n]: this layer's dz (dy, or what the layer after it stored)
  const void* mask;  // [M, k]: the previous layer's output when its act is relu (d in keeps mask > 0), or null
  const void* gate;  // [2, M, k]: the previous (gated) layer's saved (g, u) planes, or null
  int gate_act;      // that layer's activation (Act), when `gate` is set
  void* d_in;        // [M, k]: the previous layer's dz, or dx; [M, 2k] = (dg | du) per row when `gate` is set
  void* dw;          // [n, k]
  void* db;          // [n] or null
  int n, k;
  int tiles;         // d-input tiles: k / 8
  int dw_tiles;      // d-weight tiles: ceil(n / 64) * ceil(k / 128)
  int smem_off;      // this layer's weight slices in a program's shared memory (n * 16 bytes per tile)
};

struct Args {
  const void* dy;
  const void* last_out;  // the last layer's output when its act is relu (then dz_last = dy * relu'), else null
  void* dz_last;
  int m, count, mp;      // mp: M padded to the row tiles (16 each)
  int red_off, stage_off;
  LayerArgs l[kMaxChainLayers];
};

// This program's weight slices of layer L (tiles blockIdx.x, +grid, ...): w[:, tile * 8 + 0..7], n rows of 16 bytes.
__device__ void prefetch_slices(const LayerArgs& L, unsigned char* smem) {
  for (int j = 0, tile = blockIdx.x; tile < L.tiles; ++j, tile += gridDim.x) {
    unsigned char* dst = smem + L.smem_off + static_cast<size_t>(j) * L.n * 16;
    const uint16_t* src = static_cast<const uint16_t*>(L.w) + static_cast<long long>(tile) * kTileN;
    const uint16_t* src2 = static_cast<const uint16_t*>(L.w2) + static_cast<long long>(tile) * kTileN;
    const int split = L.w2 != nullptr ? L.n / 2 : L.n;
    for (int r = threadIdx.x; r < L.n; r += kThreads)
      cp_async16(dst + r * 16, r < split ? src + static_cast<long long>(r) * L.k
                                         : src2 + static_cast<long long>(r - split) * L.k);
  }
}

// dz's A fragments of one 32-wide K chunk (columns kc * 32 ..) for every row tile, with 16-byte loads: lane
// (g, t) loads columns kc * 32 + 8t .. 8t + 7 of rows g (f[i][0]) and g + 8 (f[i][1]), zeros past M or n. That
// is two MMAs' A (mma_k_chunk): the MMA's K order is a permutation of these columns, and B's rows follow it.
// One 16-byte load per row per lane instead of four 4-byte ones, each a full 32-byte sector of L2.
template <int MT>
__device__ __forceinline__ void load_a(uint4 (&f)[MT][2], const uint16_t* dz, int n, int m, int kc, int g, int t) {
  const int col = kc * 32 + 8 * t;  // n % 16 == 0: the 8 columns are all in range or all out
  const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
  for (int i = 0; i < MT; ++i) {
    const int r0 = i * 16 + g, r1 = r0 + 8;
    f[i][0] = col < n && r0 < m ? __ldcg(reinterpret_cast<const uint4*>(dz + static_cast<long long>(r0) * n + col)) : zero;
    f[i][1] = col < n && r1 < m ? __ldcg(reinterpret_cast<const uint4*>(dz + static_cast<long long>(r1) * n + col)) : zero;
  }
}

// The two MMAs of K chunk kc per (tile, row tile). MMA h takes, as its K indices 2t, 2t+1, 2t+8, 2t+9 of lane
// (g, t), the chunk's columns 8t + 4h + 0..3 (uint4 words x, y for h = 0; z, w for h = 1); so B's K row r of
// that MMA is the weight slice's row kc * 32 + 8 (r' >> 1) + 2 (r >= 8) + (r' & 1) + 4h, r' = r & 7. Rows past
// n (a half chunk when n is an odd multiple of 16) are clamped to n - 1: their A is zero, and a finite weight
// times zero adds nothing.
template <typename T, int MT, int TG>
__device__ __forceinline__ void mma_k_chunk(float (&acc)[TG][MT][4], const uint4 (&f)[MT][2],
                                            const unsigned char* slices, int slice_bytes, int kc, int n, int ntiles) {
  const int lane = threadIdx.x & 31, r = lane & 7;
  const int base = kc * 32 + 8 * (r >> 1) + 2 * ((lane >> 3) & 1) + (r & 1);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = min(base + 4 * h, n - 1);
#pragma unroll
    for (int j = 0; j < TG; ++j) {
      if (j >= ntiles) break;
      uint32_t b0, b1;
      ldmatrix_x2_trans(b0, b1, slices + j * slice_bytes + row * 16);
#pragma unroll
      for (int i = 0; i < MT; ++i) {
        const uint4& lo = f[i][0];
        const uint4& hi = f[i][1];
        if (h == 0)
          mma16816<T>(acc[j][i], lo.x, hi.x, lo.y, hi.y, b0, b1);
        else
          mma16816<T>(acc[j][i], lo.z, hi.z, lo.w, hi.w, b0, b1);
      }
    }
  }
}

// d in = dz w for this program's tiles (at most TG), stored as the previous layer's dz (relu' applied) or dx.
template <typename T, int MT, int TG>
__device__ void d_input(const Args& a, const LayerArgs& L, const unsigned char* smem, float* red, int pending) {
  int ntiles = 0;
  for (int tile = blockIdx.x; tile < L.tiles && ntiles < TG; tile += gridDim.x) ++ntiles;
  if (ntiles == 0) return;  // uniform over the block: depends on blockIdx only
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int n = L.n, k = L.k, m = a.m, slice_bytes = n * 16;
  const uint16_t* dz = static_cast<const uint16_t*>(L.dz);
  const unsigned char* slices = smem + L.smem_off;
  float acc[TG][MT][4];
#pragma unroll
  for (int j = 0; j < TG; ++j)
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[j][i][r] = 0.f;
  uint4 f0[MT][2], f1[MT][2];
  const int chunks = (n + 31) / 32;
  load_a<MT>(f0, dz, n, m, warp, g, t);  // in flight while the weight slices land
  cp_async_wait(pending);
  __syncthreads();
  phase(layer_phase(a.count, pending));  // pending == this layer's index
  for (int kc = warp; kc < chunks; kc += 2 * kWarps) {
    load_a<MT>(f1, dz, n, m, kc + kWarps, g, t);
    mma_k_chunk<T, MT, TG>(acc, f0, slices, slice_bytes, kc, n, ntiles);
    if (kc + kWarps >= chunks) break;
    load_a<MT>(f0, dz, n, m, kc + 2 * kWarps, g, t);
    mma_k_chunk<T, MT, TG>(acc, f1, slices, slice_bytes, kc + kWarps, n, ntiles);
  }
  // red: [warp][TG][MT][lane][4] partial tiles; then each thread sums output elements over the warps.
#pragma unroll
  for (int j = 0; j < TG; ++j)
#pragma unroll
    for (int i = 0; i < MT; ++i)
      *reinterpret_cast<float4*>(red + (((warp * TG + j) * MT + i) * 32 + lane) * 4) =
          make_float4(acc[j][i][0], acc[j][i][1], acc[j][i][2], acc[j][i][3]);
  __syncthreads();
  const T* mask = static_cast<const T*>(L.mask);
  const T* gate = static_cast<const T*>(L.gate);
  T* out = static_cast<T*>(L.d_in);
  for (int e = threadIdx.x; e < ntiles * MT * 128; e += kThreads) {
    const int j = e / (MT * 128), i = (e >> 7) % MT, ln = (e >> 2) & 31, r = e & 3;
    const int row = i * 16 + (ln >> 2) + (r >= 2 ? 8 : 0);
    if (row >= m) continue;
    const long long col = static_cast<long long>(blockIdx.x + j * gridDim.x) * kTileN + (ln & 3) * 2 + (r & 1);
    float v = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) v += red[(((w * TG + j) * MT + i) * 32 + ln) * 4 + r];
    const long long at = static_cast<long long>(row) * k + col;
    if (gate != nullptr) {  // v = dh: store dg = dh u act'(g) and du = dh act(g) as the gated layer's dz row
      float f, df;
      const float u = to_f(gate[static_cast<long long>(m) * k + at]);
      act_fwd_grad(to_f(gate[at]), static_cast<Act>(L.gate_act), f, df);
      T* dz_row = out + static_cast<long long>(row) * 2 * k;
      dz_row[col] = from_f<T>(v * u * df);
      dz_row[k + col] = from_f<T>(v * f);
      continue;
    }
    if (mask != nullptr && !(to_f(mask[at]) > 0.f)) v = 0.f;
    out[at] = from_f<T>(v);
  }
  __syncthreads();  // red is reused by the next layer
}

// Staging item c of a d-weight tile (load_stage, store_stage): whether it is dz's (else in's), its row and its
// 8-column chunk; decoded in one place for the load loop and the store loop, which must agree.
template <int MT>
struct StageItem {
  static constexpr int kDzChunks = kDwRows / 8, kInChunks = kDwCols / 8, kDzItems = MT * 16 * kDzChunks;
  static constexpr int kItems = kDzItems + MT * 16 * kInChunks;
  bool dz;
  int row, chunk;
  __device__ __forceinline__ explicit StageItem(int c) : dz(c < kDzItems) {
    const int chunks = dz ? kDzChunks : kInChunks, e = dz ? c : c - kDzItems;
    row = e / chunks, chunk = e - row * chunks;
  }
};

// A d-weight tile's operands staged transposed ([column][pitch], rows [0, MT * 16), zeros past M and past the
// matrix's columns): dz's columns [n0, n0 + 64) into dz_t and in's [k0, k0 + 128) into in_t. In two halves so the
// next tile's loads fly while this one multiplies: load_stage issues every 16-byte load of a thread (both matrices)
// into registers, store_stage writes them transposed once the staging area is free.
template <int MT>
struct Stage {
  static constexpr int kPer = (StageItem<MT>::kItems + kThreads - 1) / kThreads;
  uint4 v[kPer];
};

template <int MT>
__device__ __forceinline__ void load_stage(Stage<MT>& st, const LayerArgs& L, int n0, int k0, int m) {
  using Item = StageItem<MT>;
#pragma unroll
  for (int p = 0; p < Stage<MT>::kPer; ++p) {
    const int c = threadIdx.x + p * kThreads;
    const Item it(c);
    const int col = (it.dz ? n0 : k0) + it.chunk * 8, cols = it.dz ? L.n : L.k;
    const uint16_t* src = static_cast<const uint16_t*>(it.dz ? L.dz : L.in);
    st.v[p] = make_uint4(0u, 0u, 0u, 0u);
    if (c < Item::kItems && it.row < m && col < cols)
      st.v[p] = __ldcg(reinterpret_cast<const uint4*>(src + static_cast<long long>(it.row) * cols + col));
  }
}

template <int MT>
__device__ __forceinline__ void store_stage(const Stage<MT>& st, uint16_t* dz_t, uint16_t* in_t, int pitch) {
  using Item = StageItem<MT>;
#pragma unroll
  for (int p = 0; p < Stage<MT>::kPer; ++p) {
    const int c = threadIdx.x + p * kThreads;
    if (c >= Item::kItems) break;
    const Item it(c);
    uint16_t* dst = it.dz ? dz_t : in_t;
    const uint16_t* x = reinterpret_cast<const uint16_t*>(&st.v[p]);
#pragma unroll
    for (int j = 0; j < 8; ++j) dst[(it.chunk * 8 + j) * pitch + it.row] = x[j];
  }
}

// dW = dz^T in for this program's 64x128 tiles, and db = dz's column sums on the tiles of column 0.
template <typename T, int MT>
__device__ void d_weight(const Args& a, const LayerArgs& L, unsigned char* smem) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int n = L.n, k = L.k, m = a.m, mp = a.mp, pitch = mp + 8;  // +8: conflict-free fragment reads
  const int tiles_k = (k + kDwCols - 1) / kDwCols;
  uint16_t* dz_t = reinterpret_cast<uint16_t*>(smem + a.stage_off);  // [64][pitch]
  uint16_t* in_t = dz_t + kDwRows * pitch;                          // [128][pitch]
  T* dw = static_cast<T*>(L.dw);
  const int r0 = (warp & 3) * 16, c0 = (warp >> 2) * 64;
  Stage<MT> st;
  if (blockIdx.x < L.dw_tiles)
    load_stage<MT>(st, L, (blockIdx.x / tiles_k) * kDwRows, (blockIdx.x % tiles_k) * kDwCols, m);
  for (int tile = blockIdx.x; tile < L.dw_tiles; tile += gridDim.x) {
    const int n0 = (tile / tiles_k) * kDwRows, k0 = (tile % tiles_k) * kDwCols;
    store_stage<MT>(st, dz_t, in_t, pitch);
    __syncthreads();
    const int next = tile + gridDim.x;
    if (next < L.dw_tiles)  // the next tile's loads fly while this one multiplies and stores
      load_stage<MT>(st, L, (next / tiles_k) * kDwRows, (next % tiles_k) * kDwCols, m);
    float acc[8][4];
#pragma unroll
    for (int f = 0; f < 8; ++f)
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[f][r] = 0.f;
    if (n0 + r0 < n) {
      for (int s = 0; s < mp / 16; ++s) {
        const int kk = s * 16 + 2 * t;
        const uint16_t* ra = dz_t + (r0 + g) * pitch + kk;
        const uint32_t a0 = *reinterpret_cast<const uint32_t*>(ra);
        const uint32_t a1 = *reinterpret_cast<const uint32_t*>(ra + 8 * pitch);
        const uint32_t a2 = *reinterpret_cast<const uint32_t*>(ra + 8);
        const uint32_t a3 = *reinterpret_cast<const uint32_t*>(ra + 8 * pitch + 8);
#pragma unroll
        for (int f = 0; f < 8; ++f) {
          const uint16_t* rb = in_t + (c0 + f * 8 + g) * pitch + kk;
          mma16816<T>(acc[f], a0, a1, a2, a3, *reinterpret_cast<const uint32_t*>(rb),
                      *reinterpret_cast<const uint32_t*>(rb + 8));
        }
      }
#pragma unroll
      for (int f = 0; f < 8; ++f) {
        const int col = k0 + c0 + f * 8 + 2 * t;
        if (col >= k) continue;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          T pair[2] = {from_f<T>(acc[f][2 * h]), from_f<T>(acc[f][2 * h + 1])};
          *reinterpret_cast<uint32_t*>(dw + static_cast<long long>(n0 + r0 + g + 8 * h) * k + col) =
              *reinterpret_cast<const uint32_t*>(pair);
        }
      }
    }
    if (L.db != nullptr && k0 == 0 && threadIdx.x < kDwRows && n0 + static_cast<int>(threadIdx.x) < n) {
      float sum = 0.f;
      for (int row = 0; row < m; ++row) sum += to_f(reinterpret_cast<const T*>(dz_t)[threadIdx.x * pitch + row]);
      static_cast<T*>(L.db)[n0 + threadIdx.x] = from_f<T>(sum);
    }
    __syncthreads();  // the staging area is refilled for the next tile
  }
}

template <typename T, int MT>
__global__ void __launch_bounds__(kThreads, 1) chain_backward_kernel(const Args a) {
  constexpr int TG = 4 / MT;
  extern __shared__ __align__(16) unsigned char smem[];
  phase(0);
  for (int l = a.count; l-- > 0;) {
    prefetch_slices(a.l[l], smem);
    cp_async_commit();
  }
  phase(1);
  cooperative_groups::grid_group grid = cooperative_groups::this_grid();
  if (a.last_out != nullptr) {  // the last layer's relu: dz = dy where its output is > 0
    const long long total = static_cast<long long>(a.m) * a.l[a.count - 1].n;
    const T* dy = static_cast<const T*>(a.dy);
    const T* out = static_cast<const T*>(a.last_out);
    T* dz = static_cast<T*>(a.dz_last);
    for (long long e = blockIdx.x * static_cast<long long>(kThreads) + threadIdx.x; e < total;
         e += static_cast<long long>(gridDim.x) * kThreads)
      dz[e] = to_f(out[e]) > 0.f ? dy[e] : from_f<T>(0.f);
    grid.sync();
  }
  float* red = reinterpret_cast<float*>(smem + a.red_off);
  for (int l = a.count; l-- > 0;) {
    d_input<T, MT, TG>(a, a.l[l], smem, red, l);  // l commit groups (layers l-1..0) may still be in flight
    const int at = layer_phase(a.count, l);
    phase(at + 1);
    d_weight<T, MT>(a, a.l[l], smem);
    phase(at + 2);
    if (l > 0) grid.sync();
    phase(at + 3);
  }
  print_phases(a.count);
}

using KernelFn = void (*)(const Args);
struct BackwardKernel {
  KernelFn stub;
  cudaFunction_t function;
};

// The kernel for (dtype, row tiles) on `device`, prepared once with its shared-memory limit raised to the opt-in maximum.
BackwardKernel backward_kernel_on(bool bf16, int m_tiles, int device) {
  static const KernelFn stubs[6] = {chain_backward_kernel<__nv_bfloat16, 1>, chain_backward_kernel<__nv_bfloat16, 2>,
                                    chain_backward_kernel<__nv_bfloat16, 4>, chain_backward_kernel<__half, 1>,
                                    chain_backward_kernel<__half, 2>,        chain_backward_kernel<__half, 4>};
  static std::atomic<cudaFunction_t> functions[6][kMaxDevices] = {};
  const int which = variant_index(bf16, m_tiles);
  const void* stub = reinterpret_cast<const void*>(stubs[which]);
  return {stubs[which], prepared_function(stub, functions[which][device], device, "chain backward")};
}

long long dw_tiles_of(long long n, long long k) { return ((n + kDwRows - 1) / kDwRows) * ((k + kDwCols - 1) / kDwCols); }

// Shared memory on `grid` programs: every layer's weight slices (filling smem_off), the cross-warp reduction
// area, the d-weight staging area; returns the total.
size_t layout(const ChainBackwardLayer* layers, int count, int grid, int m_tiles, int* smem_off, int* red_off,
              int* stage_off) {
  size_t at = 0;
  for (int l = count; l-- > 0;) {
    smem_off[l] = static_cast<int>(at);
    const long long tiles = layers[l].k / kTileN;
    at += static_cast<size_t>((tiles + grid - 1) / grid) * layers[l].n * 16;
  }
  *red_off = static_cast<int>(at);
  at += static_cast<size_t>(kWarps) * 4 * 128 * sizeof(float);  // TG * MT = 4 partial tiles per warp
  *stage_off = static_cast<int>(at);
  return at + static_cast<size_t>(kDwRows + kDwCols) * (m_tiles * 16 + 8) * 2;
}

}  // namespace

ChainBackwardPlan plan_chain_backward(const Ctx& c, long long m, const ChainBackwardLayer* layers, int count,
                                      ScalarType dtype, int align_dy) {
  ChainBackwardPlan p;
  long long weight_bytes = 0;  // the largest layer's (a gated layer's n is gate and up: 2 I); past 8: refused below
  for (int l = 0; l < std::min(count, kMaxChainLayers); ++l)
    weight_bytes = std::max(weight_bytes, layers[l].n * layers[l].k);
  weight_bytes *= static_cast<long long>(element_bytes(dtype));
  if (choose_impl(Step::ChainBackward, c.op, c.sm, m, weight_bytes, c.captured) != Impl::Persistent) return p;
  if ((dtype != ScalarType::BFloat16 && dtype != ScalarType::Half) || m < 1 || m > kMaxChainRows || count < 1 ||
      count > kMaxChainLayers || align_dy < 16 || c.sm < 80 || c.device >= kMaxDevices)
    return p;
  // Every row count the forward takes is taken: checked against float64 of the op's own saved outputs (a relu
  // flip makes a float64 forward a wrong oracle), its gradients are within the cuBLASLt layers' own error.
  long long tiles = 0;
  for (int l = 0; l < count; ++l) {
    const ChainBackwardLayer& L = layers[l];
    const bool gated = L.w_up != nullptr;
    // A gated layer's derivative is applied by the layer after it, as it stores the gated layer's dz.
    if (gated && (l != 0 || count < 2 || L.n % 32 != 0 || !aligned16(L.w_up) || !aligned16(L.gu))) return p;
    // The width the layer before hands this one as its input (a gated layer's I, not its 2I stacked rows).
    const long long prev_n = l == 0 ? L.k : layers[l - 1].w_up != nullptr ? layers[l - 1].n / 2 : layers[l - 1].n;
    if ((!gated && L.act != Act::None && L.act != Act::Relu) || L.n <= 0 || L.k <= 0 || L.n % 16 != 0 ||
        L.k % 16 != 0 || L.n * L.k >= (1ll << 31) || m * L.n >= (1ll << 31) || m * L.k >= (1ll << 31) ||
        !aligned16(L.w) || !aligned16(L.in) || !aligned16(L.out) || prev_n != L.k)
      return p;
    tiles = std::max({tiles, L.k / kTileN, dw_tiles_of(L.n, L.k)});
  }
  p.m_tiles = m <= 16 ? 1 : m <= 32 ? 2 : 4;
  p.grid = static_cast<int>(std::min<long long>(tiles, c.sms));
  int smem_off[kMaxChainLayers], red_off = 0, stage_off = 0;
  p.smem = layout(layers, count, p.grid, p.m_tiles, smem_off, &red_off, &stage_off);
  bool fits = static_cast<long long>(p.smem) <= smem_optin(c.device);
  for (int l = 0; l < count; ++l) fits = fits && (layers[l].k / kTileN + p.grid - 1) / p.grid <= 4 / p.m_tiles;
  p.run = fits;
  return p;
}

void run_chain_backward(const ChainBackwardPlan& p, const Ctx& c, const void* dy, void* dx, long long m,
                        const ChainBackwardLayer* layers, int count, ScalarType dtype) {
  Args a{};
  a.dy = dy;
  a.m = static_cast<int>(m);
  a.count = count;
  a.mp = p.m_tiles * 16;
  int smem_off[kMaxChainLayers];
  layout(layers, count, p.grid, p.m_tiles, smem_off, &a.red_off, &a.stage_off);
  const ChainBackwardLayer& last = layers[count - 1];
  if (last.act == Act::Relu) a.last_out = last.out, a.dz_last = last.dz;
  for (int l = 0; l < count; ++l) {
    const ChainBackwardLayer& s = layers[l];
    LayerArgs& L = a.l[l];
    L.w = s.w, L.in = s.in, L.dw = s.dw, L.db = s.db;
    L.w2 = s.w_up;
    L.n = static_cast<int>(s.n), L.k = static_cast<int>(s.k);
    L.tiles = static_cast<int>(s.k / kTileN);
    L.dw_tiles = static_cast<int>(dw_tiles_of(s.n, s.k));
    L.smem_off = smem_off[l];
    L.dz = l + 1 < count || s.act == Act::Relu ? s.dz : dy;
    L.d_in = l == 0 ? dx : layers[l - 1].dz;
    const bool after_gated = l > 0 && layers[l - 1].w_up != nullptr;
    L.gate = after_gated ? layers[l - 1].gu : nullptr;
    L.gate_act = static_cast<int>(after_gated ? layers[l - 1].act : Act::None);
    L.mask = l > 0 && !after_gated && layers[l - 1].act == Act::Relu ? layers[l - 1].out : nullptr;
  }
  const BackwardKernel kernel = backward_kernel_on(dtype == ScalarType::BFloat16, p.m_tiles, c.device);
  void* params[] = {&a};
  launch_own_kernel(reinterpret_cast<const void*>(kernel.stub), kernel.function, static_cast<unsigned>(p.grid),
                    kThreads, static_cast<unsigned>(p.smem), params, true, c.stream, "chain_backward");
}

}  // namespace fused_mlp
