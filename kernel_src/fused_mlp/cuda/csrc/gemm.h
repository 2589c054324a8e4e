// Row-major GEMMs with fused epilogues through cuBLASLt (the cuBLAS that torch already ships).
#pragma once

#include "common.cuh"

namespace fused_mlp {

// What cuBLASLt applies after the product: nothing, +bias, and relu/gelu_tanh with or without bias; or
// BiasGrad: the bias pointer is an output that receives the sum over K of a (stored [K, M], trans_a): a
// weight-gradient GEMM dW = dz^T x that also writes the bias gradient db = sum of dz's rows (cuBLASLt BGRADB).
enum class Epilogue { None, Bias, Relu, ReluBias, GeluTanh, GeluTanhBias, BiasGrad };

// The epilogue that computes act(z + bias) inside the GEMM, or Bias/None when the activation must
// run as a separate kernel (gelu with erf, silu). `fused` tells which case it is.
Epilogue epilogue_for(Act act, bool has_bias, bool* fused);

// out[M,N] (row-major, ld N) = op(a) @ op(b) (+ beta * out), all row-major, every matrix in `dtype`:
//   a is [M,K] (trans_a=false) or stored as [K,M] (trans_a=true); b is [K,N] or stored as [N,K].
// Bias (length N) and the activation come from `epi`. fp32 accumulation throughout. The alignments
// (alignment_of each address, or kFreshAlign for a buffer allocated after planning) pick the kernels, so
// they are part of the shape. max_workspace: the most workspace the algorithm may need (0: kMaxWorkspace).
// batch > 1: that many products in one launch, matrix i of a/b/out `stride_*` elements after matrix i-1
// (stride 0: every product reads the same matrix); no bias epilogue then.
struct GemmShape {
  long long m, n, k;
  bool trans_a, trans_b, accumulate;  // accumulate: beta = 1 (out += product), else beta = 0
  Epilogue epi;
  ScalarType dtype;
  int align_a, align_b, align_out, align_bias;
  size_t max_workspace = 0;
  int batch = 1;
  long long stride_a = 0, stride_b = 0, stride_out = 0;
};

struct GemmPlan;  // cached descriptors + the chosen algorithm, one per (shape, device, thread)

// The cached plan of `shape` on the current device; planning is host-only and happens once per shape.
const GemmPlan* gemm_plan(const GemmShape& shape);
// The same, or null when cuBLASLt has no algorithm for it (an epilogue it does not offer for this shape,
// dtype or alignment): the caller runs it another way.
const GemmPlan* gemm_try_plan(const GemmShape& shape);
// Workspace bytes to reserve for the plan: what its algorithm needs (0 for most small problems), plus room
// to align the pointer to the 256 bytes cuBLASLt requires.
size_t gemm_workspace_bytes(const GemmPlan* plan);
// Run the planned GEMM; `bias` is the Bias epilogues' input (N elements) or BiasGrad's output (M), `workspace`
// holds gemm_workspace_bytes(plan) bytes (may be null when 0). A pointer
// less aligned than the plan assumed (a fresh buffer from an allocator that does not align blocks to
// kFreshAlign) runs a plan for its real alignment within the same workspace instead (for BiasGrad, if cuBLASLt
// offers none at that alignment: the plain product and a column-sum kernel).
void gemm_run(const GemmPlan* plan, const void* a, const void* b, void* out, const void* bias, void* workspace,
              cudaStream_t stream);

// Largest power of two (<= 256) dividing the address, as torch's own cuBLASLt calls report it: cuBLASLt's
// heuristic leaves out the algorithms that need more alignment than an operand has (its default assumes 256),
// and our Triton/TMA/CUDA kernels need >= 16.
int alignment_of(const void* p);

// Alignment planned for buffers this extension allocates itself: outputs and scratch regions start 256-byte
// aligned (cudaMalloc's guarantee; torch's caching allocator rounds blocks to 512 bytes; Scratch regions to
// 256). gemm_run checks it per call, so another allocator costs speed, never correctness.
constexpr int kFreshAlign = 256;

}  // namespace fused_mlp
