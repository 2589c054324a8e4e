// gated_evt::run / workspace_bytes for one Gemm type: the CUTLASS arguments of each form (strides, the visitor
// tree's arguments in its node order). Included by each kernels_*.cu, which instantiates one kernel type.
#pragma once

#include "gated_evt.cuh"

namespace gated_evt {

template <class G>
typename G::Op::Arguments make_args(const Args& p, int sms) {
  using K = typename G::Kernel;
  using AuxStride = typename G::Epi::LoadDesc::Stride;
  using E = typename G::Element;
  const auto sa = cutlass::make_cute_packed_stride(typename K::StrideA{}, make_shape(p.m, p.k, 1));
  const auto sb = cutlass::make_cute_packed_stride(typename K::StrideB{}, make_shape(p.n, p.k, 1));
  const auto sd = cutlass::make_cute_packed_stride(typename K::StrideD{}, make_shape(p.m, p.n, 1));
  const auto sx = cutlass::make_cute_packed_stride(AuxStride{}, make_shape(p.m, p.n, 1));
  typename G::Op::Arguments args{};
  args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
  args.problem_shape = {p.m, p.n, p.k, 1};
  args.mainloop = {static_cast<const E*>(p.a), sa, static_cast<const E*>(p.b), sb};
  args.epilogue.ptr_C = nullptr;
  args.epilogue.dC = sd;
  args.epilogue.ptr_D = static_cast<E*>(p.d);
  args.epilogue.dD = sd;
  args.hw_info.sm_count = sms;
  args.scheduler.max_swizzle_size = p.swizzle;
  args.scheduler.raster_order = static_cast<decltype(args.scheduler.raster_order)>(p.raster);
  auto& t = args.epilogue.thread;
  const auto* g = static_cast<const E*>(p.g);
  const auto* u = static_cast<const E*>(p.u);
  auto* out = static_cast<E*>(p.aux_out);
  if constexpr (G::kForm == Form::Plain) {
    t.alpha = 1.f;
    t.beta = 0.f;
  } else if constexpr (G::kForm == Form::UpAct) {
    t = {{g, E(0), sx}, {}, {p.act}};  // children: aux g, acc; then the node (act(g) * acc)
  } else if constexpr (G::kForm == Form::UpActU) {
    t = {{g, E(0), sx}, {{}, {out, sx}}, {p.act}};  // aux g; (acc -> store u); node
  } else {
    using A = typename G::Epi::Dgrad::Arguments;  // topological: acc, g, u, du, store du, dg
    t = A{{}, {g, E(0), sx}, {u, E(0), sx}, {p.act}, {out, sx}, {p.act}};
  }
  return args;
}

template <class G>
size_t workspace_bytes(const Args& p, int sms) {
  return G::Op::get_workspace_size(make_args<G>(p, sms));
}

// Host-only: whether CUTLASS accepts the problem (alignment, TMA limits); needs no GPU.
template <class G>
bool can_implement(const Args& p, int sms) {
  return G::Op::can_implement(make_args<G>(p, sms)) == cutlass::Status::kSuccess;
}

template <class G>
const char* run(const Args& p, void* workspace, cudaStream_t stream, int sms) {
  typename G::Op op;
  const auto args = make_args<G>(p, sms);
  if (op.can_implement(args) != cutlass::Status::kSuccess) return "can_implement refused the problem";
  if (op.initialize(args, workspace, stream) != cutlass::Status::kSuccess) return "initialize failed";
  if (op.run(stream) != cutlass::Status::kSuccess) return "run failed";
  return nullptr;
}

}  // namespace gated_evt

// One kernel type per translation unit (CUTLASS kernels take minutes each to compile): `name` gets a
// registry entry the driver looks up.
#define GATED_EVT_KERNEL(name, ...)                                                                    \
  namespace gated_evt {                                                                                \
  using name##_t = __VA_ARGS__;                                                                        \
  const char* name##_run(const Args& p, void* ws, cudaStream_t s, int sms) { return run<name##_t>(p, ws, s, sms); } \
  size_t name##_ws(const Args& p, int sms) { return workspace_bytes<name##_t>(p, sms); }              \
  bool name##_can(const Args& p, int sms) { return can_implement<name##_t>(p, sms); }                \
  }
