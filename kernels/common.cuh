// Shared by every kernel file: error checks that throw nn::Error with file, line and the
// library's own message; element types and their float conversions; launch helpers.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <nn/dtype.h>
#include <nn/error.h>

#include <algorithm>
#include <cstdint>
#include <mutex>

#include "kernels/int_math.h"

#define NN_CUDA_CHECK(expr)                                                              \
  do {                                                                                   \
    cudaError_t nn_err_ = (expr);                                                        \
    if (nn_err_ != cudaSuccess)                                                          \
      NN_ERROR("CUDA error at ", __FILE__, ":", __LINE__, ": ", cudaGetErrorString(nn_err_), \
               " (", #expr, ")");                                                        \
  } while (0)

// After every kernel launch: a bad configuration shows up here, not at some later sync.
#define NN_CUDA_CHECK_LAUNCH() NN_CUDA_CHECK(cudaGetLastError())

namespace nn::kernels {

constexpr int kThreads = 256;
// (a view of more dims that cannot be merged would be stranded: not even .cpu() could copy it)
constexpr int kMaxDims = 16;

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Blocks for n work items at `per_thread` each (grid.x allows 2^31 - 1 blocks; kernels that
// loop with a grid stride stay correct beyond that).
inline unsigned grid_for(int64_t n, int per_thread = 1, int threads = kThreads) {
  int64_t blocks = ceil_div(n, int64_t(threads) * per_thread);
  if (blocks < 1) blocks = 1;
  return unsigned(blocks > 0x7fffffff ? 0x7fffffff : blocks);
}

// How many splits each of K outputs' work takes, so that about 8 blocks of 256 threads per SM
// (an H100's 2048 threads on its 132 SMs) are busy: at least `least`, at most work_per_k /
// min_work (each split min_work or more) and 1024; 1 at the least.
inline int work_splits(int64_t K, int64_t work_per_k, int64_t min_work, int64_t least = 1) {
  const int64_t want = std::max(ceil_div(132 * 8, std::max<int64_t>(K, 1)), least);
  const int64_t most = std::max<int64_t>(1, work_per_k / min_work);
  return int(std::max<int64_t>(1, std::min<int64_t>({want, most, 1024})));
}

// Whether an address is a multiple of `bytes` (vector loads and stores need it).
inline bool aligned_to(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// A grid of exactly n blocks in x (one per row, bag, ...), failing clearly beyond the
// 2^31 - 1 blocks grid.x allows rather than launching a truncated grid.
inline unsigned blocks_exact(int64_t n, const char* op) {
  NN_CHECK(n <= 0x7fffffff, op, ": ", n, " blocks exceed the 2^31 - 1 a grid allows");
  return unsigned(n);
}

// A kernel may use more than the default 48 KB of dynamic shared memory only after opting
// in; fails with a clear message when the device allows less than `bytes` per block. For
// kernels with no static __shared__ arrays: without the opt-in, static and dynamic together
// get 48 KB, so a static array would make a launch just under it fail (the emulator checks).
// The opt-in only ever rises, under a lock: two host threads launching one kernel with
// different sizes never lower it beneath the other's launch.
template <typename K>
void allow_dynamic_smem(K kernel, size_t bytes, const char* op) {
  if (bytes <= 48 * 1024) return;
  int dev = 0, optin = 0;
  NN_CUDA_CHECK(cudaGetDevice(&dev));
  NN_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  NN_CHECK(bytes <= size_t(optin), op, ": needs ", bytes,
           " bytes of shared memory per block, the device allows ", optin);
  static std::mutex m;
  std::lock_guard<std::mutex> lock(m);
  cudaFuncAttributes attr{};
  NN_CUDA_CHECK(cudaFuncGetAttributes(&attr, kernel));
  if (size_t(attr.maxDynamicSharedSizeBytes) < bytes)
    NN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
}

// Device element types for each dtype.
template <DType D> struct DevType;
template <> struct DevType<DType::f32> { using T = float; };
template <> struct DevType<DType::f64> { using T = double; };
template <> struct DevType<DType::f16> { using T = __half; };
template <> struct DevType<DType::bf16> { using T = __nv_bfloat16; };
template <> struct DevType<DType::i32> { using T = int32_t; };
template <> struct DevType<DType::i64> { using T = int64_t; };
template <> struct DevType<DType::u8> { using T = uint8_t; };

// The type arithmetic happens in: float for 16-bit floats, else the type itself.
template <typename T> struct Acc { using T_ = T; };
template <> struct Acc<__half> { using T_ = float; };
template <> struct Acc<__nv_bfloat16> { using T_ = float; };
template <typename T> using acc_t = typename Acc<T>::T_;

template <typename T> __device__ __forceinline__ acc_t<T> load(T v) { return v; }
template <> __device__ __forceinline__ float load<__half>(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float load<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

// Conversion between any two element types (through float/double as needed).
template <typename To, typename From>
__device__ __forceinline__ To convert(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_same_v<To, __half>) {
    return __float2half_rn(float(load(v)));
  } else if constexpr (std::is_same_v<To, __nv_bfloat16>) {
    return __float2bfloat16_rn(float(load(v)));
  } else if constexpr (std::is_integral_v<To> && !std::is_integral_v<acc_t<From>>) {
    // Truncate through int64 with saturation, then wrap: matches the CPU backend.
    return To(saturate_i64(double(load(v))));
  } else {
    return To(load(v));
  }
}

// Calls f.template operator()<T>() for the device type of `t`.
template <typename F>
void dispatch_all(DType t, F&& f) {
  switch (t) {
    case DType::f32: f.template operator()<float>(); return;
    case DType::f64: f.template operator()<double>(); return;
    case DType::f16: f.template operator()<__half>(); return;
    case DType::bf16: f.template operator()<__nv_bfloat16>(); return;
    case DType::i32: f.template operator()<int32_t>(); return;
    case DType::i64: f.template operator()<int64_t>(); return;
    case DType::u8: f.template operator()<uint8_t>(); return;
  }
}
template <typename F>
void dispatch_float(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::f32: f.template operator()<float>(); return;
    case DType::f64: f.template operator()<double>(); return;
    case DType::f16: f.template operator()<__half>(); return;
    case DType::bf16: f.template operator()<__nv_bfloat16>(); return;
    default: NN_ERROR(op, ": not implemented for dtype ", dtype_name(t), " on CUDA");
  }
}
// For kernels that sum with atomics: f32 or f64 only (callers sum 16-bit data in f32).
template <typename F>
void dispatch_sum(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::f32: f.template operator()<float>(); return;
    case DType::f64: f.template operator()<double>(); return;
    default: NN_ERROR(op, ": sums in f32 or f64 on CUDA, got ", dtype_name(t));
  }
}

// Shape and per-operand element strides of an elementwise launch; operand 0 is the output.
template <int N>
struct Geom {
  int ndim = 0;
  int64_t shape[kMaxDims];
  int64_t stride[N][kMaxDims];
};

// Offsets in every operand of linear element i over the first `ndim` dims of g.
template <int N>
__device__ __forceinline__ void dim_offsets(const Geom<N>& g, int ndim, int64_t i,
                                            int64_t (&off)[N]) {
#pragma unroll
  for (int k = 0; k < N; ++k) off[k] = 0;
  for (int d = ndim - 1; d >= 0; --d) {
    int64_t idx = i % g.shape[d];
    i /= g.shape[d];
#pragma unroll
    for (int k = 0; k < N; ++k) off[k] += idx * g.stride[k][d];
  }
}
// Offsets of linear output element i in every operand.
template <int N>
__device__ __forceinline__ void offsets(const Geom<N>& g, int64_t i, int64_t (&off)[N]) {
  dim_offsets(g, g.ndim, i, off);
}
// Offsets of row r (the dims before the innermost) in every operand.
template <int N>
__device__ __forceinline__ void row_offsets(const Geom<N>& g, int64_t r, int64_t (&off)[N]) {
  dim_offsets(g, g.ndim - 1, r, off);
}

// Four elements moved as one vector load or store (16-bit: 8 bytes, f32: 16).
template <typename T>
struct alignas(4 * sizeof(T)) Quad {
  T v[4];
};

// The sum of v over a warp, in every lane.
template <typename A>
__device__ __forceinline__ A warp_sum(A v) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// The sum of v over the block, in every thread (blockDim.x a multiple of 32, up to 1024).
template <typename A>
__device__ A block_sum(A v) {
  __shared__ A shared[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int o = 16; o > 0; o /= 2) v += __shfl_down_sync(0xffffffffu, v, o);
  __syncthreads();  // shared may still be read by a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  const int warps = (blockDim.x + 31) / 32;
  v = int(threadIdx.x) < warps ? shared[threadIdx.x] : A(0);
  if (warp == 0)
    for (int o = 16; o > 0; o /= 2) v += __shfl_down_sync(0xffffffffu, v, o);
  if (threadIdx.x == 0) shared[0] = v;
  __syncthreads();
  return shared[0];
}

}  // namespace nn::kernels
