"""Which implementation runs each step of the CUDA backend's ops, per GPU arch and row count.

Data only, read at build time: build/cuda/embed_cubins.py compiles this table into the extension
(`_C.abi3.so`) and embeds the Triton cubins that the table's "triton" rows need, so a call picks its
kernels in C++ with no Python per kernel. Stdlib only: the build reads it without importing torch.

Steps: `linear` (every GEMM with a bias/activation epilogue: `linear`, each `mlp` layer, the gated
down projection), `gate_up` (the gated MLP's act(x W_g^T) * (x W_u^T)), `act_and_mul`.
Implementations:
- `triton`: our Triton kernel, compiled ahead of time for the arch (fused epilogue; launched with
  programmatic dependent launch where its config says so). bf16/fp16, 16-byte aligned operands, sizes
  the cubin was specialised for; any other call takes the step's fallback.
- `cublaslt`: a cuBLASLt GEMM with the bias/relu/gelu_tanh epilogue (gelu and silu: one more kernel).
- `split`: gate_up as two `linear` steps (gate, up) into scratch, then the `act_and_mul` step.
- `cuda`: the CUDA C++ elementwise act_and_mul kernel.
FALLBACK names what runs when the chosen implementation cannot take a call (fp32, misaligned, no cubin).

Two tables, because two things decide what is fastest:
- PATHS: calls issued one by one (eager Python loops). Up to mid-size batches these are host-bound: a
  call's wall time is its host time (H200 host: a Triton launch ~4 µs, a cuBLASLt GEMM 7-14 µs more), so
  Triton kernels win there although cuBLASLt is faster on the GPU.
- GRAPH_PATHS: calls captured into a CUDA graph (a user's capture, torch.compile's cudagraphs): the host
  cost is paid once at capture, GPU time decides. An arch without graph rows uses its PATHS.
The C++ side asks the stream it launches on (cudaStreamIsCapturing) which table applies.

Keys: a step, or "op/step" for one op only (ops: linear, mlp, gated_mlp, act_and_mul), which wins over the
step's own rows. Rows: (max rows M or None for any, implementation); the first row whose bound admits M
wins. An arch without an entry uses "default". Numbers behind each choice: bench/RESULTS.md ("path table").
"""

from __future__ import annotations

STEPS = ("linear", "gate_up", "act_and_mul")
OPS = ("linear", "mlp", "gated_mlp", "act_and_mul")
IMPLS = {
    "linear": ("triton", "cublaslt"),
    "gate_up": ("triton", "split"),
    "act_and_mul": ("triton", "cuda"),
}
FALLBACK = {"linear": "cublaslt", "gate_up": "split", "act_and_mul": "cuda"}
# The Triton kernel (fused_mlp.triton) behind each step's "triton" implementation.
TRITON_KERNELS = {"linear": "linear_kernel", "gate_up": "gate_up_kernel", "act_and_mul": "act_and_mul_kernel"}

Rows = tuple[tuple[int | None, str], ...]

PATHS: dict[str, dict[str, Rows]] = {
    # H200, bf16, 2026-12-03, bench/bench_paths.py (bench/RESULTS.md "path table"): wall µs of a stream of
    # calls up to M=64, GPU µs in a graph beyond. linear (3072->768): M<=64 Triton 13.7-14.9 wall vs
    # cuBLASLt 28.8-29.3; mlp 3x1024: M<=64 Triton 22.2-28.8 vs 49.9-51.5; at M=1024 cuBLASLt's 36.3 wall is
    # its host time (GPU 17.7) while Triton's host is ~25 and its GPU 21.3; from M=4096 GPU-bound (cuBLASLt
    # 44.1 vs 55.8). gate_up: fused Triton one launch, GPU 14-17 vs split 16-19 to M=256, even at
    # 1024-4096 (34.8/34.5, 112.0/111.0), split at 8192 (216.0 vs 223.3). act_and_mul: CUDA 1.8-2.7 vs
    # Triton 2.6-2.8 to M=256 (wall equal), Triton from 1024 (8192: 37.2 vs 40.0).
    "sm_90a": {
        "linear": ((64, "triton"), (None, "cublaslt")),
        "mlp/linear": ((1024, "triton"), (None, "cublaslt")),
        "gate_up": ((4096, "triton"), (None, "split")),
        "act_and_mul": ((256, "cuda"), (None, "triton")),
    },
    # Not measured on other archs yet: the vendor library and the portable CUDA kernels.
    "default": {
        "linear": ((None, "cublaslt"),),
        "gate_up": ((None, "split"),),
        "act_and_mul": ((None, "cuda"),),
    },
}

GRAPH_PATHS: dict[str, dict[str, Rows]] = {
    # H200, GPU µs in a graph (same sweep): linear Triton only at M=1 (24.1 vs 28.3 summed; PDL hides its
    # launch), cuBLASLt from 16 (18.6 vs 21.7) to 8192 (132.3 vs 177.7); gate_up fused Triton to M=256.
    "sm_90a": {
        "linear": ((1, "triton"), (None, "cublaslt")),
        "gate_up": ((256, "triton"), (None, "split")),
        "act_and_mul": ((256, "cuda"), (None, "triton")),
    },
}


def split_key(key: str) -> tuple[str | None, str]:
    """(op or None for every op, step) of a table key ("mlp/linear" or "linear")."""
    op, _, step = key.rpartition("/")
    return op or None, step


def triton_archs() -> dict[str, set[str]]:
    """arch -> the Triton kernel names its rows use in either table (the cubins the build embeds for it)."""
    out: dict[str, set[str]] = {}
    for table in (PATHS, GRAPH_PATHS):
        for arch, keys in table.items():
            if arch == "default":
                continue
            for key, rows in keys.items():
                if any(impl == "triton" for _, impl in rows):
                    out.setdefault(arch, set()).add(TRITON_KERNELS[split_key(key)[1]])
    return out
