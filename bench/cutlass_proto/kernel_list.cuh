// The prototype's kernels, one list: name and Gemm type per entry. build.sh compiles kernels.cu once per entry
// (-DGEVT_INDEX=<position>, about a minute each); the driver's table (names, forms, dtypes, entry points) is made
// from the same list, so a kernel is added here and nowhere else.
// coop: 256x128x64 tiles (two consumer warpgroups of 128x128), clusters of 1x2: cuBLAS's own choice for these
// shapes (nvjet_sm90_tst_256x128_64x4_1x2 in bench/RESULTS.md's Nsight Compute runs).
// pp: ping-pong, 128x128x64 tiles, one per consumer warpgroup, the two alternating, so one's epilogue overlaps the
// other's main loop (what an aux-heavy epilogue needs), clusters of 2x1.
// sk: cooperative 128x128x64 with the stream-K scheduler: at 1024 rows a 256x128 tiling has 96 tiles for 132 SMs.
// _s8: the aux loads with 8 stages (a whole tile's aux data in flight; the builder gives 4); _e64: ping-pong with
// 64x64 epilogue subtiles (4 per tile, so its 4 stages hold a whole tile). Session 26's diagnosis of the aux-load
// epilogues' cost.
// _gt: the activation (gelu_tanh) compiled in instead of a run-time argument (session 27: the run-time switch's five
// copies of each fragment loop overflow the instruction cache).
// _h: fp16 (the cooperative kernels, for the numerics the shipped ops need).
#pragma once

#include <tuple>
#include <utility>

#include "gated_evt.cuh"

namespace gated_evt {

using CoopTile = Shape<_256, _128, _64>;
using CoopCluster = Shape<_1, _2, _1>;
using PpTile = Shape<_128, _128, _64>;
using PpCluster = Shape<_2, _1, _1>;
using SkTile = Shape<_128, _128, _64>;
using SkCluster = Shape<_1, _1, _1>;
using StreamK = cutlass::gemm::StreamKScheduler;
using Epi64 = Shape<_64, _64>;
constexpr int kGeluTanh = static_cast<int>(fused_mlp::Act::GeluTanh);

// build.sh reads the names from the lines that start with "  X(".
#define GATED_EVT_KERNELS(X)                                                                            \
  X(plain_coop, Gemm<Form::Plain, Bf16, ColMajor, CoopTile, CoopCluster, Coop, CoopEpi>)                \
  X(upact_coop, Gemm<Form::UpAct, Bf16, ColMajor, CoopTile, CoopCluster, Coop, CoopEpi>)                \
  X(upactu_coop, Gemm<Form::UpActU, Bf16, ColMajor, CoopTile, CoopCluster, Coop, CoopEpi>)              \
  X(dgrad_coop, Gemm<Form::Dgrad, Bf16, RowMajor, CoopTile, CoopCluster, Coop, CoopEpi>)                \
  X(plain_pp, Gemm<Form::Plain, Bf16, ColMajor, PpTile, PpCluster, Pingpong, PingpongEpi>)              \
  X(upact_pp, Gemm<Form::UpAct, Bf16, ColMajor, PpTile, PpCluster, Pingpong, PingpongEpi>)              \
  X(upactu_pp, Gemm<Form::UpActU, Bf16, ColMajor, PpTile, PpCluster, Pingpong, PingpongEpi>)            \
  X(dgrad_pp, Gemm<Form::Dgrad, Bf16, RowMajor, PpTile, PpCluster, Pingpong, PingpongEpi>)              \
  X(plain_sk, Gemm<Form::Plain, Bf16, ColMajor, SkTile, SkCluster, Coop, CoopEpi, StreamK>)             \
  X(upact_sk, Gemm<Form::UpAct, Bf16, ColMajor, SkTile, SkCluster, Coop, CoopEpi, StreamK>)             \
  X(dgrad_sk, Gemm<Form::Dgrad, Bf16, RowMajor, SkTile, SkCluster, Coop, CoopEpi, StreamK>)             \
  X(upact_pp_s8, Gemm<Form::UpAct, Bf16, ColMajor, PpTile, PpCluster, Pingpong, PingpongEpi, void, 8>)   \
  X(dgrad_pp_s8, Gemm<Form::Dgrad, Bf16, RowMajor, PpTile, PpCluster, Pingpong, PingpongEpi, void, 8>)   \
  X(upact_pp_e64, Gemm<Form::UpAct, Bf16, ColMajor, PpTile, PpCluster, Pingpong, PingpongEpi, void, 4, Epi64>) \
  X(upact_coop_s8, Gemm<Form::UpAct, Bf16, ColMajor, CoopTile, CoopCluster, Coop, CoopEpi, void, 8>)     \
  X(plain_coop_h, Gemm<Form::Plain, Fp16, ColMajor, CoopTile, CoopCluster, Coop, CoopEpi>)              \
  X(upact_coop_h, Gemm<Form::UpAct, Fp16, ColMajor, CoopTile, CoopCluster, Coop, CoopEpi>)              \
  X(upactu_coop_h, Gemm<Form::UpActU, Fp16, ColMajor, CoopTile, CoopCluster, Coop, CoopEpi>)            \
  X(dgrad_coop_h, Gemm<Form::Dgrad, Fp16, RowMajor, CoopTile, CoopCluster, Coop, CoopEpi>)             \
  X(upact_pp_gt, Gemm<Form::UpAct, Bf16, ColMajor, PpTile, PpCluster, Pingpong, PingpongEpi, void, 0,         \
                      cutlass::epilogue::collective::EpilogueTileAuto, kGeluTanh>)                        \
  X(upact_pp_e64_gt, Gemm<Form::UpAct, Bf16, ColMajor, PpTile, PpCluster, Pingpong, PingpongEpi, void, 4, Epi64, \
                          kGeluTanh>)                                                                     \
  X(upactu_pp_gt, Gemm<Form::UpActU, Bf16, ColMajor, PpTile, PpCluster, Pingpong, PingpongEpi, void, 0,       \
                       cutlass::epilogue::collective::EpilogueTileAuto, kGeluTanh>)                       \
  X(dgrad_pp_gt, Gemm<Form::Dgrad, Bf16, RowMajor, PpTile, PpCluster, Pingpong, PingpongEpi, void, 0,         \
                      cutlass::epilogue::collective::EpilogueTileAuto, kGeluTanh>)                        \
  X(dgrad_sk_gt, Gemm<Form::Dgrad, Bf16, RowMajor, SkTile, SkCluster, Coop, CoopEpi, StreamK, 0,              \
                      cutlass::epilogue::collective::EpilogueTileAuto, kGeluTanh>)                        \

#define GEVT_NAME_OF(name, ...) #name,
#define GEVT_TYPE_OF(name, ...) __VA_ARGS__,
constexpr const char* kKernelNames[] = {GATED_EVT_KERNELS(GEVT_NAME_OF)};
constexpr int kNumKernels = sizeof(kKernelNames) / sizeof(kKernelNames[0]);
using AllKernels = std::tuple<GATED_EVT_KERNELS(GEVT_TYPE_OF) void>;  // void: the list's trailing comma
template <int N>
using KernelAt = std::tuple_element_t<N, AllKernels>;

// Form and dtype of a Gemm type from its template arguments (no instantiation of the CUTLASS builders).
template <class G>
struct Traits;
template <Form form, class E, class LayoutB, class Tile, class Cluster, class Sched, class EpiSched, class Scheduler,
          int kStagesC, class EpiTile, int kFixedAct>
struct Traits<Gemm<form, E, LayoutB, Tile, Cluster, Sched, EpiSched, Scheduler, kStagesC, EpiTile, kFixedAct>> {
  static constexpr Form kForm = form;
  static constexpr bool kFp16 = std::is_same<E, Fp16>::value;
  static constexpr int kAct = kFixedAct;  // -1: the activation is a run-time argument
};

// The entry points of kernel N; kernels.cu instantiates them for its GEVT_INDEX (gated_evt_impl.cuh defines them).
template <int N>
const char* run_at(const Args& p, void* workspace, cudaStream_t stream, int sms);
template <int N>
size_t workspace_at(const Args& p, int sms);
template <int N>
bool can_implement_at(const Args& p, int sms);

}  // namespace gated_evt
