// Standalone check + timing of the CUTLASS EVT kernels (kernels.cu) for the gated MLP's GEMMs, next to what the
// shipped stable-ABI variant runs today (cuBLAS GEMMs + elementwise passes), outside torch, one JSON line each.
//
//   gated_evt_proto [KERNELS|all] [ROWS,...] [HxI,...]   e.g. gated_evt_proto all 8192,1024 768x3072,4096x11008
//   GEVT_ONCE=1 gated_evt_proto ...                each kernel once per problem, no timing (for Nsight Compute)
//   gated_evt_proto host                          no GPU needed: CUTLASS's can_implement and workspace size for
//                                                 every kernel on every problem (the argument plumbing)
//
// Per problem (M rows x each H x I, default 768x3072, bf16 gelu_tanh, and fp16 at the first shape and row count;
// and one odd shape M=1000 H=760 I=3000 in gelu_tanh and silu, bf16 and fp16, checked, not timed):
// - correctness of each kernel vs fp32 references built from cuBLAS fp32-output GEMMs: plain vs x W_g^T; upact
//   vs act(g) * (x W_u^T); upact_u also u; dgrad's dg and du vs (dy W_d) * u * act'(g) and (dy W_d) * act(g),
//   from the same bf16/fp16 g, u the kernel reads. Outputs start as NaN, so an unwritten element fails.
// - GPU µs per call from CUDA-graph replay (proto_harness.cuh): each kernel; cuBLAS's bf16 GEMMs (gate [M, I],
//   the one [M, 2I] GEMM, dy W_d); the elementwise passes the split path adds (act_and_mul forward and backward,
//   written here like the shipped kernels: 8 elements per thread). The summary lines add them up per step.
#include <cublas_v2.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "gated_evt.cuh"
#include "kernel_list.cuh"
#include "proto_harness.cuh"

using namespace fused_mlp;

using gated_evt::Args;
using gated_evt::Form;

struct Kernel {
  const char* name;
  Form form;
  bool fp16;
  int act;  // the activation compiled in, or -1 (a run-time argument)
  const char* (*run)(const Args&, void*, cudaStream_t, int);
  size_t (*ws)(const Args&, int);
  bool (*can)(const Args&, int);
};

// The driver's table, made from kernel_list.cuh's list (the entry points are in the kernels' objects).
template <size_t... N>
std::vector<Kernel> make_table(std::index_sequence<N...>) {
  using namespace gated_evt;
  return {Kernel{kKernelNames[N], Traits<KernelAt<N>>::kForm, Traits<KernelAt<N>>::kFp16, Traits<KernelAt<N>>::kAct,
                 run_at<N>, workspace_at<N>, can_implement_at<N>}...};
}
const std::vector<Kernel> kKernels = make_table(std::make_index_sequence<gated_evt::kNumKernels>{});

constexpr Act kAct = Act::GeluTanh;

template <class T>
__global__ void to_elem(const float* in, T* out, long long n) {
  for (long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x; t < n; t += (long long)gridDim.x * blockDim.x)
    out[t] = from_f<T>(in[t]);
}

// The fp32 references. form UpAct: r0 = act(g) * U. Dgrad: r0 = DH * u * act'(g), r1 = DH * act(g).
template <class T>
__global__ void ref_upact(const T* g, const float* u32, float* r0, long long n, Act act) {
  for (long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x; t < n; t += (long long)gridDim.x * blockDim.x)
    r0[t] = act_fwd(to_f<T>(g[t]), act) * u32[t];
}
template <class T>
__global__ void ref_dgrad(const float* dh, const T* g, const T* u, float* r0, float* r1, long long n, Act act) {
  for (long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x; t < n; t += (long long)gridDim.x * blockDim.x) {
    const float z = to_f<T>(g[t]);
    r0[t] = dh[t] * to_f<T>(u[t]) * act_grad(z, act);
    r1[t] = dh[t] * act_fwd(z, act);
  }
}

// The split path's elementwise passes, 8 elements per thread (as elementwise.cu): h = act(g) * u; dg, du from dh, g, u.
template <class T>
__global__ void act_mul8(const uint4* g, const uint4* u, uint4* h, long long n8) {
  const long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (t >= n8) return;
  uint4 a = g[t], b = u[t], o;
  const T* pa = reinterpret_cast<const T*>(&a);
  const T* pb = reinterpret_cast<const T*>(&b);
  T* po = reinterpret_cast<T*>(&o);
#pragma unroll
  for (int i = 0; i < 8; ++i) po[i] = from_f<T>(act_fwd(to_f<T>(pa[i]), kAct) * to_f<T>(pb[i]));
  h[t] = o;
}
template <class T>
__global__ void act_mul_bwd8(const uint4* dh, const uint4* g, const uint4* u, uint4* dg, uint4* du, long long n8) {
  const long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (t >= n8) return;
  uint4 d = dh[t], a = g[t], b = u[t], o0, o1;
  const T* pd = reinterpret_cast<const T*>(&d);
  const T* pa = reinterpret_cast<const T*>(&a);
  const T* pb = reinterpret_cast<const T*>(&b);
  T* q0 = reinterpret_cast<T*>(&o0);
  T* q1 = reinterpret_cast<T*>(&o1);
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    float f, fd;
    act_fwd_grad(to_f<T>(pa[i]), kAct, f, fd);
    const float dv = to_f<T>(pd[i]);
    q0[i] = from_f<T>(dv * to_f<T>(pb[i]) * fd);
    q1[i] = from_f<T>(dv * f);
  }
  dg[t] = o0, du[t] = o1;
}

struct Problem {
  long long m, h, i;
  bool timed;
  Act act;
  bool fp16;
};

template <class T>
constexpr cudaDataType_t kCudaType = std::is_same<T, __half>::value ? CUDA_R_16F : CUDA_R_16BF;

// Row-major C[M, N] (fp32 or T) = A[M, K] B^T, B [N, K] row-major (b_kn: B stored [K, N]).
template <class T>
void gemm(cublasHandle_t hb, const T* a, const T* b, void* c, bool c32, long long m, long long n, long long k,
          bool b_kn) {
  const float one = 1.f, zero = 0.f;
  // column-major view: C^T [N, M] = op(B) [N, K] x A^T [K, M]
  cublasGemmEx(hb, b_kn ? CUBLAS_OP_N : CUBLAS_OP_T, CUBLAS_OP_N, int(n), int(m), int(k), &one, b, kCudaType<T>,
               int(b_kn ? n : k), a, kCudaType<T>, int(k), &zero, c, c32 ? CUDA_R_32F : kCudaType<T>, int(n),
               CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

// Norm-wise relative error of h against ref; fails (ok = false) on any non-finite element or beyond what rounding
// each output once to T gives (bf16 ~1.6e-3, fp16 ~2e-4 norm-wise).
template <class T>
double rel_err(const T* h, const float* ref, long long n, double* acc, bool* ok) {
  CK(cudaMemset(acc, 0, 3 * sizeof(double)));
  compare<T><<<1024, 256>>>(h, ref, n, acc);
  double host[3];
  CK(cudaMemcpy(host, acc, sizeof(host), cudaMemcpyDeviceToHost));
  const double rel = std::sqrt(host[0] / host[1]);
  *ok = *ok && host[2] == 0 && rel < (std::is_same<T, __half>::value ? 6e-4 : 4e-3);
  return host[2] > 0 ? NAN : rel;
}

// Host-side check, no GPU: every kernel accepts every problem (16-byte aligned dummy pointers, as cudaMalloc's).
int host_check() {
  int failures = 0;
  const long long shapes[][3] = {{1000, 760, 3000}, {8192, 768, 3072}, {1024, 768, 3072}, {1, 768, 3072},
                                 {2048, 4096, 11008}};
  char* base = reinterpret_cast<char*>(uintptr_t(1) << 40);
  for (const Kernel& kn : kKernels)
    for (const auto& s : shapes) {
      Args a{int(s[0]), int(s[2]), int(s[1]), int(kAct), base, base + (1 << 30), base + (2ll << 30), base + (3ll << 30),
             base + (4ll << 30), base + (5ll << 30)};
      const bool ok = kn.can(a, 132);
      failures += !ok;
      printf("{\"kernel\": \"%s\", \"m\": %lld, \"h\": %lld, \"i\": %lld, \"can_implement\": %s, "
             "\"workspace\": %zu}\n", kn.name, s[0], s[1], s[2], ok ? "true" : "false", kn.ws(a, 132));
    }
  printf("{\"failures\": %d}\n", failures);
  return failures ? 1 : 0;
}

// One problem: every kernel of its dtype checked (and timed when pr.timed), then the baselines. Returns failures.
template <class T>
int run_problem(const Problem& pr, const std::string& want, cublasHandle_t hb, int sms) {
  int failures = 0;
  const long long m = pr.m, hd = pr.h, in = pr.i, mi = m * in;
  T *x, *wgu, *wd, *dy, *g, *u, *d0, *d1, *tmp0, *tmp1, *tmp2;
  float *g32, *u32, *dh32, *r0, *r1, *down32;
  double* acc;
  void* ws;
  const size_t ws_bytes = 64 << 20;
  CK(cudaMalloc(&x, m * hd * 2));
  CK(cudaMalloc(&wgu, 2 * in * hd * 2));  // [W_g; W_u]: one buffer, so cuBLAS's [M, 2I] GEMM reads it as is
  CK(cudaMalloc(&wd, hd * in * 2));
  CK(cudaMalloc(&dy, m * hd * 2));
  for (T** p : {&g, &u, &d0, &d1, &tmp0, &tmp1, &tmp2}) CK(cudaMalloc(p, mi * 2 * (p == &tmp2 ? 2 : 1)));
  for (float** p : {&g32, &u32, &dh32, &r0, &r1}) CK(cudaMalloc(p, mi * 4));
  CK(cudaMalloc(&down32, m * hd * 4));
  CK(cudaMalloc(&acc, 3 * sizeof(double)));
  CK(cudaMalloc(&ws, ws_bytes));
  const T* wg = wgu;
  const T* wu = wgu + in * hd;
  fill<<<1024, 256>>>(x, m * hd, 17u + unsigned(m), 1.f);
  fill<<<1024, 256>>>(wgu, 2 * in * hd, 91u + unsigned(in), 1.f / std::sqrt(float(hd)));
  fill<<<1024, 256>>>(wd, hd * in, 7u, 1.f / std::sqrt(float(in)));
  fill<<<1024, 256>>>(dy, m * hd, 5u, 1.f);
  gemm(hb, x, wg, g32, true, m, in, hd, false);
  gemm(hb, x, wu, u32, true, m, in, hd, false);
  gemm(hb, dy, wd, dh32, true, m, in, hd, true);
  to_elem<T><<<1024, 256>>>(g32, g, mi);
  to_elem<T><<<1024, 256>>>(u32, u, mi);
  fill<<<1024, 256>>>(tmp1, mi, 29u, 1.f);  // h for the down projection's shape
  gemm(hb, tmp1, wd, down32, true, m, hd, in, false);
  CK(cudaDeviceSynchronize());
  const char* dtype = pr.fp16 ? "fp16" : "bf16";
  std::vector<std::pair<std::string, float>> us;
  for (const Kernel& kn : kKernels) {
    if (kn.fp16 != pr.fp16 || (want != "all" && want.find(kn.name) == std::string::npos)) continue;
    if (kn.act >= 0 && kn.act != int(pr.act)) continue;  // its activation is compiled in: only its own problems
    Args a{int(m), int(in), int(hd), int(pr.act), x, wu, d0, g, u, d1};
    if (kn.form == Form::Plain) a.b = wg;
    if (kn.form == Form::Dgrad) a.a = dy, a.b = wd;
    if (kn.ws(a, sms) > ws_bytes) {
      printf("{\"kernel\": \"%s\", \"error\": \"workspace %zu bytes\"}\n", kn.name, kn.ws(a, sms));
      ++failures;
      continue;
    }
    CK(cudaMemset(d0, 0xFF, mi * 2));  // NaN: an element the kernel does not write fails the check
    CK(cudaMemset(d1, 0xFF, mi * 2));
    const char* err = kn.run(a, ws, nullptr, sms);
    CK(cudaDeviceSynchronize());
    if (err) {
      printf("{\"kernel\": \"%s\", \"m\": %lld, \"error\": \"%s\"}\n", kn.name, m, err);
      ++failures;
      continue;
    }
    bool ok = true;
    double e0 = 0, e1 = -1;
    if (kn.form == Form::Plain) {
      e0 = rel_err(d0, g32, mi, acc, &ok);
    } else if (kn.form == Form::UpAct || kn.form == Form::UpActU) {
      ref_upact<T><<<1024, 256>>>(g, u32, r0, mi, pr.act);
      e0 = rel_err(d0, r0, mi, acc, &ok);
      if (kn.form == Form::UpActU) e1 = rel_err(d1, u32, mi, acc, &ok);
    } else {
      ref_dgrad<T><<<1024, 256>>>(dh32, g, u, r0, r1, mi, pr.act);
      e0 = rel_err(d0, r0, mi, acc, &ok);
      e1 = rel_err(d1, r1, mi, acc, &ok);
    }
    float t = -1, t_down = -1;
    double e_down = -1;
    if (kn.form == Form::Plain) {  // also the down projection's shape: [M, H] = h [M, I] W_d^T
      Args dn{int(m), int(hd), int(in), int(kAct), tmp1, wd, tmp0, nullptr, nullptr, nullptr};
      CK(cudaMemset(tmp0, 0xFF, m * hd * 2));
      const char* derr = kn.run(dn, ws, nullptr, sms);
      CK(cudaDeviceSynchronize());
      if (derr) ok = false;
      e_down = derr ? NAN : rel_err(tmp0, down32, m * hd, acc, &ok);
      if (pr.timed && !derr) t_down = graph_us(20, [&](cudaStream_t s) { kn.run(dn, ws, s, sms); });
    }
    failures += !ok;
    // The tile order is a run-time choice (no recompile): time each, keep the best, print all.
    std::string orders;
    int best_sw = 1, best_ra = 0;
    if (pr.timed)
      for (int sw : {1, 2, 4, 8})
        for (int ra : {0, 1, 2}) {
          Args o = a;
          o.swizzle = sw, o.raster = ra;
          const float v = graph_us(20, [&](cudaStream_t s) { kn.run(o, ws, s, sms); });
          char buf[48];
          snprintf(buf, sizeof(buf), "%s\"s%d r%d\": %.2f", orders.empty() ? "" : ", ", sw, ra, v);
          orders += buf;
          if (t < 0 || v < t) t = v, best_sw = sw, best_ra = ra;
        }
    us.push_back({kn.name, t});
    printf("{\"kernel\": \"%s\", \"dtype\": \"%s\", \"act\": %d, \"m\": %lld, \"h\": %lld, \"i\": %lld, \"ok\": %s, "
           "\"rel_err\": %.3g, \"rel_err_aux\": %.3g, \"us\": %.2f, \"tflops\": %.0f, \"best_order\": \"s%d r%d\", "
           "\"orders\": {%s}, \"down_rel_err\": %.3g, \"down_us\": %.2f}\n",
           kn.name, dtype, int(pr.act), m, hd, in, ok ? "true" : "false", e0, e1, t,
           t > 0 ? 2.0 * m * in * hd / t * 1e-6 : 0.0, best_sw, best_ra, orders.c_str(), e_down, t_down);
  }
  if (pr.timed) {
    const long long n8 = mi / 8;
    const int blocks = int((n8 + 255) / 256);
    auto on = [&](cudaStream_t s) { cublasSetStream(hb, s); };
    const float t_gate = graph_us(20, [&](cudaStream_t s) { on(s), gemm(hb, x, wg, tmp0, false, m, in, hd, false); });
    const float t_gu = graph_us(20, [&](cudaStream_t s) { on(s), gemm(hb, x, wgu, tmp2, false, m, 2 * in, hd, false); });
    const float t_dh = graph_us(20, [&](cudaStream_t s) { on(s), gemm(hb, dy, wd, tmp0, false, m, in, hd, true); });
    const float t_down = graph_us(20, [&](cudaStream_t s) { on(s), gemm(hb, tmp1, wd, tmp0, false, m, hd, in, false); });
    const float t_mul = graph_us(20, [&](cudaStream_t s) {
      act_mul8<T><<<blocks, 256, 0, s>>>((const uint4*)g, (const uint4*)u, (uint4*)tmp0, n8);
    });
    const float t_mul_bwd = graph_us(20, [&](cudaStream_t s) {
      act_mul_bwd8<T><<<blocks, 256, 0, s>>>((const uint4*)tmp1, (const uint4*)g, (const uint4*)u, (uint4*)tmp0,
                                             (uint4*)d1, n8);
    });
    cublasSetStream(hb, nullptr);
    printf("{\"baseline\": \"cublas+elementwise\", \"dtype\": \"%s\", \"m\": %lld, \"h\": %lld, \"i\": %lld, "
           "\"gate_gemm_us\": %.2f, \"gate_up_2i_gemm_us\": %.2f, \"dh_gemm_us\": %.2f, \"down_gemm_us\": %.2f, "
           "\"act_mul_us\": %.2f, \"act_mul_bwd_us\": %.2f}\n",
           dtype, m, hd, in, t_gate, t_gu, t_dh, t_down, t_mul, t_mul_bwd);
    auto of = [&](const std::string& n) {
      for (auto& [k, v] : us)
        if (k == n) return v;
      return -1.f;
    };
    for (const char* sfx : {"coop", "pp", "coop_h"}) {  // the schedules with all four forms
      const std::string s(sfx);
      const float plain = of("plain_" + s), upact = of("upact_" + s), upactu = of("upactu_" + s),
                  dgrad = of("dgrad_" + s);
      if (plain < 0 || upact < 0 || upactu < 0 || dgrad < 0) continue;
      printf("{\"summary\": \"%s\", \"m\": %lld, \"h\": %lld, \"i\": %lld, \"fwd_infer_gate_up_us\": %.2f, "
             "\"fwd_train_gate_up_us\": %.2f, \"bwd_dh_dgdu_us\": %.2f, \"split_fwd_us\": %.2f, \"split_bwd_us\": %.2f}\n",
             sfx, m, hd, in, plain + upact, plain + upactu, dgrad, 2 * t_gate + t_mul, t_dh + t_mul_bwd);
    }
  }
  for (void* p : std::initializer_list<void*>{x, wgu, wd, dy, g, u, d0, d1, tmp0, tmp1, tmp2, g32, u32, dh32, r0, r1,
                                              down32, acc, ws})
    cudaFree(p);
  return failures;
}

int main(int argc, char** argv) {
  const std::string want = argc > 1 ? argv[1] : "all";
  if (want == "host") return host_check();
  const std::vector<int> rows = parse_list(argc > 2 ? argv[2] : "8192,1024");
  int dev = 0, sms = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  cublasHandle_t hb;
  cublasCreate(&hb);
  const bool timed = !getenv("GEVT_ONCE");
  // GEVT_ACT: the timed problems' activation code (default gelu_tanh); 0 (none) leaves the epilogue only its loads
  // and stores, which separates their cost from the activation's arithmetic.
  const Act timed_act = getenv("GEVT_ACT") ? Act(atoi(getenv("GEVT_ACT"))) : kAct;
  // The odd shape in gelu_tanh and silu (the activation is a run-time argument of the kernels), both dtypes;
  // GEVT_NO_CHECK=1 leaves them out (a profiler run that wants the timed shapes' launches only).
  std::vector<Problem> problems;
  if (!getenv("GEVT_NO_CHECK"))
    for (bool fp16 : {false, true})
      for (Act act : {Act::GeluTanh, Act::Silu}) problems.push_back({1000, 760, 3000, false, act, fp16});
  std::string shapes = argc > 3 ? argv[3] : "768x3072";  // "HxI,..." -> H, I, H, I, ...
  std::replace(shapes.begin(), shapes.end(), 'x', ',');
  const std::vector<int> dims = parse_list(shapes.c_str());
  for (size_t d = 0; d + 1 < dims.size(); d += 2)
    for (int m : rows) problems.push_back({m, dims[d], dims[d + 1], timed, timed_act, false});
  if (dims.size() >= 2 && !rows.empty())  // fp16 timed on the first shape and row count only
    problems.push_back({rows[0], dims[0], dims[1], timed, timed_act, true});
  int failures = 0;
  for (const Problem& pr : problems)
    failures += pr.fp16 ? run_problem<__half>(pr, want, hb, sms) : run_problem<__nv_bfloat16>(pr, want, hb, sms);
  cublasDestroy(hb);
  printf("{\"failures\": %d}\n", failures);
  return failures ? 1 : 0;
}
