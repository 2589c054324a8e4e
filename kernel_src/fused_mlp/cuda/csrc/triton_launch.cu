// Loading and launching the embedded Triton cubins, and picking implementations from the path table.
// Images load once per process through the CUDA runtime's library API (context-independent, so one
// load serves every device). Launches go through the driver's cuLaunchKernelEx with a CUfunction cached
// per (cubin, device), as Triton's own launcher does: the runtime's launch of a library kernel costs about
// twice as much host time (bench/BENCHMARKS.md). The driver entry points are looked up once
// through the runtime (cudaGetDriverEntryPointByVersion), so the extension does not link libcuda; where
// they are missing, launches fall back to cudaLaunchKernelExC. Launch attributes are the ones the kernel
// was compiled for (programmatic dependent launch, clusters).
#include "triton_launch.h"

#include <cuda.h>
#include <cudaTypedefs.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "common.cuh"

namespace fused_mlp {
namespace {

constexpr int kMaxDevices = 64;
constexpr int kMaxArgs = 16;

// Per step: the forced Impl + 1, or 0 for none (the path table decides), so that zero initialisation is right.
std::atomic<int> g_override[kNumSteps] = {};

struct Loaded {
  std::atomic<cudaKernel_t> kernel{nullptr};
  std::atomic<CUfunction> function[kMaxDevices] = {};  // per device: the kernel in its primary context
};

// The driver functions the launcher calls, or null members when this driver lacks them.
struct Driver {
  PFN_cuLaunchKernelEx_v11060 launch = nullptr;
  PFN_cuKernelGetFunction_v12000 get_function = nullptr;
  PFN_cuFuncSetAttribute_v9000 set_attribute = nullptr;
  bool ok() const { return launch && get_function && set_attribute; }
};

template <typename Fn>
void entry_point(const char* name, unsigned version, Fn* out) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion(name, &fn, version, cudaEnableDefault, &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess) {
    cudaGetLastError();
    fn = nullptr;
  }
  *out = reinterpret_cast<Fn>(fn);
}

const Driver& driver() {
  static const Driver d = [] {
    Driver out;
    entry_point("cuLaunchKernelEx", 11060, &out.launch);
    entry_point("cuKernelGetFunction", 12000, &out.get_function);
    entry_point("cuFuncSetAttribute", 9000, &out.set_attribute);
    return out;
  }();
  return d;
}

// Implementations named in FUSED_MLP_CUDA_DISABLE, as a bit set over Impl codes (read once).
unsigned disabled_impls() {
  static const unsigned bits = [] {
    const char* env = std::getenv("FUSED_MLP_CUDA_DISABLE");
    unsigned out = 0;
    if (env == nullptr) return out;
    const std::string list = std::string(",") + env + ",";
    for (int i = 0; i < kNumImpls; ++i)
      if (list.find(std::string(",") + kImplNames[i] + ",") != std::string::npos) out |= 1u << i;
    return out;
  }();
  return bits;
}

// The step's fallback (paths.FALLBACK): what runs when the chosen implementation cannot or may not.
Impl fallback_of(int step) { return static_cast<Impl>(kFallbackImpl[step]); }

std::vector<Loaded>& loaded() {
  static std::vector<Loaded> entries(static_cast<size_t>(kNumTritonCubins));
  return entries;
}

cudaKernel_t load_kernel(int index) {
  Loaded& slot = loaded()[index];
  cudaKernel_t k = slot.kernel.load(std::memory_order_acquire);
  if (k != nullptr) return k;
  static std::mutex mu;
  static std::unordered_map<unsigned long long, cudaLibrary_t> libraries;  // by image offset
  std::lock_guard<std::mutex> lock(mu);
  k = slot.kernel.load(std::memory_order_acquire);
  if (k != nullptr) return k;
  const TritonCubin& c = kTritonCubins[index];
  cudaLibrary_t& lib = libraries[c.offset];
  if (lib == nullptr) {
    const cudaError_t err = cudaLibraryLoadData(&lib, kCubinBlob + c.offset, nullptr, nullptr, 0, nullptr, nullptr, 0);
    STD_TORCH_CHECK(err == cudaSuccess, "fused_mlp: cannot load the embedded Triton cubin of ", c.kernel, ": ",
                    cudaGetErrorString(err));
  }
  const cudaError_t err = cudaLibraryGetKernel(&k, lib, c.kernel);
  STD_TORCH_CHECK(err == cudaSuccess, "fused_mlp: the embedded cubin has no kernel ", c.kernel, ": ",
                  cudaGetErrorString(err));
  slot.kernel.store(k, std::memory_order_release);
  return k;
}

uint64_t cubin_key(int step, int impl, int sm, int dtype, int act, bool has_bias, bool store_gu, bool up_first) {
  return (uint64_t(step) << 48) | (uint64_t(impl) << 40) | (uint64_t(sm) << 24) | (uint64_t(dtype) << 16) |
         (uint64_t(act) << 8) | (uint64_t(up_first ? 1 : 0) << 2) | (uint64_t(has_bias ? 1 : 0) << 1) |
         uint64_t(store_gu ? 1 : 0);
}

// Index rows by (step, impl, sm, dtype, act, bias, store_gu, up_first) once, keeping table order (first bound
// wins).
const std::vector<int>* rows_for(const CubinQuery& q) {
  static const auto index = [] {
    std::unordered_map<uint64_t, std::vector<int>> idx;
    for (int i = 0; i < kNumTritonCubins; ++i) {
      const TritonCubin& c = kTritonCubins[i];
      idx[cubin_key(c.step, c.impl, c.sm, c.dtype, c.act, c.has_bias, c.store_gu, c.up_first)].push_back(i);
    }
    return idx;
  }();
  const auto it = index.find(cubin_key(static_cast<int>(q.step), static_cast<int>(q.impl), q.sm, q.dtype, q.act,
                                       q.has_bias, q.store_gu, q.up_first));
  return it == index.end() ? nullptr : &it->second;
}

long long cdiv(long long a, long long b) { return (a + b - 1) / b; }

// Share of the SMs busy over the waves a persistent grid of `c`'s tiles needs (configs.wave_fill).
double wave_fill(const TritonCubin& c, long long rows, long long cols, int sms) {
  const long long tiles = cdiv(rows, c.block_m) * cdiv(cols, c.block_n);
  return static_cast<double>(tiles) / static_cast<double>(cdiv(tiles, sms) * sms);
}

// First row of (sm, captured, op, step) admitting `rows` and `weight_bytes`, or -1 when that group has no rows.
int pick(int sm, int captured, int op, int step, long long rows, long long weight_bytes) {
  bool any = false;
  for (int i = 0; i < kNumPathRows; ++i) {
    const PathRow& r = kPathRows[i];
    if (r.sm != sm || r.captured != captured || r.op != op || r.step != step) continue;
    any = true;
    if ((r.max_rows < 0 || rows <= r.max_rows) && weight_bytes >= r.min_weight_bytes) return r.impl;
  }
  STD_TORCH_CHECK(!any, "fused_mlp: the path table has no catch-all row for step ", step);
  return -1;
}

bool arch_has_rows(int sm, int captured) {
  for (int i = 0; i < kNumPathRows; ++i)
    if (kPathRows[i].sm == sm && kPathRows[i].captured == captured) return true;
  return false;
}

}  // namespace

int device_sms(int device) {
  static std::atomic<int> cache[kMaxDevices] = {};
  STD_TORCH_CHECK(device >= 0 && device < kMaxDevices, "fused_mlp: device index ", device, " out of range");
  int sms = cache[device].load(std::memory_order_relaxed);
  if (sms == 0) {
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || sms <= 0) {
      cudaGetLastError();
      return 1;
    }
    cache[device].store(sms, std::memory_order_relaxed);
  }
  return sms;
}

int device_sm(int device) {
  static std::atomic<int> cache[kMaxDevices] = {};
  STD_TORCH_CHECK(device >= 0 && device < kMaxDevices, "fused_mlp: device index ", device, " out of range");
  int sm = cache[device].load(std::memory_order_relaxed);
  if (sm == 0) {
    int major = 0, minor = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
      cudaGetLastError();  // no such device (or none at all): the default rows of the path table apply
      return 0;
    }
    sm = major * 10 + minor;
    cache[device].store(sm, std::memory_order_relaxed);
  }
  return sm;
}

Impl choose_impl(Step step, Op op, int sm, long long rows, long long weight_bytes, bool captured) {
  const int s = static_cast<int>(step), o = static_cast<int>(op);
  const unsigned off = disabled_impls();
  const int forced = g_override[s].load(std::memory_order_relaxed) - 1;
  if (forced >= 0) return off & (1u << forced) ? fallback_of(s) : static_cast<Impl>(forced);
  for (const int arch : {sm, 0}) {
    if (!arch_has_rows(arch, 0) && !arch_has_rows(arch, 1)) continue;
    const int mode = captured && arch_has_rows(arch, 1) ? 1 : 0;
    int impl = pick(arch, mode, o, s, rows, weight_bytes);
    if (impl < 0) impl = pick(arch, mode, -1, s, rows, weight_bytes);
    if (impl < 0 && mode == 1) impl = pick(arch, 0, o, s, rows, weight_bytes);
    if (impl < 0 && mode == 1) impl = pick(arch, 0, -1, s, rows, weight_bytes);
    if (impl >= 0) return off & (1u << impl) ? fallback_of(s) : static_cast<Impl>(impl);
  }
  STD_TORCH_CHECK(false, "fused_mlp: the path table has no row for step ", s);
  return Impl::Cublaslt;
}

bool decode_wanted(Step step, int sm, long long weight_bytes) {
  const int forced = g_override[static_cast<int>(step)].load(std::memory_order_relaxed) - 1;
  if (forced >= 0) return forced == static_cast<int>(Impl::Gemv);
  if (disabled_impls() & (1u << static_cast<int>(Impl::Gemv))) return false;
  for (int i = 0; i < kNumDecodeRules; ++i)
    if (kDecodeRules[i].sm == sm) return weight_bytes >= kDecodeRules[i].min_weight_bytes;
  return false;
}

int set_path_override(Step step, int impl) {
  return g_override[static_cast<int>(step)].exchange(impl + 1) - 1;
}

const TritonCubin* find_cubin(const CubinQuery& q) {
  const std::vector<int>* candidates = rows_for(q);
  if (candidates == nullptr) return nullptr;
  const std::vector<int>& rows = *candidates;
  for (size_t j = 0; j < rows.size(); ++j) {
    const TritonCubin& c = kTritonCubins[rows[j]];
    if (c.max_rows >= 0 && q.rows > c.max_rows) continue;
    // c's row admits q.rows; its alternatives follow it with the same bound and PDL flag.
    const TritonCubin* fullest = &c;
    double best = -1.0;
    for (size_t k = j; k < rows.size(); ++k) {
      const TritonCubin& a = kTritonCubins[rows[k]];
      if (a.max_rows != c.max_rows || a.pdl != c.pdl) break;
      if (a.block_m == 0) return &a;  // not a tiled kernel (act_and_mul): one row per bound
      const double fill = wave_fill(a, q.rows, q.cols, q.sms);
      if (fill >= kWaveFill) return &a;
      if (fill > best) best = fill, fullest = &a;
    }
    return fullest;
  }
  return nullptr;
}

long long cubin_programs(const TritonCubin& c, long long rows, long long cols, int sms) {
  if (c.block_m == 0) return cdiv(rows * cols, c.block_n);  // elementwise: block_n elements per program
  const long long tiles = cdiv(rows, c.block_m) * cdiv(cols, c.block_n);
  return c.impl == static_cast<int>(Impl::Tma) && tiles > sms ? sms : tiles;
}

size_t triton_scratch_bytes(const TritonCubin& c, long long programs) {
  if (c.global_scratch_bytes == 0) return 0;
  return static_cast<size_t>(programs) * c.num_ctas * c.global_scratch_bytes + c.global_scratch_align;
}

namespace {

// The kernel's CUfunction in `device`'s primary context, cached, with its shared-memory limit raised once
// (above 48 KB a kernel must opt in, as Triton's loader does). Null when the driver lacks the entry points.
CUfunction function_for(int index, cudaKernel_t kernel, int device, const char* op) {
  const Driver& d = driver();
  if (!d.ok()) return nullptr;
  std::atomic<CUfunction>& slot = loaded()[index].function[device];
  CUfunction f = slot.load(std::memory_order_acquire);
  if (f != nullptr) return f;
  CUresult r = d.get_function(&f, reinterpret_cast<CUkernel>(kernel));
  if (r == CUDA_ERROR_INVALID_CONTEXT) {  // a thread that never touched the runtime: make its context current
    cudaSetDevice(device);
    r = d.get_function(&f, reinterpret_cast<CUkernel>(kernel));
  }
  const TritonCubin& c = kTritonCubins[index];
  STD_TORCH_CHECK(r == CUDA_SUCCESS, "fused_mlp.", op, ": no function for ", c.kernel, " on device ", device,
                  " (CUresult ", static_cast<int>(r), ")");
  if (c.shared_bytes > 48 * 1024) {
    r = d.set_attribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, c.shared_bytes);
    STD_TORCH_CHECK(r == CUDA_SUCCESS, "fused_mlp.", op, ": cannot reserve ", c.shared_bytes,
                    " bytes of shared memory for ", c.kernel, " (CUresult ", static_cast<int>(r), ")");
  }
  slot.store(f, std::memory_order_release);
  return f;
}

// The same launch through the runtime (drivers without the entry points above).
void launch_runtime(const TritonCubin& c, cudaKernel_t kernel, int device, unsigned grid, void** params,
                    cudaStream_t stream, const char* op) {
  if (c.shared_bytes > 48 * 1024) {
    const cudaError_t err = cudaKernelSetAttributeForDevice(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                            c.shared_bytes, device);
    STD_TORCH_CHECK(err == cudaSuccess, "fused_mlp.", op, ": cannot reserve ", c.shared_bytes,
                    " bytes of shared memory for ", c.kernel, ": ", cudaGetErrorString(err));
  }
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(grid, 1, 1);
  config.blockDim = dim3(32 * c.num_warps, 1, 1);
  config.dynamicSmemBytes = c.shared_bytes;
  config.stream = stream;
  cudaLaunchAttribute attrs[2];
  unsigned n = 0;
  if (c.pdl) {
    attrs[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attrs[n].val.programmaticStreamSerializationAllowed = 1;
    ++n;
  }
  if (c.num_ctas != 1) {
    attrs[n].id = cudaLaunchAttributeClusterDimension;
    attrs[n].val.clusterDim.x = c.num_ctas;
    attrs[n].val.clusterDim.y = 1;
    attrs[n].val.clusterDim.z = 1;
    ++n;
  }
  config.attrs = n ? attrs : nullptr;
  config.numAttrs = n;
  const cudaError_t err = cudaLaunchKernelExC(&config, reinterpret_cast<const void*>(kernel), params);
  STD_TORCH_CHECK(err == cudaSuccess, "fused_mlp.", op, ": launching ", c.kernel, " failed: ",
                  cudaGetErrorString(err));
}

}  // namespace

void launch_cubin(const TritonCubin& c, long long programs, const KArg* args, int nargs, void* scratch,
                  cudaStream_t stream, const char* op) {
  if (programs == 0) return;
  STD_TORCH_CHECK(nargs <= kMaxArgs, "fused_mlp: too many kernel arguments");
  const int index = static_cast<int>(&c - kTritonCubins);
  const cudaKernel_t kernel = load_kernel(index);
  int device = 0;
  cudaGetDevice(&device);
  STD_TORCH_CHECK(device >= 0 && device < kMaxDevices, "fused_mlp: device index ", device, " out of range");
  void* params[kMaxArgs + 2];
  for (int i = 0; i < nargs; ++i) params[i] = const_cast<KArg*>(&args[i]);  // each KArg holds its value first
  void* global_scratch = nullptr;
  void* profile_scratch = nullptr;
  if (c.global_scratch_bytes > 0) {
    const uintptr_t a = static_cast<uintptr_t>(c.global_scratch_align);
    global_scratch = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(scratch) + a - 1) / a * a);
  }
  params[nargs] = &global_scratch;
  params[nargs + 1] = &profile_scratch;
  const unsigned grid = static_cast<unsigned>(programs * c.num_ctas);

  const CUfunction f = function_for(index, kernel, device, op);
  if (f == nullptr) return launch_runtime(c, kernel, device, grid, params, stream, op);
  CUlaunchConfig config = {};
  config.gridDimX = grid, config.gridDimY = 1, config.gridDimZ = 1;
  config.blockDimX = 32 * c.num_warps, config.blockDimY = 1, config.blockDimZ = 1;
  config.sharedMemBytes = c.shared_bytes;
  config.hStream = reinterpret_cast<CUstream>(stream);
  CUlaunchAttribute attrs[2];
  unsigned n = 0;
  if (c.pdl) {  // the kernel waits on griddepcontrol before touching memory: it may start while the previous drains
    attrs[n].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attrs[n].value.programmaticStreamSerializationAllowed = 1;
    ++n;
  }
  if (c.num_ctas != 1) {
    attrs[n].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attrs[n].value.clusterDim.x = c.num_ctas;
    attrs[n].value.clusterDim.y = 1;
    attrs[n].value.clusterDim.z = 1;
    ++n;
  }
  config.attrs = n ? attrs : nullptr;
  config.numAttrs = n;
  const CUresult r = driver().launch(&config, f, params, nullptr);
  STD_TORCH_CHECK(r == CUDA_SUCCESS, "fused_mlp.", op, ": launching ", c.kernel, " failed (CUresult ",
                  static_cast<int>(r), ")");
}

void launch_own_kernel(const void* stub, cudaFunction_t function, unsigned grid, unsigned block, unsigned smem,
                       void** params, bool cooperative, cudaStream_t stream, const char* op) {
  const Driver& d = driver();
  if (d.ok()) {
    CUlaunchConfig config = {};
    config.gridDimX = grid, config.gridDimY = 1, config.gridDimZ = 1;
    config.blockDimX = block, config.blockDimY = 1, config.blockDimZ = 1;
    config.sharedMemBytes = smem;
    config.hStream = reinterpret_cast<CUstream>(stream);
    CUlaunchAttribute attr;
    attr.id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
    attr.value.cooperative = 1;
    config.attrs = cooperative ? &attr : nullptr;
    config.numAttrs = cooperative ? 1 : 0;
    const CUresult r = d.launch(&config, reinterpret_cast<CUfunction>(function), params, nullptr);
    STD_TORCH_CHECK(r == CUDA_SUCCESS, "fused_mlp.", op, ": launching the kernel on ", grid, " programs with ", smem,
                    " bytes of shared memory failed (CUresult ", static_cast<int>(r),
                    "); FUSED_MLP_CUDA_DISABLE=persistent runs the layers one by one");
    return;
  }
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(grid, 1, 1);
  config.blockDim = dim3(block, 1, 1);
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attr;
  attr.id = cudaLaunchAttributeCooperative;
  attr.val.cooperative = 1;
  config.attrs = cooperative ? &attr : nullptr;
  config.numAttrs = cooperative ? 1 : 0;
  const cudaError_t err = cudaLaunchKernelExC(&config, stub, params);
  STD_TORCH_CHECK(err == cudaSuccess, "fused_mlp.", op, ": launching the kernel on ", grid, " programs with ", smem,
                  " bytes of shared memory failed: ", cudaGetErrorString(err),
                  "; FUSED_MLP_CUDA_DISABLE=persistent runs the layers one by one");
}

}  // namespace fused_mlp
