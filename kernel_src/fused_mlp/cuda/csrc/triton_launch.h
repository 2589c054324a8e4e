// Triton kernels compiled ahead of time and launched from C++, and the path table that decides, per GPU
// arch, step, row count and weight bytes, which implementation runs. Both tables are generated at build time by
// build/cuda/embed_cubins.py (from fused_mlp/cuda/paths.py and fused_mlp.triton.aot) into
// triton_table.gen.cpp; the cubins live in the .so, are loaded with the CUDA runtime's library API and
// launched through the driver's cuLaunchKernelEx (entry point looked up at run time: no libcuda link).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace fused_mlp {

// Chain: the whole forward of `mlp` / `gated_mlp` as one persistent kernel (chain.h) or layer by layer;
// ChainBackward: the whole backward of `mlp` / `linear` likewise. These enums and counts mirror embed_cubins'
// STEP_CODES / OP_CODES / IMPL_CODES; the generated file's static_asserts fail the build where they drift.
enum class Step : int { Linear = 0, GateUp = 1, ActAndMul = 2, Chain = 3, ChainBackward = 4 };
// GatedMlpTrain: the gated MLP's training forward, which also stores (g, u) for backward.
enum class Op : int { Linear = 0, Mlp = 1, GatedMlp = 2, ActAndMul = 3, GatedMlpTrain = 4 };
enum class Impl : int { Triton = 0, Cublaslt = 1, Split = 2, Cuda = 3, Tma = 4, Persistent = 5, Layers = 6, Gemv = 7 };
constexpr int kNumImpls = 8;
constexpr int kNumSteps = 5;
constexpr int kNumOps = 5;

// One embedded cubin as one row of its config table (layout: embed_cubins.write_sources).
struct TritonCubin {
  const char* kernel;         // entry name
  int step;                   // Step
  int impl;                   // Impl::Triton / Impl::Gemv (portable arguments) or Impl::Tma (Hopper, persistent grid)
  int sm;                     // compute capability (major*10+minor) the SASS runs on, exactly
  int dtype;                  // 0 bf16, 1 fp16
  int act, has_bias;          // Act code, bias flag
  int store_gu;               // tma gate_up: also stores the (g, u) planes (training forward)
  long long max_rows;         // serves M <= max_rows; -1: any M. Rows with equal bounds are tile alternatives
  int block_m, block_n, block_k;  // GEMM tile; act_and_mul: block_n = elements per program
  int num_warps, num_ctas, shared_bytes;
  int global_scratch_bytes, global_scratch_align;  // per program; 0: none
  int pdl;                    // compiled to wait on the previous grid: launch with programmatic serialization
  unsigned long long offset, size;  // the image inside kCubinBlob
  int up_first;               // tma gate_up: compiled for w_up below w_gate in memory (its weight planes swap)
};

// Path table row: on `sm` (0 = any arch without rows of its own), for calls issued one by one (captured 0)
// or captured into a CUDA graph (1), `step` of `op` (-1: of every op) with M <= max_rows (-1: any) reading at
// least min_weight_bytes of weights (0: any; paths.py says what a step's weight bytes are) runs `impl`.
struct PathRow {
  int sm, captured, op, step;
  long long max_rows, min_weight_bytes;
  int impl;
};

// The decode kernels' rule on one arch (configs.DECODE_MIN_WEIGHT_BYTES): forward GEMMs reading at least this
// many bytes of weights take the `gemv` cubins when a row of theirs admits the call's rows.
struct DecodeRule {
  int sm;
  long long min_weight_bytes;
};

extern const unsigned char* const kCubinBlob;
extern const DecodeRule kDecodeRules[];
extern const int kNumDecodeRules;
extern const char kTritonVersion[];
extern const int kNumTritonCubins;
extern const double kWaveFill;  // configs.WAVE_FILL: least share of the last wave a tile alternative must fill
extern const TritonCubin kTritonCubins[];
extern const PathRow kPathRows[];
extern const int kNumPathRows;
// Generated from paths.py and embed_cubins' code tables, indexed by Step / Op / Impl codes.
extern const char* const kStepNames[];   // kNumSteps names (paths.STEPS)
extern const char* const kOpNames[];     // kNumOps names (paths.OPS)
extern const char* const kImplNames[];   // kNumImpls names (FUSED_MLP_CUDA_DISABLE, cuda_set_path)
extern const int kFallbackImpl[];        // per step: the Impl of paths.FALLBACK
extern const int kOpSteps[][kNumSteps];  // per op: the Step codes it runs (paths.OP_STEPS), -1 after the last

// Compute capability (major*10+minor) and number of SMs of a device, cached.
int device_sm(int device);
int device_sms(int device);

// The implementation the path table (or an override, see set_path_override) picks for `step` of `op` at
// `rows` rows reading `weight_bytes` of weights (paths.py: per step) on a device of compute capability `sm`,
// for a call captured into a graph or not. Search order: this arch's rows, else the default arch's; within
// them the op's own rows, else the step's; graph rows, else (none for the arch) the stream rows.
Impl choose_impl(Step step, Op op, int sm, long long rows, long long weight_bytes, bool captured);
// An implementation named in FUSED_MLP_CUDA_DISABLE (comma list, e.g. "tma") is never chosen: its step's
// fallback runs instead (read once per process; a switch for a path that misbehaves on some machine).
// Force `step` to `impl` (-1: back to the table) for every later call in this process; for benchmarks that
// measure each implementation (bench/bench_paths.py). Returns the previous override.
int set_path_override(Step step, int impl);
// Whether a forward `step` (Linear or GateUp) reading `weight_bytes` of weights on `sm` tries the decode (gemv)
// cubins before the table: the arch's DecodeRule, unless an override forces another implementation of the
// step (forcing gemv says yes) or FUSED_MLP_CUDA_DISABLE names gemv.
bool decode_wanted(Step step, int sm, long long weight_bytes);

// What a cubin lookup asks for: the kernel family's specialization and the launch's output size.
struct CubinQuery {
  Step step;
  Impl impl;  // Triton or Tma
  int sm, dtype, act;
  bool has_bias, store_gu;
  long long rows, cols;  // the output is rows x cols (tile alternatives are picked by last-wave fill)
  int sms;               // SMs of the device (persistent grids)
  bool up_first = false;  // tma gate_up: w_up lies below w_gate
};
// The cubin for this launch, or nullptr: the first row of (step, impl, sm, dtype, act, bias, store_gu) whose
// bound admits `rows`; among alternatives with that bound (same PDL), the first whose tiles fill at least
// kWaveFill of the last wave of `sms` programs, else the fullest (configs.tma_config's rule).
const TritonCubin* find_cubin(const CubinQuery& q);
// Programs of a launch of `c` over a rows x cols output: one per tile, or for the persistent Hopper family
// min(SMs, tiles) (each program walks tiles pid, pid + grid, ...); elementwise kernels: one per block_n elements.
long long cubin_programs(const TritonCubin& c, long long rows, long long cols, int sms);

// One kernel argument: a device pointer or a 32-bit integer.
struct KArg {
  union {
    const void* ptr;
    int32_t i32;
  };
  KArg(const void* p) : ptr(p) {}
  KArg(int32_t v) : i32(v) {}
};

// Bytes of global scratch the launch of `c` on `programs` programs needs (0 for most kernels), padded so
// that a scratch region of this size can be placed at a 256-byte aligned offset.
size_t triton_scratch_bytes(const TritonCubin& c, long long programs);

// Launch `c` on a 1-D grid of `programs` programs with `args` (then Triton's scratch pointers) on `stream`;
// `scratch` is device memory of triton_scratch_bytes(c, programs) bytes (may be null when that is 0).
void launch_cubin(const TritonCubin& c, long long programs, const KArg* args, int nargs, void* scratch,
                  cudaStream_t stream, const char* op);

// Launch one of this extension's own __global__ kernels on a 1-D grid, optionally cooperative: through the
// driver with `function` (its cudaFunction_t on the current device, from cudaGetFuncBySymbol), as the cubins
// are (the runtime's launch costs more host time), or through the runtime with its host `stub` when the driver
// lacks the entry points. The kernel's shared-memory limit must already allow `smem`.
void launch_own_kernel(const void* stub, cudaFunction_t function, unsigned grid, unsigned block, unsigned smem,
                       void** params, bool cooperative, cudaStream_t stream, const char* op);

}  // namespace fused_mlp
