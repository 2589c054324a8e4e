"""Which implementation runs each step of the CUDA backend's ops, per GPU arch, row count and weight size.

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
- `gemv`: our decode Triton kernels (fused_mlp/triton/decode.py: few rows, weights streamed once). No table
  row names it: a forward `linear` / `gate_up` (no (g, u) store) takes it before the table whenever the arch
  has decode rows (`configs.DECODE_LINEAR` / `DECODE_GATE_UP`) admitting its rows and its weights are at
  least `configs.DECODE_MIN_WEIGHT_BYTES[arch]`: a rule by rows and bytes, so unseen widths take it too.
  Same operand rules as `triton`; a call it cannot take goes to the table's choice. `cuda_set_path` forcing
  another implementation, or FUSED_MLP_CUDA_DISABLE=gemv, turns it off.
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
K-major weights (`linear` and `mlp` given the transpose view of a contiguous [in, out] tensor, as GPT-2's Conv1D
keeps it) are read in place by cuBLASLt's transpose flag whatever the table says, forward and backward: the
Triton cubins, gemv and the persistent kernels read weights row-major, so `linear` runs `cublaslt` and `chain` /
`chain_backward` run `layers` for such a call.

Two tables, because two things decide what is fastest:
- PATHS: calls issued one by one (eager Python loops). Up to mid-size batches these are host-bound: a
  call's wall time is its host time, and a Triton launch costs less host time than a cuBLASLt GEMM, so
  Triton kernels win there although cuBLASLt is faster on the GPU.
- GRAPH_PATHS: calls captured into a CUDA graph (a user's capture, torch.compile's cudagraphs): the host
  cost is paid once at capture, GPU time decides. An arch without graph rows uses its PATHS.
The C++ side asks the stream it launches on (cudaStreamIsCapturing) which table applies.

Keys: a step, or "op/step" for one op only (ops: linear, mlp, gated_mlp, act_and_mul, and gated_mlp_train: the
gated MLP's training forward, which also stores (g, u)), which wins over the step's own rows. Rows: (max rows M
or None for any, implementation), or (max rows M or None, implementation, min weight bytes): searched in order,
the first row that admits the call wins; a row admits M <= its max rows, and with a third element only calls
whose weight bytes are at least that many (what is fastest changes with the weights' size: rows measured on
the project's 2-9 MiB weights need not hold at real models' widths). A key's last row admits every call:
(None, implementation). An arch without an entry uses "default". cuda_build_info reports the choices per M for
small weights ("paths") and at each weight bound ("paths_by_weight"). The measurements behind each row:
bench/BENCHMARKS.md ("Path table"), from bench/bench_paths.py.
Weight bytes of a call, per step (element size of its dtype, the decode rule's numbers for linear and gate_up):
- `linear`: N x K of its weight (each `mlp` layer, the gated down projection and split's gate and up GEMMs
  alone);
- `gate_up`: 2 x I x K (gate and up together);
- `act_and_mul`: inside split, the gate_up's 2 x I x K; the `act_and_mul` op has no weights: 0;
- `chain`: the largest layer's (a gated layer counts gate and up together, as gate_up does; a chain longer than
  the persistent kernel's 8 layers runs its layers anyway, so its first 8 are looked at);
- `chain_backward`: the largest layer's, as `chain`.
"""

from __future__ import annotations

STEPS = ("linear", "gate_up", "act_and_mul", "chain", "chain_backward")
OPS = ("linear", "mlp", "gated_mlp", "act_and_mul", "gated_mlp_train")
IMPLS = {
    "linear": ("triton", "tma", "cublaslt", "gemv"),
    "gate_up": ("triton", "tma", "split", "gemv"),
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
    ("linear", "gemv"): ("gemv_linear_kernel", "gemv_linear"),
    ("gate_up", "gemv"): ("gemv_gate_up_kernel", "gemv_gate_up"),
}

Rows = tuple[tuple[int | None, str] | tuple[int | None, str, int], ...]

# A row's min weight bytes for real models' widths (e.g. `(2048, "split", LARGE_WEIGHT_BYTES)`): the decode
# rule's threshold on sm_90a (configs.DECODE_MIN_WEIGHT_BYTES, which tests/cuda/test_embed.py keeps equal; this
# module stays stdlib-only, so it cannot import it).
LARGE_WEIGHT_BYTES = 16 << 20

PATHS: dict[str, dict[str, Rows]] = {
    # Calls one at a time: small batches are host-bound, so a Triton launch wins until cuBLASLt's faster GEMM
    # pays for its extra host time (mlp's back-to-back layers stay host-bound to 1024 rows);
    # gate_up's Triton kernel is one launch where split is three, and the Hopper kernel wins above 256 rows;
    # act_and_mul's Triton kernel is as fast as the CUDA one or faster at every row count. Measured on an
    # H200 in bf16: bench/BENCHMARKS.md "Path table".
    "sm_90a": {
        "linear": ((64, "triton"), (None, "cublaslt")),
        "mlp/linear": ((1024, "triton"), (None, "cublaslt")),
        # 65-256 rows on real models' weights (>= 16 MiB): split (see GRAPH_PATHS; wall agrees but on 2048x8192).
        "gate_up": ((64, "triton"), (256, "split", LARGE_WEIGHT_BYTES), (256, "triton"), (None, "tma")),
        "gated_mlp_train/gate_up": ((2048, "split"), (None, "tma")),  # see GRAPH_PATHS
        "act_and_mul": ((None, "triton"),),
        # One launch instead of one per layer saves the other launches' host time. The gated 768x3072 falls
        # back above 16 rows: its 384 tiles of 8 columns exceed the kernel's 2 per SM.
        "chain": ((64, "persistent"), (None, "layers")),
        # One cooperative launch for the whole backward beats a GEMM pair per layer in wall time at every row
        # count the forward's persistent kernel takes (bench/BENCHMARKS.md "Path table").
        "chain_backward": ((64, "persistent"), (None, "layers")),
        # The gated MLP's backward wins in wall time up to 16 rows; from 17 rows its 384 down-projection tiles
        # need more than two per program, which the kernel refuses.
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
    # GPU time decides here (bench/BENCHMARKS.md "Path table"). Triton's linear wins only at one row, where
    # PDL hides its launch; cuBLASLt is faster beyond, and faster than our Hopper linear on every shape.
    # gate_up: the portable kernel to 256 rows, then the Hopper kernel (one GEMM per tile over both weights).
    # The training forward also stores (g, u): split's GEMMs write them anyway, while the Hopper kernel's
    # extra stores do not overlap its main loop, so split wins until the GEMMs are large enough to hide them.
    # On real models' weights (>= 16 MiB: Llama-3.2-1B to Qwen2.5-7B) split's two cuBLASLt GEMMs beat the portable
    # kernel at 256 rows and lose to it at 64 (bench/BENCHMARKS.md "Ops, real-model widths").
    "sm_90a": {
        "linear": ((1, "triton"), (None, "cublaslt")),
        "gate_up": ((64, "triton"), (256, "split", LARGE_WEIGHT_BYTES), (256, "triton"), (None, "tma")),
        "gated_mlp_train/gate_up": ((2048, "split"), (None, "tma")),
        "act_and_mul": ((None, "triton"),),
        # In a graph launches cost no host time, so the persistent kernel wins only while its grid barriers cost
        # less than the layers' better GEMMs: mlp to 16 rows; the gated MLP at one row, as its K=3072 down
        # projection reads all of h in each program (bench/BENCHMARKS.md "Path table").
        # From 2 rows, layers of 4 MiB or more (GPT-2's 4.5, BERT-large's 8) run faster as cuBLASLt epilogue GEMMs.
        "mlp/chain": ((1, "persistent"), (16, "layers", 4 << 20), (16, "persistent"), (None, "layers")),
        "chain": ((1, "persistent"), (None, "layers")),
        # The backward's one launch wins on the GPU for mlp to 32 rows and for linear at one row only; the
        # gated MLP's is behind the layers at every row count (bench/BENCHMARKS.md "Path table").
        "mlp/chain_backward": ((32, "persistent"), (None, "layers")),
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
