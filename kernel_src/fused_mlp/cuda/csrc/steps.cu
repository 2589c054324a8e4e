// Planning and running the steps of steps.h: the path table proposes an implementation, the call's
// dtype/alignment/sizes decide whether it can run, else the step's fallback runs (cuBLASLt, CUDA kernels).
#include "steps.h"

#include <cstdint>
#include <initializer_list>

#include "elementwise.h"

namespace fused_mlp {
namespace {

constexpr long long kI32 = 2147483647ll;  // Triton kernels index with 32-bit offsets

// Triton cubins are compiled for bf16/fp16 only (fp32 goes to the fallbacks): 0 bf16, 1 fp16, -1 neither.
int cubin_dtype(ScalarType t) {
  if (t == ScalarType::BFloat16) return 0;
  if (t == ScalarType::Half) return 1;
  return -1;
}

long long cdiv(long long a, long long b) { return (a + b - 1) / b; }

}  // namespace

Ctx ctx_for(const Tensor& x, Op op) {
  Ctx c;
  c.device = x.get_device_index();
  c.stream = current_stream(x);
  c.sm = device_sm(c.device);
  c.sms = device_sms(c.device);
  c.op = op;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(c.stream, &status) != cudaSuccess) {
    cudaGetLastError();  // e.g. the legacy stream while another stream captures: the launch reports it
    status = cudaStreamCaptureStatusNone;
  }
  c.captured = status == cudaStreamCaptureStatusActive;
  return c;
}

namespace {

// What the Hopper (TMA) kernels need beyond the dtype: 16-byte aligned bases and row strides (2-byte
// elements: every leading dim a multiple of 8), sizes that fit their 32-bit parameters.
bool tma_fits(std::initializer_list<int> aligns, std::initializer_list<long long> lds, long long m) {
  for (const int a : aligns)
    if (a < 16) return false;
  for (const long long ld : lds)
    if (ld % 8 != 0 || ld > kI32) return false;
  return m <= kI32;
}

// What the portable and decode cubins assume (`i32:16` sizes, 16-byte pointers) and 32-bit offsets.
bool portable_fits(int dt, long long m, long long n, long long k, std::initializer_list<int> aligns) {
  for (const int a : aligns)
    if (a < 16) return false;
  return dt >= 0 && n % 16 == 0 && k % 16 == 0 && m * k <= kI32 && n * k <= kI32 && m * n <= kI32;
}

// The step's fallback (paths.FALLBACK) when a forced gemv cannot take a call.
Impl fallback_impl(Step step) { return static_cast<Impl>(kFallbackImpl[static_cast<int>(step)]); }

}  // namespace

LinearPlan plan_linear(const Ctx& c, long long m, long long n, long long k, Act act, bool has_bias, ScalarType dtype,
                       int align_x, int align_w, int align_b, Scratch& s, int align_y, bool w_kmajor) {
  LinearPlan p;
  p.m = m, p.n = n, p.k = k, p.act = act, p.has_bias = has_bias, p.dtype = dtype;
  const long long weight_bytes = n * k * static_cast<long long>(element_bytes(dtype));
  p.impl = choose_impl(Step::Linear, c.op, c.sm, m, weight_bytes, c.captured);
  if (m == 0 || n == 0) return p;
  const int dt = cubin_dtype(dtype);
  if (!w_kmajor && decode_wanted(Step::Linear, c.sm, weight_bytes) &&
      portable_fits(dt, m, n, k, {align_x, align_w, has_bias ? align_b : 16, align_y})) {
    p.cubin = find_cubin({Step::Linear, Impl::Gemv, c.sm, dt, static_cast<int>(act), has_bias, false, m, n, c.sms});
    if (p.cubin != nullptr && k % p.cubin->block_k == 0) {
      p.impl = Impl::Gemv;
      p.programs = cubin_programs(*p.cubin, m, n, c.sms);
      return p;
    }
    p.cubin = nullptr;
    if (p.impl == Impl::Gemv) p.impl = fallback_impl(Step::Linear);
  }
  if (!w_kmajor && (p.impl == Impl::Triton || p.impl == Impl::Tma)) {  // their cubins read w row-major
    const bool tma = p.impl == Impl::Tma;
    const int ab = has_bias ? align_b : 16;
    const bool fits = tma ? dt >= 0 && tma_fits({align_x, align_w, ab, align_y}, {k, n}, m)
                          : portable_fits(dt, m, n, k, {align_x, align_w, ab, align_y});
    p.cubin = fits ? find_cubin({Step::Linear, p.impl, c.sm, dt, static_cast<int>(act), has_bias, false, m, n, c.sms})
                   : nullptr;
    if (p.cubin != nullptr && (tma || k % p.cubin->block_k == 0)) {
      p.programs = cubin_programs(*p.cubin, m, n, c.sms);
      p.scratch = s.reserve(triton_scratch_bytes(*p.cubin, p.programs));
      return p;
    }
    p.cubin = nullptr;
  }
  p.impl = Impl::Cublaslt;
  bool fused = false;
  const Epilogue epi = epilogue_for(act, has_bias, &fused);
  p.act_kernel = !fused;
  // b = w: stored [N, K] (trans_b), or as the [K, N] buffer of a K-major weight.
  p.gemm = gemm_plan({m, n, k, false, !w_kmajor, false, epi, dtype, align_x, align_w, align_y, has_bias ? align_b : 16});
  p.scratch = s.reserve(gemm_workspace_bytes(p.gemm));
  return p;
}

void run_linear(const LinearPlan& p, const Ctx& c, const Scratch& s, const void* x, const void* w, const void* b,
                void* y) {
  if (p.m == 0 || p.n == 0) return;
  STD_TORCH_CHECK(p.k > 0, "fused_mlp.linear: the input's last dim is 0; nothing to multiply");
  if (p.cubin != nullptr) {
    const TritonCubin& t = *p.cubin;
    const int32_t m = static_cast<int32_t>(p.m), n = static_cast<int32_t>(p.n), k = static_cast<int32_t>(p.k);
    if (t.impl == static_cast<int>(Impl::Tma)) {  // a, b, b2 (unused: w), c, bias (or y), aux (unused: y); M, N, K;
      const KArg args[] = {x, w, w, y, b ? b : y, y, m, n, k, k, k, k, n, n};  // lda, ldb, ldb2, ldc, ld_aux
      launch_cubin(t, p.programs, args, 14, s.at(p.scratch), c.stream, "linear");
      return;
    }
    const KArg args[] = {x, w, b ? b : x, y, m, n, k, k, k, n};  // x, w, b, out, M, N, K, strides x / w / out
    launch_cubin(t, p.programs, args, 10, s.at(p.scratch), c.stream, "linear");
    return;
  }
  gemm_run(p.gemm, x, w, y, b, s.at(p.scratch), c.stream);
  if (p.act_kernel) act_inplace(y, p.m * p.n, p.act, p.dtype, c.stream);
}

ActAndMulPlan plan_act_and_mul(const Ctx& c, long long rows, long long n, Act act, ScalarType dtype, bool aligned,
                               long long weight_bytes) {
  ActAndMulPlan p;
  p.n = n, p.act = act, p.dtype = dtype;
  p.impl = choose_impl(Step::ActAndMul, c.op, c.sm, rows, weight_bytes, c.captured);
  if (p.impl == Impl::Triton) {
    const int dt = cubin_dtype(dtype);
    if (dt >= 0 && aligned && n % 16 == 0 && n <= kI32)
      p.cubin = find_cubin({Step::ActAndMul, Impl::Triton, c.sm, dt, static_cast<int>(act), false, false, rows, 1, c.sms});
  }
  if (p.cubin == nullptr) p.impl = Impl::Cuda;
  return p;
}

void run_act_and_mul(const ActAndMulPlan& p, const Ctx& c, const void* gate, const void* up, void* out) {
  if (p.n == 0) return;
  if (p.cubin != nullptr) {
    const KArg args[] = {gate, up, out, static_cast<int32_t>(p.n)};
    launch_cubin(*p.cubin, cubin_programs(*p.cubin, 1, p.n, c.sms), args, 4, nullptr, c.stream, "act_and_mul");
    return;
  }
  act_and_mul(gate, up, out, p.n, p.act, p.dtype, c.stream);
}

bool w_planes_fit(const void* wg, const void* wu) {
  const auto a = reinterpret_cast<uintptr_t>(wg), b = reinterpret_cast<uintptr_t>(wu);
  const uintptr_t dist = a > b ? a - b : b - a;
  return dist != 0 && dist < (uintptr_t{1} << 40);
}

GateUpPlan plan_gate_up(const Ctx& c, long long m, long long i, long long k, Act act, ScalarType dtype, int align_x,
                        int align_wg, int align_wu, bool w_planes, bool up_first, Scratch& s, bool store_gu) {
  GateUpPlan p;
  p.m = m, p.i = i, p.k = k, p.act = act, p.dtype = dtype, p.store_gu = store_gu;
  const long long weight_bytes = 2 * i * k * static_cast<long long>(element_bytes(dtype));
  p.impl = choose_impl(Step::GateUp, c.op, c.sm, m, weight_bytes, c.captured);
  if (m == 0 || i == 0) return p;
  const int dt = cubin_dtype(dtype);
  if (!store_gu && decode_wanted(Step::GateUp, c.sm, weight_bytes) &&
      portable_fits(dt, m, i, k, {align_x, align_wg, align_wu})) {
    p.cubin = find_cubin({Step::GateUp, Impl::Gemv, c.sm, dt, static_cast<int>(act), false, false, m, i, c.sms});
    if (p.cubin != nullptr && k % p.cubin->block_k == 0) {
      p.impl = Impl::Gemv;
      p.programs = cubin_programs(*p.cubin, m, i, c.sms);
      return p;
    }
    p.cubin = nullptr;
    if (p.impl == Impl::Gemv) p.impl = fallback_impl(Step::GateUp);
  }
  if (p.impl == Impl::Tma) {
    if (dt >= 0 && w_planes && tma_fits({align_x, align_wg, align_wu}, {k, i}, m))
      p.cubin =
          find_cubin({Step::GateUp, Impl::Tma, c.sm, dt, static_cast<int>(act), false, store_gu, m, i, c.sms, up_first});
    if (p.cubin != nullptr) {
      p.programs = cubin_programs(*p.cubin, m, i, c.sms);
      p.tma_scratch = s.reserve(triton_scratch_bytes(*p.cubin, p.programs));
      return p;
    }
  } else if (p.impl == Impl::Triton && !store_gu) {  // the portable kernel keeps g, u in registers only
    const bool fits = portable_fits(dt, m, i, k, {align_x, align_wg, align_wu});
    p.cubin = fits ? find_cubin({Step::GateUp, Impl::Triton, c.sm, dt, static_cast<int>(act), false, false, m, i, c.sms})
                   : nullptr;
    if (p.cubin != nullptr && k % p.cubin->block_k == 0) {
      p.programs = cubin_programs(*p.cubin, m, i, c.sms);
      return p;
    }
  }
  p.cubin = nullptr;
  p.impl = Impl::Split;
  const size_t bytes = static_cast<size_t>(m * i) * element_bytes(dtype);
  // g, u: the gu planes (plane 1 is M*I elements after a fresh, kFreshAlign-aligned plane 0) or two scratch regions
  const int align_u = store_gu ? alignment_of(reinterpret_cast<const void*>(bytes)) : kFreshAlign;
  if (!store_gu) {
    p.g_off = s.reserve(bytes);
    p.u_off = s.reserve(bytes);
  }
  p.gate = plan_linear(c, m, i, k, Act::None, false, dtype, align_x, align_wg, 16, s);
  p.up = plan_linear(c, m, i, k, Act::None, false, dtype, align_x, align_wu, 16, s, align_u);
  p.mul = plan_act_and_mul(c, m, m * i, act, dtype, align_u >= 16, weight_bytes);
  return p;
}

void run_gate_up(const GateUpPlan& p, const Ctx& c, const Scratch& s, const void* x, const void* wg, const void* wu,
                 void* h, void* gu) {
  if (p.m == 0 || p.i == 0) return;
  STD_TORCH_CHECK(!p.store_gu || gu != nullptr, "fused_mlp.gated_mlp: the training forward needs a (g, u) buffer");
  if (p.cubin != nullptr) {
    const TritonCubin& t = *p.cubin;
    const int32_t m = static_cast<int32_t>(p.m), i = static_cast<int32_t>(p.i), k = static_cast<int32_t>(p.k);
    if (t.impl == static_cast<int>(Impl::Tma)) {  // x, wg, wu, h, gu (or h); M, N, K; ldx, ldwg, ldwu, ldh, ld_gu
      const KArg args[] = {x, wg, wu, h, p.store_gu ? gu : h, m, i, k, k, k, k, i, i};
      launch_cubin(t, p.programs, args, 13, s.at(p.tma_scratch), c.stream, "gated_mlp");
      return;
    }
    const KArg args[] = {x, wg, wu, h, m, i, k, k, k, k, i};  // x, wg, wu, h, M, N, K, strides x / wg / wu / h
    launch_cubin(t, p.programs, args, 11, nullptr, c.stream, "gated_mlp");
    return;
  }
  const size_t plane = static_cast<size_t>(p.m * p.i) * element_bytes(p.dtype);
  void* g = p.store_gu ? gu : s.at(p.g_off);
  void* u = p.store_gu ? static_cast<char*>(gu) + plane : s.at(p.u_off);
  run_linear(p.gate, c, s, x, wg, nullptr, g);
  run_linear(p.up, c, s, x, wu, nullptr, u);
  run_act_and_mul(p.mul, c, g, u, h);
}

}  // namespace fused_mlp
