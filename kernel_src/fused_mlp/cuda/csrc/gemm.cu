// cuBLASLt GEMMs for row-major tensors, with cached handle and algorithm choices.
// Row-major out[M,N] = A[M,K] B[K,N] is column-major out^T[N,M] = B^T A^T, so B becomes cuBLASLt's
// first operand and the bias (length N) is per row of the column-major result, as cuBLASLt wants.
#include "gemm.h"

#include "elementwise.h"

#include <cublasLt.h>

#include <algorithm>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <unordered_map>
#include <vector>

namespace fused_mlp {
namespace {

void check_status(cublasStatus_t s, const char* what) {
  STD_TORCH_CHECK(s == CUBLAS_STATUS_SUCCESS, "fused_mlp: cuBLASLt ", what, " failed with status ",
                  static_cast<int>(s), " (", cublasLtGetStatusString(s), ")");
}

cublasLtHandle_t lt_handle() {
  static cublasLtHandle_t handle = [] {
    cublasLtHandle_t h = nullptr;
    check_status(cublasLtCreate(&h), "create");
    return h;
  }();
  return handle;
}

cudaDataType_t cuda_type(ScalarType t) {
  switch (t) {
    case ScalarType::Float: return CUDA_R_32F;
    case ScalarType::Half: return CUDA_R_16F;
    case ScalarType::BFloat16: return CUDA_R_16BF;
    default:
      STD_TORCH_CHECK(false, "fused_mlp: GEMM got dtype ", torch::headeronly::toString(t),
                      "; use float32, float16 or bfloat16");
  }
  return CUDA_R_32F;
}

cublasLtEpilogue_t lt_epilogue(Epilogue e) {
  switch (e) {
    case Epilogue::Bias: return CUBLASLT_EPILOGUE_BIAS;
    case Epilogue::Relu: return CUBLASLT_EPILOGUE_RELU;
    case Epilogue::ReluBias: return CUBLASLT_EPILOGUE_RELU_BIAS;
    case Epilogue::GeluTanh: return CUBLASLT_EPILOGUE_GELU;
    case Epilogue::GeluTanhBias: return CUBLASLT_EPILOGUE_GELU_BIAS;
    case Epilogue::BiasGrad: return CUBLASLT_EPILOGUE_BGRADB;
    default: return CUBLASLT_EPILOGUE_DEFAULT;
  }
}

struct AlgoKey {
  long long m, n, k, stride_a, stride_b, stride_out;
  unsigned long long max_workspace;
  int batch;
  int dtype, epi, trans_a, trans_b, accumulate, align_a, align_b, align_out, align_bias, device;
  bool operator==(const AlgoKey& o) const { return std::memcmp(this, &o, sizeof(AlgoKey)) == 0; }
};
struct AlgoKeyHash {
  size_t operator()(const AlgoKey& k) const {
    const auto* p = reinterpret_cast<const unsigned char*>(&k);
    size_t h = 1469598103934665603ull;
    for (size_t i = 0; i < sizeof(AlgoKey); ++i) h = (h ^ p[i]) * 1099511628211ull;
    return h;
  }
};

// Per thread like the plans: the algorithm chosen for each power-of-two bucket of M (see gemm_plan).
std::unordered_map<AlgoKey, cublasLtMatmulAlgo_t, AlgoKeyHash>& bucket_algorithms() {
  thread_local std::unordered_map<AlgoKey, cublasLtMatmulAlgo_t, AlgoKeyHash> algos;
  return algos;
}

// Products of at least this many multiply-adds have their heuristic's answers timed once: on large shapes the
// heuristic's first answer can lose to a later one, while below this a choice is worth less than its timing
// (bench/BENCHMARKS.md).
constexpr double kTuneMinMacs = 2.0 * 1024 * 1024 * 1024;
constexpr int kTuneCandidates = 8;

// FUSED_MLP_GEMM_TUNE, read once: unset or 1 = time the answers, 0 = the heuristic's first answer always,
// log = time them and print each choice to stderr.
enum class Tuning { Off, On, Log };
Tuning tuning() {
  static const Tuning t = [] {
    const char* v = std::getenv("FUSED_MLP_GEMM_TUNE");
    if (v == nullptr) return Tuning::On;
    return std::strcmp(v, "0") == 0 ? Tuning::Off : std::strcmp(v, "log") == 0 ? Tuning::Log : Tuning::On;
  }();
  return t;
}

// Workspace cuBLASLt may ask for; the plan records what its algorithm really needs, and callers
// allocate only that (most small problems need none).
constexpr uint64_t kMaxWorkspaceBytes = 32u << 20;

}  // namespace

struct GemmPlan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  cublasLtMatmulAlgo_t algo;
  size_t workspace = 0;
  float beta = 0.f;
  bool has_bias = false;  // a bias pointer: the Bias epilogues' input, BiasGrad's output
  bool usable = true;     // false: cuBLASLt had no algorithm (gemm_try_plan returns null)
  GemmShape shape;  // what it was planned for (gemm_run compares the call's real alignments with it)
  // The heuristic's other answers that fit the same workspace, timed against `algo` on the plan's first
  // uncaptured run (gemm_run) when the GEMM is large enough for the choice to matter; empty once decided.
  std::vector<cublasLtMatmulAlgo_t> candidates;
  AlgoKey bucket;  // where the bucket's algorithm is remembered, so the timed choice serves the whole bucket
};

int alignment_of(const void* p) {
  const auto v = reinterpret_cast<uintptr_t>(p);
  int a = 256;
  while (a > 1 && (v % a) != 0) a /= 2;
  return a;
}

Epilogue epilogue_for(Act act, bool has_bias, bool* fused) {
  *fused = true;
  switch (act) {
    case Act::None: return has_bias ? Epilogue::Bias : Epilogue::None;
    case Act::Relu: return has_bias ? Epilogue::ReluBias : Epilogue::Relu;
    case Act::GeluTanh: return has_bias ? Epilogue::GeluTanhBias : Epilogue::GeluTanh;
    default: *fused = false; return has_bias ? Epilogue::Bias : Epilogue::None;
  }
}

const GemmPlan* gemm_plan(const GemmShape& g) {
  const GemmPlan* p = gemm_try_plan(g);
  STD_TORCH_CHECK(p != nullptr, "fused_mlp: cuBLASLt has no algorithm for M=", g.m, " N=", g.n, " K=", g.k,
                  " dtype=", torch::headeronly::toString(g.dtype), " epilogue=", static_cast<int>(g.epi));
  return p;
}

const GemmPlan* gemm_try_plan(const GemmShape& g) {
  // Column-major view: C'[N,M] = op(B')[N,K] op(A')[K,M]; B' is b's buffer, A' is a's.
  const cudaDataType_t dt = cuda_type(g.dtype);
  int device = 0;
  cudaGetDevice(&device);
  AlgoKey key;
  std::memset(&key, 0, sizeof(key));
  key.m = g.m; key.n = g.n; key.k = g.k;
  const uint64_t max_ws = g.max_workspace ? std::min<uint64_t>(g.max_workspace, kMaxWorkspaceBytes) : kMaxWorkspaceBytes;
  key.max_workspace = max_ws;
  key.batch = g.batch; key.stride_a = g.stride_a; key.stride_b = g.stride_b; key.stride_out = g.stride_out;
  key.dtype = static_cast<int>(dt); key.epi = static_cast<int>(g.epi);
  key.trans_a = g.trans_a; key.trans_b = g.trans_b; key.accumulate = g.accumulate;
  key.align_a = g.align_a; key.align_b = g.align_b; key.align_out = g.align_out;
  key.align_bias = g.align_bias; key.device = device;

  // Per thread, so the bias pointer set on a cached descriptor in gemm_run never races another thread.
  thread_local std::unordered_map<AlgoKey, GemmPlan, AlgoKeyHash> plans;
  auto it = plans.find(key);
  if (it != plans.end()) return it->second.usable ? &it->second : nullptr;
  GemmPlan plan;
  plan.shape = g;
  plan.beta = g.accumulate ? 1.f : 0.f;
  plan.has_bias = g.epi == Epilogue::Bias || g.epi == Epilogue::ReluBias || g.epi == Epilogue::GeluTanhBias ||
                  g.epi == Epilogue::BiasGrad;
  STD_TORCH_CHECK(g.epi != Epilogue::BiasGrad || (g.trans_a && !g.accumulate),
                  "fused_mlp: a bias-gradient GEMM reads a stored [K, M] and writes a fresh output");
  const cublasOperation_t op_first = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;   // B' is [N,K] or [K,N]
  const cublasOperation_t op_second = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;  // A' is [K,M] or [M,K]
  check_status(cublasLtMatmulDescCreate(&plan.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul desc");
  check_status(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSA, &op_first, sizeof(op_first)), "transa");
  check_status(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSB, &op_second, sizeof(op_second)), "transb");
  const cublasLtEpilogue_t epi = lt_epilogue(g.epi);
  check_status(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)), "epilogue");
  if (plan.has_bias) {
    check_status(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &dt, sizeof(dt)), "bias type");
  }
  // Column-major shapes of the stored buffers (a row-major [r,c] buffer is column-major [c,r]).
  const uint64_t rows_b = g.trans_b ? g.k : g.n, cols_b = g.trans_b ? g.n : g.k;
  const uint64_t rows_a = g.trans_a ? g.m : g.k, cols_a = g.trans_a ? g.k : g.m;
  check_status(cublasLtMatrixLayoutCreate(&plan.la, dt, rows_b, cols_b, rows_b), "layout B");
  check_status(cublasLtMatrixLayoutCreate(&plan.lb, dt, rows_a, cols_a, rows_a), "layout A");
  check_status(cublasLtMatrixLayoutCreate(&plan.lc, dt, g.n, g.m, g.n), "layout C");
  STD_TORCH_CHECK(g.batch >= 1 && (g.batch == 1 || !plan.has_bias), "fused_mlp: a batched GEMM takes no bias");
  if (g.batch > 1) {
    const int32_t count = g.batch;
    const int64_t strides[3] = {g.stride_b, g.stride_a, g.stride_out};
    cublasLtMatrixLayout_t layouts[3] = {plan.la, plan.lb, plan.lc};
    for (int i = 0; i < 3; ++i) {
      check_status(cublasLtMatrixLayoutSetAttribute(layouts[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)), "batch count");
      check_status(cublasLtMatrixLayoutSetAttribute(layouts[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &strides[i],
                                                    sizeof(strides[i])), "batch stride");
    }
  }

  // One heuristic query per power-of-two bucket of M: the algorithm found for the first M of a bucket is
  // checked (cublasLtMatmulAlgoCheck) and reused for the bucket's other sizes, so a stream of new batch
  // sizes neither queries nor loads new kernels per size. Only a failed check queries again.
  auto& bucket_algos = bucket_algorithms();
  AlgoKey bucket = key;
  bucket.m = 1;
  while (bucket.m < g.m) bucket.m *= 2;
  cublasLtMatmulHeuristicResult_t result;
  plan.bucket = bucket;
  const auto known = bucket_algos.find(bucket);
  if (known != bucket_algos.end() &&
      cublasLtMatmulAlgoCheck(lt_handle(), plan.op, plan.la, plan.lb, plan.lc, plan.lc, &known->second, &result) ==
          CUBLAS_STATUS_SUCCESS &&
      result.workspaceSize <= max_ws) {
    plan.algo = known->second;
    plan.workspace = result.workspaceSize;
    return &plans.emplace(key, plan).first->second;
  }
  cublasLtMatmulPreference_t pref = nullptr;
  check_status(cublasLtMatmulPreferenceCreate(&pref), "preference");
  const uint64_t ws = max_ws;
  check_status(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)), "workspace");
  const uint32_t al_first = g.align_b, al_second = g.align_a, al_c = g.align_out;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_first, sizeof(al_first));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_second, sizeof(al_second));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof(al_c));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_c, sizeof(al_c));
  const bool tune = tuning() != Tuning::Off && !g.accumulate &&
                    static_cast<double>(g.m) * g.n * g.k * g.batch >= kTuneMinMacs;
  cublasLtMatmulHeuristicResult_t results[kTuneCandidates];
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt_handle(), plan.op, plan.la, plan.lb, plan.lc, plan.lc,
                                                           pref, tune ? kTuneCandidates : 1, results, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st == CUBLAS_STATUS_NOT_SUPPORTED || (st == CUBLAS_STATUS_SUCCESS && found == 0)) {
    plan.usable = false;  // remembered, so the next call does not ask again
    plans.emplace(key, plan);
    return nullptr;
  }
  check_status(st, "heuristic");
  plan.algo = results[0].algo;
  plan.workspace = results[0].workspaceSize;
  // Only answers within the first one's workspace: callers reserve what the plan reports before its first run.
  for (int i = 1; i < found; ++i)
    if (results[i].workspaceSize <= plan.workspace) plan.candidates.push_back(results[i].algo);
  bucket_algos[bucket] = plan.algo;
  return &plans.emplace(key, plan).first->second;
}

// cuBLASLt rejects a workspace that is not 256-byte aligned (CUBLAS_STATUS_INVALID_VALUE; torch's own calls
// hit it under an allocator with 16-byte aligned blocks), so callers reserve this much more and gemm_run
// rounds the pointer up.
constexpr uintptr_t kWorkspaceAlign = 256;

size_t gemm_workspace_bytes(const GemmPlan* plan) { return plan->workspace ? plan->workspace + kWorkspaceAlign : 0; }

namespace {
bool below(const void* p, int align) { return (reinterpret_cast<uintptr_t>(p) & static_cast<uintptr_t>(align - 1)) != 0; }

// Bytes spanned by a (batched) row-major matrix of rows x cols elements.
uintptr_t span_bytes(long long rows, long long cols, int batch, long long stride, size_t elem) {
  return static_cast<uintptr_t>((batch - 1) * stride + rows * cols) * elem;
}

bool overlap(const void* p, uintptr_t np, const void* q, uintptr_t nq) {
  const auto a = reinterpret_cast<uintptr_t>(p), b = reinterpret_cast<uintptr_t>(q);
  return a < b + nq && b < a + np;
}

// Times the plan's algorithm against its other candidates on this call's own operands (out is written by
// every candidate and by the real run after it: beta = 0, and out overlaps no input) and keeps the fastest,
// for this plan and its M bucket. A candidate must beat the heuristic's answer by 3% (timing noise on a busy
// GPU is about that). Skipped, and tried again on the next run, while the stream is being captured; any CUDA
// error during timing leaves the heuristic's answer in place.
void choose_by_timing(GemmPlan* plan, const void* a, const void* b, void* out, const void* bias, void* workspace,
                      cudaStream_t stream) {
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capturing) != cudaSuccess || capturing != cudaStreamCaptureStatusNone) {
    cudaGetLastError();
    return;
  }
  std::vector<cublasLtMatmulAlgo_t> algos = {plan->algo};
  algos.insert(algos.end(), plan->candidates.begin(), plan->candidates.end());
  plan->candidates.clear();
  const GemmShape& g = plan->shape;
  const size_t elem = element_bytes(g.dtype);
  const uintptr_t out_bytes = span_bytes(g.m, g.n, g.batch, g.stride_out, elem);
  if (overlap(out, out_bytes, a, span_bytes(g.m, g.k, g.batch, g.stride_a, elem)) ||
      overlap(out, out_bytes, b, span_bytes(g.k, g.n, g.batch, g.stride_b, elem)) ||
      (plan->has_bias &&
       overlap(out, out_bytes, bias, span_bytes(1, g.epi == Epilogue::BiasGrad ? g.m : g.n, 1, 0, elem))))
    return;
  // Rounds over every candidate in turn (the GPU's clocks drift with heat); per candidate one untimed call
  // first, so the timed calls queue behind it and the events time GPU work, not the first launch.
  constexpr int kRounds = 3, kCalls = 10;
  std::vector<std::vector<float>> ms(algos.size());
  cudaEvent_t start = nullptr, stop = nullptr;
  bool ok = cudaEventCreate(&start) == cudaSuccess && cudaEventCreate(&stop) == cudaSuccess;
  const float alpha = 1.f;
  auto call = [&](const cublasLtMatmulAlgo_t& algo) {
    return cublasLtMatmul(lt_handle(), plan->op, &alpha, b, plan->la, a, plan->lb, &plan->beta, out, plan->lc, out,
                          plan->lc, &algo, workspace, plan->workspace, stream) == CUBLAS_STATUS_SUCCESS;
  };
  for (int r = 0; ok && r < kRounds; ++r) {
    for (size_t i = 0; ok && i < algos.size(); ++i) {
      ok = call(algos[i]) && cudaEventRecord(start, stream) == cudaSuccess;
      for (int c = 0; ok && c < kCalls; ++c) ok = call(algos[i]);
      float t = 0.f;
      ok = ok && cudaEventRecord(stop, stream) == cudaSuccess && cudaEventSynchronize(stop) == cudaSuccess &&
           cudaEventElapsedTime(&t, start, stop) == cudaSuccess;
      ms[i].push_back(t * 1000.f / kCalls);
    }
  }
  if (start) cudaEventDestroy(start);
  if (stop) cudaEventDestroy(stop);
  if (!ok) {
    cudaGetLastError();
    return;
  }
  std::vector<float> median(algos.size());
  for (size_t i = 0; i < algos.size(); ++i) {
    std::sort(ms[i].begin(), ms[i].end());
    median[i] = ms[i][ms[i].size() / 2];
  }
  size_t best = 0;
  for (size_t i = 1; i < algos.size(); ++i)
    if (median[i] < 0.97f * median[0] && median[i] < median[best]) best = i;
  if (tuning() == Tuning::Log) {
    std::fprintf(stderr, "fused_mlp: cuBLASLt M=%lld N=%lld K=%lld batch=%d epilogue=%d: µs per answer",
                 g.m, g.n, g.k, g.batch, static_cast<int>(g.epi));
    for (size_t i = 0; i < algos.size(); ++i) std::fprintf(stderr, " %.2f", median[i]);
    std::fprintf(stderr, "; keeps answer %zu\n", best);
  }
  plan->algo = algos[best];
  bucket_algorithms()[plan->bucket] = plan->algo;
}
}  // namespace

void gemm_run(const GemmPlan* plan, const void* a, const void* b, void* out, const void* bias, void* workspace,
              cudaStream_t stream) {
  const GemmShape& g = plan->shape;
  if (below(a, g.align_a) || below(b, g.align_b) || below(out, g.align_out) ||
      (plan->has_bias && below(bias, g.align_bias))) {
    GemmShape real = g;
    real.align_a = std::min(g.align_a, alignment_of(a));
    real.align_b = std::min(g.align_b, alignment_of(b));
    real.align_out = std::min(g.align_out, alignment_of(out));
    if (plan->has_bias) real.align_bias = std::min(g.align_bias, alignment_of(bias));
    // Within the workspace the caller reserved for `plan` (a limit of 0 would mean the default).
    real.max_workspace = plan->workspace ? plan->workspace : 1;
    const GemmPlan* at_real = gemm_try_plan(real);
    if (at_real == nullptr && real.epi == Epilogue::BiasGrad) {
      real.epi = Epilogue::None;
      gemm_run(gemm_plan(real), a, b, out, nullptr, workspace, stream);
      column_sum(a, const_cast<void*>(bias), g.k, g.m, g.dtype, stream);  // a is dz [K, M]: db = its row sum
      return;
    }
    plan = at_real ? at_real : gemm_plan(real);
  }
  if (plan->workspace) {
    const uintptr_t w = reinterpret_cast<uintptr_t>(workspace);
    workspace = reinterpret_cast<void*>((w + kWorkspaceAlign - 1) & ~(kWorkspaceAlign - 1));
  } else {
    workspace = nullptr;  // an unaligned pointer is refused even with a size of 0
  }
  if (plan->has_bias) {
    check_status(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)), "bias");
  }
  if (!plan->candidates.empty()) choose_by_timing(const_cast<GemmPlan*>(plan), a, b, out, bias, workspace, stream);
  const float alpha = 1.f;
  check_status(cublasLtMatmul(lt_handle(), plan->op, &alpha, b, plan->la, a, plan->lb, &plan->beta, out, plan->lc,
                              out, plan->lc, &plan->algo, workspace, plan->workspace, stream), "matmul");
}

}  // namespace fused_mlp
