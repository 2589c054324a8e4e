"""kernel-hub: hub server, builder, publisher, loader and compatibility matrix for fused-MLP kernels.

Layout (docs/ARCHITECTURE.md): `spec` (shared vocabulary), `publisher` (build, sign, publish), `hub`
(the server), `client` (fetch, resolve, verify, check, load), `matrix`, `commands` + `cli` (kernel-hub).
"""

from .errors import KernelHubError, KernelLoadError

__all__ = ["KernelHubError", "KernelLoadError", "get_kernel", "kernel_report", "mlp_kernel_mapping"]


def __getattr__(name: str):
    # Lazy: importing `registry` (e.g. for the hub server) must not import torch.
    if name == "get_kernel":
        from .gcpause import gc_paused

        with gc_paused():  # the loader's imports would trigger full collections over torch's objects
            from .client.loader import get_kernel

        return get_kernel
    if name in ("kernel_report", "mlp_kernel_mapping"):  # our kernels in a transformers model
        from .client import models

        return getattr(models, name)
    raise AttributeError(f"module 'registry' has no attribute {name!r}")
