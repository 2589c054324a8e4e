"""Forcing a step of the CUDA backend's path table from a GPU test (`cuda_set_path`), shared by tests/cuda."""

from contextlib import contextmanager

import torch
from fused_mlp._build_info import OPS_NAMESPACE


@contextmanager
def forced(step: str, impl: str):
    """Every call of `step` runs `impl` (or its fallback where it cannot take the call) inside the block;
    "table" runs what the path table chooses."""
    ns = getattr(torch.ops, OPS_NAMESPACE)
    before = ns.cuda_set_path(step, impl)
    try:
        yield
    finally:
        ns.cuda_set_path(step, before)
