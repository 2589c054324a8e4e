// gated_evt::run / workspace_bytes for one Gemm type: the CUTLASS arguments of each form (strides, the visitor
// tree's arguments in its node order), and the list's entry points. Included by kernels.cu, which instantiates
// them for one kernel of the list.
#pragma once

#include "gated_evt.cuh"
#include "kernel_list.cuh"

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

// Runs one GEMM of type G on `stream`; returns a message on failure (null on success). `workspace` must hold
// workspace_bytes<G>(args).
template <class G>
const char* run(const Args& p, void* workspace, cudaStream_t stream, int sms) {
  typename G::Op op;
  const auto args = make_args<G>(p, sms);
  if (op.can_implement(args) != cutlass::Status::kSuccess) return "can_implement refused the problem";
  if (op.initialize(args, workspace, stream) != cutlass::Status::kSuccess) return "initialize failed";
  if (op.run(stream) != cutlass::Status::kSuccess) return "run failed";
  return nullptr;
}

// The entry points kernel_list.cuh declares, for the list's kernel N.
template <int N>
const char* run_at(const Args& p, void* workspace, cudaStream_t stream, int sms) {
  return run<KernelAt<N>>(p, workspace, stream, sms);
}
template <int N>
size_t workspace_at(const Args& p, int sms) {
  return workspace_bytes<KernelAt<N>>(p, sms);
}
template <int N>
bool can_implement_at(const Args& p, int sms) {
  return can_implement<KernelAt<N>>(p, sms);
}

}  // namespace gated_evt
