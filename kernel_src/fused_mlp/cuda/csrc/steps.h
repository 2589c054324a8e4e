// The steps every op is built from (linear layer, gated gate/up, act_and_mul), each planned first (path
// table + what this call allows: dtype, alignment, sizes) and run after the op has allocated its
// outputs and one scratch buffer. Planning is host-only and cached where it costs (cuBLASLt).
#pragma once

#include "alloc.h"
#include "gemm.h"
#include "triton_launch.h"

namespace fused_mlp {

// Where a call runs and what the path table needs to know about it: its stream and device, the device's
// compute capability, the op, and whether the stream is being captured into a CUDA graph.
struct Ctx {
  cudaStream_t stream;
  int device, sm, sms;  // sms: the device's SM count (persistent grids)
  Op op;
  bool captured;
};
Ctx ctx_for(const Tensor& x, Op op);

// y[M,N] = act(x[M,K] w[N,K]^T + b): one Triton GEMM with the epilogue fused (portable or Hopper family),
// or cuBLASLt (+1 kernel for gelu/silu). `align_*` are the operands' alignments (alignment_of, or
// kFreshAlign for our own buffers). `w_kmajor`: w is stored as its transpose, a row-major [K, N] buffer
// (transformers' Conv1D weight, read in place): only cuBLASLt reads that layout, so the call goes there.
struct LinearPlan {
  Impl impl;
  const TritonCubin* cubin = nullptr;
  long long programs = 0;  // the cubin's grid
  const GemmPlan* gemm = nullptr;
  long long m, n, k;
  Act act;
  bool has_bias, act_kernel = false;  // act_kernel: cuBLASLt could not fuse `act`
  ScalarType dtype;
  size_t scratch = 0;  // offset of this step's workspace in the call's Scratch
};
LinearPlan plan_linear(const Ctx& c, long long m, long long n, long long k, Act act, bool has_bias, ScalarType dtype,
                       int align_x, int align_w, int align_b, Scratch& s, int align_y = kFreshAlign,
                       bool w_kmajor = false);
void run_linear(const LinearPlan& p, const Ctx& c, const Scratch& s, const void* x, const void* w, const void* b,
                void* y);

// out[n] = act(gate[n]) * up[n] over `rows` rows (the path table's bound); `weight_bytes`: the gate/up
// weights' when split runs it, 0 for the act_and_mul op (paths.py).
struct ActAndMulPlan {
  Impl impl;
  const TritonCubin* cubin = nullptr;
  long long n;
  Act act;
  ScalarType dtype;
};
ActAndMulPlan plan_act_and_mul(const Ctx& c, long long rows, long long n, Act act, ScalarType dtype, bool aligned,
                               long long weight_bytes);
void run_act_and_mul(const ActAndMulPlan& p, const Ctx& c, const void* gate, const void* up, void* out);

// h[M,I] = act(x[M,K] wg[I,K]^T) * (x wu^T): one fused Triton kernel (portable or Hopper), or split into
// two linear steps plus the act_and_mul step. With `store_gu` (training forward) the pre-activations g, u
// also land in gu = a [2, M, I] buffer (plane 0 g, plane 1 u), which backward reads: the Hopper kernel
// stores them from its epilogue, split writes its two GEMMs there; the portable kernel cannot (split runs).
struct GateUpPlan {
  Impl impl;
  const TritonCubin* cubin = nullptr;
  long long programs = 0;  // the cubin's grid
  size_t tma_scratch = 0;  // the Hopper kernel's descriptor scratch
  LinearPlan gate, up;     // split: the two GEMMs
  ActAndMulPlan mul;       // split: act(g) * u
  size_t g_off = 0, u_off = 0;  // split without store_gu: g, u in scratch
  long long m, i, k;
  Act act;
  ScalarType dtype;
  bool store_gu;
};
// The Hopper kernel reads w_gate and w_up as two planes of one 3D TMA tensor, the lower-addressed first:
// w_planes says it can (w_planes_fit); up_first (w_up below w_gate) picks its cubin.
GateUpPlan plan_gate_up(const Ctx& c, long long m, long long i, long long k, Act act, ScalarType dtype, int align_x,
                        int align_wg, int align_wu, bool w_planes, bool up_first, Scratch& s, bool store_gu = false);
// Whether two weights can be the planes of one TMA tensor: distinct bases (the same tensor twice has no second
// plane) less than 2^40 bytes apart (TMA's largest stride).
bool w_planes_fit(const void* wg, const void* wu);
// gu: the [2, M, I] buffer when the plan stores g, u (fresh, kFreshAlign-aligned), else null.
void run_gate_up(const GateUpPlan& p, const Ctx& c, const Scratch& s, const void* x, const void* wg, const void* wu,
                 void* h, void* gu = nullptr);

}  // namespace fused_mlp
