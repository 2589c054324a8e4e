// Memory-bound elementwise kernels. Each thread moves 16 bytes per operand when the pointers and
// the length allow it (the act_and_mul goal is HBM bandwidth), else one element.
#include "elementwise.h"

namespace fused_mlp {
namespace {

constexpr int kThreads = 256;

template <typename T, int V>
struct alignas(sizeof(T) * V) Vec { T v[V]; };

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) % 16) == 0; }

unsigned grid_for(long long items) {
  const long long blocks = (items + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < (1ll << 30) ? (blocks > 0 ? blocks : 1) : (1ll << 30));
}

template <typename T, int V>
__global__ void act_inplace_kernel(T* z, long long nvec, Act act) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < nvec; i += (long long)gridDim.x * blockDim.x) {
    Vec<T, V> a = reinterpret_cast<Vec<T, V>*>(z)[i];
#pragma unroll
    for (int j = 0; j < V; ++j) a.v[j] = from_f<T>(act_fwd(to_f(a.v[j]), act));
    reinterpret_cast<Vec<T, V>*>(z)[i] = a;
  }
}

template <typename T, int V>
__global__ void act_and_mul_kernel(const T* __restrict__ g, const T* __restrict__ u, T* __restrict__ out,
                                   long long nvec, Act act) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < nvec; i += (long long)gridDim.x * blockDim.x) {
    const Vec<T, V> a = reinterpret_cast<const Vec<T, V>*>(g)[i];
    const Vec<T, V> b = reinterpret_cast<const Vec<T, V>*>(u)[i];
    Vec<T, V> o;
#pragma unroll
    for (int j = 0; j < V; ++j) o.v[j] = from_f<T>(act_fwd(to_f(a.v[j]), act) * to_f(b.v[j]));
    reinterpret_cast<Vec<T, V>*>(out)[i] = o;
  }
}

template <typename T, int V>
__global__ void act_and_mul_backward_kernel(const T* __restrict__ dout, const T* __restrict__ g,
                                            const T* __restrict__ u, T* __restrict__ dg, T* __restrict__ du,
                                            long long nvec, Act act) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < nvec; i += (long long)gridDim.x * blockDim.x) {
    const Vec<T, V> d = reinterpret_cast<const Vec<T, V>*>(dout)[i];
    const Vec<T, V> a = reinterpret_cast<const Vec<T, V>*>(g)[i];
    const Vec<T, V> b = reinterpret_cast<const Vec<T, V>*>(u)[i];
    Vec<T, V> og, ou;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const float dv = to_f(d.v[j]);
      float f, df;
      act_fwd_grad(to_f(a.v[j]), act, f, df);
      og.v[j] = from_f<T>(dv * to_f(b.v[j]) * df);
      ou.v[j] = from_f<T>(dv * f);
    }
    reinterpret_cast<Vec<T, V>*>(dg)[i] = og;
    reinterpret_cast<Vec<T, V>*>(du)[i] = ou;
  }
}

template <typename T, int V>
__global__ void act_backward_kernel(const T* __restrict__ dy, const T* __restrict__ saved, T* __restrict__ dz,
                                    long long nvec, Act act) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < nvec; i += (long long)gridDim.x * blockDim.x) {
    const Vec<T, V> d = reinterpret_cast<const Vec<T, V>*>(dy)[i];
    const Vec<T, V> s = reinterpret_cast<const Vec<T, V>*>(saved)[i];
    Vec<T, V> o;
#pragma unroll
    for (int j = 0; j < V; ++j) o.v[j] = from_f<T>(to_f(d.v[j]) * act_grad(to_f(s.v[j]), act));
    reinterpret_cast<Vec<T, V>*>(dz)[i] = o;
  }
}

template <typename T, int V>
__global__ void add_kernel(T* __restrict__ dst, const T* __restrict__ src, long long nvec, Act) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < nvec; i += (long long)gridDim.x * blockDim.x) {
    Vec<T, V> a = reinterpret_cast<Vec<T, V>*>(dst)[i];
    const Vec<T, V> b = reinterpret_cast<const Vec<T, V>*>(src)[i];
#pragma unroll
    for (int j = 0; j < V; ++j) a.v[j] = from_f<T>(to_f(a.v[j]) + to_f(b.v[j]));
    reinterpret_cast<Vec<T, V>*>(dst)[i] = a;
  }
}

// One block per 32 columns; 32 x 16 threads walk the rows and reduce through shared memory.
template <typename T>
__global__ void column_sum_kernel(const T* __restrict__ dz, T* __restrict__ db, long long m, long long n) {
  __shared__ float part[16][33];
  const long long col = blockIdx.x * 32ll + threadIdx.x;
  float acc = 0.f;
  if (col < n) {
    for (long long r = threadIdx.y; r < m; r += 16) acc += to_f(dz[r * n + col]);
  }
  part[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && col < n) {
    float s = 0.f;
#pragma unroll
    for (int j = 0; j < 16; ++j) s += part[j][threadIdx.x];
    db[col] = from_f<T>(s);
  }
}

}  // namespace

// Launches KERNEL<T, V> with V = 16 bytes worth of T when every pointer is 16-byte aligned and n
// is a multiple of V, else V = 1.
#define FMLP_LAUNCH_VEC(KERNEL, T, n, ALIGNED, stream, ...)                                       \
  do {                                                                                            \
    constexpr int kV = 16 / sizeof(T);                                                            \
    if ((ALIGNED) && (n) % kV == 0) {                                                             \
      KERNEL<T, kV><<<grid_for((n) / kV), kThreads, 0, stream>>>(__VA_ARGS__, (n) / kV, act);     \
    } else {                                                                                      \
      KERNEL<T, 1><<<grid_for(n), kThreads, 0, stream>>>(__VA_ARGS__, (n), act);                  \
    }                                                                                             \
  } while (0)

void act_inplace(void* z, long long n, Act act, ScalarType dtype, cudaStream_t stream) {
  if (n == 0 || act == Act::None) return;
  dispatch_float_types(dtype, "activation", [&](auto tag) {
    using T = decltype(tag);
    FMLP_LAUNCH_VEC(act_inplace_kernel, T, n, aligned16(z), stream, static_cast<T*>(z));
  });
  check_launch("activation");
}

void act_and_mul(const void* gate, const void* up, void* out, long long n, Act act, ScalarType dtype,
                 cudaStream_t stream) {
  if (n == 0) return;
  // One 16-byte vector per thread, one pass, no cache hints: near the memory-bandwidth floor; 2 or 4 vectors per
  // thread, streaming or no-L1 loads and grid-stride grids measured equal or slower (bench/BENCHMARKS.md).
  dispatch_float_types(dtype, "act_and_mul", [&](auto tag) {
    using T = decltype(tag);
    FMLP_LAUNCH_VEC(act_and_mul_kernel, T, n, aligned16(gate) && aligned16(up) && aligned16(out), stream,
                    static_cast<const T*>(gate), static_cast<const T*>(up), static_cast<T*>(out));
  });
  check_launch("act_and_mul");
}

void act_and_mul_backward(const void* dout, const void* gate, const void* up, void* dgate, void* dup,
                          long long n, Act act, ScalarType dtype, cudaStream_t stream) {
  if (n == 0) return;
  dispatch_float_types(dtype, "act_and_mul backward", [&](auto tag) {
    using T = decltype(tag);
    const bool al = aligned16(dout) && aligned16(gate) && aligned16(up) && aligned16(dgate) && aligned16(dup);
    FMLP_LAUNCH_VEC(act_and_mul_backward_kernel, T, n, al, stream, static_cast<const T*>(dout),
                    static_cast<const T*>(gate), static_cast<const T*>(up), static_cast<T*>(dgate),
                    static_cast<T*>(dup));
  });
  check_launch("act_and_mul backward");
}

void act_backward(const void* dy, const void* saved, void* dz, long long n, Act act, ScalarType dtype,
                  cudaStream_t stream) {
  if (n == 0) return;
  dispatch_float_types(dtype, "activation backward", [&](auto tag) {
    using T = decltype(tag);
    const bool al = aligned16(dy) && aligned16(saved) && aligned16(dz);
    FMLP_LAUNCH_VEC(act_backward_kernel, T, n, al, stream, static_cast<const T*>(dy),
                    static_cast<const T*>(saved), static_cast<T*>(dz));
  });
  check_launch("activation backward");
}

void add_inplace(void* dst, const void* src, long long n, ScalarType dtype, cudaStream_t stream) {
  if (n == 0) return;
  const Act act = Act::None;  // unused by add_kernel; FMLP_LAUNCH_VEC passes it to every kernel
  dispatch_float_types(dtype, "gradient sum", [&](auto tag) {
    using T = decltype(tag);
    FMLP_LAUNCH_VEC(add_kernel, T, n, aligned16(dst) && aligned16(src), stream, static_cast<T*>(dst),
                    static_cast<const T*>(src));
  });
  check_launch("gradient sum");
}

void column_sum(const void* dz, void* db, long long m, long long n, ScalarType dtype, cudaStream_t stream) {
  if (n == 0) return;
  dispatch_float_types(dtype, "bias gradient", [&](auto tag) {
    using T = decltype(tag);
    column_sum_kernel<T><<<ceil_div(n, 32), dim3(32, 16), 0, stream>>>(static_cast<const T*>(dz),
                                                                         static_cast<T*>(db), m, n);
  });
  check_launch("bias gradient");
}

}  // namespace fused_mlp
