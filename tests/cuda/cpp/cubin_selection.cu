// Host-only probe of the C++ launcher's choices (tests/cuda/test_build.py compiles it against a build's
// generated table, no GPU needed): which embedded cubin a launch takes, its grid and descriptor scratch, and
// which implementation the path table picks per M on sm_90a, for calls one by one and captured.
#include <cstdio>

#include "triton_launch.h"

using namespace fused_mlp;

namespace {

void cubin(const char* what, Step step, Impl impl, int act, bool bias, bool store_gu, long long m, long long n,
           bool up_first = false) {
  const TritonCubin* c = find_cubin({step, impl, 90, 0, act, bias, store_gu, m, n, 132, up_first});
  if (c == nullptr) {
    std::printf("%s M=%lld N=%lld: none\n", what, m, n);
    return;
  }
  std::printf("%s M=%lld N=%lld: %s %dx%d programs %lld scratch %d pdl %d store %d up_first %d\n", what, m, n,
              c->kernel, c->block_m, c->block_n, cubin_programs(*c, m, n, 132), c->global_scratch_bytes, c->pdl,
              c->store_gu, c->up_first);
}

}  // namespace

int main() {
  cubin("tma_linear", Step::Linear, Impl::Tma, 1, true, false, 8192, 1024);
  cubin("tma_linear", Step::Linear, Impl::Tma, 0, false, false, 8192, 768);
  cubin("tma_gate_up", Step::GateUp, Impl::Tma, 3, false, false, 8192, 3072);
  cubin("tma_gate_up", Step::GateUp, Impl::Tma, 3, false, true, 8192, 3072);
  cubin("tma_gate_up", Step::GateUp, Impl::Tma, 3, false, false, 8192, 3072, true);
  cubin("tma_gate_up", Step::GateUp, Impl::Tma, 4, false, false, 1024, 3072);
  cubin("linear", Step::Linear, Impl::Triton, 1, true, false, 16, 1024);
  cubin("act_and_mul", Step::ActAndMul, Impl::Triton, 3, false, false, 1, 3 << 20);
  // Weight bytes of the project's shapes in bf16: the gated 768x3072 (gate and up together, its chain the same)
  // and a 1024x1024 layer of the mlp.
  const long long gated = 2ll * 3072 * 768 * 2, layer = 1024ll * 1024 * 2;
  for (const long long m : {1ll, 16ll, 64ll, 65ll, 256ll, 257ll, 8192ll})
    for (const bool captured : {false, true})
      std::printf("path M=%lld captured %d: gate_up %d linear %d act_and_mul %d train gate_up %d chain %d %d\n", m,
                  captured,
                  static_cast<int>(choose_impl(Step::GateUp, Op::GatedMlp, 90, m, gated, captured)),
                  static_cast<int>(choose_impl(Step::Linear, Op::Mlp, 90, m, layer, captured)),
                  static_cast<int>(choose_impl(Step::ActAndMul, Op::GatedMlp, 90, m, gated, captured)),
                  static_cast<int>(choose_impl(Step::GateUp, Op::GatedMlpTrain, 90, m, gated, captured)),
                  static_cast<int>(choose_impl(Step::Chain, Op::Mlp, 90, m, layer, captured)),
                  static_cast<int>(choose_impl(Step::Chain, Op::GatedMlpTrain, 90, m, gated, captured)));
}
