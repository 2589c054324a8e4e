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

__device__ __forceinline__ float act_fwd(float z, Act a) {
  switch (a) {
    case Act::Relu: return z > 0.f ? z : 0.f;
    case Act::Gelu: return 0.5f * z * (1.f + erff(z * 0.70710678118654752f));
    case Act::GeluTanh: {
      const float inner = 0.79788456080286536f * (z + 0.044715f * z * z * z);
      return 0.5f * z * (1.f + tanhf(inner));
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
      const float k = 0.79788456080286536f;
      const float inner = k * (z + 0.044715f * z * z * z);
      const float t = tanhf(inner);
      return 0.5f * (1.f + t) + 0.5f * z * (1.f - t * t) * k * (1.f + 3.f * 0.044715f * z * z);
    }
    case Act::Silu: {
      const float s = 1.f / (1.f + __expf(-z));
      return s * (1.f + z * (1.f - s));
    }
    default: return 1.f;
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
