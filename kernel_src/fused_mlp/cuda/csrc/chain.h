// The whole layer chain of a small-batch forward (the MLP's layers, or the gated MLP's gate/up and down) in
// ONE persistent kernel: each program owns 8-column tiles of every layer, copies its slices of ALL the
// layers' weights into shared memory when it starts (they do not depend on the activations, so layer l+1's
// weights arrive while layer l computes), and a grid barrier separates the layers. At 1-64 rows a layer is
// bound by reading its weights, so the chain costs one launch and one weight read instead of a launch, a
// pipeline fill and a partial wave per layer.
#pragma once

#include "steps.h"

namespace fused_mlp {

constexpr int kMaxChainLayers = 8;
constexpr long long kMaxChainRows = 64;

// One layer: out[M, n] = act(in @ w^T + bias), in = the previous layer's out (x for the first); gated
// (w_up set): out = act(in @ w^T) * (in @ w_up^T), and with `gu` also the pre-activations as gu's two
// [M, n] planes (g then u: the training forward). Pointers may be set after planning.
struct ChainLayer {
  const void* w = nullptr;
  const void* w_up = nullptr;
  const void* bias = nullptr;
  void* out = nullptr;
  void* gu = nullptr;
  long long n = 0, k = 0;
  Act act = Act::None;
};

// A persistent kernel's plan (forward chain or backward).
struct ChainPlan {
  bool run = false;  // the persistent kernel takes this call; else the op runs its layers one by one
  int grid = 0, m_tiles = 0;
  size_t smem = 0;
};

// Whether the path table (step `chain`) sends this call to the persistent kernel and it can take it:
// bf16/fp16, M <= kMaxChainRows, at most kMaxChainLayers layers, every n a multiple of 8 and k of 16,
// 16-byte aligned weights and biases (x: `align_x`), and every program's weight slices fit in shared memory.
ChainPlan plan_chain(const Ctx& c, long long m, const ChainLayer* layers, int count, ScalarType dtype, int align_x);
// Run the planned chain on x; every layer's `out` (and gu where set) filled in.
void run_chain(const ChainPlan& p, const Ctx& c, const void* x, long long m, const ChainLayer* layers, int count,
               ScalarType dtype);

// ---- backward -------------------------------------------------------------------------------------------
// The whole backward of a small-batch `mlp` / `linear` (layers out_i = act_i(in_i w_i^T + b_i), act none or
// relu) or `gated_mlp` (a gated layer, then the down projection) in ONE persistent kernel: per layer, from the
// last, every program computes its 8-column tiles of d in_i = dz_i w_i (relu' of the previous layer's saved
// output applied as it stores: that is dz_{i-1}; after a gated layer, dz_{i-1} = (dg, du) from its saved (g, u))
// and its 64x128 tiles of dW_i = dz_i^T in_i with the bias gradient, and a grid barrier separates the layers.
// Each program's column slices of every w_i go to shared memory when it starts. It replaces 2-6 launches per
// layer (cuBLASLt dW and dX GEMMs, the relu mask or the dg/du pass), which is what a host-bound training step pays.

// One layer's backward. Pointers may be set after planning. A gated layer (w_up set; only as the first of at
// least two) is one layer of n = 2 I stacked rows, w's then w_up's: its dz is [M, 2 I] = (dg | du) per row, its
// dw [2 I, k] = (dw_gate; dw_up), and the next layer's k is I.
struct ChainBackwardLayer {
  const void* w = nullptr;     // [n, k] ([I, k] when gated)
  const void* in = nullptr;    // [M, k]: x, or the previous layer's output
  const void* out = nullptr;   // [M, n]: this layer's saved output (relu' when act is relu)
  void* dz = nullptr;          // [M, n] scratch for dz (the last layer's gradient when act is none: unused)
  void* dw = nullptr;          // [n, k]
  void* db = nullptr;          // [n], or null without a bias
  long long n = 0, k = 0;
  Act act = Act::None;         // none or relu; a gated layer's gate activation (any)
  const void* w_up = nullptr;  // gated: [I, k], else null
  const void* gu = nullptr;    // gated: the forward's saved (g, u) planes [2, M, I]
};

using ChainBackwardPlan = ChainPlan;  // the same fields: not run means the op's GEMMs layer by layer

// Whether the path table (step `chain_backward`) sends this call to the persistent kernel and it can take
// it: bf16/fp16, 1-64 rows (kMaxChainRows), at most kMaxChainLayers layers, acts none/relu (a gated layer's: any),
// every n and k a multiple of 16 (a gated layer's I too), 16-byte aligned operands (dy: `align_dy`), and every
// program's weight slices fit in shared memory.
ChainBackwardPlan plan_chain_backward(const Ctx& c, long long m, const ChainBackwardLayer* layers, int count,
                                      ScalarType dtype, int align_dy);
// Run it: dy the last layer's output gradient, dx [M, k_0] the input gradient; every layer's dw (and db).
void run_chain_backward(const ChainBackwardPlan& p, const Ctx& c, const void* dy, void* dx, long long m,
                        const ChainBackwardLayer* layers, int count, ScalarType dtype);

}  // namespace fused_mlp
