// Allocation for the ops: outputs and one scratch buffer per call, through the C shim's
// aoti_torch_empty_strided (torch's caching allocator on the current stream, no dispatcher round trip,
// so it is cheap and works inside CUDA graph capture).
#pragma once

#include "common.cuh"

#include <cstdint>
#include <initializer_list>
#include <optional>

namespace fused_mlp {

// A new tensor of `sizes` and `strides` on `like`'s device; dtype `dtype` (a shim dtype code) or like's.
inline Tensor empty_strided_on(const Tensor& like, const int64_t* sizes, const int64_t* strides, int64_t ndim,
                               int32_t dtype = -1) {
  int32_t device_type = 0, device_index = 0;
  if (dtype < 0) STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_get_dtype(like.get(), &dtype));
  STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_get_device_type(like.get(), &device_type));
  STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_get_device_index(like.get(), &device_index));
  AtenTensorHandle out = nullptr;
  STABLE_TORCH_ERROR_CODE_CHECK(
      aoti_torch_empty_strided(ndim, sizes, strides, dtype, device_type, device_index, &out));
  return Tensor(out);
}

// A new contiguous tensor of `sizes` on `like`'s device; dtype `dtype` (a shim dtype code) or like's.
inline Tensor empty_on(const Tensor& like, const int64_t* sizes, int64_t ndim, int32_t dtype = -1) {
  int64_t strides[8];
  STD_TORCH_CHECK(ndim <= 8, "fused_mlp: tensors of more than 8 dims are not supported, got ", ndim);
  int64_t step = 1;
  for (int64_t d = ndim; d-- > 0;) {
    strides[d] = step;
    step *= sizes[d] > 1 ? sizes[d] : 1;
  }
  return empty_strided_on(like, sizes, strides, ndim, dtype);
}

inline Tensor empty_on(const Tensor& like, std::initializer_list<int64_t> sizes) {
  return empty_on(like, sizes.begin(), static_cast<int64_t>(sizes.size()));
}

// x's shape with the last dim replaced by `last`: the output of a row-wise op on x.
inline Tensor empty_rows_like(const Tensor& x, int64_t last) {
  const auto s = x.sizes();
  int64_t sizes[8];
  const int64_t nd = static_cast<int64_t>(s.size());
  STD_TORCH_CHECK(nd <= 8, "fused_mlp: inputs of more than 8 dims are not supported, got ", nd);
  for (int64_t d = 0; d < nd; ++d) sizes[d] = s[d];
  sizes[nd - 1] = last;
  return empty_on(x, sizes, nd);
}

// Regions of one scratch allocation: reserve sizes first, allocate once, then take pointers. Every region
// starts 256-byte aligned (the allocator's blocks are at least that), as kernels and cuBLASLt want.
class Scratch {
 public:
  size_t reserve(size_t bytes) {
    const size_t at = total_;
    total_ += (bytes + 255) / 256 * 256;
    return at;
  }
  void allocate(const Tensor& like) {
    if (total_ == 0) return;
    const int64_t n = static_cast<int64_t>(total_);
    buffer_ = empty_on(like, &n, 1, aoti_torch_dtype_uint8());
    base_ = static_cast<char*>(buffer_->mutable_data_ptr());
  }
  // Small calls: the output and the scratch in ONE allocation (one allocator call less on the host-bound
  // path). The output is a tensor over the buffer's first bytes; it keeps the scratch bytes alive with it,
  // so this is only for scratch up to kShareBytes. Returns the output, shaped `sizes` in like's dtype.
  static constexpr size_t kShareBytes = 1u << 20;
  bool can_share() const { return total_ <= kShareBytes; }
  Tensor allocate_with_output(const Tensor& like, const int64_t* sizes, int64_t ndim, size_t elem_bytes) {
    int64_t strides[8], numel = 1;
    for (int64_t d = ndim; d-- > 0;) {
      strides[d] = numel;
      numel *= sizes[d];
    }
    const int64_t head = static_cast<int64_t>((numel * elem_bytes + 255) / 256 * 256);
    const int64_t total = (head + static_cast<int64_t>(total_) + static_cast<int64_t>(elem_bytes) - 1) /
                          static_cast<int64_t>(elem_bytes);
    buffer_ = empty_on(like, &total, 1);
    AtenTensorHandle out = nullptr;
    STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch__reinterpret_tensor(buffer_->get(), ndim, sizes, strides, 0, &out));
    base_ = static_cast<char*>(buffer_->mutable_data_ptr()) + head;
    return Tensor(out);
  }
  void* at(size_t offset) const { return base_ ? base_ + offset : nullptr; }

 private:
  size_t total_ = 0;
  std::optional<Tensor> buffer_;  // holds the memory until the op returns (stream-ordered reuse after that)
  char* base_ = nullptr;
};

}  // namespace fused_mlp
