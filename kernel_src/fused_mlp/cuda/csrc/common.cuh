// Shared pieces of the CUDA fused-MLP kernels: activation math, dtype dispatch, argument checks,
// the current torch CUDA stream. Everything here is header-only and free of torch C++ symbols:
// tensors come in as torch::stable::Tensor and torch is reached only through its C shim.
#pragma once

// torch's stable headers look up optional shim functions with dlsym. Bind it to its glibc 2.2.5
// version (what glibc < 2.34 exports) rather than the GLIBC_2.34 default of the build machine.
#if defined(__linux__) && defined(__x86_64__)
__asm__(".symver dlsym,dlsym@GLIBC_2.2.5");
#endif

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <string>

#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>
#include <torch/headeronly/util/Exception.h>

namespace fused_mlp {

using torch::stable::Tensor;
using torch::headeronly::ScalarType;

// Activation codes shared by host and device code; the order is the one `parse_activation` maps.
enum class Act : int { None = 0, Relu = 1, Gelu = 2, GeluTanh = 3, Silu = 4 };

inline Act parse_activation(const std::string& name) {
  if (name == "none") return Act::None;
  if (name == "relu") return Act::Relu;
  if (name == "gelu") return Act::Gelu;
  if (name == "gelu_tanh") return Act::GeluTanh;
  if (name == "silu") return Act::Silu;
  STD_TORCH_CHECK(false, "fused_mlp: unknown activation '", name,
                  "'; use one of none, relu, gelu, gelu_tanh, silu");
  return Act::None;
}

// 0.5 * (1 + tanh(inner)) of the tanh GELU, written as s = sigmoid(2 * inner) = 1 / (1 + e), e = exp(-2 * inner):
// one fast exp and one fast divide instead of tanhf (which made act_and_mul compute-bound at large sizes), and no
// cancellation where 1 + tanh nears 0. e overflows to inf for z < ~-9.8, giving s = 0 like eager's tanh. Also returns
// e, for 1 - s = e * s without cancellation.
__device__ __forceinline__ float gelu_tanh_sigmoid(float z, float& e) {
  e = __expf(-1.5957691216057308f * (z + 0.044715f * z * z * z));
  return __fdividef(1.f, 1.f + e);
}

// 1 - s for s = 1 / (1 + e): e * s, except where e = inf made s = 0 (then 1).
__device__ __forceinline__ float one_minus_sigmoid(float e, float s) { return fminf(e * s, 1.f); }

// d/dz of the tanh GELU from gelu_tanh_sigmoid's s and e: with s = 0.5 * (1 + tanh), 0.5 * (1 - tanh^2) = 2 s (1 - s).
__device__ __forceinline__ float gelu_tanh_grad(float z, float s, float e) {
  return s * (1.f + 2.f * z * one_minus_sigmoid(e, s) * 0.79788456080286536f * (1.f + 3.f * 0.044715f * z * z));
}

__device__ __forceinline__ float act_fwd(float z, Act a) {
  switch (a) {
    case Act::Relu: return z > 0.f ? z : 0.f;
    case Act::Gelu: return 0.5f * z * (1.f + erff(z * 0.70710678118654752f));
    case Act::GeluTanh: {
      float e;
      return z * gelu_tanh_sigmoid(z, e);
    }
    case Act::Silu: return z / (1.f + __expf(-z));
    default: return z;
  }
}

// d act(z) / dz.
__device__ __forceinline__ float act_grad(float z, Act a) {
  switch (a) {
    case Act::Relu: return z > 0.f ? 1.f : 0.f;
    case Act::Gelu: {
      const float cdf = 0.5f * (1.f + erff(z * 0.70710678118654752f));
      const float pdf = 0.39894228040143268f * __expf(-0.5f * z * z);
      return cdf + z * pdf;
    }
    case Act::GeluTanh: {
      float e;
      const float s = gelu_tanh_sigmoid(z, e);
      return gelu_tanh_grad(z, s, e);
    }
    case Act::Silu: {
      const float s = 1.f / (1.f + __expf(-z));
      return s * (1.f + z * (1.f - s));
    }
    default: return 1.f;
  }
}

// act(z) and act'(z) together, sharing the exp / erf both need (the gated backward wants both per element).
__device__ __forceinline__ void act_fwd_grad(float z, Act a, float& f, float& d) {
  switch (a) {
    case Act::Relu: f = z > 0.f ? z : 0.f, d = z > 0.f ? 1.f : 0.f; return;
    case Act::Gelu: {
      const float cdf = 0.5f * (1.f + erff(z * 0.70710678118654752f));
      f = z * cdf, d = cdf + z * 0.39894228040143268f * __expf(-0.5f * z * z);
      return;
    }
    case Act::GeluTanh: {
      float e;
      const float s = gelu_tanh_sigmoid(z, e);
      f = z * s, d = gelu_tanh_grad(z, s, e);
      return;
    }
    case Act::Silu: {
      const float e = __expf(-z), s = 1.f / (1.f + e);
      f = z * s, d = s * (1.f + z * one_minus_sigmoid(e, s));
      return;
    }
    default: f = z, d = 1.f; return;
  }
}

template <typename T> __device__ __forceinline__ float to_f(T v);
template <> __device__ __forceinline__ float to_f<float>(float v) { return v; }
template <> __device__ __forceinline__ float to_f<__half>(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float to_f<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T> __device__ __forceinline__ T from_f(float v);
template <> __device__ __forceinline__ float from_f<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_f<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// Calls fn with a value of the CUDA element type that matches `t` (float, __half or __nv_bfloat16).
template <typename Fn>
inline void dispatch_float_types(ScalarType t, const char* op, Fn&& fn) {
  switch (t) {
    case ScalarType::Float: fn(float{}); return;
    case ScalarType::Half: fn(__half{}); return;
    case ScalarType::BFloat16: fn(__nv_bfloat16{}); return;
    default:
      STD_TORCH_CHECK(false, "fused_mlp.", op, ": unsupported dtype ", torch::headeronly::toString(t),
                      "; use float32, float16 or bfloat16");
  }
}

// Bytes per element of the float types the kernels take (float32: 4; float16, bfloat16: 2).
inline size_t element_bytes(ScalarType t) { return t == ScalarType::Float ? 4 : 2; }

inline void check_cuda_tensor(const Tensor& t, const char* op, const char* name) {
  STD_TORCH_CHECK(t.is_cuda(), "fused_mlp.", op, ": `", name,
                  "` is not on a CUDA device; the cuda backend needs CUDA tensors");
}

// The shim's dtype code: compared as is on the hot path (Tensor::scalar_type() maps it through a chain of
// shim calls); names only for the error message.
inline int32_t dtype_code(const Tensor& t) {
  int32_t code = 0;
  STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_get_dtype(t.get(), &code));
  return code;
}

inline void check_same_dtype(const Tensor& a, const Tensor& b, const char* op, const char* name) {
  if (dtype_code(a) == dtype_code(b)) return;
  STD_TORCH_CHECK(false, "fused_mlp.", op, ": `", name, "` has dtype ", torch::headeronly::toString(b.scalar_type()),
                  " but the input has ", torch::headeronly::toString(a.scalar_type()), "; cast them to one dtype");
}

inline cudaStream_t current_stream(const Tensor& t) {
  void* stream = nullptr;
  STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_get_current_cuda_stream(t.get_device_index(), &stream));
  return static_cast<cudaStream_t>(stream);
}

inline void check_launch(const char* op) {
  const cudaError_t err = cudaGetLastError();
  STD_TORCH_CHECK(err == cudaSuccess, "fused_mlp.", op, ": kernel launch failed: ", cudaGetErrorString(err));
}

inline unsigned ceil_div(long long a, long long b) { return static_cast<unsigned>((a + b - 1) / b); }

}  // namespace fused_mlp
