// Row-major GEMMs with fused epilogues through cuBLASLt (the cuBLAS that torch already ships).
#pragma once

#include "common.cuh"

namespace fused_mlp {

// What cuBLASLt applies after the product: nothing, +bias, and relu/gelu_tanh with or without bias.
enum class Epilogue { None, Bias, Relu, ReluBias, GeluTanh, GeluTanhBias };

// The epilogue that computes act(z + bias) inside the GEMM, or Bias/None when the activation must
// run as a separate kernel (gelu with erf, silu). `fused` tells which case it is.
Epilogue epilogue_for(Act act, bool has_bias, bool* fused);

// out[M,N] (row-major, ld N) = op(a) @ op(b) (+ beta * out), all row-major, every matrix in `dtype`:
//   a is [M,K] (trans_a=false) or stored as [K,M] (trans_a=true); b is [K,N] or stored as [N,K].
// bias (length N, may be null) and the activation come from `epi`. fp32 accumulation throughout.
struct GemmArgs {
  const void* a; bool trans_a;
  const void* b; bool trans_b;
  void* out;
  const void* bias;
  long long m, n, k;
  float beta;
  Epilogue epi;
  ScalarType dtype;
  void* workspace; size_t workspace_bytes;
  cudaStream_t stream;
};
void gemm(const GemmArgs& g);

// Bytes of workspace each GEMM call may use; callers allocate it once per host call.
constexpr size_t kGemmWorkspaceBytes = 32u << 20;

}  // namespace fused_mlp
