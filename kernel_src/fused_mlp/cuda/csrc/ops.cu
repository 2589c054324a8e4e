// The torch ops of the CUDA backend, registered through the torch stable ABI (C shim only), so one
// build serves every torch >= 2.11. The op namespace is baked in at compile time (FUSED_MLP_NS, from
// fused_mlp/_build_info.py) so two loaded builds never clash in torch.ops.
// Schemas take 2-D-or-more inputs; leading dims are flattened here, not in Python, to keep one host
// call per public op. Backward ops recompute pre-activations instead of storing them in forward.
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

Tensor empty_like_shape(const Tensor& like, const Sizes& sizes) { return torch::stable::new_empty(like, sizes); }

// x[..., K] -> contiguous [M, K].
Tensor flatten_rows(const Tensor& x, const char* op, const char* name) {
  check_cuda_tensor(x, op, name);
  STD_TORCH_CHECK(x.dim() >= 1, "fused_mlp.", op, ": `", name, "` must have at least 1 dim, got a scalar");
  const int64_t k = x.size(x.dim() - 1);
  const int64_t m = k == 0 ? 0 : x.numel() / k;
  return torch::stable::reshape(torch::stable::contiguous(x), Sizes{m, k});
}

// Leading dims of x with `last` as the new last dim.
Sizes out_shape(const Tensor& x, int64_t last) {
  Sizes s(x.sizes().begin(), x.sizes().end());
  if (s.empty()) s.push_back(last); else s.back() = last;
  return s;
}

Tensor weight_2d(const Tensor& w, const Tensor& x, int64_t k, const char* op, const char* name) {
  check_cuda_tensor(w, op, name);
  check_same_dtype(x, w, op, name);
  STD_TORCH_CHECK(w.dim() == 2 && w.size(1) == k, "fused_mlp.", op, ": `", name, "` must be [out, ", k,
                  "] to match the input's last dim ", k, ", got ", w.dim(), " dims with last size ",
                  w.dim() ? w.size(w.dim() - 1) : 0);
  return torch::stable::contiguous(w);
}

Tensor bias_1d(const Tensor& b, const Tensor& x, int64_t n, const char* op, const char* name) {
  check_cuda_tensor(b, op, name);
  check_same_dtype(x, b, op, name);
  STD_TORCH_CHECK(b.dim() == 1 && b.size(0) == n, "fused_mlp.", op, ": `", name, "` must be [", n,
                  "], got ", b.dim(), " dims");
  return torch::stable::contiguous(b);
}

Tensor workspace(const Tensor& like) {
  return torch::stable::new_empty(like, Sizes{static_cast<int64_t>(kGemmWorkspaceBytes)}, ScalarType::Byte);
}

// out = a @ b (or with transposes, see GemmArgs); out is allocated unless given.
void run_gemm(const Tensor& a, bool ta, const Tensor& b, bool tb, Tensor& out, const Tensor* bias, int64_t m,
              int64_t n, int64_t k, Epilogue epi, float beta, const Tensor& ws, cudaStream_t stream) {
  GemmArgs g{a.const_data_ptr(), ta, b.const_data_ptr(), tb, out.mutable_data_ptr(),
             bias ? bias->const_data_ptr() : nullptr, m, n, k, beta, epi, a.scalar_type(),
             ws.mutable_data_ptr(), kGemmWorkspaceBytes, stream};
  gemm(g);
}

// y[M,N] = act(x2 @ w^T + b) on 2-D contiguous operands.
Tensor linear_2d(const Tensor& x2, const Tensor& w, const Tensor* b, Act act, const Tensor& ws, cudaStream_t stream) {
  const int64_t m = x2.size(0), k = x2.size(1), n = w.size(0);
  Tensor y = empty_like_shape(x2, Sizes{m, n});
  if (m == 0 || n == 0) return y;
  STD_TORCH_CHECK(k > 0, "fused_mlp.linear: the input's last dim is 0; nothing to multiply");
  bool fused = false;
  const Epilogue epi = epilogue_for(act, b != nullptr, &fused);
  run_gemm(x2, false, w, true, y, b, m, n, k, epi, 0.f, ws, stream);
  if (!fused) act_inplace(y.mutable_data_ptr(), m * n, act, y.scalar_type(), stream);
  return y;
}

// dz = dy * act'(z) for one layer; `out2` is act(z) (relu needs only that), z is recomputed otherwise.
Tensor preact_grad(const Tensor& dy2, const Tensor& in2, const Tensor& w, const Tensor* b, const Tensor& out2,
                   Act act, const Tensor& ws, cudaStream_t stream) {
  if (act == Act::None) return dy2;
  Tensor dz = empty_like_shape(dy2, Sizes{dy2.size(0), dy2.size(1)});
  if (act == Act::Relu) {
    act_backward(dy2.const_data_ptr(), out2.const_data_ptr(), dz.mutable_data_ptr(), dy2.numel(), act,
                 dy2.scalar_type(), stream);
    return dz;
  }
  Tensor z = linear_2d(in2, w, b, Act::None, ws, stream);
  act_backward(dy2.const_data_ptr(), z.const_data_ptr(), dz.mutable_data_ptr(), dy2.numel(), act,
               dy2.scalar_type(), stream);
  return dz;
}

// Gradients of one layer given dz [M,N]: dw = dz^T in2, db = sum(dz), returns d(in2) = dz @ w.
struct LayerGrads { Tensor din, dw, db; };
LayerGrads layer_backward(const Tensor& dz, const Tensor& in2, const Tensor& w, bool has_bias, bool need_din,
                          const Tensor& ws, cudaStream_t stream) {
  const int64_t m = in2.size(0), k = in2.size(1), n = w.size(0);
  LayerGrads g;
  if (m == 0) {
    g.dw = torch::stable::new_zeros(w, Sizes{n, k});
    g.db = torch::stable::new_zeros(w, Sizes{has_bias ? n : 0});
    g.din = empty_like_shape(in2, Sizes{0, k});
    return g;
  }
  g.dw = empty_like_shape(w, Sizes{n, k});
  run_gemm(dz, true, in2, false, g.dw, nullptr, n, k, m, Epilogue::None, 0.f, ws, stream);
  g.db = empty_like_shape(w, Sizes{has_bias ? n : 0});
  if (has_bias) column_sum(dz.const_data_ptr(), g.db.mutable_data_ptr(), m, n, dz.scalar_type(), stream);
  if (need_din) {
    g.din = empty_like_shape(in2, Sizes{m, k});
    run_gemm(dz, false, w, false, g.din, nullptr, m, k, n, Epilogue::None, 0.f, ws, stream);
  }
  return g;
}

Tensor linear(Tensor x, Tensor w, std::optional<Tensor> b, std::string activation) {
  const Act act = parse_activation(activation);
  Tensor x2 = flatten_rows(x, "linear", "x");
  torch::stable::accelerator::DeviceGuard guard(x.get_device_index());
  Tensor w2 = weight_2d(w, x, x2.size(1), "linear", "weight");
  Tensor b2;
  if (b.has_value()) b2 = bias_1d(*b, x, w2.size(0), "linear", "bias");
  const cudaStream_t stream = current_stream(x);
  Tensor y = linear_2d(x2, w2, b.has_value() ? &b2 : nullptr, act, workspace(x2), stream);
  return torch::stable::reshape(y, out_shape(x, w2.size(0)));
}

std::vector<Tensor> linear_backward(Tensor grad, Tensor x, Tensor w, std::optional<Tensor> b, Tensor y,
                                    std::string activation) {
  const Act act = parse_activation(activation);
  Tensor x2 = flatten_rows(x, "linear backward", "x");
  torch::stable::accelerator::DeviceGuard guard(x.get_device_index());
  Tensor w2 = weight_2d(w, x, x2.size(1), "linear backward", "weight");
  Tensor b2;
  if (b.has_value()) b2 = bias_1d(*b, x, w2.size(0), "linear backward", "bias");
  Tensor dy2 = flatten_rows(grad, "linear backward", "grad");
  Tensor y2 = flatten_rows(y, "linear backward", "y");
  const cudaStream_t stream = current_stream(x);
  Tensor ws = workspace(x2);
  Tensor dz = preact_grad(dy2, x2, w2, b.has_value() ? &b2 : nullptr, y2, act, ws, stream);
  LayerGrads g = layer_backward(dz, x2, w2, b.has_value(), true, ws, stream);
  return {torch::stable::reshape(g.din, out_shape(x, x2.size(1))), g.dw, g.db};
}

// All layers in one host call; returns every layer's output (the last is the MLP's output). The
// intermediates reach HBM anyway as the next layer's input, so returning them costs nothing and
// backward needs them.
std::vector<Tensor> mlp(Tensor x, std::vector<Tensor> ws, std::vector<Tensor> bs, std::string activation) {
  const Act act = parse_activation(activation);
  STD_TORCH_CHECK(!ws.empty(), "fused_mlp.mlp: `weights` is empty; pass at least one weight");
  STD_TORCH_CHECK(bs.empty() || bs.size() == ws.size(), "fused_mlp.mlp: got ", bs.size(), " biases for ",
                  ws.size(), " weights; pass one bias per weight or none");
  Tensor h = flatten_rows(x, "mlp", "x");
  torch::stable::accelerator::DeviceGuard guard(x.get_device_index());
  const cudaStream_t stream = current_stream(x);
  Tensor work = workspace(h);
  std::vector<Tensor> outs;
  for (size_t l = 0; l < ws.size(); ++l) {
    Tensor w2 = weight_2d(ws[l], x, h.size(1), "mlp", "weights[i]");
    Tensor b2;
    if (!bs.empty()) b2 = bias_1d(bs[l], x, w2.size(0), "mlp", "biases[i]");
    h = linear_2d(h, w2, bs.empty() ? nullptr : &b2, l + 1 == ws.size() ? Act::None : act, work, stream);
    outs.push_back(torch::stable::reshape(h, out_shape(x, w2.size(0))));
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
  Tensor x2 = flatten_rows(x, "mlp backward", "x");
  torch::stable::accelerator::DeviceGuard guard(x.get_device_index());
  const cudaStream_t stream = current_stream(x);
  Tensor work = workspace(x2);
  std::vector<Tensor> ins(layers), w2(layers), b2(layers);
  for (size_t l = 0; l < layers; ++l) {
    ins[l] = l == 0 ? x2 : flatten_rows(outs[l - 1], "mlp backward", "outputs[i]");
    w2[l] = weight_2d(ws[l], x, ins[l].size(1), "mlp backward", "weights[i]");
    if (!bs.empty()) b2[l] = bias_1d(bs[l], x, w2[l].size(0), "mlp backward", "biases[i]");
  }
  std::vector<Tensor> result(1 + 2 * layers);
  Tensor g = flatten_rows(grads[layers - 1], "mlp backward", "grads[-1]");
  for (size_t i = layers; i-- > 0;) {
    const Act a = i + 1 == layers ? Act::None : act;
    Tensor out2 = flatten_rows(outs[i], "mlp backward", "outputs[i]");
    if (i + 1 < layers && grads[i].numel() > 0) {
      Tensor extra = flatten_rows(grads[i], "mlp backward", "grads[i]");
      add_inplace(g.mutable_data_ptr(), extra.const_data_ptr(), g.numel(), g.scalar_type(), stream);
    }
    Tensor dz = preact_grad(g, ins[i], w2[i], bs.empty() ? nullptr : &b2[i], out2, a, work, stream);
    LayerGrads lg = layer_backward(dz, ins[i], w2[i], !bs.empty(), true, work, stream);
    result[1 + i] = lg.dw;
    result[1 + layers + i] = lg.db;
    g = lg.din;
  }
  result[0] = torch::stable::reshape(g, out_shape(x, x2.size(1)));
  return result;
}

// Returns [y, h] with h = act(x w_gate^T) * (x w_up^T) (saved for backward; it is the down
// projection's input, so it reaches HBM in any case). The [M, 2I] gate/up product never does.
std::vector<Tensor> gated_mlp(Tensor x, Tensor w_gate, Tensor w_up, Tensor w_down, std::string activation) {
  const Act act = parse_activation(activation);
  Tensor x2 = flatten_rows(x, "gated_mlp", "x");
  torch::stable::accelerator::DeviceGuard guard(x.get_device_index());
  const int64_t m = x2.size(0), hdim = x2.size(1);
  Tensor wg = weight_2d(w_gate, x, hdim, "gated_mlp", "w_gate");
  Tensor wu = weight_2d(w_up, x, hdim, "gated_mlp", "w_up");
  STD_TORCH_CHECK(wg.size(0) == wu.size(0), "fused_mlp.gated_mlp: w_gate has ", wg.size(0), " rows but w_up has ",
                  wu.size(0), "; they must match");
  const int64_t inter = wg.size(0);
  Tensor wd = weight_2d(w_down, x, inter, "gated_mlp", "w_down");
  const int64_t out_dim = wd.size(0);
  STD_TORCH_CHECK(hdim > 0 && inter > 0, "fused_mlp.gated_mlp: zero-sized hidden (", hdim, ") or intermediate (",
                  inter, ") dim");
  const cudaStream_t stream = current_stream(x);
  Tensor h = empty_like_shape(x2, Sizes{m, inter});
  gate_up(x2.const_data_ptr(), wg.const_data_ptr(), wu.const_data_ptr(), h.mutable_data_ptr(), m, inter, hdim, act,
          x2.scalar_type(), stream);
  Tensor y = empty_like_shape(x2, Sizes{m, out_dim});
  if (m > 0 && out_dim > 0) run_gemm(h, false, wd, true, y, nullptr, m, out_dim, inter, Epilogue::None, 0.f, workspace(x2), stream);
  return {torch::stable::reshape(y, out_shape(x, out_dim)), torch::stable::reshape(h, out_shape(x, inter))};
}

// Returns [dx, dw_gate, dw_up, dw_down].
// grad_h: gradient of the returned h, an empty tensor when none flows there (the public API hides h).
std::vector<Tensor> gated_mlp_backward(Tensor grad, Tensor grad_h, Tensor x, Tensor w_gate, Tensor w_up,
                                       Tensor w_down, Tensor h, std::string activation) {
  const Act act = parse_activation(activation);
  Tensor x2 = flatten_rows(x, "gated_mlp backward", "x");
  torch::stable::accelerator::DeviceGuard guard(x.get_device_index());
  const int64_t hdim = x2.size(1);
  Tensor wg = weight_2d(w_gate, x, hdim, "gated_mlp backward", "w_gate");
  Tensor wu = weight_2d(w_up, x, hdim, "gated_mlp backward", "w_up");
  Tensor wd = weight_2d(w_down, x, wg.size(0), "gated_mlp backward", "w_down");
  Tensor dy2 = flatten_rows(grad, "gated_mlp backward", "grad");
  Tensor h2 = flatten_rows(h, "gated_mlp backward", "h");
  const cudaStream_t stream = current_stream(x);
  Tensor work = workspace(x2);
  const int64_t m = x2.size(0), inter = wg.size(0), out_dim = wd.size(0);
  if (m == 0) {
    return {empty_like_shape(x, out_shape(x, hdim)), torch::stable::new_zeros(wg, Sizes{inter, hdim}),
            torch::stable::new_zeros(wu, Sizes{inter, hdim}), torch::stable::new_zeros(wd, Sizes{out_dim, inter})};
  }
  Tensor g = linear_2d(x2, wg, nullptr, Act::None, work, stream);
  Tensor u = linear_2d(x2, wu, nullptr, Act::None, work, stream);
  const bool has_grad_h = grad_h.numel() > 0;
  Tensor dh = has_grad_h ? torch::stable::clone(flatten_rows(grad_h, "gated_mlp backward", "grad_h"))
                         : empty_like_shape(x2, Sizes{m, inter});
  run_gemm(dy2, false, wd, false, dh, nullptr, m, inter, out_dim, Epilogue::None, has_grad_h ? 1.f : 0.f, work,
           stream);
  Tensor dg = empty_like_shape(x2, Sizes{m, inter}), du = empty_like_shape(x2, Sizes{m, inter});
  act_and_mul_backward(dh.const_data_ptr(), g.const_data_ptr(), u.const_data_ptr(), dg.mutable_data_ptr(),
                       du.mutable_data_ptr(), m * inter, act, x2.scalar_type(), stream);
  Tensor dx = empty_like_shape(x2, Sizes{m, hdim});
  run_gemm(dg, false, wg, false, dx, nullptr, m, hdim, inter, Epilogue::None, 0.f, work, stream);
  run_gemm(du, false, wu, false, dx, nullptr, m, hdim, inter, Epilogue::None, 1.f, work, stream);
  Tensor dwg = empty_like_shape(wg, Sizes{inter, hdim}), dwu = empty_like_shape(wu, Sizes{inter, hdim});
  Tensor dwd = empty_like_shape(wd, Sizes{out_dim, inter});
  run_gemm(dg, true, x2, false, dwg, nullptr, inter, hdim, m, Epilogue::None, 0.f, work, stream);
  run_gemm(du, true, x2, false, dwu, nullptr, inter, hdim, m, Epilogue::None, 0.f, work, stream);
  run_gemm(dy2, true, h2, false, dwd, nullptr, out_dim, inter, m, Epilogue::None, 0.f, work, stream);
  return {torch::stable::reshape(dx, out_shape(x, hdim)), dwg, dwu, dwd};
}

Tensor act_and_mul_op(Tensor gate, Tensor up, std::string activation) {
  const Act act = parse_activation(activation);
  check_cuda_tensor(gate, "act_and_mul", "gate");
  check_cuda_tensor(up, "act_and_mul", "up");
  check_same_dtype(gate, up, "act_and_mul", "up");
  STD_TORCH_CHECK(gate.sizes().equals(up.sizes()), "fused_mlp.act_and_mul: gate and up shapes differ; pass equal shapes");
  torch::stable::accelerator::DeviceGuard guard(gate.get_device_index());
  Tensor g = torch::stable::contiguous(gate), u = torch::stable::contiguous(up);
  Tensor out = torch::stable::new_empty(g, Sizes(g.sizes().begin(), g.sizes().end()));
  act_and_mul(g.const_data_ptr(), u.const_data_ptr(), out.mutable_data_ptr(), g.numel(), act, g.scalar_type(),
              current_stream(g));
  return out;
}

std::vector<Tensor> act_and_mul_backward_op(Tensor grad, Tensor gate, Tensor up, std::string activation) {
  const Act act = parse_activation(activation);
  check_cuda_tensor(grad, "act_and_mul backward", "grad");
  torch::stable::accelerator::DeviceGuard guard(gate.get_device_index());
  Tensor d = torch::stable::contiguous(grad), g = torch::stable::contiguous(gate), u = torch::stable::contiguous(up);
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
