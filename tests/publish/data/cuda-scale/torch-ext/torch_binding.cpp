// Registers the op under the build's namespace (TORCH_EXTENSION_NAME = _build_info.OPS_NAMESPACE).
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/tensor.h>

torch::stable::Tensor scale_cuda(torch::stable::Tensor x, double alpha);

STABLE_TORCH_LIBRARY(TORCH_EXTENSION_NAME, m) { m.def("scale(Tensor x, float alpha) -> Tensor"); }

STABLE_TORCH_LIBRARY_IMPL(TORCH_EXTENSION_NAME, CUDA, m) { m.impl("scale", TORCH_BOX(&scale_cuda)); }
