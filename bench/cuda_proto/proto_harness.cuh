// What the standalone prototypes of bench/cuda_proto (and bench/cutlass_proto) share: a CUDA error check that prints
// one JSON line and exits, deterministic fill of a 16/32-bit buffer, the error sums against an fp32 reference, GPU µs per call from CUDA-graph replay, and the variant list
// of argv[1].
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "common.cuh"

#define CK(x)                                                                       \
  do {                                                                              \
    cudaError_t e_ = (x);                                                           \
    if (e_ != cudaSuccess) {                                                        \
      printf("{\"error\": \"%s at line %d\"}\n", cudaGetErrorString(e_), __LINE__); \
      exit(1);                                                                      \
    }                                                                               \
  } while (0)

// p[i] = scale * a hash of (i, seed) in [-1, 1): reproducible, never all zeros.
template <typename T>
__global__ void fill(T* p, long long n, unsigned seed, float scale) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    unsigned x = unsigned(i) * 2654435761u ^ seed;
    x ^= x >> 13, x *= 0x5bd1e995u, x ^= x >> 15;
    p[i] = fused_mlp::from_f<T>(scale * ((x & 0xFFFFFF) / float(0x800000) - 1.f));
  }
}

// Error sums of an output against an fp32 reference: out[0] += sum (h - ref)^2, out[1] += sum ref^2, out[2] += the
// count of non-finite h (so NaN never passes). Launch over any grid; zero `out` first.
template <typename T>
__global__ void compare(const T* h, const float* ref, long long n, double* out) {
  double e = 0, r = 0, bad = 0;
  for (long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x; t < n; t += (long long)gridDim.x * blockDim.x) {
    const float v = fused_mlp::to_f<T>(h[t]);
    if (!isfinite(v)) bad += 1;
    const double d = double(v) - ref[t];
    e += d * d, r += double(ref[t]) * ref[t];
  }
  atomicAdd(&out[0], e), atomicAdd(&out[1], r), atomicAdd(&out[2], bad);
}

// Median over 25 replays of one graph holding `calls` calls of body(stream), per call, after a warm-up call.
template <typename Body>
float graph_us(int calls, Body&& body) {
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  body(s);
  CK(cudaStreamSynchronize(s));
  cudaGraph_t gr;
  cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < calls; ++i) body(s);
  CK(cudaStreamEndCapture(s, &gr));
  CK(cudaGraphInstantiate(&ge, gr, 0));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  std::vector<float> t;
  for (int r = 0; r < 25; ++r) {
    CK(cudaEventRecord(a, s));
    CK(cudaGraphLaunch(ge, s));
    CK(cudaEventRecord(b, s));
    CK(cudaEventSynchronize(b));
    float ms;
    CK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms * 1000.f / calls);
  }
  std::sort(t.begin(), t.end());
  cudaEventDestroy(a), cudaEventDestroy(b);
  cudaGraphExecDestroy(ge), cudaGraphDestroy(gr), cudaStreamDestroy(s);
  return t[t.size() / 2];
}

// "3,-1,7" -> {3, -1, 7}
inline std::vector<int> parse_list(const char* p) {
  std::vector<int> out;
  while (*p) {
    out.push_back(atoi(p));
    while (*p && *p != ',') ++p;
    if (*p) ++p;
  }
  return out;
}
