// CUTLASS 3.x (nvidia-cutlass 4.2 headers) sm90a GEMMs for the gated MLP, with the elementwise passes folded
// into epilogue visitor trees (EVT): TMA loads into a multi-stage ring, wgmma, producer/consumer warp
// specialization and a persistent tile scheduler, as cuBLAS's nvjet kernels have them, plus aux tensors
// loaded and stored by TMA in the epilogue. The forms (issue #15, "Training"):
//   plain   D = A B^T                                   (the gate GEMM: g = x W_g^T)
//   upact   D = act(aux g) * (A B^T)                    (h from the up GEMM, reading g; inference)
//   upact_u D = act(aux g) * acc, aux u = acc           (training forward: also stores u for backward)
//   dgrad   acc = dy W_d (B stored [K, N]); D = dg = acc * u * act'(g), aux du = acc * act(g)
// Two GEMMs per gated forward instead of one fused gate|up kernel: each is a plain cuBLAS-shaped GEMM whose
// epilogue does the elementwise work, so nothing but (g) or (dg, du) round-trips through HBM.
// The activation math is kernel_src's (common.cuh act_fwd / act_fwd_grad), so numerics match the shipped kernels.
#pragma once

#include <cuda_bf16.h>

#include <type_traits>

#include "common.cuh"
#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/util/packed_stride.hpp"

namespace gated_evt {

using namespace cute;
using Bf16 = cutlass::bfloat16_t;
using Fp16 = cutlass::half_t;
using RowMajor = cutlass::layout::RowMajor;
using ColMajor = cutlass::layout::ColumnMajor;
namespace fusion = cutlass::epilogue::fusion;
namespace edetail = cutlass::epilogue::collective::detail;
constexpr auto kRound = cutlass::FloatRoundStyle::round_to_nearest;
constexpr int kAct = static_cast<int>(fused_mlp::Act::GeluTanh);

// The epilogue functors. The activation is a run-time argument (kFixed < 0), so one kernel serves every
// activation, or a compile-time one (kFixed = an Act code; the run-time argument is then ignored). Run-time: the
// switch runs once per fragment (with_act), each case a loop with the activation a constant (a switch per element
// compiled to one indirect branch per element, 256 BRX in the SASS), yet the five copies of every fragment loop
// overflow the instruction cache: Nsight Compute (session 27) shows dgrad stalled on instruction fetch
// (no_instruction 8.9 per issue) and 41 M instructions vs 20 M for upact and 8 M for plain.
// ComputeFn<float> is only named for its Arguments; the calls get fragments (cutlass::Array<float, N>).
struct ActArg {
  int act = kAct;
};

template <int kFixed, class F>
CUTLASS_DEVICE auto with_act(int act, F&& f) {
  using fused_mlp::Act;
  if constexpr (kFixed >= 0) return f(std::integral_constant<Act, Act(kFixed)>{});
  switch (Act(act)) {
    case Act::Relu: return f(std::integral_constant<Act, Act::Relu>{});
    case Act::Gelu: return f(std::integral_constant<Act, Act::Gelu>{});
    case Act::GeluTanh: return f(std::integral_constant<Act, Act::GeluTanh>{});
    case Act::Silu: return f(std::integral_constant<Act, Act::Silu>{});
    default: return f(std::integral_constant<Act, Act::None>{});
  }
}

// act(g) * x: h in the forward, du = act(g) * dh in the backward
template <class T, int kFixed>
struct ActMulOf {
  using Arguments = ActArg;
  CUTLASS_DEVICE T operator()(T const& g, T const& x, Arguments const& a) const {
    return with_act<kFixed>(a.act, [&](auto A) {
      T out;
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < T::kElements; ++i) out[i] = fused_mlp::act_fwd(g[i], A.value) * x[i];
      return out;
    });
  }
};

// dg = dh * u * act'(g)
template <class T, int kFixed>
struct DgOfAct {
  using Arguments = ActArg;
  CUTLASS_DEVICE T operator()(T const& dh, T const& g, T const& u, Arguments const& a) const {
    return with_act<kFixed>(a.act, [&](auto A) {
      T out;
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < T::kElements; ++i) out[i] = dh[i] * u[i] * fused_mlp::act_grad(g[i], A.value);
      return out;
    });
  }
};

enum class Form { Plain, UpAct, UpActU, Dgrad };

// The epilogue's subtile and pipeline depths for (TileShape, Schedule): the builder's (EpiTile auto, kStagesC 0),
// or an override. The builder gives the aux loads min(subtiles, 4) stages: with ping-pong's 64x32 subtiles (8 per
// 128x128 tile) only half a tile's aux data can be in flight before its epilogue starts.
template <class TileShape, class EpiTile, class E, class EpiSchedule, int kStagesC>
struct EpiDesc {
  using Base = edetail::EpilogueDescriptor<TileShape, EpiTile, void, E, EpiSchedule>;
  using EpilogueTile = typename Base::EpilogueTile;
  static constexpr int StagesC = kStagesC > 0 ? kStagesC : Base::StagesC;
  static constexpr int StagesD = Base::StagesD;
  using DispatchPolicy = cutlass::epilogue::Sm90TmaWarpSpecialized<
      StagesC, StagesD, Base::DispatchPolicy::FragmentSize, Base::DispatchPolicy::ReuseSmemC,
      Base::DispatchPolicy::DelayTmaStore>;
};

// The epilogue's visitor tree for `form` over elements E (bf16 or fp16), on Desc's subtile and stages, with the
// activation kFixed (-1: the run-time argument).
template <Form form, class E, class Desc, int kFixed>
struct Epilogue {
  template <class T>
  using ActMul = ActMulOf<T, kFixed>;
  template <class T>
  using DgOf = DgOfAct<T, kFixed>;
  using LoadDesc = edetail::AuxLoadDescriptor<Desc, RowMajor, E>;
  using StoreDesc = edetail::AuxStoreDescriptor<Desc, RowMajor, E>;
  using Load = fusion::Sm90AuxLoad<LoadDesc::Stages, typename Desc::EpilogueTile, E, typename LoadDesc::Stride,
                                   typename LoadDesc::SmemLayoutAtom, typename LoadDesc::CopyOpS2R>;
  using Store = fusion::Sm90AuxStore<StoreDesc::Stages, typename Desc::EpilogueTile, E, kRound,
                                     typename StoreDesc::Stride, typename StoreDesc::SmemLayoutAtom,
                                     typename StoreDesc::CopyOpR2S>;
  using Acc = fusion::Sm90AccFetch;
  template <template <class> class Fn>
  using Compute = fusion::Sm90Compute<Fn, float, float, kRound>;

  using UpAct = fusion::Sm90EVT<fusion::Sm90Compute<ActMul, E, float, kRound>, Load, Acc>;
  using UpActU = fusion::Sm90EVT<fusion::Sm90Compute<ActMul, E, float, kRound>, Load, fusion::Sm90EVT<Store, Acc>>;
  // DAG in topological order: 0 acc, 1 g, 2 u, 3 du = act(g) * acc, 4 store du, 5 dg = acc * u * act'(g) (the D output)
  using Dgrad = fusion::Sm90TopologicalVisitor<
      float, cute::tuple<seq<>, seq<>, seq<>, seq<1, 0>, seq<3>, seq<0, 1, 2>>, Acc, Load, Load, Compute<ActMul>,
      Store, fusion::Sm90Compute<DgOf, E, float, kRound>>;
  using Plain = fusion::LinearCombination<E, float>;

  using Callbacks = std::conditional_t<
      form == Form::Plain, Plain,
      std::conditional_t<form == Form::UpAct, UpAct, std::conditional_t<form == Form::UpActU, UpActU, Dgrad>>>;
};

// D[M, N] (row-major) = A[M, K] (row-major) x B, B stored [N, K] (LayoutB ColMajor: the weights as nn.Linear
// holds them) or [K, N] (RowMajor: W_down read as dy W_down in backward). Scheduler: void = persistent tiles,
// cutlass::gemm::StreamKScheduler = stream-K (K split across SMs where tiles do not fill the machine).
// kStagesC / EpiTile: the epilogue's aux-load stages and subtile (0 / auto: the builder's choice). kFixedAct: the
// activation compiled in (an Act code), or -1 for the run-time argument.
template <Form form, class E, class LayoutB, class TileShape, class ClusterShape, class KernelSchedule,
          class EpiSchedule, class Scheduler = void, int kStagesC = 0,
          class EpiTile = cutlass::epilogue::collective::EpilogueTileAuto, int kFixedAct = -1>
struct Gemm {
  static constexpr Form kForm = form;
  using Element = E;
  using Desc = EpiDesc<TileShape, EpiTile, E, EpiSchedule, kStagesC>;
  using Epi = Epilogue<form, E, Desc, kFixedAct>;
  // CUTLASS's epilogue CollectiveBuilder ends in the same Sm90TmaBuilderImpl, with Desc's choices when kStagesC
  // is 0 and EpiTile auto (same SASS, checked on plain_pp, upact_coop and dgrad_sk), so one path serves both.
  using CollectiveEpilogue =
      typename edetail::Sm90TmaBuilderImpl<TileShape, typename Desc::EpilogueTile, float, float, void, RowMajor, 8, E,
                                           RowMajor, 8, typename Epi::Callbacks,
                                           typename Desc::DispatchPolicy>::CollectiveOp;
  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, E, RowMajor, 8, E, LayoutB, 8, float, TileShape,
      ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename CollectiveEpilogue::SharedStorage))>,
      KernelSchedule>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, CollectiveMainloop, CollectiveEpilogue,
                                                      Scheduler>;
  using Op = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
};

using Coop = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
using CoopEpi = cutlass::epilogue::TmaWarpSpecializedCooperative;
using Pingpong = cutlass::gemm::KernelTmaWarpSpecializedPingpong;
using PingpongEpi = cutlass::epilogue::TmaWarpSpecialized;

// The pointers of one launch; aux pointers unused by a form are ignored.
struct Args {
  int m, n, k;
  int act;          // fused_mlp::Act code of the epilogue's activation
  const void* a;    // [M, K]
  const void* b;    // [N, K] or [K, N]
  void* d;          // [M, N]
  const void* g;    // aux loads, [M, N]
  const void* u;
  void* aux_out;    // aux store (u or du), [M, N]
  int swizzle = 1;  // the tile scheduler's max_swizzle_size (1, 2, 4, 8): tiles walked in groups, for L2 reuse
  int raster = 0;   // 0 heuristic, 1 along M, 2 along N
};

}  // namespace gated_evt
