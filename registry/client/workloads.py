"""The fused-MLP kernel's standard workloads: one list for `kernel-hub bench` and the loader's speed check.

bench/ times the real-model presets of `registry.spec.presets` (this module's two shapes among them) and
uses `as_call` and `leaves` from here.

Shapes of a transformer MLP block: a 3-layer `mlp` of Linear(1024)+ReLU, a GeGLU-tanh `gated_mlp` (H=768,
I=3072) and its `act_and_mul` [M, 3072], at decode (M=16) to prefill (M=8192) row counts, forward and
forward+backward. `SPEED_CHECK` picks the few the loader times on a GPU before serving a kernel;
`CPU_SPEED_CHECK` are small shapes of the same ops, so a CPU build (`backend="cpu"`) takes the same path
in CPU CI. Inputs are fresh random numbers (never zeros), weights scaled so activations stay O(1).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

KINDS = {"mlp": "mlp", "gated": "gated_mlp", "act_and_mul": "act_and_mul"}  # kind -> the public op it calls
DEFAULT_DIMS = {"mlp": (1024,), "gated": (768, 3072), "act_and_mul": (3072,)}


@dataclass(frozen=True)
class Workload:
    """One op on one shape: `kind` mlp | gated | act_and_mul, `rows` = M, `dims` the feature sizes."""

    kind: str
    rows: int
    train: bool = False  # forward + backward (grads of every input and weight)
    dims: tuple[int, ...] = ()  # () = DEFAULT_DIMS[kind]

    @property
    def shape(self) -> tuple[int, ...]:
        return self.dims or DEFAULT_DIMS[self.kind]

    @property
    def op(self) -> str:
        return KINDS[self.kind]

    @property
    def name(self) -> str:
        """The long name bench tables and speed records use, e.g. `gated GeGLU-tanh H=768 I=3072 M=8192`."""
        s = self.shape
        what = {
            "mlp": f"mlp 3xLinear({s[0]})+ReLU",
            "gated": f"gated GeGLU-tanh H={s[0]} I={s[-1]}",
            "act_and_mul": f"act_and_mul gelu_tanh [M,{s[0]}]",
        }[self.kind]
        return f"{what} M={self.rows}" + (" fwd+bwd" if self.train else "")

    @property
    def label(self) -> str:
        """The short name in reasons: `gated_mlp M=8192`."""
        return f"{self.op} M={self.rows}" + (" fwd+bwd" if self.train else "")

    def flops_bytes(self, elem: int) -> tuple[float, float]:
        """FLOPs and the bytes that must move at least, for an element size of `elem` bytes."""
        m, f, s = self.rows, 3 if self.train else 1, self.shape
        if self.kind == "mlp":
            d = s[0]
            return f * 2 * m * d * d * 3, elem * (f * 2 * m * d + 3 * d * d + 3 * d)
        if self.kind == "gated":
            h, i = s
            return f * 6 * m * h * i, elem * (f * 2 * m * h + 3 * h * i)
        return 5 * m * s[0], elem * 3 * m * s[0] * f


WORKLOADS = (
    Workload("mlp", 16),
    Workload("mlp", 1024),
    Workload("mlp", 4096),
    Workload("mlp", 8192),
    Workload("gated", 16),
    Workload("gated", 1024),
    Workload("gated", 8192),
    Workload("act_and_mul", 8192),
    Workload("mlp", 1024, train=True),
    Workload("gated", 8192, train=True),
)
# Decode and prefill sizes of both GEMM ops: where launch cost and where the GEMMs decide.
SPEED_CHECK = (Workload("mlp", 16), Workload("mlp", 8192), Workload("gated", 1024), Workload("gated", 8192))
# A few ms per call on a CPU: long enough that a Python frame or two of dispatch is noise, short enough for CI.
CPU_SPEED_CHECK = (Workload("mlp", 128, dims=(512,)), Workload("gated", 128, dims=(256, 1024)))


def speed_workloads(device: str) -> tuple[Workload, ...]:
    return SPEED_CHECK if device == "cuda" else CPU_SPEED_CHECK


def bench_workloads(device: str) -> tuple[Workload, ...]:
    """What `kernel-hub bench` times: every standard workload on a GPU, the small CPU shapes on a CPU."""
    return WORKLOADS if device == "cuda" else CPU_SPEED_CHECK


def make_inputs(w: Workload, dtype, device: str = "cuda") -> dict:
    """Fresh random inputs (never zeros); weights scaled by fan-in^-0.5. Leaves require grad for `train`."""
    import torch  # on use: the matrix (hub pages) reads the workload list without torch

    def rnd(*shape, scale=1.0):
        return (torch.randn(*shape, device=device) * scale).to(dtype).requires_grad_(w.train)

    s = w.shape
    if w.kind == "mlp":
        d = s[0]
        return {
            "x": rnd(w.rows, d),
            "ws": [rnd(d, d, scale=d**-0.5) for _ in range(3)],
            "bs": [rnd(d) for _ in range(3)],
        }
    if w.kind == "gated":
        h, i = s
        return {"x": rnd(w.rows, h), "wg": rnd(i, h, scale=h**-0.5), "wu": rnd(i, h, scale=h**-0.5),
                "wd": rnd(h, i, scale=i**-0.5)}  # fmt: skip
    return {"gate": rnd(w.rows, s[0]), "up": rnd(w.rows, s[0])}


def leaves(a: dict) -> list:
    return [t for v in a.values() for t in (v if isinstance(v, list) else [v])]


def api_forward(w: Workload, a: dict, kernel):
    """The workload through the package API of `kernel` (a loaded variant, the fallback or `reference`)."""
    if w.kind == "mlp":
        return kernel.mlp(a["x"], a["ws"], a["bs"], "relu")
    if w.kind == "gated":
        return kernel.gated_mlp(a["x"], a["wg"], a["wu"], a["wd"], "gelu_tanh")
    return kernel.act_and_mul(a["gate"], a["up"], "gelu_tanh")


def as_call(w: Workload, a: dict, forward: Callable[[], object]) -> Callable[[], object]:
    """One forward (inference, no grad) or one forward + backward (grads of every leaf, no accumulation)."""
    import torch  # on use, as in make_inputs

    if not w.train:

        def infer():
            with torch.no_grad():
                return forward()

        return infer
    params = leaves(a)
    upstream = torch.randn_like(forward())

    def train():
        return torch.autograd.grad(forward(), params, upstream)

    return train
