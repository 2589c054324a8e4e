"""The eager oracle and fallback of `scale`, and the check's inputs."""

from __future__ import annotations

import torch


def scale(x: torch.Tensor, alpha: float = 2.0) -> torch.Tensor:
    return alpha * x


def check_cases(gen: torch.Generator, device: str) -> list[dict]:
    x = torch.randn((3, 37, 80), generator=gen, dtype=torch.float64, device=device)
    return [{"op": "scale", "name": "3x37x80 alpha 1.5", "args": (x,), "kwargs": {"alpha": 1.5}}]


def speed_cases(device: str, dtype: torch.dtype) -> list[dict]:
    """The shape the speed check times the kernel against this reference at (inputs on `device` in `dtype`)."""
    x = torch.randn(1024, 1024, device=device, dtype=dtype)
    return [{"op": "scale", "name": "1024x1024", "args": (x,), "kwargs": {"alpha": 1.5}}]
