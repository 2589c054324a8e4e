// Standalone check + timing of act_and_mul kernel candidates (out = act(g) * u over two contiguous planes), to pick
// what kernel_src/fused_mlp/cuda/csrc/elementwise.cu runs: the activation's math (tanhf vs the exp form), bytes per
// thread, cache hints, grid shape. Error vs a float64 reference per dtype (and the error of rounding that reference
// to the dtype, the best any kernel can do), NaN-filled outputs, GPU µs per call from CUDA-graph replay.
// Also the gated backward's elementwise pass (dg = dy * u * act'(g), du = dy * act(g)): variants 100+.
// Built by bench/cuda_proto/build.sh; prints one JSON object per line. Usage: act_mul_proto [variants]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <type_traits>
#include <vector>

#include "common.cuh"
#include "elementwise.cu"  // the production kernels, launched as the op launches them
#include "proto_harness.cuh"

using namespace fused_mlp;


// The tanh GELU as elementwise.cu computed it before 2026-12-04 (tanhf), for the comparison; FAST kernels use
// common.cuh's act_fwd (z * sigmoid(2 * inner), one fast exp and divide).
__device__ __forceinline__ float act_tanhf(float z, Act a) {
  if (a != Act::GeluTanh) return act_fwd(z, a);
  const float inner = 0.79788456080286536f * (z + 0.044715f * z * z * z);
  return 0.5f * z * (1.f + tanhf(inner));
}

template <int HINT>
__device__ __forceinline__ uint4 load16(const void* p) {
  if constexpr (HINT == 1) return __ldcs(static_cast<const uint4*>(p));
  if constexpr (HINT == 2) {
    uint4 r;
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
    return r;
  }
  return *static_cast<const uint4*>(p);
}

template <int HINT>
__device__ __forceinline__ void store16(void* p, uint4 v) {
  if constexpr (HINT == 1) __stcs(static_cast<uint4*>(p), v);
  else *static_cast<uint4*>(p) = v;
}

// U 16-byte vectors per thread per step, loads first; FAST picks the activation's math; HINT the cache policy.
// CA >= 0: the activation compiled in (the act argument ignored).
template <typename T, int U, bool FAST, int HINT, int CA = -1>
__global__ void __launch_bounds__(256) act_mul(const T* __restrict__ g, const T* __restrict__ u, T* __restrict__ out,
                                               long long nvec, Act act_arg) {
  constexpr int V = 16 / sizeof(T);
  const Act act = CA >= 0 ? Act(CA) : act_arg;
  const long long stride = (long long)gridDim.x * blockDim.x * U;
  for (long long base = (long long)blockIdx.x * blockDim.x * U + threadIdx.x; base < nvec; base += stride) {
    uint4 a[U], b[U];
#pragma unroll
    for (int j = 0; j < U; ++j) {
      const long long i = base + (long long)j * blockDim.x;
      if (i < nvec) a[j] = load16<HINT>(g + i * V), b[j] = load16<HINT>(u + i * V);
    }
#pragma unroll
    for (int j = 0; j < U; ++j) {
      const long long i = base + (long long)j * blockDim.x;
      if (i >= nvec) break;
      const T* av = reinterpret_cast<const T*>(&a[j]);
      const T* bv = reinterpret_cast<const T*>(&b[j]);
      uint4 o;
      T* ov = reinterpret_cast<T*>(&o);
#pragma unroll
      for (int e = 0; e < V; ++e) {
        const float z = to_f(av[e]);
        ov[e] = from_f<T>((FAST ? act_fwd(z, act) : act_tanhf(z, act)) * to_f(bv[e]));
      }
      store16<HINT>(out + i * V, o);
    }
  }
}

// The backward pass: U vectors per thread; OLD: act' and act from tanhf as shipped before 2026-12-04.
template <typename T, int U, bool OLD, int HINT, int CA = -1>
__global__ void __launch_bounds__(256) act_mul_bwd(const T* __restrict__ dy, const T* __restrict__ g,
                                                   const T* __restrict__ u, T* __restrict__ dg, T* __restrict__ du,
                                                   long long nvec, Act act_arg) {
  constexpr int V = 16 / sizeof(T);
  const Act act = CA >= 0 ? Act(CA) : act_arg;
  const long long stride = (long long)gridDim.x * blockDim.x * U;
  for (long long base = (long long)blockIdx.x * blockDim.x * U + threadIdx.x; base < nvec; base += stride) {
    uint4 a[U], b[U], c[U];
#pragma unroll
    for (int j = 0; j < U; ++j) {
      const long long i = base + (long long)j * blockDim.x;
      if (i < nvec) a[j] = load16<HINT>(g + i * V), b[j] = load16<HINT>(u + i * V), c[j] = load16<HINT>(dy + i * V);
    }
#pragma unroll
    for (int j = 0; j < U; ++j) {
      const long long i = base + (long long)j * blockDim.x;
      if (i >= nvec) break;
      const T *av = reinterpret_cast<const T*>(&a[j]), *bv = reinterpret_cast<const T*>(&b[j]);
      const T* cv = reinterpret_cast<const T*>(&c[j]);
      uint4 og, ou;
      T *gv = reinterpret_cast<T*>(&og), *uv = reinterpret_cast<T*>(&ou);
#pragma unroll
      for (int e = 0; e < V; ++e) {
        const float z = to_f(av[e]), d = to_f(cv[e]);
        float f, df;
        if (OLD && act == Act::GeluTanh) {
          const float k = 0.79788456080286536f, t = tanhf(k * (z + 0.044715f * z * z * z));
          f = 0.5f * z * (1.f + t), df = 0.5f * (1.f + t) + 0.5f * z * (1.f - t * t) * k * (1.f + 3.f * 0.044715f * z * z);
        } else {
          act_fwd_grad(z, act, f, df);
        }
        gv[e] = from_f<T>(d * to_f(bv[e]) * df), uv[e] = from_f<T>(d * f);
      }
      store16<HINT>(dg + i * V, og), store16<HINT>(du + i * V, ou);
    }
  }
}

__device__ double act_grad_ref(double z, int a) {
  switch (a) {
    case 3: {
      const double k = 0.79788456080286536, t = tanh(k * (z + 0.044715 * z * z * z));
      return 0.5 * (1 + t) + 0.5 * z * (1 - t * t) * k * (1 + 3 * 0.044715 * z * z);
    }
    case 4: {
      const double s = 1 / (1 + exp(-z));
      return s * (1 + z * (1 - s));
    }
    default: return 1;
  }
}


__device__ double act_ref(double z, int a) {
  switch (a) {
    case 3: return 0.5 * z * (1.0 + tanh(0.79788456080286536 * (z + 0.044715 * z * z * z)));
    case 4: return z / (1.0 + exp(-z));
    case 2: return 0.5 * z * (1.0 + erf(z * 0.70710678118654752));
    case 1: return z > 0 ? z : 0;
    default: return z;
  }
}

// out[0..2]: sum (o - ref)^2, sum ref^2, non-finite count; out[3]: sum (round_T(ref) - ref)^2.
template <typename T>
__global__ void compare(const T* g, const T* u, const T* o, long long n, int act, double* out) {
  double e = 0, r = 0, bad = 0, best = 0;
  for (long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x; t < n; t += (long long)gridDim.x * blockDim.x) {
    const double ref = act_ref(to_f(g[t]), act) * double(to_f(u[t]));
    const float v = to_f(o[t]);
    if (!isfinite(v)) bad += 1;
    e += (v - ref) * (v - ref), r += ref * ref;
    const double rt = to_f(from_f<T>(float(ref)));
    best += (rt - ref) * (rt - ref);
  }
  atomicAdd(&out[0], e), atomicAdd(&out[1], r), atomicAdd(&out[2], bad), atomicAdd(&out[3], best);
}


int g_sms = 132;

// One JSON line: errors from compare's sums a[0..3] (see compare), µs per call and the bandwidth of `planes`
// [rows, cols] buffers read or written per call.
template <typename T>
void report(const char* pass, long long rows, long long cols, int act, int variant, const double (&a)[4], float us,
            int planes) {
  const char* dt = std::is_same<T, float>::value ? "fp32" : std::is_same<T, __half>::value ? "fp16" : "bf16";
  const double den = std::max(a[1], 1e-300);
  printf("{\"pass\": \"%s\", \"rows\": %lld, \"cols\": %lld, \"act\": %d, \"dtype\": \"%s\", \"variant\": %d, "
         "\"rel\": %.3e, \"rel_rounding\": %.3e, \"nonfinite\": %.0f, \"us\": %.2f, \"tb_per_s\": %.2f}\n",
         pass, rows, cols, act, dt, variant, std::sqrt(a[0] / den), std::sqrt(a[3] / den), a[2], us,
         us > 0 ? double(planes) * rows * cols * sizeof(T) / (us * 1e6) : 0.0);
  fflush(stdout);
}

// variant -> (launch of one call). grid 0: one pass over the data; else that many blocks per SM, grid-stride.
template <typename T>
void launch(int variant, const T* g, const T* u, T* o, long long n, Act act, cudaStream_t s) {
  const long long nvec = n / (16 / sizeof(T));
  auto go = [&](auto kern, int units, int per_sm) {
    const long long one_pass = (nvec + 256ll * units - 1) / (256ll * units);
    const long long blocks = per_sm ? std::min<long long>(one_pass, (long long)g_sms * per_sm) : one_pass;
    kern<<<unsigned(std::max<long long>(blocks, 1)), 256, 0, s>>>(g, u, o, nvec, act);
  };
  switch (variant) {
    case 0: go(act_mul<T, 1, false, 0>, 1, 0); break;  // elementwise.cu before 2026-12-04
    case 1: go(act_mul<T, 1, true, 0>, 1, 0); break;  // elementwise.cu since
    case 2: go(act_mul<T, 1, true, 1>, 1, 0); break;
    case 3: go(act_mul<T, 2, true, 0>, 2, 0); break;
    case 4: go(act_mul<T, 2, true, 1>, 2, 0); break;
    case 5: go(act_mul<T, 1, true, 2>, 1, 0); break;
    case 6: go(act_mul<T, 2, true, 2>, 2, 0); break;
    case 7: go(act_mul<T, 1, true, 0>, 1, 16); break;
    case 8: go(act_mul<T, 2, true, 0>, 2, 8); break;
    case 9: go(act_mul<T, 4, true, 1>, 4, 0); break;
    case 10: go(act_mul<T, 1, true, 0, 3>, 1, 0); break;  // gelu_tanh compiled in (other rows: wrong activation)
    case 11: go(act_mul<T, 1, true, 0, 4>, 1, 0); break;  // silu compiled in
    default: printf("{\"error\": \"no variant %d\"}\n", variant), exit(1);
  }
}

template <typename T>
void run(long long rows, long long cols, int act, int variant, bool time_it) {
  const long long n = rows * cols;
  T *g, *u, *o;
  double* acc;
  CK(cudaMalloc(&g, n * sizeof(T)));
  CK(cudaMalloc(&u, n * sizeof(T)));
  CK(cudaMalloc(&o, n * sizeof(T)));
  CK(cudaMalloc(&acc, 4 * sizeof(double)));
  fill<<<2048, 256>>>(g, n, 7u + unsigned(rows), 4.f);  // gate in [-4, 4): both tails of the activation
  fill<<<2048, 256>>>(u, n, 99u + unsigned(cols), 1.f);
  CK(cudaMemset(o, 0xFF, n * sizeof(T)));  // NaN pattern: an unwritten output fails
  launch<T>(variant, g, u, o, n, Act(act), 0);
  CK(cudaDeviceSynchronize());
  CK(cudaMemset(acc, 0, 4 * sizeof(double)));
  compare<<<2048, 256>>>(g, u, o, n, act, acc);
  double a[4];
  CK(cudaMemcpy(a, acc, sizeof a, cudaMemcpyDeviceToHost));
  const float us = time_it ? graph_us(20, [&](cudaStream_t s) { launch<T>(variant, g, u, o, n, Act(act), s); }) : 0.f;
  report<T>("forward", rows, cols, act, variant, a, us, 3);
  cudaFree(g), cudaFree(u), cudaFree(o), cudaFree(acc);
}

// out[0..2]: sum (dg - ref)^2 + (du - ref)^2, sum ref^2, non-finite count; out[3]: the same for round_T(ref).
template <typename T>
__global__ void compare_bwd(const T* dy, const T* g, const T* u, const T* dg, const T* du, long long n, int act,
                            double* out) {
  double e = 0, r = 0, bad = 0, best = 0;
  for (long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x; t < n; t += (long long)gridDim.x * blockDim.x) {
    const double z = to_f(g[t]), d = to_f(dy[t]);
    const double ref[2] = {d * to_f(u[t]) * act_grad_ref(z, act), d * act_ref(z, act)};
    const float v[2] = {to_f(dg[t]), to_f(du[t])};
    for (int k = 0; k < 2; ++k) {
      if (!isfinite(v[k])) bad += 1;
      const double rt = to_f(from_f<T>(float(ref[k])));
      e += (v[k] - ref[k]) * (v[k] - ref[k]), r += ref[k] * ref[k], best += (rt - ref[k]) * (rt - ref[k]);
    }
  }
  atomicAdd(&out[0], e), atomicAdd(&out[1], r), atomicAdd(&out[2], bad), atomicAdd(&out[3], best);
}

template <typename T>
void launch_bwd(int variant, const T* dy, const T* g, const T* u, T* dg, T* du, long long n, Act act, cudaStream_t s) {
  const long long nvec = n / (16 / sizeof(T));
  auto go = [&](auto kern, int units) {
    kern<<<unsigned(std::max<long long>((nvec + 256ll * units - 1) / (256ll * units), 1)), 256, 0, s>>>(dy, g, u, dg, du,
                                                                                                     nvec, act);
  };
  const ScalarType dt = std::is_same<T, float>::value    ? ScalarType::Float
                        : std::is_same<T, __half>::value ? ScalarType::Half
                                                         : ScalarType::BFloat16;
  switch (variant) {
    case 100: go(act_mul_bwd<T, 1, true, 0>, 1); break;  // elementwise.cu before 2026-12-04
    case 101: act_and_mul_backward(dy, g, u, dg, du, n, act, dt, s); break;  // elementwise.cu now
    case 102: go(act_mul_bwd<T, 1, false, 1>, 1); break;
    case 103: go(act_mul_bwd<T, 2, false, 0>, 2); break;
    case 104: go(act_mul_bwd<T, 1, false, 2>, 1); break;
    case 105: go(act_mul_bwd<T, 1, false, 0, 3>, 1); break;  // gelu_tanh compiled in
    case 106: go(act_mul_bwd<T, 1, false, 0, 4>, 1); break;  // silu compiled in
    default: printf("{\"error\": \"no variant %d\"}\n", variant), exit(1);
  }
}

template <typename T>
void run_bwd(long long rows, long long cols, int act, int variant, bool time_it) {
  const long long n = rows * cols;
  T *dy, *g, *u, *dg, *du;
  double* acc;
  for (T** p : {&dy, &g, &u, &dg, &du}) CK(cudaMalloc(p, n * sizeof(T)));
  CK(cudaMalloc(&acc, 4 * sizeof(double)));
  fill<<<2048, 256>>>(g, n, 7u + unsigned(rows), 4.f);
  fill<<<2048, 256>>>(u, n, 99u + unsigned(cols), 1.f);
  fill<<<2048, 256>>>(dy, n, 5u + unsigned(cols), 1.f);
  CK(cudaMemset(dg, 0xFF, n * sizeof(T)));
  CK(cudaMemset(du, 0xFF, n * sizeof(T)));
  launch_bwd<T>(variant, dy, g, u, dg, du, n, Act(act), 0);
  CK(cudaDeviceSynchronize());
  CK(cudaMemset(acc, 0, 4 * sizeof(double)));
  compare_bwd<<<2048, 256>>>(dy, g, u, dg, du, n, act, acc);
  double a[4];
  CK(cudaMemcpy(a, acc, sizeof a, cudaMemcpyDeviceToHost));
  const float us = time_it ? graph_us(20, [&](cudaStream_t s) { launch_bwd<T>(variant, dy, g, u, dg, du, n, Act(act), s); }) : 0.f;
  report<T>("backward", rows, cols, act, variant, a, us, 5);
  for (T* p : {dy, g, u, dg, du}) cudaFree(p);
  cudaFree(acc);
}

int main(int argc, char** argv) {
  const std::vector<int> variants = parse_list(argc > 1 ? argv[1] : "0,1,2,3,4,5,6,7,8,9");
  CK(cudaDeviceGetAttribute(&g_sms, cudaDevAttrMultiProcessorCount, 0));
  for (int v : variants) {
    if (v >= 100) {
      run_bwd<__nv_bfloat16>(1000, 3000, 3, v, false);
      run_bwd<__half>(333, 1000, 4, v, false);
      run_bwd<float>(257, 1024, 3, v, false);
      run_bwd<__nv_bfloat16>(8192, 3072, 3, v, true);
      run_bwd<__nv_bfloat16>(8192, 3072, 4, v, true);
      continue;
    }
    run<__nv_bfloat16>(1000, 3000, 3, v, false);  // odd sizes (still whole 16-byte vectors)
    run<__half>(333, 1000, 4, v, false);
    run<float>(257, 1024, 3, v, false);
    run<__nv_bfloat16>(8192, 3072, 3, v, true);
    run<__nv_bfloat16>(8192, 3072, 4, v, true);
    run<__half>(8192, 3072, 3, v, true);
    run<__nv_bfloat16>(1024, 3072, 3, v, true);
  }
  return 0;
}
