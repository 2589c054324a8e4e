"""Which implementation runs each step of the CUDA backend's ops, per GPU arch and row count.

Data only, read at build time: build/cuda/embed_cubins.py compiles this table into the extension
(`_C.abi3.so`) and embeds the Triton cubins that the table's "triton" rows need, so a call picks its
kernels in C++ with no Python per kernel. Stdlib only: the build reads it without importing torch.

Steps: `linear` (every GEMM with a bias/activation epilogue: `linear`, each `mlp` layer, the gated
down projection), `gate_up` (the gated MLP's act(x W_g^T) * (x W_u^T)), `act_and_mul`, `chain` (the whole
forward of `mlp` or `gated_mlp`: one persistent kernel, or its layers one by one through the other steps) and
`chain_backward` (the whole backward of `mlp`, `linear` or `gated_mlp`: one persistent kernel, or cuBLASLt GEMMs
per layer).
Implementations:
- `triton`: our portable Triton kernel, compiled ahead of time for the arch (fused epilogue; launched with
  programmatic dependent launch where its config says so). bf16/fp16, 16-byte aligned operands, sizes
  the cubin was specialised for; any other call takes the step's fallback.
- `tma`: our Hopper Triton kernel (fused_mlp/triton/hopper.py: TMA + wgmma, persistent grid of one program
  per SM, tile alternatives by last-wave fill), for archs whose Triton tables ship it (sm_90a). bf16/fp16,
  16-byte aligned bases and row strides (K, N multiples of 8); else the step's fallback. Its `gate_up`
  also stores the pre-activations (g, u) for backward in one pass (training forward).
- `cublaslt`: a cuBLASLt GEMM with the bias/relu/gelu_tanh epilogue (gelu and silu: one more kernel).
- `split`: gate_up as two `linear` steps (gate, up) into scratch, then the `act_and_mul` step.
- `cuda`: the CUDA C++ elementwise act_and_mul kernel.
- `persistent`: the CUDA C++ chain kernel (csrc/chain.h): every layer in one cooperative launch, each
  program's slices of all the weights copied to shared memory at its start, a grid barrier between layers.
  bf16/fp16, 1-64 rows, at most 8 layers, every layer's out dim a multiple of 8 and in dim of 16, 16-byte
  aligned operands, and the slices must fit in shared memory; else `layers`. For `chain_backward`, the CUDA C++
  backward kernel (csrc/chain_backward.cu): per layer dX and dW (+ the bias gradient) in one cooperative launch,
  a grid barrier between layers (the gated MLP: dh, then dg/du from the saved (g, u) as dh is stored, then dx
  and dW_gate|up); bf16/fp16, 1-64 rows, at most 8 layers, acts none/relu (gated: any), every dim a multiple of
  16, 16-byte aligned operands, and the slices must fit in shared memory (the gated 768x3072 at 1-16 rows); else
  `layers`.
- `layers`: each layer as its own steps (the `linear` / `gate_up` rows decide how); for `chain_backward`, each
  layer's dW and dX GEMMs on cuBLASLt (the bias gradient in the dW GEMM) and the activation's derivative (the
  gated MLP: its dg/du pass).
FALLBACK names what runs when the chosen implementation cannot take a call (fp32, misaligned, no cubin).

Two tables, because two things decide what is fastest:
- PATHS: calls issued one by one (eager Python loops). Up to mid-size batches these are host-bound: a
  call's wall time is its host time (H200 host: a Triton launch ~4 µs, a cuBLASLt GEMM 7-14 µs more), so
  Triton kernels win there although cuBLASLt is faster on the GPU.
- GRAPH_PATHS: calls captured into a CUDA graph (a user's capture, torch.compile's cudagraphs): the host
  cost is paid once at capture, GPU time decides. An arch without graph rows uses its PATHS.
The C++ side asks the stream it launches on (cudaStreamIsCapturing) which table applies.

Keys: a step, or "op/step" for one op only (ops: linear, mlp, gated_mlp, act_and_mul, and gated_mlp_train: the
gated MLP's training forward, which also stores (g, u)), which wins over the step's own rows. Rows: (max rows M or None for any, implementation); the first row whose bound admits M
wins. An arch without an entry uses "default". Numbers behind each choice: bench/RESULTS.md ("path table").
"""

from __future__ import annotations

STEPS = ("linear", "gate_up", "act_and_mul", "chain", "chain_backward")
OPS = ("linear", "mlp", "gated_mlp", "act_and_mul", "gated_mlp_train")
IMPLS = {
    "linear": ("triton", "tma", "cublaslt"),
    "gate_up": ("triton", "tma", "split"),
    "act_and_mul": ("triton", "cuda"),
    "chain": ("persistent", "layers"),
    "chain_backward": ("persistent", "layers"),
}
# The steps each op runs, in the order build_info reports them (cuda_build_info's "paths" keys "<op>/<step>");
# compiled into the extension beside the table, and what the tests check every op's choices over.
OP_STEPS = {
    "linear": ("linear", "chain_backward"),
    "mlp": ("chain", "linear", "chain_backward"),
    "gated_mlp": ("chain", "gate_up", "linear", "chain_backward"),
    "act_and_mul": ("act_and_mul",),
    "gated_mlp_train": ("chain", "gate_up", "linear"),
}
FALLBACK = {
    "linear": "cublaslt",
    "gate_up": "split",
    "act_and_mul": "cuda",
    "chain": "layers",
    "chain_backward": "layers",
}
# The Triton kernel (fused_mlp.triton) and its shipped role (aot_build.ShippedRow.role) behind each
# (step, implementation) that runs Triton cubins. The build embeds every one of them that the arch's AOT
# build ships, for every arch with rows of its own here, so `cuda_set_path` can force any of them
# (tests, bench/bench_paths.py) even where the table does not choose it.
TRITON_KERNELS = {
    ("linear", "triton"): ("linear_kernel", "linear"),
    ("linear", "tma"): ("tma_gemm_kernel", "tma_linear"),
    ("gate_up", "triton"): ("gate_up_kernel", "gate_up"),
    ("gate_up", "tma"): ("tma_gate_up_kernel", "tma_gate_up"),
    ("act_and_mul", "triton"): ("act_and_mul_kernel", "act_and_mul"),
}

Rows = tuple[tuple[int | None, str], ...]

PATHS: dict[str, dict[str, Rows]] = {
    # H200, bf16, 2026-12-03, bench/bench_paths.py (bench/RESULTS.md "path table"): wall µs of a stream of
    # calls up to M=64, GPU µs in a graph beyond. linear (3072->768): M<=64 Triton 13.7-14.9 wall vs
    # cuBLASLt 28.8-29.3; mlp 3x1024: M<=64 Triton 22.2-28.8 vs 49.9-51.5; at M=1024 cuBLASLt's 36.3 wall is
    # its host time (GPU 17.7) while Triton's host is ~25 and its GPU 21.3; from M=4096 GPU-bound (cuBLASLt
    # 44.1 vs 55.8). gate_up: fused Triton one launch, GPU 14-17 vs split 16-19 to M=256, even at
    # 1024-4096 (34.8/34.5, 112.0/111.0), split at 8192 (216.0 vs 223.3). act_and_mul: CUDA 1.8-2.7 vs
    # Triton 2.6-2.8 to M=256 (wall equal). Since its tanh GELU went from tanhf to the exp form (2026-12-04,
    # bench/act_mul_sweep.py, GPU µs in a graph): CUDA to 2048 rows (1024: 4.39 vs 4.93), Triton beyond (4096:
    # 19.85 vs 20.07; 8192: 37.31 vs 37.71; before the change CUDA took 40.0 there). Since the Triton kernels'
    # tanh GELU took the same sigmoid form and the cubin 1024-element blocks of 4 warps (2026-12-04 17:53 UTC,
    # bench_paths): Triton at every M, GPU 1.19-7.14 vs CUDA 1.69-8.06 µs at 1-2048 rows, 18.78 / 36.65 vs 20.12 /
    # 37.71 at 4096 / 8192; wall 9.1-9.8 vs 9.6-10.1 (one outlier: 13.8 vs 10.1 at 16 rows). gate_up above 256
    # rows: the Hopper kernel (see GRAPH_PATHS; wall at 1024 / 2048 rows: 33.5 / 57.3 vs split 37.1 / 62.0).
    "sm_90a": {
        "linear": ((64, "triton"), (None, "cublaslt")),
        "mlp/linear": ((1024, "triton"), (None, "cublaslt")),
        "gate_up": ((256, "triton"), (None, "tma")),
        "gated_mlp_train/gate_up": ((2048, "split"), (None, "tma")),  # see GRAPH_PATHS
        "act_and_mul": ((None, "triton"),),
        # One launch instead of one per layer: wall at 1-64 rows (bench_paths, 2026-12-03 20:54 UTC) mlp 3x1024
        # 19.6-21.2 vs 27.6-28.7 µs, gated 768x3072 16.1-16.4 vs 19.4-19.6 at 1-16 rows (beyond, that shape
        # falls back: 384 tiles of 8 columns exceed the kernel's 2 per SM at 17-32 rows).
        "chain": ((64, "persistent"), (None, "layers")),
        # Wall µs of fwd+bwd, one call at a time (H200, 2026-12-06, bench_paths, bench/RESULTS.md session 35), summed
        # over mlp 3x1024 relu and linear 768->3072 relu: 262.7 / 235.0 / 232.4 / 237.8 / 220.8 / 231.1 vs the layers'
        # 331.4 / 306.1 / 297.1 / 301.1 / 322.7 / 318.6 at 1 / 8 / 16 / 32 / 48 / 64 rows (run 4). A 32-layer mlp
        # training step (get_kernel, run 2): 3776-3809 vs 5275-5328 µs wall at 1 / 16 / 32 rows, eager 7244-7946.
        "chain_backward": ((64, "persistent"), (None, "layers")),
        # The gated MLP (H100, 2026-12-07, session 36 run 1, bench/RESULTS.md): a 32-layer gated training step
        # (H=768, I=3072) 4716 / 4955 µs wall at 1 / 16 rows vs the layers' 7622 / 6093 (eager 12174-15916 on
        # that host); fwd+bwd of one op 162 / 273 vs 252 / 352. From 17 rows its 384 down-projection tiles need
        # more than two per program (the kernel refuses): the layers.
        "gated_mlp/chain_backward": ((16, "persistent"), (None, "layers")),
    },
    # Not measured on other archs yet: the vendor library and the portable CUDA kernels.
    "default": {
        "linear": ((None, "cublaslt"),),
        "gate_up": ((None, "split"),),
        "act_and_mul": ((None, "cuda"),),
        "chain": ((None, "layers"),),
        "chain_backward": ((None, "layers"),),
    },
}

GRAPH_PATHS: dict[str, dict[str, Rows]] = {
    # H200, GPU µs in a graph (same sweep): linear Triton only at M=1 (24.1 vs 28.3 summed; PDL hides its
    # launch), cuBLASLt from 16 (18.6 vs 21.7) to 8192 (132.3 vs 177.7); gate_up fused Triton to M=256.
    # gate_up from 257 rows (both tables): the Hopper kernel, one GEMM per tile over both weights (2026-12-03
    # 18:39 UTC sweep, whole gated_mlp H=768 I=3072 in a graph: 1024 rows 33.3 vs split 34.4 and portable
    # 35.1; 2048: 56.6 vs 57.2; 4096: 104.1 vs 111.3; 8192: 202.6 vs 217.4 and 229.2; since the Triton kernels'
    # sigmoid-form GELU, 2026-12-04 17:48 UTC: 1024 rows 30.5 vs 34.9 and 34.4, 2048: 50.1 vs 59.4, 4096: 94.0 vs
    # 111.3, 8192: 177.5 vs 217.4 and 224.9). At 256 rows the
    # portable kernel (16.5 vs 18.5). The linear Hopper kernel loses to cuBLASLt on every measured shape
    # (8192x1024x1024: 29.5 vs 26.5; 8192x768x3072: 58.5 vs 52.1). The training forward also stores (g, u):
    # split (its GEMMs write them anyway; the portable kernel keeps them in registers only, and the
    # Hopper kernel's extra stores are not overlapped with its main loop: gate/up alone at 8192 rows 161.3 vs
    # 117.4 + 37.2 µs, at 1024 rows 28.6 vs 18.6 + 4.9; bench/gate_up_single_dot.py, 2026-12-03). Since the
    # sigmoid-form GELU the Hopper kernel wins from 4096 rows (whole training forward, bench_paths, H100,
    # 2026-12-06, bench/RESULTS.md "Session 31"): 4096 rows 108.9 vs split 120.3, 8192: 231.1 vs 247.0; up to 2048
    # rows split (1024: 36.5 vs 38.7, 2048: 59.0 vs 59.9).
    "sm_90a": {
        "linear": ((1, "triton"), (None, "cublaslt")),
        "gate_up": ((256, "triton"), (None, "tma")),
        "gated_mlp_train/gate_up": ((2048, "split"), (None, "tma")),
        "act_and_mul": ((None, "triton"),),
        # GPU µs in a graph (bench/chain_cost.py and bench_paths, 2026-12-03 20:54 UTC): mlp 3x1024 1 row 9.8 vs
        # 15.8, 8 rows 10.9 vs 11.9, 16 rows 11.8 vs 12.0, 32 rows 13.9 vs 12.0; with 8 copies of the weights
        # called in turn (weights from HBM, as in a model) 82 vs 159 (1 row), 96 vs 113 (16 rows), 145 vs 117
        # (64 rows). gated 768x3072: 1 row 10.4 vs 15.2 (8 copies: 87 vs 125), 8 rows 11.3 vs 10.0, 16 rows
        # 12.8 vs 9.9 (8 copies: 103 vs 100): its K=3072 down projection reads all of h in each of 96 programs.
        "mlp/chain": ((16, "persistent"), (None, "layers")),
        "chain": ((1, "persistent"), (None, "layers")),
        # GPU µs in a graph of fwd+bwd (bench_paths, session 35 run 1): mlp 3x1024 relu 29.5 / 31.4 / 32.9 / 37.5 /
        # 46.9 vs layers 44.5 / 38.9 / 39.5 / 40.2 / 42.0 at 1 / 8 / 16 / 32 / 48 rows; linear 768->3072 relu 22.2 vs
        # 24.2 at 1 row, then behind (16 rows: 22.8 vs 17.5; not analysed). A 32-layer mlp training step in a graph
        # (run 2): 1105 / 1233 / 1432 vs 1640 / 1518 / 1625 µs at 1 / 16 / 32 rows.
        "mlp/chain_backward": ((32, "persistent"), (None, "layers")),
        # The gated MLP's one launch is behind the layers on the GPU (session 36 run 1, H100): fwd+bwd 50.7 / 57.8
        # / 59.3 vs 42.7 / 47.3 / 46.5 µs at 1 / 8 / 16 rows; a 32-layer gated training step at 1 row 1797 vs 1732.
        "gated_mlp/chain_backward": ((None, "layers"),),
        "chain_backward": ((1, "persistent"), (None, "layers")),
    },
}


def split_key(key: str) -> tuple[str | None, str]:
    """(op or None for every op, step) of a table key ("mlp/linear" or "linear")."""
    op, _, step = key.rpartition("/")
    return op or None, step


def triton_archs() -> dict[str, set[tuple[str, str]]]:
    """arch -> the (kernel, role) pairs of TRITON_KERNELS, for every arch with rows of its own in either table
    (the cubins the build embeds for it, where the arch's AOT build ships that role)."""
    archs = {arch for table in (PATHS, GRAPH_PATHS) for arch in table if arch != "default"}
    return {arch: set(TRITON_KERNELS.values()) for arch in sorted(archs)}
