// Which cuBLASLt algorithm wins on the GEMMs the stable-ABI op plans, and does cuBLAS (what torch.mm calls) beat them:
// for each shape of the gated MLP's training step (H=768, I=3072) and the 3x Linear(1024)+ReLU forward, GPU µs per call
// from CUDA-graph replay of
//   - cuBLASLt's heuristic answers 0..7 asked exactly as kernel_src/fused_mlp/cuda/csrc/gemm.cu asks (row-major view,
//     fp32 compute, 256-byte alignments, the epilogue), under workspace limits of 32 MiB (ours), 4 MiB and 1 MiB;
//   - cublasGemmEx / cublasGemmStridedBatchedEx as torch's at::cuda::blas::gemm calls it (no epilogue), with a
//     32 MiB workspace set on the handle as torch sets it.
// One JSON line per (shape, candidate): the median and min over rounds that take every candidate in turn.
// Usage: lt_rank [M for the gated rows, default 8192] [M for the mlp rows, "4096,8192"] [rounds, default 7]
#include <cublasLt.h>
#include <cublas_v2.h>

#include <cstring>
#include <functional>
#include <string>

#include "proto_harness.cuh"

#define CB(x)                                                                                 \
  do {                                                                                        \
    int s_ = int(x);                                                                          \
    if (s_ != 0) {                                                                            \
      printf("{\"error\": \"cublas status %d at line %d\"}\n", s_, __LINE__);                  \
      exit(1);                                                                                \
    }                                                                                         \
  } while (0)

using bf16 = __nv_bfloat16;

struct Shape {
  const char* name;
  long long m, n, k;
  bool trans_a, trans_b, accumulate;
  cublasLtEpilogue_t epi;
  int batch;
  long long stride_a, stride_b, stride_out;
};

struct Bufs {
  bf16 *a, *b, *out, *bias;
  void* ws;
};

constexpr size_t kWs = 32u << 20;

// The descriptors gemm.cu builds for `g` (column-major view: C'[N,M] = op(B')[N,K] op(A')[K,M]).
struct LtDesc {
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t la, lb, lc;
  explicit LtDesc(const Shape& g) {
    const cudaDataType_t dt = CUDA_R_16BF;
    const cublasOperation_t op_first = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, op_second = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    CB(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CB(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &op_first, sizeof(op_first)));
    CB(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &op_second, sizeof(op_second)));
    CB(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &g.epi, sizeof(g.epi)));
    if (g.epi != CUBLASLT_EPILOGUE_DEFAULT)
      CB(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &dt, sizeof(dt)));
    const uint64_t rows_b = g.trans_b ? g.k : g.n, cols_b = g.trans_b ? g.n : g.k;
    const uint64_t rows_a = g.trans_a ? g.m : g.k, cols_a = g.trans_a ? g.k : g.m;
    CB(cublasLtMatrixLayoutCreate(&la, dt, rows_b, cols_b, rows_b));
    CB(cublasLtMatrixLayoutCreate(&lb, dt, rows_a, cols_a, rows_a));
    CB(cublasLtMatrixLayoutCreate(&lc, dt, g.n, g.m, g.n));
    if (g.batch > 1) {
      const int32_t count = g.batch;
      const int64_t strides[3] = {g.stride_b, g.stride_a, g.stride_out};
      cublasLtMatrixLayout_t ls[3] = {la, lb, lc};
      for (int i = 0; i < 3; ++i) {
        CB(cublasLtMatrixLayoutSetAttribute(ls[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
        CB(cublasLtMatrixLayoutSetAttribute(ls[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &strides[i], sizeof(strides[i])));
      }
    }
  }
};

int algo_attr(const cublasLtMatmulAlgo_t& a, cublasLtMatmulAlgoConfigAttributes_t attr) {
  int v = 0;
  size_t got = 0;
  uint32_t u = 0;
  if (cublasLtMatmulAlgoConfigGetAttribute(&a, attr, &u, sizeof(u), &got) == CUBLAS_STATUS_SUCCESS) v = int(u);
  return v;
}

// One timed candidate of a shape: what it is (a JSON fragment) and its call.
struct Candidate {
  std::string what;
  std::function<void(cudaStream_t)> run;
};

// cuBLASLt's answers under our workspace limit (32 MiB) and the first answer under 4 and 1 MiB.
void lt_candidates(cublasLtHandle_t lt, const Shape& g, const Bufs& bf, std::vector<Candidate>& out) {
  auto* d = new LtDesc(g);  // lives as long as the process: the candidates' calls refer to it
  if (g.epi != CUBLASLT_EPILOGUE_DEFAULT)
    CB(cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bf.bias, sizeof(bf.bias)));
  static const float alpha = 1.f, beta0 = 0.f, beta1 = 1.f;
  const float* beta = g.accumulate ? &beta1 : &beta0;
  for (uint64_t ws : {uint64_t(32u << 20), uint64_t(4u << 20), uint64_t(1u << 20)}) {
    cublasLtMatmulPreference_t pref;
    CB(cublasLtMatmulPreferenceCreate(&pref));
    CB(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    const uint32_t al = 256;
    for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
      cublasLtMatmulPreferenceSetAttribute(pref, attr, &al, sizeof(al));
    cublasLtMatmulHeuristicResult_t res[8];
    int found = 0;
    CB(cublasLtMatmulAlgoGetHeuristic(lt, d->op, d->la, d->lb, d->lc, d->lc, pref, 8, res, &found));
    cublasLtMatmulPreferenceDestroy(pref);
    const int upto = ws == (32u << 20) ? found : std::min(found, 1);
    for (int r = 0; r < upto; ++r) {
      const cublasLtMatmulAlgo_t algo = res[r].algo;
      const size_t wsz = res[r].workspaceSize;
      char what[256];
      snprintf(what, sizeof(what),
               "\"how\": \"lt\", \"ws_limit_mib\": %d, \"rank\": %d, \"ws\": %zu, \"tile\": %d, \"stages\": %d, "
               "\"swizzle\": %d, \"cluster\": %d",
               int(ws >> 20), r, wsz, algo_attr(algo, CUBLASLT_ALGO_CONFIG_TILE_ID),
               algo_attr(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID), algo_attr(algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING),
               algo_attr(algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID));
      out.push_back({what, [=](cudaStream_t s) {
                       CB(cublasLtMatmul(lt, d->op, &alpha, bf.b, d->la, bf.a, d->lb, beta, bf.out, d->lc, bf.out, d->lc,
                                         &algo, wsz ? bf.ws : nullptr, wsz, s));
                     }});
    }
  }
}

// torch.mm / bmm's cuBLAS call for the same row-major product (the epilogue left out: torch.mm has none).
Candidate cublas_candidate(cublasHandle_t h, const Shape& g, const Bufs& bf) {
  return {"\"how\": \"cublas\"", [=](cudaStream_t s) {
            const cublasOperation_t op_first = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
            const cublasOperation_t op_second = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
            const long long ld_b = g.trans_b ? g.k : g.n, ld_a = g.trans_a ? g.m : g.k;
            const float alpha = 1.f, beta = g.accumulate ? 1.f : 0.f;
            CB(cublasSetStream(h, s));
            if (g.batch > 1)
              CB(cublasGemmStridedBatchedEx(h, op_first, op_second, g.n, g.m, g.k, &alpha, bf.b, CUDA_R_16BF, ld_b,
                                            g.stride_b, bf.a, CUDA_R_16BF, ld_a, g.stride_a, &beta, bf.out, CUDA_R_16BF,
                                            g.n, g.stride_out, g.batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT_TENSOR_OP));
            else
              CB(cublasGemmEx(h, op_first, op_second, g.n, g.m, g.k, &alpha, bf.b, CUDA_R_16BF, ld_b, bf.a, CUDA_R_16BF,
                              ld_a, &beta, bf.out, CUDA_R_16BF, g.n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT_TENSOR_OP));
          }};
}

// Rounds of every candidate in turn (so clocks and heat fall on all alike); median and min per candidate.
void time_shape(const Shape& g, std::vector<Candidate>& cands, int rounds) {
  std::vector<std::vector<float>> t(cands.size());
  for (int r = 0; r < rounds; ++r)
    for (size_t i = 0; i < cands.size(); ++i) t[i].push_back(graph_us(10, cands[i].run));
  for (size_t i = 0; i < cands.size(); ++i) {
    std::sort(t[i].begin(), t[i].end());
    printf("{\"shape\": \"%s\", \"m\": %lld, \"n\": %lld, \"k\": %lld, %s, \"us\": %.2f, \"min_us\": %.2f}\n", g.name,
           g.m, g.n, g.k, cands[i].what.c_str(), t[i][t[i].size() / 2], t[i][0]);
  }
  fflush(stdout);
}

int main(int argc, char** argv) {
  const long long gm = argc > 1 ? atoll(argv[1]) : 8192;
  const std::vector<int> mlp_rows = parse_list(argc > 2 ? argv[2] : "4096,8192");
  const int rounds = argc > 3 ? atoi(argv[3]) : 7;
  const long long H = 768, I = 3072, D = 1024;
  std::vector<Shape> shapes = {
      {"gated fwd down: h @ wd^T", gm, H, I, false, true, false, CUBLASLT_EPILOGUE_DEFAULT, 1, 0, 0, 0},
      {"gated bwd dh: dy @ wd", gm, I, H, false, false, false, CUBLASLT_EPILOGUE_DEFAULT, 1, 0, 0, 0},
      {"gated bwd dx_g: dg @ wg", gm, H, I, false, false, false, CUBLASLT_EPILOGUE_DEFAULT, 1, 0, 0, 0},
      {"gated bwd dx_u: dx += du @ wu", gm, H, I, false, false, true, CUBLASLT_EPILOGUE_DEFAULT, 1, 0, 0, 0},
      {"gated bwd dw_gu: (dg,du)^T @ x, batch 2", I, H, gm, true, false, false, CUBLASLT_EPILOGUE_DEFAULT, 2, gm * I, 0, I * H},
      {"gated bwd dw_down: dy^T @ h", H, I, gm, true, false, false, CUBLASLT_EPILOGUE_DEFAULT, 1, 0, 0, 0},
  };
  for (long long m : mlp_rows) {
    shapes.push_back({"mlp relu layer: x @ w^T + b, relu", m, D, D, false, true, false, CUBLASLT_EPILOGUE_RELU_BIAS, 1, 0, 0, 0});
    shapes.push_back({"mlp last layer: x @ w^T + b", m, D, D, false, true, false, CUBLASLT_EPILOGUE_BIAS, 1, 0, 0, 0});
  }
  long long most = 0;
  for (const Shape& g : shapes) most = std::max({most, g.m * g.k * g.batch, g.n * g.k * std::max(1, g.batch), g.m * g.n * g.batch});
  Bufs bf;
  CK(cudaMalloc(&bf.a, most * sizeof(bf16)));
  CK(cudaMalloc(&bf.b, most * sizeof(bf16)));
  CK(cudaMalloc(&bf.out, most * sizeof(bf16)));
  CK(cudaMalloc(&bf.bias, 1 << 16));
  CK(cudaMalloc(&bf.ws, kWs));
  fill<<<1024, 256>>>(bf.a, most, 1u, 1.f);
  fill<<<1024, 256>>>(bf.b, most, 2u, 0.05f);
  fill<<<1024, 256>>>(bf.out, most, 3u, 1.f);
  fill<<<64, 256>>>(bf.bias, (1 << 16) / 2, 4u, 0.1f);
  CK(cudaDeviceSynchronize());
  cublasLtHandle_t lt;
  CB(cublasLtCreate(&lt));
  cublasHandle_t h;
  CB(cublasCreate(&h));
  void* cublas_ws;
  CK(cudaMalloc(&cublas_ws, kWs));
  CB(cublasSetWorkspace(h, cublas_ws, kWs));
  for (const Shape& g : shapes) {
    std::vector<Candidate> cands = {cublas_candidate(h, g, bf)};
    lt_candidates(lt, g, bf, cands);
    time_shape(g, cands, rounds);
  }
  return 0;
}
