// Standalone check + timing of the sm_90a gate/up kernel (kernel_src/fused_mlp/cuda/csrc/gate_up_sm90.cu) against
// cuBLAS, outside torch: correctness vs a cuBLAS fp32-output GEMM of [x] x [wg; wu]^T followed by act(g) * u in
// fp32, and GPU µs per call from CUDA-graph replay next to cuBLAS's plain bf16 [M, 2I] GEMM. Built and run on the
// GPU machine by bench/sm90/run_proto.sh; prints one JSON object per line.
#include <cublas_v2.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "gate_up_sm90.cu"
#include "proto_harness.cuh"

namespace fused_mlp {
int gate_up_sm90_grid(int variant, bool half, int device);
}

using namespace fused_mlp;



__global__ void ref_epilogue(const float* gu, float* ref, long long m, long long i, int act) {
  for (long long t = blockIdx.x * blockDim.x + threadIdx.x; t < m * i; t += gridDim.x * blockDim.x) {
    const long long r = t / i, c = t % i;
    ref[t] = act_fwd(gu[r * 2 * i + c], Act(act)) * gu[r * 2 * i + i + c];
  }
}


template <typename T>
void run(long long m, long long i, long long k, int act, int variant, bool time_it) {
  const bool half = sizeof(T) == 2 && std::is_same<T, __half>::value;
  T *x, *w, *h, *c16;
  float *gu, *ref;
  double* acc;
  CK(cudaMalloc(&x, m * k * 2));
  CK(cudaMalloc(&w, 2 * i * k * 2));
  CK(cudaMalloc(&h, m * i * 2));
  CK(cudaMalloc(&c16, m * 2 * i * 2));
  CK(cudaMalloc(&gu, m * 2 * i * 4));
  CK(cudaMalloc(&ref, m * i * 4));
  CK(cudaMalloc(&acc, 3 * sizeof(double)));
  fill<<<1024, 256>>>(x, m * k, 17u + unsigned(m), 1.f);
  fill<<<1024, 256>>>(w, 2 * i * k, 91u + unsigned(i), 1.f / std::sqrt(float(k)));
  CK(cudaMemset(h, 0xFF, m * i * 2));  // NaN pattern: an unwritten output fails
  const T* wg = w;
  const T* wu = w + i * k;
  cublasHandle_t hb;
  cublasCreate(&hb);
  const float one = 1.f, zero = 0.f;
  const cudaDataType dt = half ? CUDA_R_16F : CUDA_R_16BF;
  // [M, 2I] row-major = (W[2I, K] row-major)^T-product: column-major C[2I, M] = W^T(col) x X(col).
  cublasGemmEx(hb, CUBLAS_OP_T, CUBLAS_OP_N, int(2 * i), int(m), int(k), &one, w, dt, int(k), x, dt, int(k), &zero, gu,
               CUDA_R_32F, int(2 * i), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  ref_epilogue<<<1024, 256>>>(gu, ref, m, i, act);
  launch_gate_up_sm90(x, wg, wu, h, m, i, k, Act(act), half, variant, 0, 0);
  CK(cudaDeviceSynchronize());
  CK(cudaMemset(acc, 0, 3 * sizeof(double)));
  compare<<<1024, 256>>>(h, ref, m * i, acc);
  double a[3];
  CK(cudaMemcpy(a, acc, sizeof a, cudaMemcpyDeviceToHost));
  const double rel = std::sqrt(a[0] / std::max(a[1], 1e-30));
  float ours = 0, cub = 0;
  if (time_it) {
    ours = graph_us(20, [&](cudaStream_t s) { launch_gate_up_sm90(x, wg, wu, h, m, i, k, Act(act), half, variant, s, 0); });
    cub = graph_us(20, [&](cudaStream_t s) {
      cublasSetStream(hb, s);
      cublasGemmEx(hb, CUBLAS_OP_T, CUBLAS_OP_N, int(2 * i), int(m), int(k), &one, w, dt, int(k), x, dt, int(k), &zero,
                   c16, dt, int(2 * i), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    });
  }
  printf("{\"m\": %lld, \"i\": %lld, \"k\": %lld, \"act\": %d, \"dtype\": \"%s\", \"variant\": %d, \"rel\": %.3e, "
         "\"nonfinite\": %.0f, \"us\": %.2f, \"cublas_gemm_us\": %.2f, \"tflops\": %.0f}\n",
         m, i, k, act, half ? "fp16" : "bf16", variant, rel, a[2], ours, cub,
         ours > 0 ? 2.0 * m * 2 * i * k / (ours * 1e6) : 0.0);
  fflush(stdout);
  cublasDestroy(hb);
  cudaFree(x), cudaFree(w), cudaFree(h), cudaFree(c16), cudaFree(gu), cudaFree(ref), cudaFree(acc);
}

// One variant (or cuBLAS's [M, 2I] GEMM for variant -1) at 8192x3072x768, act none, timed three ways: single
// launches each synchronized (events around one launch), a graph of 1 launch, a graph of 20 launches. Separates
// a kernel's own duration from what back-to-back launches add.
void launch_modes(int variant) {
  const long long m = 8192, i = 3072, k = 768;
  __nv_bfloat16 *x, *w, *h;
  CK(cudaMalloc(&x, m * k * 2));
  CK(cudaMalloc(&w, 2 * i * k * 2));
  CK(cudaMalloc(&h, m * 2 * i * 2));
  fill<<<1024, 256>>>(x, m * k, 17u, 1.f);
  fill<<<1024, 256>>>(w, 2 * i * k, 91u, 1.f / std::sqrt(float(k)));
  cublasHandle_t hb;
  cublasCreate(&hb);
  const float one = 1.f, zero = 0.f;
  auto call = [&](cudaStream_t s) {
    if (variant >= 0) {
      launch_gate_up_sm90(x, w, w + i * k, h, m, i, k, Act::None, false, variant, s, 0);
    } else {
      cublasSetStream(hb, s);
      cublasGemmEx(hb, CUBLAS_OP_T, CUBLAS_OP_N, int(2 * i), int(m), int(k), &one, w, CUDA_R_16BF, int(k), x,
                   CUDA_R_16BF, int(k), &zero, h, CUDA_R_16BF, int(2 * i), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    }
  };
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  std::vector<float> t;
  for (int r = 0; r < 16; ++r) {
    CK(cudaStreamSynchronize(s));
    CK(cudaEventRecord(a, s));
    call(s);
    CK(cudaEventRecord(b, s));
    CK(cudaEventSynchronize(b));
    float ms;
    CK(cudaEventElapsedTime(&ms, a, b));
    if (r) t.push_back(ms * 1000.f);
  }
  std::sort(t.begin(), t.end());
  const float single = t[t.size() / 2];
  const float g1 = graph_us(1, call), g20 = graph_us(20, call);
  printf("{\"variant\": %d, \"single_launch_us\": %.2f, \"graph_of_1_us\": %.2f, \"graph_of_20_us\": %.2f}\n", variant,
         single, g1, g20);
  fflush(stdout);
  cublasDestroy(hb);
  cudaStreamDestroy(s);
  cudaFree(x), cudaFree(w), cudaFree(h);
}

int main(int argc, char** argv) {
  // argv[1]: comma list of variants (default all); argv[2] = 1: timing only
  const std::vector<int> variants = parse_list(argc > 1 ? argv[1] : "0,7,13,15,17");
  // 0 check + time, 1 time, 2 one launch per variant (profilers), 4 launch_modes (variant -1: cuBLAS's [M, 2I]
  // GEMM; under a profiler, e.g. `ncu -k regex:nvjet --launch-count 1 gate_up_proto -1 4`, it names cuBLAS's kernel)
  const int mode = argc > 2 ? atoi(argv[2]) : 0;
  if (mode == 4) {  // launch_modes per variant; -1 = cuBLAS
    for (int v : variants) launch_modes(v);
    return 0;
  }
  if (mode == 2) {
    for (int v : variants) {
      printf("{\"variant\": %d, \"grid\": %d}\n", v, gate_up_sm90_grid(v, false, 0));
      run<__nv_bfloat16>(8192, 3072, 768, 0, v, false);
    }
    return 0;
  }
  const bool timing_only = mode == 1;
  for (int v : variants) {
    if (!timing_only) {
      run<__nv_bfloat16>(1000, 3000, 760, 3, v, false);
      run<__nv_bfloat16>(1, 136, 64, 4, v, false);
      run<__half>(333, 1000, 768, 2, v, false);
    }
    run<__nv_bfloat16>(8192, 3072, 768, 3, v, true);
    run<__nv_bfloat16>(8192, 3072, 768, 0, v, true);
    run<__nv_bfloat16>(2048, 11008, 4096, 4, v, true);
  }
  for (int v : variants) run<__nv_bfloat16>(1024, 3072, 768, 3, v, true);
  return 0;
}
