// The torch ops of the CUDA backend, registered through the torch stable ABI (C shim only), so one
// build serves every torch >= 2.11. The op namespace is baked in at compile time (FUSED_MLP_NS, from
// fused_mlp/_build_info.py) so two loaded builds never clash in torch.ops.
// One host call per public op does everything: checks, planning (steps.h: path table, cached cuBLASLt
// plans), one output allocation plus one scratch allocation through the C shim, and every launch.
// `*_infer` ops are the inference forms (no autograd registered, intermediates in scratch, only the
// result returned); the others return what backward needs. Backward recomputes pre-activations.
#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>

#include <optional>
#include <string>
#include <vector>

#include "alloc.h"
#include "common.cuh"
#include "elementwise.h"
#include "steps.h"

#ifndef FUSED_MLP_NS
#error "FUSED_MLP_NS must name the torch op namespace (the build passes -DFUSED_MLP_NS=<OPS_NAMESPACE>)"
#endif

namespace fused_mlp {
namespace {

// A contiguous tensor seen as a row-major [rows, cols] matrix (cols = its last dim). The kernels work
// on pointers, so leading dims are never reshaped: no dispatcher round trip for views.
struct Mat {
  Tensor t;
  int64_t rows, cols;
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

Mat weight_2d(const Tensor& w, const Tensor& x, int64_t k, const char* op, const char* name) {
  check_cuda_tensor(w, op, name);
  check_same_dtype(x, w, op, name);
  STD_TORCH_CHECK(w.dim() == 2 && w.size(1) == k, "fused_mlp.", op, ": `", name, "` must be [out, ", k,
                  "] to match the input's last dim ", k, ", got ", w.dim(), " dims with last size ",
                  w.dim() ? w.size(w.dim() - 1) : 0);
  return {as_contiguous(w), w.size(0), k};
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

// One GEMM run right away (backward): plan, a workspace only when its algorithm needs one, run.
void gemm_now(const Tensor& like, const void* a, bool ta, const void* b, bool tb, void* out, long long m, long long n,
              long long k, bool accumulate, ScalarType dt, cudaStream_t stream) {
  const GemmPlan* plan =
      gemm_plan({m, n, k, ta, tb, accumulate, Epilogue::None, dt, alignment_of(a), alignment_of(b), alignment_of(out), 16});
  Scratch ws;
  const size_t at = ws.reserve(gemm_workspace_bytes(plan));
  ws.allocate(like);
  gemm_run(plan, a, b, out, nullptr, ws.at(at), stream);
}

// y = act(x @ w^T + b) into a new tensor shaped like x with last dim w.rows.
Mat linear_now(const Mat& x, const Mat& w, const void* b, Act act, const Ctx& c) {
  Scratch s;
  const LinearPlan p = plan_linear(c, x.rows, w.rows, x.cols, act, b != nullptr, x.t.scalar_type(), alignment_of(x.ptr()),
                                   alignment_of(w.ptr()), alignment_of(b), s);
  Mat y = new_rows(x, w.rows);
  s.allocate(x.t);
  run_linear(p, c, s, x.ptr(), w.ptr(), b, y.mut());
  return y;
}

// dz = dy * act'(z) for one layer; `out` is act(z) (relu needs only that), z is recomputed otherwise.
Mat preact_grad(const Mat& dy, const Mat& in, const Mat& w, const void* b, const Mat& out, Act act, const Ctx& c) {
  if (act == Act::None) return dy;
  Mat dz = new_rows(dy, dy.cols);
  const Mat saved = act == Act::Relu ? out : linear_now(in, w, b, Act::None, c);
  act_backward(dy.ptr(), saved.ptr(), dz.mut(), dy.rows * dy.cols, act, dy.t.scalar_type(), c.stream);
  return dz;
}

// Gradients of one layer given dz [M,N]: dw = dz^T in, db = sum(dz); din = dz @ w.
struct LayerGrads {
  Mat din;
  Tensor dw, db;
};
LayerGrads layer_backward(const Mat& dz, const Mat& in, const Mat& w, bool has_bias, const Ctx& c) {
  const int64_t m = in.rows, k = in.cols, n = w.rows;
  const ScalarType dt = in.t.scalar_type();
  if (m == 0) return {new_rows(in, k), new_zeros(w.t, {n, k}), new_zeros(w.t, {has_bias ? n : 0})};
  LayerGrads g{new_rows(in, k), empty_on(w.t, {n, k}), empty_on(w.t, {has_bias ? n : 0})};
  gemm_now(in.t, dz.ptr(), true, in.ptr(), false, g.dw.mutable_data_ptr(), n, k, m, false, dt, c.stream);
  if (has_bias) column_sum(dz.ptr(), g.db.mutable_data_ptr(), m, n, dt, c.stream);
  gemm_now(in.t, dz.ptr(), false, w.ptr(), false, g.din.mut(), m, k, n, false, dt, c.stream);
  return g;
}

// ---- forward ops -------------------------------------------------------------------------------------

Tensor linear(Tensor x, Tensor w, std::optional<Tensor> b, std::string activation) {
  const Act act = parse_activation(activation);
  const Mat x2 = as_rows(x, "linear", "x");
  OnDevice on(x);
  const Mat w2 = weight_2d(w, x, x2.cols, "linear", "weight");
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
  std::vector<LinearPlan> plans;
  std::vector<size_t> at(layers, 0);
  w2.reserve(layers), b2.reserve(layers), plans.reserve(layers);
  Scratch s;
  int64_t cols = x2.cols;
  int align_in = alignment_of(x2.ptr());
  for (size_t l = 0; l < layers; ++l) {
    w2.push_back(weight_2d(ws[l], x, cols, "mlp", "weights[i]"));
    b2.push_back(bs.empty() ? std::nullopt : bias_1d(bs[l], x, w2[l].rows, "mlp", "biases[i]"));
    const Act a = l + 1 == layers ? Act::None : act;
    plans.push_back(plan_linear(c, x2.rows, w2[l].rows, cols, a, b2[l].has_value(), dt, align_in,
                                alignment_of(w2[l].ptr()), alignment_of(ptr_of(b2[l])), s));
    if (!keep && l + 1 < layers) at[l] = s.reserve(static_cast<size_t>(x2.rows * w2[l].rows) * x2.t.element_size());
    align_in = kFreshAlign;
    cols = w2[l].rows;
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
    run_linear(plans[l], c, s, in, w2[l].ptr(), ptr_of(b2[l]), out);
    in = out;
  }
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

// y = down(act(gate(x)) * up(x)); h (the down projection's input) is a returned tensor when `keep_h`.
std::vector<Tensor> gated_chain(const Tensor& x, const Tensor& w_gate, const Tensor& w_up, const Tensor& w_down,
                                const std::string& activation, bool keep_h) {
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
  const Ctx c = ctx_for(x, Op::GatedMlp);
  const ScalarType dt = x2.t.scalar_type();
  Scratch s;
  const GateUpPlan gu = plan_gate_up(c, x2.rows, wg.rows, x2.cols, act, dt, alignment_of(x2.ptr()),
                                     alignment_of(wg.ptr()), alignment_of(wu.ptr()), s);
  const LinearPlan down =
      plan_linear(c, x2.rows, wd.rows, wg.rows, Act::None, false, dt, kFreshAlign, alignment_of(wd.ptr()), 16, s);
  const size_t h_at = keep_h ? 0 : s.reserve(static_cast<size_t>(x2.rows * wg.rows) * x2.t.element_size());
  std::vector<Tensor> outs;
  if (keep_h) {
    outs = {empty_rows_like(x, wd.rows), empty_rows_like(x, wg.rows)};
    s.allocate(x);
  } else {
    outs.push_back(output_and_scratch(x, wd.rows, s));
  }
  void* h = keep_h ? outs[1].mutable_data_ptr() : s.at(h_at);
  run_gate_up(gu, c, s, x2.ptr(), wg.ptr(), wu.ptr(), h);
  run_linear(down, c, s, h, wd.ptr(), nullptr, outs[0].mutable_data_ptr());
  return outs;
}

// Returns [y, h] with h = act(x w_gate^T) * (x w_up^T), saved for backward.
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
  const bool aligned = alignment_of(g.const_data_ptr()) == 16 && alignment_of(u.const_data_ptr()) == 16;
  const ActAndMulPlan p = plan_act_and_mul(c, rows, g.numel(), act, g.scalar_type(), aligned);
  run_act_and_mul(p, c, g.const_data_ptr(), u.const_data_ptr(), out.mutable_data_ptr());
  return out;
}

// ---- backward ops ------------------------------------------------------------------------------------

std::vector<Tensor> linear_backward(Tensor grad, Tensor x, Tensor w, std::optional<Tensor> b, Tensor y,
                                    std::string activation) {
  const Act act = parse_activation(activation);
  const Mat x2 = as_rows(x, "linear backward", "x");
  OnDevice on(x);
  const Mat w2 = weight_2d(w, x, x2.cols, "linear backward", "weight");
  const std::optional<Tensor> b2 = bias_1d(b, x, w2.rows, "linear backward", "bias");
  const Mat dy = as_rows(grad, "linear backward", "grad"), y2 = as_rows(y, "linear backward", "y");
  const Ctx c = ctx_for(x, Op::Linear);
  const Mat dz = preact_grad(dy, x2, w2, ptr_of(b2), y2, act, c);
  LayerGrads g = layer_backward(dz, x2, w2, b.has_value(), c);
  return {g.din.t, g.dw, g.db};
}

// grads[i] is the gradient of outputs[i] (an empty tensor when none flows there; only the last one
// does through the public API). Returns [dx, dw_0..dw_{L-1}, db_0..db_{L-1}] (db_i empty without biases).
std::vector<Tensor> mlp_backward(std::vector<Tensor> grads, Tensor x, std::vector<Tensor> ws, std::vector<Tensor> bs,
                                 std::vector<Tensor> outs, std::string activation) {
  const Act act = parse_activation(activation);
  const size_t layers = ws.size();
  STD_TORCH_CHECK(outs.size() == layers && grads.size() == layers, "fused_mlp.mlp backward: got ", outs.size(),
                  " saved outputs and ", grads.size(), " output grads for ", layers, " layers");
  const Mat x2 = as_rows(x, "mlp backward", "x");
  OnDevice on(x);
  const Ctx c = ctx_for(x, Op::Mlp);
  std::vector<Mat> ins, w2, out2;
  std::vector<std::optional<Tensor>> b2;
  for (size_t l = 0; l < layers; ++l) {
    out2.push_back(as_rows(outs[l], "mlp backward", "outputs[i]"));
    ins.push_back(l == 0 ? x2 : out2[l - 1]);
    w2.push_back(weight_2d(ws[l], x, ins[l].cols, "mlp backward", "weights[i]"));
    b2.push_back(bs.empty() ? std::nullopt : bias_1d(bs[l], x, w2[l].rows, "mlp backward", "biases[i]"));
  }
  std::vector<Tensor> result;
  result.reserve(1 + 2 * layers);
  result.push_back(x);  // placeholders, all overwritten below
  for (size_t l = 0; l < 2 * layers; ++l) result.push_back(x);
  Mat g = as_rows(grads[layers - 1], "mlp backward", "grads[-1]");
  for (size_t i = layers; i-- > 0;) {
    const Act a = i + 1 == layers ? Act::None : act;
    if (i + 1 < layers && grads[i].numel() > 0) {  // g is this call's own buffer here (a previous din)
      const Mat extra = as_rows(grads[i], "mlp backward", "grads[i]");
      add_inplace(g.mut(), extra.ptr(), g.rows * g.cols, g.t.scalar_type(), c.stream);
    }
    const Mat dz = preact_grad(g, ins[i], w2[i], ptr_of(b2[i]), out2[i], a, c);
    LayerGrads lg = layer_backward(dz, ins[i], w2[i], !bs.empty(), c);
    result[1 + i] = lg.dw;
    result[1 + layers + i] = lg.db;
    g = lg.din;
  }
  result[0] = g.t;
  return result;
}

// grad_h: gradient of the returned h, an empty tensor when none flows there (the public API hides h).
// Returns [dx, dw_gate, dw_up, dw_down].
std::vector<Tensor> gated_mlp_backward(Tensor grad, Tensor grad_h, Tensor x, Tensor w_gate, Tensor w_up,
                                       Tensor w_down, Tensor h, std::string activation) {
  const Act act = parse_activation(activation);
  const Mat x2 = as_rows(x, "gated_mlp backward", "x");
  OnDevice on(x);
  const Mat wg = weight_2d(w_gate, x, x2.cols, "gated_mlp backward", "w_gate");
  const Mat wu = weight_2d(w_up, x, x2.cols, "gated_mlp backward", "w_up");
  const Mat wd = weight_2d(w_down, x, wg.rows, "gated_mlp backward", "w_down");
  const Mat dy = as_rows(grad, "gated_mlp backward", "grad"), h2 = as_rows(h, "gated_mlp backward", "h");
  const int64_t m = x2.rows, hdim = x2.cols, inter = wg.rows, out_dim = wd.rows;
  const ScalarType dt = x2.t.scalar_type();
  if (m == 0) {
    return {empty_rows_like(x, hdim), new_zeros(wg.t, {inter, hdim}), new_zeros(wu.t, {inter, hdim}),
            new_zeros(wd.t, {out_dim, inter})};
  }
  const Ctx c = ctx_for(x, Op::GatedMlp);
  const Mat g = linear_now(x2, wg, nullptr, Act::None, c), u = linear_now(x2, wu, nullptr, Act::None, c);
  const bool has_grad_h = grad_h.numel() > 0;
  const Mat dh = has_grad_h ? Mat{torch::stable::clone(as_rows(grad_h, "gated_mlp backward", "grad_h").t), m, inter}
                            : new_rows(x2, inter);
  gemm_now(x, dy.ptr(), false, wd.ptr(), false, dh.mut(), m, inter, out_dim, has_grad_h, dt, c.stream);
  const Mat dg = new_rows(x2, inter), du = new_rows(x2, inter);
  act_and_mul_backward(dh.ptr(), g.ptr(), u.ptr(), dg.mut(), du.mut(), m * inter, act, dt, c.stream);
  const Mat dx = new_rows(x2, hdim);
  gemm_now(x, dg.ptr(), false, wg.ptr(), false, dx.mut(), m, hdim, inter, false, dt, c.stream);
  gemm_now(x, du.ptr(), false, wu.ptr(), false, dx.mut(), m, hdim, inter, true, dt, c.stream);
  Tensor dwg = empty_on(wg.t, {inter, hdim}), dwu = empty_on(wu.t, {inter, hdim}), dwd = empty_on(wd.t, {out_dim, inter});
  gemm_now(x, dg.ptr(), true, x2.ptr(), false, dwg.mutable_data_ptr(), inter, hdim, m, false, dt, c.stream);
  gemm_now(x, du.ptr(), true, x2.ptr(), false, dwu.mutable_data_ptr(), inter, hdim, m, false, dt, c.stream);
  gemm_now(x, dy.ptr(), true, h2.ptr(), false, dwd.mutable_data_ptr(), out_dim, inter, m, false, dt, c.stream);
  return {dx.t, dwg, dwu, dwd};
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

const char* const kStepNames[] = {"linear", "gate_up", "act_and_mul"};
const char* const kImplNames[] = {"triton", "cublaslt", "split", "cuda"};

int index_of(const char* const* names, int n, const std::string& name, const char* what) {
  for (int i = 0; i < n; ++i)
    if (name == names[i]) return i;
  STD_TORCH_CHECK(false, "fused_mlp: unknown ", what, " '", name, "'");
  return -1;
}

// Force `step` to `impl` ("table": back to the path table) for later calls; returns the previous setting.
std::string set_path(std::string step, std::string impl) {
  const int s = index_of(kStepNames, 3, step, "step (use linear, gate_up or act_and_mul)");
  const int i = impl == "table" ? -1 : index_of(kImplNames, 4, impl, "implementation");
  const int before = set_path_override(static_cast<Step>(s), i);
  return before < 0 ? "table" : kImplNames[before];
}

// What this build embeds and what the path table says for `device`'s arch: one JSON object. "paths" maps
// "<op>/<step>" to [M, implementation for calls one by one, implementation inside a captured graph] rows.
std::string build_info(int64_t device) {
  const int sm = device_sm(static_cast<int>(device));
  int here = 0;
  for (int i = 0; i < kNumTritonCubins; ++i) here += kTritonCubins[i].sm == sm;
  std::string out = std::string("{\"triton\": \"") + kTritonVersion + "\", \"entries\": " +
                    std::to_string(kNumTritonCubins) + ", \"entries_for_device\": " + std::to_string(here) +
                    ", \"sm\": " + std::to_string(sm) + ", \"paths\": {";
  const char* const op_names[] = {"linear", "mlp", "gated_mlp", "act_and_mul"};
  const int steps_of[][2] = {{0, -1}, {0, -1}, {1, 0}, {2, -1}};  // the steps each op runs
  bool first_key = true;
  for (int o = 0; o < 4; ++o) {
    for (const int s : steps_of[o]) {
      if (s < 0) continue;
      out += std::string(first_key ? "" : ", ") + "\"" + op_names[o] + "/" + kStepNames[s] + "\": [";
      first_key = false;
      bool first = true;
      for (const long long rows : {1ll, 16ll, 64ll, 256ll, 1024ll, 4096ll, 8192ll}) {
        const Impl eager = choose_impl(static_cast<Step>(s), static_cast<Op>(o), sm, rows, false);
        const Impl graph = choose_impl(static_cast<Step>(s), static_cast<Op>(o), sm, rows, true);
        out += std::string(first ? "" : ", ") + "[" + std::to_string(rows) + ", \"" +
               kImplNames[static_cast<int>(eager)] + "\", \"" + kImplNames[static_cast<int>(graph)] + "\"]";
        first = false;
      }
      out += "]";
    }
  }
  return out + "}}";
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
  m.def("cuda_mlp_backward(Tensor[] grads, Tensor x, Tensor[] weights, Tensor[] biases, Tensor[] outputs, str activation) -> Tensor[]");
  m.def("cuda_gated_mlp(Tensor x, Tensor w_gate, Tensor w_up, Tensor w_down, str activation) -> Tensor[]");
  m.def("cuda_gated_mlp_infer(Tensor x, Tensor w_gate, Tensor w_up, Tensor w_down, str activation) -> Tensor");
  m.def("cuda_gated_mlp_backward(Tensor grad, Tensor grad_h, Tensor x, Tensor w_gate, Tensor w_up, Tensor w_down, Tensor h, str activation) -> Tensor[]");
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
  m.impl("cuda_mlp_backward", TORCH_BOX(&fused_mlp::mlp_backward));
  m.impl("cuda_mlp_probe", TORCH_BOX(&fused_mlp::mlp_probe));
  m.impl("cuda_gated_mlp", TORCH_BOX(&fused_mlp::gated_mlp));
  m.impl("cuda_gated_mlp_infer", TORCH_BOX(&fused_mlp::gated_mlp_infer));
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
