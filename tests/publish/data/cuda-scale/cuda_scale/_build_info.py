"""Per-build identity; `kernel-hub build` rewrites it per variant (OPS_NAMESPACE = TORCH_EXTENSION_NAME)."""

OPS_NAMESPACE = "cuda_scale_dev"
BUILD_ID = "dev"
