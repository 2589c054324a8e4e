// Loading and launching the embedded Triton cubins, and picking implementations from the path table.
// Images load once per process through the CUDA runtime's library API (context-independent, so one
// load serves every device); launches go through cudaLaunchKernelExC with the launch attributes the
// kernel was compiled for (programmatic dependent launch, clusters), as Triton's own launcher does.
#include "triton_launch.h"

#include <atomic>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "common.cuh"

namespace fused_mlp {
namespace {

constexpr int kMaxDevices = 64;
constexpr int kMaxArgs = 16;

std::atomic<int> g_override[kNumSteps] = {-1, -1, -1};

struct Loaded {
  std::atomic<cudaKernel_t> kernel{nullptr};
  std::atomic<uint64_t> smem_ready{0};  // bit d: the dynamic shared-memory limit is raised on device d
};

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

// Index rows by (step, sm, dtype, act, bias) once, keeping table order (first matching bound wins).
const std::vector<int>* rows_for(Step step, int sm, int dtype, int act, bool has_bias) {
  static const auto index = [] {
    std::unordered_map<uint64_t, std::vector<int>> idx;
    for (int i = 0; i < kNumTritonCubins; ++i) {
      const TritonCubin& c = kTritonCubins[i];
      const uint64_t key = (uint64_t(c.step) << 40) | (uint64_t(c.sm) << 24) | (uint64_t(c.dtype) << 16) |
                           (uint64_t(c.act) << 8) | uint64_t(c.has_bias);
      idx[key].push_back(i);
    }
    return idx;
  }();
  const uint64_t key = (uint64_t(step) << 40) | (uint64_t(sm) << 24) | (uint64_t(dtype) << 16) |
                       (uint64_t(act) << 8) | uint64_t(has_bias ? 1 : 0);
  const auto it = index.find(key);
  return it == index.end() ? nullptr : &it->second;
}

// First row of (sm, captured, op, step) admitting `rows`, or -1 when that group has no rows at all.
int pick(int sm, int captured, int op, int step, long long rows) {
  bool any = false;
  for (int i = 0; i < kNumPathRows; ++i) {
    const PathRow& r = kPathRows[i];
    if (r.sm != sm || r.captured != captured || r.op != op || r.step != step) continue;
    any = true;
    if (r.max_rows < 0 || rows <= r.max_rows) return r.impl;
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

Impl choose_impl(Step step, Op op, int sm, long long rows, bool captured) {
  const int forced = g_override[static_cast<int>(step)].load(std::memory_order_relaxed);
  if (forced >= 0) return static_cast<Impl>(forced);
  const int s = static_cast<int>(step), o = static_cast<int>(op);
  for (const int arch : {sm, 0}) {
    if (!arch_has_rows(arch, 0) && !arch_has_rows(arch, 1)) continue;
    const int mode = captured && arch_has_rows(arch, 1) ? 1 : 0;
    int impl = pick(arch, mode, o, s, rows);
    if (impl < 0) impl = pick(arch, mode, -1, s, rows);
    if (impl < 0 && mode == 1) impl = pick(arch, 0, o, s, rows);
    if (impl < 0 && mode == 1) impl = pick(arch, 0, -1, s, rows);
    if (impl >= 0) return static_cast<Impl>(impl);
  }
  STD_TORCH_CHECK(false, "fused_mlp: the path table has no row for step ", s);
  return Impl::Cublaslt;
}

int set_path_override(Step step, int impl) {
  return g_override[static_cast<int>(step)].exchange(impl);
}

const TritonCubin* find_cubin(Step step, int sm, int dtype, int act, bool has_bias, long long rows) {
  const std::vector<int>* candidates = rows_for(step, sm, dtype, act, has_bias);
  if (candidates == nullptr) return nullptr;
  for (const int i : *candidates) {
    const TritonCubin& c = kTritonCubins[i];
    if (c.max_rows < 0 || rows <= c.max_rows) return &c;
  }
  return nullptr;
}

size_t triton_scratch_bytes(const TritonCubin& c, long long programs) {
  if (c.global_scratch_bytes == 0) return 0;
  return static_cast<size_t>(programs) * c.num_ctas * c.global_scratch_bytes + c.global_scratch_align;
}

void launch_cubin(const TritonCubin& c, long long programs, const KArg* args, int nargs, void* scratch,
                  cudaStream_t stream, const char* op) {
  if (programs == 0) return;
  STD_TORCH_CHECK(nargs <= kMaxArgs, "fused_mlp: too many kernel arguments");
  const int index = static_cast<int>(&c - kTritonCubins);
  const cudaKernel_t kernel = load_kernel(index);
  int device = 0;
  cudaGetDevice(&device);
  if (c.shared_bytes > 48 * 1024) {  // above the default limit: opt in once per device, as Triton's loader does
    Loaded& slot = loaded()[index];
    const uint64_t bit = uint64_t(1) << device;
    if ((slot.smem_ready.load(std::memory_order_acquire) & bit) == 0) {
      const cudaError_t err = cudaKernelSetAttributeForDevice(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                              c.shared_bytes, device);
      STD_TORCH_CHECK(err == cudaSuccess, "fused_mlp.", op, ": cannot reserve ", c.shared_bytes,
                      " bytes of shared memory for ", c.kernel, ": ", cudaGetErrorString(err));
      slot.smem_ready.fetch_or(bit, std::memory_order_acq_rel);
    }
  }
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

  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(programs * c.num_ctas), 1, 1);
  config.blockDim = dim3(32 * c.num_warps, 1, 1);
  config.dynamicSmemBytes = c.shared_bytes;
  config.stream = stream;
  cudaLaunchAttribute attrs[2];
  unsigned n = 0;
  if (c.pdl) {  // the kernel waits on griddepcontrol before touching memory: it may start while the previous drains
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

}  // namespace fused_mlp
