"""The CUDA GPU tests run against a built variant: FUSED_MLP_VARIANT_DIR names its directory
(`dist/fused-mlp/build/torch-stable-abi211-cu130-x86_64-linux`, or dist/cuda-recipe/stage from
build/cuda/build_variant.py); its `fused_mlp` package, with the compiled extension and the op namespace
baked into it, goes ahead of kernel_src on sys.path. Unset: kernel_src's package (no extension: skipped)."""

import os
import sys

VARIANT_DIR = os.environ.get("FUSED_MLP_VARIANT_DIR")
if VARIANT_DIR:
    sys.path.insert(0, VARIANT_DIR)
