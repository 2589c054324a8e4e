// The torch ops of the CUDA backend, registered through the torch stable ABI (C shim only), so one
// build serves every torch >= 2.11. The op namespace is baked in at compile time (FUSED_MLP_NS, from
// fused_mlp/_build_info.py) so two loaded builds never clash in torch.ops.
// Inputs may have any leading dims; the kernels see them as row-major matrices, so one host call
// per public op does everything. Backward ops recompute pre-activations instead of storing them in forward.
#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>

#include <vector>

#include "common.cuh"
#include "elementwise.h"
#include "gate_up.h"
#include "gemm.h"

#ifndef FUSED_MLP_NS
#error "FUSED_MLP_NS must name the torch op namespace (the build passes -DFUSED_MLP_NS=<OPS_NAMESPACE>)"
#endif

namespace fused_mlp {
namespace {

using Sizes = std::vector<int64_t>;

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

// Leading dims of x with `last` as the new last dim.
Sizes out_shape(const Tensor& x, int64_t last) {
  Sizes s(x.sizes().begin(), x.sizes().end());
  s.back() = last;
  return s;
}

// A new [rows, n] matrix shaped like x's leading dims + [n].
Mat new_rows(const Mat& x, int64_t n) { return {torch::stable::new_empty(x.t, out_shape(x.t, n)), x.rows, n}; }

Mat weight_2d(const Tensor& w, const Tensor& x, int64_t k, const char* op, const char* name) {
  check_cuda_tensor(w, op, name);
  check_same_dtype(x, w, op, name);
  STD_TORCH_CHECK(w.dim() == 2 && w.size(1) == k, "fused_mlp.", op, ": `", name, "` must be [out, ", k,
                  "] to match the input's last dim ", k, ", got ", w.dim(), " dims with last size ",
                  w.dim() ? w.size(w.dim() - 1) : 0);
  return {as_contiguous(w), w.size(0), k};
}

Tensor bias_1d(const Tensor& b, const Tensor& x, int64_t n, const char* op, const char* name) {
  check_cuda_tensor(b, op, name);
  check_same_dtype(x, b, op, name);
  STD_TORCH_CHECK(b.dim() == 1 && b.size(0) == n, "fused_mlp.", op, ": `", name, "` must be [", n,
                  "], got ", b.dim(), " dims");
  return as_contiguous(b);
}

Tensor workspace(const Tensor& like) {
  return torch::stable::new_empty(like, Sizes{static_cast<int64_t>(kGemmWorkspaceBytes)}, ScalarType::Byte);
}

struct Ctx {
  Tensor ws;
  cudaStream_t stream;
};

// out = op(a) @ op(b) (see GemmArgs) with m, n, k given.
void run_gemm(const void* a, bool ta, const void* b, bool tb, void* out, const Tensor* bias, int64_t m, int64_t n,
              int64_t k, Epilogue epi, float beta, ScalarType dtype, const Ctx& c) {
  GemmArgs g{a, ta, b, tb, out, bias ? bias->const_data_ptr() : nullptr, m, n, k, beta, epi, dtype,
             c.ws.mutable_data_ptr(), kGemmWorkspaceBytes, c.stream};
  gemm(g);
}

// y = act(x @ w^T + b), y shaped like x with last dim w.rows.
Mat linear_rows(const Mat& x, const Mat& w, const Tensor* b, Act act, const Ctx& c) {
  Mat y = new_rows(x, w.rows);
  if (x.rows == 0 || w.rows == 0) return y;
  STD_TORCH_CHECK(x.cols > 0, "fused_mlp.linear: the input's last dim is 0; nothing to multiply");
  bool fused = false;
  const Epilogue epi = epilogue_for(act, b != nullptr, &fused);
  run_gemm(x.ptr(), false, w.ptr(), true, y.mut(), b, x.rows, w.rows, x.cols, epi, 0.f, x.t.scalar_type(), c);
  if (!fused) act_inplace(y.mut(), x.rows * w.rows, act, x.t.scalar_type(), c.stream);
  return y;
}

// dz = dy * act'(z) for one layer; `out` is act(z) (relu needs only that), z is recomputed otherwise.
Mat preact_grad(const Mat& dy, const Mat& in, const Mat& w, const Tensor* b, const Mat& out, Act act, const Ctx& c) {
  if (act == Act::None) return dy;
  Mat dz = new_rows(dy, dy.cols);
  const Mat saved = act == Act::Relu ? out : linear_rows(in, w, b, Act::None, c);
  act_backward(dy.ptr(), saved.ptr(), dz.mut(), dy.rows * dy.cols, act, dy.t.scalar_type(), c.stream);
  return dz;
}

// Gradients of one layer given dz [M,N]: dw = dz^T in, db = sum(dz); din = dz @ w.
struct LayerGrads { Mat din; Tensor dw, db; };
LayerGrads layer_backward(const Mat& dz, const Mat& in, const Mat& w, bool has_bias, const Ctx& c) {
  const int64_t m = in.rows, k = in.cols, n = w.rows;
  const ScalarType dt = in.t.scalar_type();
  LayerGrads g{new_rows(in, k), Tensor(), Tensor()};
  if (m == 0) {
    g.dw = torch::stable::new_zeros(w.t, Sizes{n, k});
    g.db = torch::stable::new_zeros(w.t, Sizes{has_bias ? n : 0});
    return g;
  }
  g.dw = torch::stable::new_empty(w.t, Sizes{n, k});
  run_gemm(dz.ptr(), true, in.ptr(), false, g.dw.mutable_data_ptr(), nullptr, n, k, m, Epilogue::None, 0.f, dt, c);
  g.db = torch::stable::new_empty(w.t, Sizes{has_bias ? n : 0});
  if (has_bias) column_sum(dz.ptr(), g.db.mutable_data_ptr(), m, n, dt, c.stream);
  run_gemm(dz.ptr(), false, w.ptr(), false, g.din.mut(), nullptr, m, k, n, Epilogue::None, 0.f, dt, c);
  return g;
}

Tensor linear(Tensor x, Tensor w, std::optional<Tensor> b, std::string activation) {
  const Act act = parse_activation(activation);
  const Mat x2 = as_rows(x, "linear", "x");
  torch::stable::accelerator::DeviceGuard guard(x.get_device_index());
  const Mat w2 = weight_2d(w, x, x2.cols, "linear", "weight");
  Tensor b2 = b.has_value() ? bias_1d(*b, x, w2.rows, "linear", "bias") : Tensor();
  const Ctx c{workspace(x), current_stream(x)};
  return linear_rows(x2, w2, b.has_value() ? &b2 : nullptr, act, c).t;
}

std::vector<Tensor> linear_backward(Tensor grad, Tensor x, Tensor w, std::optional<Tensor> b, Tensor y,
                                    std::string activation) {
  const Act act = parse_activation(activation);
  const Mat x2 = as_rows(x, "linear backward", "x");
  torch::stable::accelerator::DeviceGuard guard(x.get_device_index());
  const Mat w2 = weight_2d(w, x, x2.cols, "linear backward", "weight");
  Tensor b2 = b.has_value() ? bias_1d(*b, x, w2.rows, "linear backward", "bias") : Tensor();
  const Mat dy = as_rows(grad, "linear backward", "grad"), y2 = as_rows(y, "linear backward", "y");
  const Ctx c{workspace(x), current_stream(x)};
  const Mat dz = preact_grad(dy, x2, w2, b.has_value() ? &b2 : nullptr, y2, act, c);
  LayerGrads g = layer_backward(dz, x2, w2, b.has_value(), c);
  return {g.din.t, g.dw, g.db};
}

// All layers in one host call; returns every layer's output (the last is the MLP's output). The
// intermediates reach HBM anyway as the next layer's input, so returning them costs nothing and
// backward needs them.
std::vector<Tensor> mlp(Tensor x, std::vector<Tensor> ws, std::vector<Tensor> bs, std::string activation) {
  const Act act = parse_activation(activation);
  STD_TORCH_CHECK(!ws.empty(), "fused_mlp.mlp: `weights` is empty; pass at least one weight");
  STD_TORCH_CHECK(bs.empty() || bs.size() == ws.size(), "fused_mlp.mlp: got ", bs.size(), " biases for ",
                  ws.size(), " weights; pass one bias per weight or none");
  Mat h = as_rows(x, "mlp", "x");
  torch::stable::accelerator::DeviceGuard guard(x.get_device_index());
  const Ctx c{workspace(x), current_stream(x)};
  std::vector<Tensor> outs;
  for (size_t l = 0; l < ws.size(); ++l) {
    const Mat w2 = weight_2d(ws[l], x, h.cols, "mlp", "weights[i]");
    Tensor b2 = bs.empty() ? Tensor() : bias_1d(bs[l], x, w2.rows, "mlp", "biases[i]");
    h = linear_rows(h, w2, bs.empty() ? nullptr : &b2, l + 1 == ws.size() ? Act::None : act, c);
    outs.push_back(h.t);
  }
  return outs;
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
  torch::stable::accelerator::DeviceGuard guard(x.get_device_index());
  const Ctx c{workspace(x), current_stream(x)};
  std::vector<Mat> ins, w2, out2;
  std::vector<Tensor> b2;
  for (size_t l = 0; l < layers; ++l) {
    out2.push_back(as_rows(outs[l], "mlp backward", "outputs[i]"));
    ins.push_back(l == 0 ? x2 : out2[l - 1]);
    w2.push_back(weight_2d(ws[l], x, ins[l].cols, "mlp backward", "weights[i]"));
    b2.push_back(bs.empty() ? Tensor() : bias_1d(bs[l], x, w2[l].rows, "mlp backward", "biases[i]"));
  }
  std::vector<Tensor> result(1 + 2 * layers);
  Mat g = as_rows(grads[layers - 1], "mlp backward", "grads[-1]");
  for (size_t i = layers; i-- > 0;) {
    const Act a = i + 1 == layers ? Act::None : act;
    if (i + 1 < layers && grads[i].numel() > 0) {  // g is this call's own buffer here (a previous din)
      const Mat extra = as_rows(grads[i], "mlp backward", "grads[i]");
      add_inplace(g.mut(), extra.ptr(), g.rows * g.cols, g.t.scalar_type(), c.stream);
    }
    const Mat dz = preact_grad(g, ins[i], w2[i], bs.empty() ? nullptr : &b2[i], out2[i], a, c);
    LayerGrads lg = layer_backward(dz, ins[i], w2[i], !bs.empty(), c);
    result[1 + i] = lg.dw;
    result[1 + layers + i] = lg.db;
    g = lg.din;
  }
  result[0] = g.t;
  return result;
}

// Returns [y, h] with h = act(x w_gate^T) * (x w_up^T) (saved for backward; it is the down
// projection's input, so it reaches HBM in any case). The [M, 2I] gate/up product never does.
std::vector<Tensor> gated_mlp(Tensor x, Tensor w_gate, Tensor w_up, Tensor w_down, std::string activation) {
  const Act act = parse_activation(activation);
  const Mat x2 = as_rows(x, "gated_mlp", "x");
  torch::stable::accelerator::DeviceGuard guard(x.get_device_index());
  const Mat wg = weight_2d(w_gate, x, x2.cols, "gated_mlp", "w_gate");
  const Mat wu = weight_2d(w_up, x, x2.cols, "gated_mlp", "w_up");
  STD_TORCH_CHECK(wg.rows == wu.rows, "fused_mlp.gated_mlp: w_gate has ", wg.rows, " rows but w_up has ", wu.rows,
                  "; they must match");
  const Mat wd = weight_2d(w_down, x, wg.rows, "gated_mlp", "w_down");
  STD_TORCH_CHECK(x2.cols > 0 && wg.rows > 0, "fused_mlp.gated_mlp: zero-sized hidden (", x2.cols,
                  ") or intermediate (", wg.rows, ") dim");
  const cudaStream_t stream = current_stream(x);
  Mat h = new_rows(x2, wg.rows);
  gate_up(x2.ptr(), wg.ptr(), wu.ptr(), h.mut(), x2.rows, wg.rows, x2.cols, act, x2.t.scalar_type(), stream);
  Mat y = new_rows(x2, wd.rows);
  if (x2.rows > 0 && wd.rows > 0) {
    const Ctx c{workspace(x), stream};
    run_gemm(h.ptr(), false, wd.ptr(), true, y.mut(), nullptr, x2.rows, wd.rows, wg.rows, Epilogue::None, 0.f,
             x2.t.scalar_type(), c);
  }
  return {y.t, h.t};
}

// grad_h: gradient of the returned h, an empty tensor when none flows there (the public API hides h).
// Returns [dx, dw_gate, dw_up, dw_down].
std::vector<Tensor> gated_mlp_backward(Tensor grad, Tensor grad_h, Tensor x, Tensor w_gate, Tensor w_up,
                                       Tensor w_down, Tensor h, std::string activation) {
  const Act act = parse_activation(activation);
  const Mat x2 = as_rows(x, "gated_mlp backward", "x");
  torch::stable::accelerator::DeviceGuard guard(x.get_device_index());
  const Mat wg = weight_2d(w_gate, x, x2.cols, "gated_mlp backward", "w_gate");
  const Mat wu = weight_2d(w_up, x, x2.cols, "gated_mlp backward", "w_up");
  const Mat wd = weight_2d(w_down, x, wg.rows, "gated_mlp backward", "w_down");
  const Mat dy = as_rows(grad, "gated_mlp backward", "grad"), h2 = as_rows(h, "gated_mlp backward", "h");
  const int64_t m = x2.rows, hdim = x2.cols, inter = wg.rows, out_dim = wd.rows;
  const ScalarType dt = x2.t.scalar_type();
  if (m == 0) {
    return {torch::stable::new_empty(x, out_shape(x, hdim)), torch::stable::new_zeros(wg.t, Sizes{inter, hdim}),
            torch::stable::new_zeros(wu.t, Sizes{inter, hdim}), torch::stable::new_zeros(wd.t, Sizes{out_dim, inter})};
  }
  const Ctx c{workspace(x), current_stream(x)};
  const Mat g = linear_rows(x2, wg, nullptr, Act::None, c), u = linear_rows(x2, wu, nullptr, Act::None, c);
  const bool has_grad_h = grad_h.numel() > 0;
  const Mat dh = has_grad_h ? Mat{torch::stable::clone(as_rows(grad_h, "gated_mlp backward", "grad_h").t), m, inter}
                            : new_rows(x2, inter);
  run_gemm(dy.ptr(), false, wd.ptr(), false, dh.mut(), nullptr, m, inter, out_dim, Epilogue::None,
           has_grad_h ? 1.f : 0.f, dt, c);
  const Mat dg = new_rows(x2, inter), du = new_rows(x2, inter);
  act_and_mul_backward(dh.ptr(), g.ptr(), u.ptr(), dg.mut(), du.mut(), m * inter, act, dt, c.stream);
  const Mat dx = new_rows(x2, hdim);
  run_gemm(dg.ptr(), false, wg.ptr(), false, dx.mut(), nullptr, m, hdim, inter, Epilogue::None, 0.f, dt, c);
  run_gemm(du.ptr(), false, wu.ptr(), false, dx.mut(), nullptr, m, hdim, inter, Epilogue::None, 1.f, dt, c);
  Tensor dwg = torch::stable::new_empty(wg.t, Sizes{inter, hdim}), dwu = torch::stable::new_empty(wu.t, Sizes{inter, hdim});
  Tensor dwd = torch::stable::new_empty(wd.t, Sizes{out_dim, inter});
  run_gemm(dg.ptr(), true, x2.ptr(), false, dwg.mutable_data_ptr(), nullptr, inter, hdim, m, Epilogue::None, 0.f, dt, c);
  run_gemm(du.ptr(), true, x2.ptr(), false, dwu.mutable_data_ptr(), nullptr, inter, hdim, m, Epilogue::None, 0.f, dt, c);
  run_gemm(dy.ptr(), true, h2.ptr(), false, dwd.mutable_data_ptr(), nullptr, out_dim, inter, m, Epilogue::None, 0.f,
           dt, c);
  return {dx.t, dwg, dwu, dwd};
}

Tensor act_and_mul_op(Tensor gate, Tensor up, std::string activation) {
  const Act act = parse_activation(activation);
  check_cuda_tensor(gate, "act_and_mul", "gate");
  check_cuda_tensor(up, "act_and_mul", "up");
  check_same_dtype(gate, up, "act_and_mul", "up");
  STD_TORCH_CHECK(gate.sizes().equals(up.sizes()), "fused_mlp.act_and_mul: gate and up shapes differ; pass equal shapes");
  torch::stable::accelerator::DeviceGuard guard(gate.get_device_index());
  const Tensor g = as_contiguous(gate), u = as_contiguous(up);
  Tensor out = torch::stable::new_empty(g, Sizes(g.sizes().begin(), g.sizes().end()));
  act_and_mul(g.const_data_ptr(), u.const_data_ptr(), out.mutable_data_ptr(), g.numel(), act, g.scalar_type(),
              current_stream(g));
  return out;
}

std::vector<Tensor> act_and_mul_backward_op(Tensor grad, Tensor gate, Tensor up, std::string activation) {
  const Act act = parse_activation(activation);
  check_cuda_tensor(grad, "act_and_mul backward", "grad");
  torch::stable::accelerator::DeviceGuard guard(gate.get_device_index());
  const Tensor d = as_contiguous(grad), g = as_contiguous(gate), u = as_contiguous(up);
  const Sizes s(g.sizes().begin(), g.sizes().end());
  Tensor dg = torch::stable::new_empty(g, s), du = torch::stable::new_empty(g, s);
  act_and_mul_backward(d.const_data_ptr(), g.const_data_ptr(), u.const_data_ptr(), dg.mutable_data_ptr(),
                       du.mutable_data_ptr(), g.numel(), act, g.scalar_type(), current_stream(g));
  return {dg, du};
}

}  // namespace
}  // namespace fused_mlp

// Indirection so FUSED_MLP_NS expands before the library macros paste it into identifiers. A
// FRAGMENT, because the Triton backend's Python custom ops share the namespace.
#define FMLP_LIBRARY(ns, m) STABLE_TORCH_LIBRARY_FRAGMENT(ns, m)
#define FMLP_LIBRARY_IMPL(ns, k, m) STABLE_TORCH_LIBRARY_IMPL(ns, k, m)

FMLP_LIBRARY(FUSED_MLP_NS, m) {
  m.def("cuda_linear(Tensor x, Tensor weight, Tensor? bias, str activation) -> Tensor");
  m.def("cuda_linear_backward(Tensor grad, Tensor x, Tensor weight, Tensor? bias, Tensor y, str activation) -> Tensor[]");
  m.def("cuda_mlp(Tensor x, Tensor[] weights, Tensor[] biases, str activation) -> Tensor[]");
  m.def("cuda_mlp_backward(Tensor[] grads, Tensor x, Tensor[] weights, Tensor[] biases, Tensor[] outputs, str activation) -> Tensor[]");
  m.def("cuda_gated_mlp(Tensor x, Tensor w_gate, Tensor w_up, Tensor w_down, str activation) -> Tensor[]");
  m.def("cuda_gated_mlp_backward(Tensor grad, Tensor grad_h, Tensor x, Tensor w_gate, Tensor w_up, Tensor w_down, Tensor h, str activation) -> Tensor[]");
  m.def("cuda_act_and_mul(Tensor gate, Tensor up, str activation) -> Tensor");
  m.def("cuda_act_and_mul_backward(Tensor grad, Tensor gate, Tensor up, str activation) -> Tensor[]");
}

FMLP_LIBRARY_IMPL(FUSED_MLP_NS, CUDA, m) {
  m.impl("cuda_linear", TORCH_BOX(&fused_mlp::linear));
  m.impl("cuda_linear_backward", TORCH_BOX(&fused_mlp::linear_backward));
  m.impl("cuda_mlp", TORCH_BOX(&fused_mlp::mlp));
  m.impl("cuda_mlp_backward", TORCH_BOX(&fused_mlp::mlp_backward));
  m.impl("cuda_gated_mlp", TORCH_BOX(&fused_mlp::gated_mlp));
  m.impl("cuda_gated_mlp_backward", TORCH_BOX(&fused_mlp::gated_mlp_backward));
  m.impl("cuda_act_and_mul", TORCH_BOX(&fused_mlp::act_and_mul_op));
  m.impl("cuda_act_and_mul_backward", TORCH_BOX(&fused_mlp::act_and_mul_backward_op));
}
