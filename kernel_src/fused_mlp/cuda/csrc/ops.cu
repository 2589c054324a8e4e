// The torch ops of the CUDA backend, registered through the torch stable ABI (C shim only), so one
// build serves every torch >= 2.11. The op namespace is baked in at compile time (FUSED_MLP_NS, from
// fused_mlp/_build_info.py) so two loaded builds never clash in torch.ops.
// One host call per public op does everything: checks, planning (steps.h: path table, cached cuBLASLt
// plans), one output allocation plus one scratch allocation through the C shim, and every launch.
// `*_infer` ops are the inference forms (no autograd registered, intermediates in scratch, only the
// result returned); the others return what backward needs (the gated MLP's pre-activations g, u from the
// same pass; the MLP's layer outputs). `*_train` are the same forwards without autograd registered: the
// Python autograd.Function of eager training calls them (no Python autograd kernel in the dispatcher).
// Each backward is one op: every GEMM planned first (cached cuBLASLt plans, one shared workspace), one
// scratch allocation for the intermediates, the outputs, then every launch.
#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "alloc.h"
#include "chain.h"
#include "common.cuh"
#include "elementwise.h"
#include "steps.h"

#ifndef FUSED_MLP_NS
#error "FUSED_MLP_NS must name the torch op namespace (the build passes -DFUSED_MLP_NS=<OPS_NAMESPACE>)"
#endif

namespace fused_mlp {
namespace {

// A contiguous tensor seen as a row-major [rows, cols] matrix (cols = its last dim). The kernels work
// on pointers, so leading dims are never reshaped: no dispatcher round trip for views. A K-major weight
// (`kmajor`) is the transpose view of a contiguous [cols, rows] tensor: ptr() is that buffer.
struct Mat {
  Tensor t;
  int64_t rows, cols;
  bool kmajor = false;
  const void* ptr() const { return t.const_data_ptr(); }
  void* mut() const { return t.mutable_data_ptr(); }
};

// Each torch::stable op is a boxed dispatcher call, costly next to a kernel launch: skip when possible.
Tensor as_contiguous(const Tensor& t) { return t.is_contiguous() ? t : torch::stable::contiguous(t); }

Mat as_rows(const Tensor& x, const char* op, const char* name) {
  check_cuda_tensor(x, op, name);
  STD_TORCH_CHECK(x.dim() >= 1, "fused_mlp.", op, ": `", name, "` must have at least 1 dim, got a scalar");
  const int64_t k = x.size(x.dim() - 1);
  return {as_contiguous(x), k == 0 ? 0 : x.numel() / k, k};
}

// A new [rows, n] matrix shaped like x's leading dims + [n].
Mat new_rows(const Mat& x, int64_t n) { return {empty_rows_like(x.t, n), x.rows, n}; }

// The output of an inference op (x's leading dims + [n]) and the call's scratch: one allocation when the
// scratch is small (the host-bound calls), else two.
Tensor output_and_scratch(const Tensor& x, int64_t n, Scratch& s) {
  if (!s.can_share()) {
    Tensor out = empty_rows_like(x, n);
    s.allocate(x);
    return out;
  }
  const auto sizes = x.sizes();
  int64_t shape[8];
  const int64_t nd = static_cast<int64_t>(sizes.size());
  STD_TORCH_CHECK(nd <= 8, "fused_mlp: inputs of more than 8 dims are not supported, got ", nd);
  for (int64_t d = 0; d < nd; ++d) shape[d] = sizes[d];
  shape[nd - 1] = n;
  return s.allocate_with_output(x, shape, nd, x.element_size());
}

Tensor new_zeros(const Tensor& like, std::initializer_list<int64_t> sizes) {
  Tensor t = empty_on(like, sizes);
  if (t.numel() > 0) torch::stable::zero_(t);
  return t;
}

// `kmajor_ok`: the op reads a K-major weight in place (linear and mlp, forward and backward, through cuBLASLt:
// transformers' Conv1D keeps [in, out], which the caller passes transposed); other layouts are copied.
Mat weight_2d(const Tensor& w, const Tensor& x, int64_t k, const char* op, const char* name, bool kmajor_ok = false) {
  check_cuda_tensor(w, op, name);
  check_same_dtype(x, w, op, name);
  STD_TORCH_CHECK(w.dim() == 2 && w.size(1) == k, "fused_mlp.", op, ": `", name, "` must be [out, ", k,
                  "] to match the input's last dim ", k, ", got ", w.dim(), " dims with last size ",
                  w.dim() ? w.size(w.dim() - 1) : 0);
  if (w.is_contiguous()) return {w, w.size(0), k};
  if (kmajor_ok && w.stride(0) == 1 && w.stride(1) == w.size(0)) return {w, w.size(0), k, true};
  return {torch::stable::contiguous(w), w.size(0), k};
}

// A new tensor for the gradient of weight `w`, in w's layout (K-major stays K-major: the parameter behind the
// view gets its gradient in its own layout, no copy in autograd); zeroed when `zero`.
Tensor weight_grad(const Mat& w, bool zero = false) {
  const int64_t sizes[2] = {w.rows, w.cols}, kmajor_strides[2] = {1, w.rows};
  Tensor t = w.kmajor ? empty_strided_on(w.t, sizes, kmajor_strides, 2) : empty_on(w.t, sizes, 2);
  if (zero && t.numel() > 0) torch::stable::zero_(t);
  return t;
}

std::optional<Tensor> bias_1d(const std::optional<Tensor>& b, const Tensor& x, int64_t n, const char* op,
                              const char* name) {
  if (!b.has_value()) return std::nullopt;
  check_cuda_tensor(*b, op, name);
  check_same_dtype(x, *b, op, name);
  STD_TORCH_CHECK(b->dim() == 1 && b->size(0) == n, "fused_mlp.", op, ": `", name, "` must be [", n, "], got ",
                  b->dim(), " dims");
  return as_contiguous(*b);
}

const void* ptr_of(const std::optional<Tensor>& t) { return t.has_value() ? t->const_data_ptr() : nullptr; }

// Sets x's device current for the call only when it is not already (a guard costs a heap allocation).
class OnDevice {
 public:
  explicit OnDevice(const Tensor& x) {
    int current = 0;
    cudaGetDevice(&current);
    const int want = x.get_device_index();
    if (current != want) guard_.emplace(want);
  }

 private:
  std::optional<torch::stable::accelerator::DeviceGuard> guard_;
};

// y = act(x @ w^T + b) into a new tensor shaped like x with last dim w.rows.
Mat linear_now(const Mat& x, const Mat& w, const void* b, Act act, const Ctx& c) {
  Scratch s;
  const LinearPlan p = plan_linear(c, x.rows, w.rows, x.cols, act, b != nullptr, x.t.scalar_type(), alignment_of(x.ptr()),
                                   alignment_of(w.ptr()), alignment_of(b), s, kFreshAlign, w.kmajor);
  Mat y = new_rows(x, w.rows);
  s.allocate(x.t);
  run_linear(p, c, s, x.ptr(), w.ptr(), b, y.mut());
  return y;
}

// ---- forward ops -------------------------------------------------------------------------------------

Tensor linear(Tensor x, Tensor w, std::optional<Tensor> b, std::string activation) {
  const Act act = parse_activation(activation);
  const Mat x2 = as_rows(x, "linear", "x");
  OnDevice on(x);
  const Mat w2 = weight_2d(w, x, x2.cols, "linear", "weight", true);
  const std::optional<Tensor> b2 = bias_1d(b, x, w2.rows, "linear", "bias");
  return linear_now(x2, w2, ptr_of(b2), act, ctx_for(x, Op::Linear)).t;
}

// How far an inference call goes: all the way, or (the host-cost probe, bench/host_cost.py) returning after
// the arguments reached C++, after checks and planning, or after allocation.
enum class Stop : int64_t { Arguments = 0, Planned = 1, Allocated = 2, Launched = 3 };

// The layer chain of `mlp`: every layer's output as its own tensor when `keep` (backward needs them), else
// intermediates in one scratch buffer and only the last layer's output allocated.
std::vector<Tensor> mlp_chain(const Tensor& x, const std::vector<Tensor>& ws, const std::vector<Tensor>& bs,
                              const std::string& activation, bool keep, Stop stop = Stop::Launched) {
  if (stop == Stop::Arguments) return {x};
  const Act act = parse_activation(activation);
  STD_TORCH_CHECK(!ws.empty(), "fused_mlp.mlp: `weights` is empty; pass at least one weight");
  STD_TORCH_CHECK(bs.empty() || bs.size() == ws.size(), "fused_mlp.mlp: got ", bs.size(), " biases for ", ws.size(),
                  " weights; pass one bias per weight or none");
  const Mat x2 = as_rows(x, "mlp", "x");
  OnDevice on(x);
  const Ctx c = ctx_for(x, Op::Mlp);
  const ScalarType dt = x2.t.scalar_type();
  const size_t layers = ws.size();
  std::vector<Mat> w2;
  std::vector<std::optional<Tensor>> b2;
  w2.reserve(layers), b2.reserve(layers);
  ChainLayer chain[kMaxChainLayers];
  int64_t cols = x2.cols;
  bool kmajor = false;  // a K-major weight: the persistent kernel reads weights row-major, so layer by layer
  for (size_t l = 0; l < layers; ++l) {
    w2.push_back(weight_2d(ws[l], x, cols, "mlp", "weights[i]", true));
    kmajor = kmajor || w2[l].kmajor;
    b2.push_back(bs.empty() ? std::nullopt : bias_1d(bs[l], x, w2[l].rows, "mlp", "biases[i]"));
    if (l < kMaxChainLayers)
      chain[l] = {w2[l].ptr(), nullptr, ptr_of(b2[l]), nullptr, nullptr, w2[l].rows, cols, l + 1 == layers ? Act::None : act};
    cols = w2[l].rows;
  }
  // One persistent kernel for the whole chain where the table says so and it can take the call, else a step
  // per layer (each planned here: path table, alignment, cached cuBLASLt plans).
  const ChainPlan fused =
      kmajor ? ChainPlan{} : plan_chain(c, x2.rows, chain, static_cast<int>(layers), dt, alignment_of(x2.ptr()));
  std::vector<LinearPlan> plans;
  std::vector<size_t> at(layers, 0);
  plans.reserve(layers);
  Scratch s;
  int align_in = alignment_of(x2.ptr());
  for (size_t l = 0; l < layers; ++l) {
    const Act a = l + 1 == layers ? Act::None : act;
    if (!fused.run)
      plans.push_back(plan_linear(c, x2.rows, w2[l].rows, w2[l].cols, a, b2[l].has_value(), dt, align_in,
                                  alignment_of(w2[l].ptr()), alignment_of(ptr_of(b2[l])), s, kFreshAlign,
                                  w2[l].kmajor));
    if (!keep && l + 1 < layers) at[l] = s.reserve(static_cast<size_t>(x2.rows * w2[l].rows) * x2.t.element_size());
    align_in = kFreshAlign;
  }
  if (stop == Stop::Planned) return {x};
  std::vector<Tensor> outs;
  if (keep) {
    for (size_t l = 0; l < layers; ++l) outs.push_back(empty_rows_like(x, w2[l].rows));
    s.allocate(x);
  } else {
    outs.push_back(output_and_scratch(x, cols, s));
  }
  if (stop == Stop::Allocated) return outs;
  const void* in = x2.ptr();
  for (size_t l = 0; l < layers; ++l) {
    void* out = keep ? outs[l].mutable_data_ptr() : (l + 1 == layers ? outs.back().mutable_data_ptr() : s.at(at[l]));
    if (fused.run)
      chain[l].out = out;
    else
      run_linear(plans[l], c, s, in, w2[l].ptr(), ptr_of(b2[l]), out);
    in = out;
  }
  if (fused.run) run_chain(fused, c, x2.ptr(), x2.rows, chain, static_cast<int>(layers), dt);
  return outs;
}

// All layers in one host call; returns every layer's output (backward needs them; they reach HBM anyway
// as the next layer's input).
std::vector<Tensor> mlp(Tensor x, std::vector<Tensor> ws, std::vector<Tensor> bs, std::string activation) {
  return mlp_chain(x, ws, bs, activation, true);
}

Tensor mlp_infer(Tensor x, std::vector<Tensor> ws, std::vector<Tensor> bs, std::string activation) {
  return mlp_chain(x, ws, bs, activation, false)[0];
}

// mlp_infer stopped after stage `stop` (Stop); returns x or the (unwritten) output. For host-cost breakdowns.
Tensor mlp_probe(Tensor x, std::vector<Tensor> ws, std::vector<Tensor> bs, std::string activation, int64_t stop) {
  STD_TORCH_CHECK(stop >= 0 && stop <= 3, "fused_mlp: probe stage must be 0..3, got ", stop);
  return mlp_chain(x, ws, bs, activation, false, static_cast<Stop>(stop))[0];
}

// y = down(act(gate(x)) * up(x)). Training (`keep`): also returns h (the down projection's input) and gu =
// the [2, M, I] planes of g = x w_gate^T and u = x w_up^T from the same pass (backward reads them instead of
// recomputing two GEMMs).
std::vector<Tensor> gated_chain(const Tensor& x, const Tensor& w_gate, const Tensor& w_up, const Tensor& w_down,
                                const std::string& activation, bool keep) {
  const Act act = parse_activation(activation);
  const Mat x2 = as_rows(x, "gated_mlp", "x");
  OnDevice on(x);
  const Mat wg = weight_2d(w_gate, x, x2.cols, "gated_mlp", "w_gate");
  const Mat wu = weight_2d(w_up, x, x2.cols, "gated_mlp", "w_up");
  STD_TORCH_CHECK(wg.rows == wu.rows, "fused_mlp.gated_mlp: w_gate has ", wg.rows, " rows but w_up has ", wu.rows,
                  "; they must match");
  const Mat wd = weight_2d(w_down, x, wg.rows, "gated_mlp", "w_down");
  STD_TORCH_CHECK(x2.cols > 0 && wg.rows > 0, "fused_mlp.gated_mlp: zero-sized hidden (", x2.cols,
                  ") or intermediate (", wg.rows, ") dim");
  const Ctx c = ctx_for(x, keep ? Op::GatedMlpTrain : Op::GatedMlp);  // the table has rows for each
  const ScalarType dt = x2.t.scalar_type();
  ChainLayer chain[2] = {{wg.ptr(), wu.ptr(), nullptr, nullptr, nullptr, wg.rows, x2.cols, act},
                         {wd.ptr(), nullptr, nullptr, nullptr, nullptr, wd.rows, wg.rows, Act::None}};
  // One persistent kernel (h, and g, u when training, through global memory) where the table says so and it
  // can take the call, else the gate/up step and the down projection.
  const ChainPlan fused = plan_chain(c, x2.rows, chain, 2, dt, alignment_of(x2.ptr()));
  Scratch s;
  GateUpPlan gu;
  LinearPlan down;
  if (!fused.run) {
    gu = plan_gate_up(c, x2.rows, wg.rows, x2.cols, act, dt, alignment_of(x2.ptr()), alignment_of(wg.ptr()),
                      alignment_of(wu.ptr()), w_planes_fit(wg.ptr(), wu.ptr()), wu.ptr() < wg.ptr(), s, keep);
    down = plan_linear(c, x2.rows, wd.rows, wg.rows, Act::None, false, dt, kFreshAlign, alignment_of(wd.ptr()), 16, s);
  }
  const size_t h_at = keep ? 0 : s.reserve(static_cast<size_t>(x2.rows * wg.rows) * x2.t.element_size());
  std::vector<Tensor> outs;
  if (keep) {
    outs = {empty_rows_like(x, wd.rows), empty_rows_like(x, wg.rows), empty_on(x, {2, x2.rows, wg.rows})};
    s.allocate(x);
  } else {
    outs.push_back(output_and_scratch(x, wd.rows, s));
  }
  void* h = keep ? outs[1].mutable_data_ptr() : s.at(h_at);
  void* g_u = keep ? outs[2].mutable_data_ptr() : nullptr;
  if (fused.run) {
    chain[0].out = h, chain[0].gu = g_u, chain[1].out = outs[0].mutable_data_ptr();
    run_chain(fused, c, x2.ptr(), x2.rows, chain, 2, dt);
  } else {
    run_gate_up(gu, c, s, x2.ptr(), wg.ptr(), wu.ptr(), h, g_u);
    run_linear(down, c, s, h, wd.ptr(), nullptr, outs[0].mutable_data_ptr());
  }
  return outs;
}

// Returns [y, h, gu]: h = act(g) * u, gu = the (g, u) planes [2, M, I], both saved for backward.
std::vector<Tensor> gated_mlp(Tensor x, Tensor w_gate, Tensor w_up, Tensor w_down, std::string activation) {
  return gated_chain(x, w_gate, w_up, w_down, activation, true);
}

Tensor gated_mlp_infer(Tensor x, Tensor w_gate, Tensor w_up, Tensor w_down, std::string activation) {
  return gated_chain(x, w_gate, w_up, w_down, activation, false)[0];
}

Tensor act_and_mul_op(Tensor gate, Tensor up, std::string activation) {
  const Act act = parse_activation(activation);
  check_cuda_tensor(gate, "act_and_mul", "gate");
  check_cuda_tensor(up, "act_and_mul", "up");
  check_same_dtype(gate, up, "act_and_mul", "up");
  STD_TORCH_CHECK(gate.sizes().equals(up.sizes()), "fused_mlp.act_and_mul: gate and up shapes differ; pass equal shapes");
  OnDevice on(gate);
  const Tensor g = as_contiguous(gate), u = as_contiguous(up);
  const int64_t last = g.dim() ? g.size(g.dim() - 1) : 1;
  const int64_t rows = last ? g.numel() / last : 0;
  const Ctx c = ctx_for(g, Op::ActAndMul);
  Tensor out = empty_rows_like(g, last);
  const bool aligned = alignment_of(g.const_data_ptr()) >= 16 && alignment_of(u.const_data_ptr()) >= 16;
  const ActAndMulPlan p = plan_act_and_mul(c, rows, g.numel(), act, g.scalar_type(), aligned, 0);  // no weights
  run_act_and_mul(p, c, g.const_data_ptr(), u.const_data_ptr(), out.mutable_data_ptr());
  return out;
}

// ---- backward ops ------------------------------------------------------------------------------------

// The GEMMs of one backward op, planned before anything is allocated. They run one after another on one
// stream, so they share one cuBLASLt workspace: the largest any of them needs.
class BackwardGemms {
 public:
  explicit BackwardGemms(ScalarType dt) : dt_(dt) {}
  // out[M,N] (+)= op(a) op(b), as gemm.h's GemmShape says; the alignments of a, b and out.
  const GemmPlan* plan(long long m, long long n, long long k, bool ta, bool tb, bool accumulate, int align_a,
                       int align_b, int align_out) {
    return plan({m, n, k, ta, tb, accumulate, Epilogue::None, dt_, align_a, align_b, align_out, 16});
  }
  // `batch` products in one launch (gemm.h: GemmShape's batch and element strides).
  const GemmPlan* plan_batched(long long m, long long n, long long k, bool ta, int batch, long long stride_a,
                               long long stride_b, long long stride_out, int align_a, int align_b, int align_out) {
    GemmShape g{m, n, k, ta, false, false, Epilogue::None, dt_, align_a, align_b, align_out, 16};
    g.batch = batch, g.stride_a = stride_a, g.stride_b = stride_b, g.stride_out = stride_out;
    return plan(g);
  }
  const GemmPlan* plan(const GemmShape& g) {
    const GemmPlan* p = gemm_plan(g);
    bytes_ = std::max(bytes_, gemm_workspace_bytes(p));
    return p;
  }
  // The weight gradient dW[M,N] = a^T b (a stored [K, M]) that also writes the bias gradient (the row sum of
  // a) into run's `bias`; null where cuBLASLt has no such algorithm (the caller sums separately).
  const GemmPlan* plan_with_bias_grad(long long m, long long n, long long k, int align_a, int align_b) {
    const GemmPlan* p = gemm_try_plan({m, n, k, true, false, false, Epilogue::BiasGrad, dt_, align_a, align_b,
                                       kFreshAlign, kFreshAlign});
    if (p) bytes_ = std::max(bytes_, gemm_workspace_bytes(p));
    return p;
  }
  void reserve(Scratch& s) { at_ = s.reserve(bytes_); }
  void run(const GemmPlan* p, const Scratch& s, const void* a, const void* b, void* out, cudaStream_t stream,
           void* bias_grad = nullptr) const {
    gemm_run(p, a, b, out, bias_grad, s.at(at_), stream);
  }

 private:
  ScalarType dt_;
  size_t bytes_ = 0, at_ = 0;
};

// Alignment of a buffer `offset` bytes after a fresh (kFreshAlign-aligned) one: a plane of a [2, M, N] tensor.
int align_after(size_t offset) { return alignment_of(reinterpret_cast<const void*>(offset)); }

// Gradients of a chain of layers out_i = acts[i](in_i @ w_i^T + b_i), in_0 = x, in_{i+1} = out_i, given dy
// (the last output's gradient) and `hidden` (gradients of out_0..out_{L-2}; empty, or tensors with no
// elements where none flows). Returns [dx, dw_0..dw_{L-1}, db_0..db_{L-1}] (db_i has 0 elements without
// biases). relu reads act' from its saved output; other activations recompute the pre-activation.
// Intermediates (each layer's dz and d in) live in two ping-pong scratch regions (a third for recomputed
// pre-activations), so the op makes one scratch allocation plus its outputs.
std::vector<Tensor> chain_backward(const Mat& dy, const std::vector<Tensor>& hidden, const Mat& x,
                                   const std::vector<Mat>& w, const std::vector<std::optional<Tensor>>& b,
                                   const std::vector<Mat>& outs, const std::vector<Act>& acts, const Ctx& c) {
  const size_t layers = w.size();
  const int64_t m = x.rows;
  const ScalarType dt = x.t.scalar_type();
  const bool has_bias = !b.empty() && b[0].has_value();
  std::vector<Tensor> result(1 + 2 * layers, x.t);
  if (m == 0) {
    result[0] = new_rows(x, x.cols).t;
    for (size_t i = 0; i < layers; ++i) {
      result[1 + i] = weight_grad(w[i], true);
      result[1 + layers + i] = new_zeros(w[i].t, {has_bias ? w[i].rows : 0});
    }
    return result;
  }
  auto allocate_results = [&] {
    result[0] = new_rows(x, x.cols).t;
    for (size_t i = 0; i < layers; ++i) {
      result[1 + i] = weight_grad(w[i]);
      result[1 + layers + i] = empty_on(w[i].t, {has_bias ? w[i].rows : 0});
    }
  };
  // Small batches: the whole backward in one persistent kernel (chain.h) where the path table says so and it
  // can take the call (not with gradients flowing into hidden outputs: that is the layer-by-layer path's add;
  // not with K-major weights, which it reads row-major).
  bool hidden_grads = false, kmajor = false;
  for (const Tensor& h : hidden) hidden_grads = hidden_grads || h.numel() > 0;
  for (const Mat& wi : w) kmajor = kmajor || wi.kmajor;
  if (!hidden_grads && !kmajor && layers <= static_cast<size_t>(kMaxChainLayers)) {
    ChainBackwardLayer cb[kMaxChainLayers];
    for (size_t i = 0; i < layers; ++i)
      cb[i] = {w[i].ptr(), (i == 0 ? x : outs[i - 1]).ptr(), outs[i].ptr(), nullptr, nullptr, nullptr,
               w[i].rows, w[i].cols, acts[i]};
    const int count = static_cast<int>(layers);
    const ChainBackwardPlan fused = plan_chain_backward(c, m, cb, count, dt, alignment_of(dy.ptr()));
    if (fused.run) {
      Scratch s;
      size_t dz_at[kMaxChainLayers];
      for (size_t i = 0; i < layers; ++i) dz_at[i] = s.reserve(static_cast<size_t>(m * w[i].rows) * x.t.element_size());
      allocate_results();
      s.allocate(x.t);
      for (size_t i = 0; i < layers; ++i) {
        cb[i].dz = s.at(dz_at[i]);
        cb[i].dw = result[1 + i].mutable_data_ptr();
        cb[i].db = has_bias ? result[1 + layers + i].mutable_data_ptr() : nullptr;
      }
      run_chain_backward(fused, c, dy.ptr(), result[0].mutable_data_ptr(), m, cb, count, dt);
      return result;
    }
  }
  int64_t width = 0;
  bool recompute = false;
  for (size_t i = 0; i < layers; ++i) {
    width = std::max({width, w[i].rows, w[i].cols});
    recompute = recompute || (acts[i] != Act::None && acts[i] != Act::Relu);
  }
  // Where each layer's gradients live: -1 the caller's dy, 0/1 a ping-pong region, 2 the dx output.
  struct Layer {
    int dz, din;
    const GemmPlan *dw, *dx;
    bool db_in_dw;   // the dW GEMM also writes db (cuBLASLt's BGRADB epilogue): no column-sum launch
    LinearPlan pre;  // recomputed pre-activation (acts other than none/relu)
  };
  std::vector<Layer> plan(layers);
  Scratch s;
  const size_t region_bytes = static_cast<size_t>(m * width) * x.t.element_size();
  const size_t region[3] = {s.reserve(region_bytes), s.reserve(region_bytes), recompute ? s.reserve(region_bytes) : 0};
  BackwardGemms gemms(dt);
  int g = -1;
  for (size_t i = layers; i-- > 0;) {
    Layer& l = plan[i];
    const Mat& in = i == 0 ? x : outs[i - 1];
    l.dz = acts[i] == Act::None ? g : (g == 0 ? 1 : 0);
    l.din = i == 0 ? 2 : (l.dz == 0 ? 1 : 0);
    const int align_dz = l.dz < 0 ? alignment_of(dy.ptr()) : kFreshAlign;
    if (acts[i] != Act::None && acts[i] != Act::Relu)
      l.pre = plan_linear(c, m, w[i].rows, w[i].cols, Act::None, has_bias, dt, alignment_of(in.ptr()),
                          alignment_of(w[i].ptr()), alignment_of(ptr_of(b[i])), s, kFreshAlign, w[i].kmajor);
    if (w[i].kmajor) {  // dW stored K-major: its [K, N] buffer = in^T dz (the bias gradient by a column sum)
      l.dw = gemms.plan(w[i].cols, w[i].rows, m, true, false, false, alignment_of(in.ptr()), align_dz, kFreshAlign);
      l.db_in_dw = false;
    } else {
      l.dw = has_bias ? gemms.plan_with_bias_grad(w[i].rows, w[i].cols, m, align_dz, alignment_of(in.ptr())) : nullptr;
      l.db_in_dw = l.dw != nullptr;
      if (!l.dw) l.dw = gemms.plan(w[i].rows, w[i].cols, m, true, false, false, align_dz, alignment_of(in.ptr()), kFreshAlign);
    }
    // dX = dz w: w is b stored [K_gemm = N, N_gemm = K] row-major, or K-major ([K, N]: trans_b).
    l.dx = gemms.plan(m, w[i].cols, w[i].rows, false, w[i].kmajor, false, align_dz, alignment_of(w[i].ptr()), kFreshAlign);
    g = l.din;
  }
  gemms.reserve(s);
  allocate_results();
  s.allocate(x.t);
  auto at = [&](int where) -> void* {
    return where == 2 ? result[0].mutable_data_ptr() : where < 0 ? const_cast<void*>(dy.ptr()) : s.at(region[where]);
  };
  for (size_t i = layers; i-- > 0;) {
    const Layer& l = plan[i];
    const Mat& in = i == 0 ? x : outs[i - 1];
    const int64_t n = w[i].rows;
    void* grad = i + 1 == layers ? const_cast<void*>(dy.ptr()) : at(plan[i + 1].din);
    if (i + 1 < layers && !hidden.empty() && hidden[i].numel() > 0) {  // grad is this op's own region here
      const Mat extra = as_rows(hidden[i], "mlp backward", "grads[i]");
      add_inplace(grad, extra.ptr(), m * n, dt, c.stream);
    }
    void* dz = at(l.dz);
    if (acts[i] == Act::Relu) {
      act_backward(grad, outs[i].ptr(), dz, m * n, acts[i], dt, c.stream);
    } else if (acts[i] != Act::None) {
      void* pre = s.at(region[2]);
      run_linear(l.pre, c, s, in.ptr(), w[i].ptr(), ptr_of(b[i]), pre);
      act_backward(grad, pre, dz, m * n, acts[i], dt, c.stream);
    }
    void* db = has_bias ? result[1 + layers + i].mutable_data_ptr() : nullptr;
    if (w[i].kmajor)
      gemms.run(l.dw, s, in.ptr(), dz, result[1 + i].mutable_data_ptr(), c.stream);
    else
      gemms.run(l.dw, s, dz, in.ptr(), result[1 + i].mutable_data_ptr(), c.stream, l.db_in_dw ? db : nullptr);
    if (has_bias && !l.db_in_dw) column_sum(dz, db, m, n, dt, c.stream);
    gemms.run(l.dx, s, dz, w[i].ptr(), at(l.din), c.stream);
  }
  return result;
}

std::vector<Tensor> linear_backward(Tensor grad, Tensor x, Tensor w, std::optional<Tensor> b, Tensor y,
                                    std::string activation) {
  const Act act = parse_activation(activation);
  const Mat x2 = as_rows(x, "linear backward", "x");
  OnDevice on(x);
  const Mat w2 = weight_2d(w, x, x2.cols, "linear backward", "weight", true);
  const std::optional<Tensor> b2 = bias_1d(b, x, w2.rows, "linear backward", "bias");
  const Mat dy = as_rows(grad, "linear backward", "grad"), y2 = as_rows(y, "linear backward", "y");
  return chain_backward(dy, {}, x2, {w2}, {b2}, {y2}, {act}, ctx_for(x, Op::Linear));
}

// grad: the gradient of the last layer's output; hidden: [] or one tensor per hidden layer output (a tensor
// with no elements where none flows; only opcheck-style callers differentiate those). Returns [dx, dw_0..
// dw_{L-1}, db_0..db_{L-1}] (db_i with no elements without biases).
std::vector<Tensor> mlp_backward(Tensor grad, std::vector<Tensor> hidden, Tensor x, std::vector<Tensor> ws,
                                 std::vector<Tensor> bs, std::vector<Tensor> outs, std::string activation) {
  const Act act = parse_activation(activation);
  const size_t layers = ws.size();
  STD_TORCH_CHECK(outs.size() == layers && (hidden.empty() || hidden.size() + 1 == layers),
                  "fused_mlp.mlp backward: got ", outs.size(), " saved outputs and ", hidden.size(),
                  " hidden-output grads for ", layers, " layers");
  STD_TORCH_CHECK(bs.empty() || bs.size() == layers, "fused_mlp.mlp backward: got ", bs.size(), " biases for ",
                  layers, " weights");
  const Mat x2 = as_rows(x, "mlp backward", "x");
  OnDevice on(x);
  std::vector<Mat> w2, out2;
  std::vector<std::optional<Tensor>> b2;
  std::vector<Act> acts;
  int64_t cols = x2.cols;
  for (size_t l = 0; l < layers; ++l) {
    w2.push_back(weight_2d(ws[l], x, cols, "mlp backward", "weights[i]", true));
    b2.push_back(bs.empty() ? std::nullopt : bias_1d(bs[l], x, w2[l].rows, "mlp backward", "biases[i]"));
    out2.push_back(as_rows(outs[l], "mlp backward", "outputs[i]"));
    acts.push_back(l + 1 == layers ? Act::None : act);
    cols = w2[l].rows;
  }
  const Mat dy = as_rows(grad, "mlp backward", "grad");
  return chain_backward(dy, hidden, x2, w2, b2, out2, acts, ctx_for(x, Op::Mlp));
}

// From the training forward's h and gu = (g, u) planes [2, M, I]; grad_h: gradient of h, absent when none
// flows (the public API hides h). Small batches without grad_h: one persistent launch (chain.h) where the path
// table's chain_backward row says so. Else: dh = dy w_down (+ grad_h); (dg, du) in one
// elementwise pass over dh, g, u; dx = dg w_gate + du w_up; dw_gate = dg^T x, dw_up = du^T x,
// dw_down = dy^T h (cuBLASLt, measured faster than our Hopper backward kernels); dw_gate and dw_up as one batched
// GEMM (two [I, H] outputs of K = M each fill the GPU's waves better together; both in bench/BENCHMARKS.md).
// Returns [dx, dw_gu = (dw_gate, dw_up) as one [2, I, H] tensor, dw_down].
std::vector<Tensor> gated_mlp_backward(Tensor grad, std::optional<Tensor> grad_h, Tensor x, Tensor w_gate,
                                       Tensor w_up, Tensor w_down, Tensor h, Tensor gu, std::string activation) {
  const Act act = parse_activation(activation);
  const Mat x2 = as_rows(x, "gated_mlp backward", "x");
  OnDevice on(x);
  const Mat wg = weight_2d(w_gate, x, x2.cols, "gated_mlp backward", "w_gate");
  const Mat wu = weight_2d(w_up, x, x2.cols, "gated_mlp backward", "w_up");
  const Mat wd = weight_2d(w_down, x, wg.rows, "gated_mlp backward", "w_down");
  const Mat dy = as_rows(grad, "gated_mlp backward", "grad"), h2 = as_rows(h, "gated_mlp backward", "h");
  const int64_t m = x2.rows, hdim = x2.cols, inter = wg.rows, out_dim = wd.rows;
  const Tensor gu2 = as_contiguous(gu);
  STD_TORCH_CHECK(gu2.numel() == 2 * m * inter, "fused_mlp.gated_mlp backward: the saved (g, u) planes have ",
                  gu2.numel(), " elements, expected 2 x ", m, " x ", inter);
  const ScalarType dt = x2.t.scalar_type();
  if (m == 0) {
    return {empty_rows_like(x, hdim), new_zeros(wg.t, {2, inter, hdim}), new_zeros(wd.t, {out_dim, inter})};
  }
  const Ctx c = ctx_for(x, Op::GatedMlp);
  const bool has_grad_h = grad_h.has_value();
  const size_t plane = static_cast<size_t>(m * inter) * x2.t.element_size();
  std::vector<Tensor> result = {empty_rows_like(x, hdim), empty_on(wg.t, {2, inter, hdim}), empty_on(wd.t, {out_dim, inter})};
  if (!has_grad_h) {  // small batches: the whole backward in one persistent launch where the table says so
    ChainBackwardLayer cb[2];
    cb[0].w = wg.ptr(), cb[0].w_up = wu.ptr(), cb[0].gu = gu2.const_data_ptr(), cb[0].in = x2.ptr();
    cb[0].n = 2 * inter, cb[0].k = hdim, cb[0].act = act;
    cb[1].w = wd.ptr(), cb[1].in = h2.ptr(), cb[1].n = out_dim, cb[1].k = inter;
    const ChainBackwardPlan fused = plan_chain_backward(c, m, cb, 2, dt, alignment_of(dy.ptr()));
    if (fused.run) {
      Scratch s;
      const size_t dgu_at = s.reserve(2 * plane);  // (dg | du) per row: the gated layer's dz [M, 2I]
      s.allocate(x);
      cb[0].dz = s.at(dgu_at), cb[0].dw = result[1].mutable_data_ptr(), cb[1].dw = result[2].mutable_data_ptr();
      run_chain_backward(fused, c, dy.ptr(), result[0].mutable_data_ptr(), m, cb, 2, dt);
      return result;
    }
  }
  const int align_2nd = align_after(plane);  // plane 1 of a [2, M, I] buffer
  const void* g = gu2.const_data_ptr();
  const void* u = static_cast<const char*>(g) + plane;
  Scratch s;
  const size_t dh_at = s.reserve(plane), dgu_at = s.reserve(2 * plane);
  BackwardGemms gemms(dt);
  const GemmPlan* p_dh = gemms.plan(m, inter, out_dim, false, false, has_grad_h, alignment_of(dy.ptr()),
                                    alignment_of(wd.ptr()), kFreshAlign);
  const GemmPlan* p_dx_g = gemms.plan(m, hdim, inter, false, false, false, kFreshAlign, alignment_of(wg.ptr()), kFreshAlign);
  const GemmPlan* p_dx_u = gemms.plan(m, hdim, inter, false, false, true, align_2nd, alignment_of(wu.ptr()), kFreshAlign);
  // (dw_gate, dw_up) = (dg, du)^T x: batch 2 over the dg/du planes and the two output planes, x read by both.
  const long long w_plane = inter * hdim;
  const int align_w_2nd = align_after(static_cast<size_t>(w_plane) * x2.t.element_size());
  const GemmPlan* p_dwgu = gemms.plan_batched(inter, hdim, m, true, 2, m * inter, 0, w_plane, align_2nd,
                                              alignment_of(x2.ptr()), align_w_2nd);
  const GemmPlan* p_dwd = gemms.plan(out_dim, inter, m, true, false, false, alignment_of(dy.ptr()),
                                     alignment_of(h2.ptr()), kFreshAlign);
  gemms.reserve(s);
  s.allocate(x);
  void* dh = s.at(dh_at);
  char* dg = static_cast<char*>(s.at(dgu_at));
  char* du = dg + plane;
  if (has_grad_h) {
    const Mat gh = as_rows(*grad_h, "gated_mlp backward", "grad_h");
    const cudaError_t err = cudaMemcpyAsync(dh, gh.ptr(), plane, cudaMemcpyDeviceToDevice, c.stream);
    STD_TORCH_CHECK(err == cudaSuccess, "fused_mlp.gated_mlp backward: copying grad_h failed: ", cudaGetErrorString(err));
  }
  gemms.run(p_dh, s, dy.ptr(), wd.ptr(), dh, c.stream);
  act_and_mul_backward(dh, g, u, dg, du, m * inter, act, dt, c.stream);
  gemms.run(p_dx_g, s, dg, wg.ptr(), result[0].mutable_data_ptr(), c.stream);
  gemms.run(p_dx_u, s, du, wu.ptr(), result[0].mutable_data_ptr(), c.stream);
  gemms.run(p_dwgu, s, dg, x2.ptr(), result[1].mutable_data_ptr(), c.stream);
  gemms.run(p_dwd, s, dy.ptr(), h2.ptr(), result[2].mutable_data_ptr(), c.stream);
  return result;
}

std::vector<Tensor> act_and_mul_backward_op(Tensor grad, Tensor gate, Tensor up, std::string activation) {
  const Act act = parse_activation(activation);
  check_cuda_tensor(grad, "act_and_mul backward", "grad");
  OnDevice on(gate);
  const Tensor d = as_contiguous(grad), g = as_contiguous(gate), u = as_contiguous(up);
  const int64_t last = g.dim() ? g.size(g.dim() - 1) : 1;
  Tensor dg = empty_rows_like(g, last), du = empty_rows_like(g, last);
  act_and_mul_backward(d.const_data_ptr(), g.const_data_ptr(), u.const_data_ptr(), dg.mutable_data_ptr(),
                       du.mutable_data_ptr(), g.numel(), act, g.scalar_type(), current_stream(g));
  return {dg, du};
}

// ---- implementation paths (benchmarks and tests) ---------------------------------------------------------

int index_of(const char* const* names, int n, const std::string& name, const char* what) {
  for (int i = 0; i < n; ++i)
    if (name == names[i]) return i;
  STD_TORCH_CHECK(false, "fused_mlp: unknown ", what, " '", name, "'");
  return -1;
}

// Force `step` to `impl` ("table": back to the path table) for later calls; returns the previous setting.
std::string set_path(std::string step, std::string impl) {
  static const std::string what = [] {  // "step (use linear, ... or chain_backward)", from the generated names
    std::string out = "step (use ";
    for (int i = 0; i < kNumSteps; ++i) out += std::string(i == 0 ? "" : i + 1 < kNumSteps ? ", " : " or ") + kStepNames[i];
    return out + ")";
  }();
  const int s = index_of(kStepNames, kNumSteps, step, what.c_str());
  const int i = impl == "table" ? -1 : index_of(kImplNames, kNumImpls, impl, "implementation");
  const int before = set_path_override(static_cast<Step>(s), i);
  return before < 0 ? "table" : kImplNames[before];
}

// The path table's choices on `sm` for calls of `weight_bytes` of weights: "<op>/<step>" -> [M, implementation
// for calls one by one, implementation inside a captured graph] rows, as a JSON object.
std::string path_choices(int sm, long long weight_bytes) {
  std::string out = "{";
  bool first_key = true;
  for (int o = 0; o < kNumOps; ++o) {
    for (const int s : kOpSteps[o]) {
      if (s < 0) break;  // the op's last step was the one before
      out += std::string(first_key ? "" : ", ") + "\"" + kOpNames[o] + "/" + kStepNames[s] + "\": [";
      first_key = false;
      bool first = true;
      for (const long long rows : {1ll, 16ll, 64ll, 256ll, 1024ll, 4096ll, 8192ll}) {
        const Step step = static_cast<Step>(s);
        const Impl eager = choose_impl(step, static_cast<Op>(o), sm, rows, weight_bytes, false);
        const Impl graph = choose_impl(step, static_cast<Op>(o), sm, rows, weight_bytes, true);
        out += std::string(first ? "" : ", ") + "[" + std::to_string(rows) + ", \"" +
               kImplNames[static_cast<int>(eager)] + "\", \"" + kImplNames[static_cast<int>(graph)] + "\"]";
        first = false;
      }
      out += "]";
    }
  }
  return out + "}";
}

// What this build embeds and what the path table says for `device`'s arch: one JSON object. "paths": the
// choices (path_choices) for weights under every row's weight bound; "paths_by_weight": for each distinct
// weight bound B of the rows this arch searches (its own and the default arch's), ascending, {"min_weight_bytes":
// B, "paths": the choices for calls reading B bytes of weights}.
std::string build_info(int64_t device) {
  const int sm = device_sm(static_cast<int>(device));
  int here = 0;
  for (int i = 0; i < kNumTritonCubins; ++i) here += kTritonCubins[i].sm == sm;
  std::vector<long long> bounds;
  for (int i = 0; i < kNumPathRows; ++i)
    if ((kPathRows[i].sm == sm || kPathRows[i].sm == 0) && kPathRows[i].min_weight_bytes > 0)
      bounds.push_back(kPathRows[i].min_weight_bytes);
  std::sort(bounds.begin(), bounds.end());
  bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());
  std::string out = std::string("{\"triton\": \"") + kTritonVersion + "\", \"entries\": " +
                    std::to_string(kNumTritonCubins) + ", \"entries_for_device\": " + std::to_string(here) +
                    ", \"sm\": " + std::to_string(sm) + ", \"paths\": " + path_choices(sm, 0) +
                    ", \"paths_by_weight\": [";
  for (size_t i = 0; i < bounds.size(); ++i)
    out += std::string(i ? ", " : "") + "{\"min_weight_bytes\": " + std::to_string(bounds[i]) +
           ", \"paths\": " + path_choices(sm, bounds[i]) + "}";
  return out + "]}";
}

}  // namespace
}  // namespace fused_mlp

// Indirection so FUSED_MLP_NS expands before the library macros paste it into identifiers. A
// FRAGMENT, because the Triton backend's Python custom ops share the namespace.
#define FMLP_LIBRARY(ns, m) STABLE_TORCH_LIBRARY_FRAGMENT(ns, m)
#define FMLP_LIBRARY_IMPL(ns, k, m) STABLE_TORCH_LIBRARY_IMPL(ns, k, m)

FMLP_LIBRARY(FUSED_MLP_NS, m) {
  m.def("cuda_linear(Tensor x, Tensor weight, Tensor? bias, str activation) -> Tensor");
  m.def("cuda_linear_infer(Tensor x, Tensor weight, Tensor? bias, str activation) -> Tensor");
  m.def("cuda_linear_backward(Tensor grad, Tensor x, Tensor weight, Tensor? bias, Tensor y, str activation) -> Tensor[]");
  m.def("cuda_mlp(Tensor x, Tensor[] weights, Tensor[] biases, str activation) -> Tensor[]");
  m.def("cuda_mlp_infer(Tensor x, Tensor[] weights, Tensor[] biases, str activation) -> Tensor");
  m.def("cuda_mlp_train(Tensor x, Tensor[] weights, Tensor[] biases, str activation) -> Tensor[]");
  m.def("cuda_mlp_backward(Tensor grad, Tensor[] hidden_grads, Tensor x, Tensor[] weights, Tensor[] biases, Tensor[] outputs, str activation) -> Tensor[]");
  m.def("cuda_gated_mlp(Tensor x, Tensor w_gate, Tensor w_up, Tensor w_down, str activation) -> Tensor[]");
  m.def("cuda_gated_mlp_infer(Tensor x, Tensor w_gate, Tensor w_up, Tensor w_down, str activation) -> Tensor");
  m.def("cuda_gated_mlp_train(Tensor x, Tensor w_gate, Tensor w_up, Tensor w_down, str activation) -> Tensor[]");
  m.def("cuda_gated_mlp_backward(Tensor grad, Tensor? grad_h, Tensor x, Tensor w_gate, Tensor w_up, Tensor w_down, Tensor h, Tensor gu, str activation) -> Tensor[]");
  m.def("cuda_act_and_mul(Tensor gate, Tensor up, str activation) -> Tensor");
  m.def("cuda_act_and_mul_infer(Tensor gate, Tensor up, str activation) -> Tensor");
  m.def("cuda_act_and_mul_backward(Tensor grad, Tensor gate, Tensor up, str activation) -> Tensor[]");
  m.def("cuda_mlp_probe(Tensor x, Tensor[] weights, Tensor[] biases, str activation, int stop) -> Tensor");
  m.def("cuda_set_path(str step, str impl) -> str");
  m.def("cuda_build_info(int device) -> str");
}

FMLP_LIBRARY_IMPL(FUSED_MLP_NS, CUDA, m) {
  m.impl("cuda_linear", TORCH_BOX(&fused_mlp::linear));
  m.impl("cuda_linear_infer", TORCH_BOX(&fused_mlp::linear));
  m.impl("cuda_linear_backward", TORCH_BOX(&fused_mlp::linear_backward));
  m.impl("cuda_mlp", TORCH_BOX(&fused_mlp::mlp));
  m.impl("cuda_mlp_infer", TORCH_BOX(&fused_mlp::mlp_infer));
  m.impl("cuda_mlp_train", TORCH_BOX(&fused_mlp::mlp));
  m.impl("cuda_mlp_backward", TORCH_BOX(&fused_mlp::mlp_backward));
  m.impl("cuda_mlp_probe", TORCH_BOX(&fused_mlp::mlp_probe));
  m.impl("cuda_gated_mlp", TORCH_BOX(&fused_mlp::gated_mlp));
  m.impl("cuda_gated_mlp_infer", TORCH_BOX(&fused_mlp::gated_mlp_infer));
  m.impl("cuda_gated_mlp_train", TORCH_BOX(&fused_mlp::gated_mlp));
  m.impl("cuda_gated_mlp_backward", TORCH_BOX(&fused_mlp::gated_mlp_backward));
  m.impl("cuda_act_and_mul", TORCH_BOX(&fused_mlp::act_and_mul_op));
  m.impl("cuda_act_and_mul_infer", TORCH_BOX(&fused_mlp::act_and_mul_op));
  m.impl("cuda_act_and_mul_backward", TORCH_BOX(&fused_mlp::act_and_mul_backward_op));
}

// No tensor arguments: these dispatch on the backend-independent key.
FMLP_LIBRARY_IMPL(FUSED_MLP_NS, CompositeExplicitAutograd, m) {
  m.impl("cuda_set_path", TORCH_BOX(&fused_mlp::set_path));
  m.impl("cuda_build_info", TORCH_BOX(&fused_mlp::build_info));
}
