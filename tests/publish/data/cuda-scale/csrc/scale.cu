// y = alpha * x for fp32 / fp16 / bf16 tensors, on the current torch CUDA stream (torch stable ABI only).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>
#include <torch/headeronly/util/Exception.h>

using torch::stable::Tensor;

// torch builds with __CUDA_NO_HALF_CONVERSIONS__: explicit conversions only.
__device__ float to_float(float v) { return v; }
__device__ float to_float(__half v) { return __half2float(v); }
__device__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ T from_float(float v);
template <> __device__ float from_float<float>(float v) { return v; }
template <> __device__ __half from_float<__half>(float v) { return __float2half(v); }
template <> __device__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16(v); }

template <typename T>
__global__ void scale_kernel(const T* x, T* y, float alpha, int64_t n) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) y[i] = from_float<T>(alpha * to_float(x[i]));
}

template <typename T>
static void launch(const Tensor& x, Tensor& y, float alpha) {
  void* stream = nullptr;
  STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_get_current_cuda_stream(x.get_device_index(), &stream));
  const int64_t n = x.numel();
  const int threads = 256;
  const int64_t blocks = (n + threads - 1) / threads;
  if (blocks == 0) return;
  scale_kernel<T><<<blocks, threads, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const T*>(x.const_data_ptr()), static_cast<T*>(y.mutable_data_ptr()), alpha, n);
  STD_TORCH_CHECK(cudaGetLastError() == cudaSuccess, "cuda_scale: kernel launch failed");
}

Tensor scale_cuda(Tensor x, double alpha) {
  STD_TORCH_CHECK(x.is_cuda() && x.is_contiguous(), "cuda_scale: x must be a contiguous CUDA tensor");
  Tensor y = torch::stable::empty_like(x);
  switch (x.scalar_type()) {
    case torch::headeronly::ScalarType::Float: launch<float>(x, y, static_cast<float>(alpha)); break;
    case torch::headeronly::ScalarType::Half: launch<__half>(x, y, static_cast<float>(alpha)); break;
    case torch::headeronly::ScalarType::BFloat16: launch<__nv_bfloat16>(x, y, static_cast<float>(alpha)); break;
    default: STD_TORCH_CHECK(false, "cuda_scale: dtype must be float32, float16 or bfloat16");
  }
  return y;
}
