"""kernel-hub: hub server, builder, publisher, loader and compatibility matrix for fused-MLP kernels."""

__all__ = ["get_kernel"]


def __getattr__(name: str):
    # Lazy: importing `registry` (e.g. for the hub server) must not import torch.
    if name == "get_kernel":
        from .loader import get_kernel

        return get_kernel
    raise AttributeError(f"module 'registry' has no attribute {name!r}")
