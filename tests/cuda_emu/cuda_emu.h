// The CUDA emulator's device side: force-included (-include) into every .cu file of the
// library after tests/cuda_emu/rewrite.py has turned its launches into ::emu::launch calls,
// so the CUDA backend and our kernels compile with the host compiler and run on the CPU.
//
// Each CUDA thread of a block is a fiber; the blocks of a grid run one after another on the
// calling thread. A fiber runs until it finishes or reaches __syncthreads / a warp
// collective, where it waits until every thread the collective names has arrived. So the
// kernels run with real barrier semantics (a missing __syncthreads shows up as a wrong value,
// a barrier not every thread reaches as a reported deadlock), shuffles exchange values the
// way the hardware does, and a bad launch configuration or __trap() is a launch error that
// cudaGetLastError returns. What it cannot show: timing, races between blocks (blocks never
// overlap), and hardware limits other than the launch-configuration ones checked below.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <tuple>
#include <type_traits>

// Host-compiler builds leave __shared__ empty: here a block's shared variables are statics
// (one block runs at a time, so one copy is the block's copy). rewrite.py follows each
// declaration with ::emu::fresh_shared, so that every block finds them filled with NaN
// bytes, as it would find garbage on the hardware, not the previous block's values.
#undef __shared__
#define __shared__ static
#ifndef __launch_bounds__
#define __launch_bounds__(...)
#endif

namespace emu {

// The running fiber's coordinates (set by the scheduler before it switches to a fiber).
struct Coords {
  uint3 thread, block;
  dim3 block_dim, grid_dim;
};
extern Coords coords;

unsigned char* dynamic_smem();
// Whether a kernel may dereference p: it points into (or just past) a device allocation, or
// into pinned host memory.
bool is_device_pointer(const void* p);
// Notes a kernel argument that points to host memory; the next launch fails naming it (the
// hardware would fault where the kernel dereferences it).
void note_host_pointer_arg(int index);
// The launch's arguments, after checking that every pointer among them is null or a device
// pointer (rewrite.py wraps each launch's arguments in it).
template <typename Tuple>
Tuple checked_args(Tuple args) {
  std::apply([](const auto&... a) {
    int i = 0;
    [[maybe_unused]] auto check = [&i](const auto& v) {
      if constexpr (std::is_pointer_v<std::decay_t<decltype(v)>>)
        if (v != nullptr && !is_device_pointer(v)) note_host_pointer_arg(i);
      ++i;
    };
    (check(a), ...);
  }, args);
  return args;
}
// Fills the static shared variable at p with 0xff bytes the first time a thread of the
// running block reaches its declaration.
void fresh_shared(void* p, size_t bytes);
// Runs body once per thread of the grid; `kernel` (may be null) names the kernel for the
// shared-memory opt-in check, `where` the launch site ("NAME @ FILE:LINE") for the counts.
void launch(dim3 grid, dim3 block, size_t smem, cudaStream_t stream, const void* kernel,
            const char* where, const std::function<void()>& body);

// Device memory can be read and written only while a DeviceAccess lives (a kernel, a copy or
// memset, a library computation, the emulator's own checks); elsewhere it is inaccessible, so
// host code dereferencing a device pointer faults here as it does on a GPU (runtime.cpp).
// Nests, and may be held by several threads at once.
struct DeviceAccess {
  DeviceAccess();
  ~DeviceAccess();
  DeviceAccess(const DeviceAccess&) = delete;
  DeviceAccess& operator=(const DeviceAccess&) = delete;
};

// Runs the stream's queued copies and memsets (runtime.cpp): kernels and library calls come
// after them on the stream.
void run_queued();
// Stops the program with a message naming `where` when something wrote outside a device
// allocation (runtime.cpp's guard zones).
void check_guards(const char* where);

// __syncthreads at file:line: every thread of the block must wait at the same one (threads
// that have exited excepted); the hardware counts arrivals at any barrier, but the CUDA
// programming guide leaves a barrier in divergent code undefined, so the emulator reports it.
void syncthreads(const char* file, int line);
// A warp collective over the lanes in `mask`: every lane deposits `value` and reads back
// the value of lane `src` (its own if src < 0); returns after all lanes in mask arrived.
uint64_t warp_exchange(unsigned mask, uint64_t value, int src);
[[noreturn]] void trap(const char* what);

template <typename T>
uint64_t to_bits(T v) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>);
  uint64_t b = 0;
  std::memcpy(&b, &v, sizeof(T));
  return b;
}
template <typename T>
T from_bits(uint64_t b) {
  T v;
  std::memcpy(&v, &b, sizeof(T));
  return v;
}
inline int lane_id() {
  const unsigned t = coords.thread.x + coords.block_dim.x *
                                           (coords.thread.y + coords.block_dim.y * coords.thread.z);
  return int(t % 32);
}

}  // namespace emu

#define threadIdx (::emu::coords.thread)
#define blockIdx (::emu::coords.block)
#define blockDim (::emu::coords.block_dim)
#define gridDim (::emu::coords.grid_dim)

#define __syncthreads() ::emu::syncthreads(__FILE__, __LINE__)
namespace emu {
// A kernel declared with __launch_bounds__(max_threads) runs in blocks of at most that many
// threads (rewrite.py puts this call first in its body).
inline void check_launch_bounds(unsigned max_threads) {
  if (coords.block_dim.x * coords.block_dim.y * coords.block_dim.z > max_threads)
    trap("a block larger than the kernel's __launch_bounds__");
}
}  // namespace emu

inline void __syncwarp(unsigned mask = 0xffffffffu) { ::emu::warp_exchange(mask, 0, -1); }
[[noreturn]] inline void __trap() { ::emu::trap("__trap() called"); }

template <typename T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  const int lane = ::emu::lane_id(), seg = lane % width;
  const int src = seg + int(delta) < width ? lane + int(delta) : -1;
  return ::emu::from_bits<T>(::emu::warp_exchange(mask, ::emu::to_bits(v), src));
}
// A lane may read a lane of its own or an earlier group of `width` lanes; asking a later
// group gives its own value (the CUDA programming guide's rule).
template <typename T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  const int lane = ::emu::lane_id();
  const int src = (lane ^ lane_mask) / width <= lane / width ? lane ^ lane_mask : -1;
  return ::emu::from_bits<T>(::emu::warp_exchange(mask, ::emu::to_bits(v), src));
}
// The runtime's kernel-pointer overloads (cuda_runtime.h has them for nvcc only).
template <typename T>
cudaError_t cudaFuncSetAttribute(T* kernel, cudaFuncAttribute attr, int value) {
  return cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel), attr, value);
}
template <typename T>
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attr, T* kernel) {
  return cudaFuncGetAttributes(attr, reinterpret_cast<const void*>(kernel));
}

// Atomics: fibers switch only at barriers, so a read-modify-write is atomic by construction.
template <typename T>
T atomicAdd(T* p, T v) {
  T old = *p;
  *p = old + v;
  return old;
}
template <typename T>
T atomicCAS(T* p, T compare, T v) {
  T old = *p;
  if (old == compare) *p = v;
  return old;
}

// Device math the host library lacks. (The emulator supplies the device API our kernels use;
// a kernel using more fails to compile here until it is added.)
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
using std::isfinite;
using std::isinf;
inline unsigned __float_as_uint(float v) {
  unsigned u;
  std::memcpy(&u, &v, 4);
  return u;
}
inline float __uint_as_float(unsigned u) {
  float v;
  std::memcpy(&v, &u, 4);
  return v;
}
using std::max;
using std::min;
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }

// nvcuda::wmma over 16x16x16 tiles, and 16x16x8 tiles of TF32 (f32 data). Every lane keeps
// the whole tile (the hardware spreads it over the lanes in an unspecified layout, which code
// may only touch uniformly, as ours does) but owns, as on the hardware, only some of the
// accumulator's elements: a store writes those alone. Ownership follows the sm_80/sm_90
// accumulator layout (lane l holds rows l/4 and l/4 + 8, columns 2(l%4), 2(l%4) + 1 and the
// same + 8), not the row-major order in which code reads a stored tile back lane by lane, so
// reading elements other lanes stored without a __syncwarp between shows up as a wrong value.
// Pointers must be 32-byte aligned and leading dimensions multiples of 16 bytes, as the
// hardware requires. A TF32 product reads only the top 19 bits of each f32 operand (sign,
// exponent, 10 mantissa bits), as the tensor cores do, so an operand not rounded with
// __float_to_tf32 first loses its low bits here too.
namespace nvcuda::wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };
namespace precision {
struct tf32 {};
}  // namespace precision
template <typename T> struct storage { using type = T; };
template <> struct storage<precision::tf32> { using type = float; };

// rows and columns of a fragment's tile: A is M x K, B is K x N, the accumulator M x N
template <typename Use, int M, int N, int K>
constexpr int tile_rows = std::is_same_v<Use, matrix_b> ? K : M;
template <typename Use, int M, int N, int K>
constexpr int tile_cols = std::is_same_v<Use, matrix_a> ? K : N;
template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
  static constexpr int num_elements = tile_rows<Use, M, N, K> * tile_cols<Use, M, N, K>;
  typename storage<T>::type x[256];
};
template <int M, int N, int K>
constexpr void check_shape() {
  static_assert(M == 16 && N == 16 && (K == 16 || K == 8), "the emulator has 16x16x16 and 16x16x8 tiles only");
}

// cvt.rna.tf32.f32: to 10 mantissa bits, ties away from zero; infinities as they are, NaN as
// the canonical NaN (a NaN whose payload is in the low bits would read as an infinity)
inline float __float_to_tf32(float v) {
  if (std::isnan(v)) return ::__uint_as_float(0x7fffffffu);
  if (std::isinf(v)) return v;
  return ::__uint_as_float((::__float_as_uint(v) + 0x1000u) & 0xffffe000u);
}
template <typename T>
float operand(T v) {
  if constexpr (std::is_same_v<T, float>) return ::__uint_as_float(::__float_as_uint(v) & 0xffffe000u);
  else return float(v);
}

template <typename Use, int M, int N, int K, typename T, typename L>
void fill_fragment(fragment<Use, M, N, K, T, L>& f, typename storage<T>::type v) {
  for (auto& e : f.x) e = v;
}
template <typename Use, int M, int N, int K, typename T, typename L>
void fill_fragment(fragment<Use, M, N, K, T, L>& f, float v)
  requires(!std::is_same_v<typename storage<T>::type, float>)
{
  for (auto& e : f.x) e = T(v);
}
template <typename T>
void check_tile(const T* p, unsigned ld) {
  static_assert(sizeof(T) == 2 || sizeof(T) == 4, "WMMA tiles of 16- or 32-bit elements");
  if (reinterpret_cast<uintptr_t>(p) % 32 != 0) ::emu::trap("a WMMA tile pointer is not 32-byte aligned");
  if (ld * sizeof(T) % 16 != 0) ::emu::trap("a WMMA leading dimension is not a multiple of 16 bytes");
}
inline int owner_lane(int r, int c) { return (r % 8) * 4 + (c % 8) / 2; }
// a row-major or column-major source: element (r, c) at p[r * ld + c] or p[c * ld + r]
template <typename Use, int M, int N, int K, typename T, typename L>
void load_matrix_sync(fragment<Use, M, N, K, T, L>& f, const typename storage<T>::type* p,
                      unsigned ld) {
  check_shape<M, N, K>();
  check_tile(p, ld);
  constexpr int R = tile_rows<Use, M, N, K>, C = tile_cols<Use, M, N, K>;
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c)
      f.x[r * C + c] = std::is_same_v<L, col_major> ? p[c * ld + r] : p[r * ld + c];
}
template <int M, int N, int K, typename T>
void load_matrix_sync(fragment<accumulator, M, N, K, T, void>& f, const T* p, unsigned ld,
                      layout_t layout) {
  check_shape<M, N, K>();
  check_tile(p, ld);
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c)
      f.x[r * 16 + c] = layout == mem_col_major ? p[c * ld + r] : p[r * ld + c];
}
template <int M, int N, int K, typename T>
void store_matrix_sync(T* p, const fragment<accumulator, M, N, K, T, void>& f, unsigned ld,
                       layout_t layout) {
  check_shape<M, N, K>();
  check_tile(p, ld);
  const int lane = ::emu::lane_id();
  for (int e = 0; e < 256; ++e) {  // each lane stores the elements it owns
    const int r = e / 16, c = e % 16;
    if (owner_lane(r, c) == lane) (layout == mem_col_major ? p[c * ld + r] : p[r * ld + c]) = f.x[e];
  }
}
// d = a b + c with products and sums in f32 (the tensor cores' accumulation type here)
template <int M, int N, int K, typename Ta, typename La, typename Lb, typename Tc>
void mma_sync(fragment<accumulator, M, N, K, Tc, void>& d,
              const fragment<matrix_a, M, N, K, Ta, La>& a,
              const fragment<matrix_b, M, N, K, Ta, Lb>& b,
              const fragment<accumulator, M, N, K, Tc, void>& c) {
  check_shape<M, N, K>();
  fragment<accumulator, M, N, K, Tc, void> out;
  for (int r = 0; r < 16; ++r)
    for (int col = 0; col < 16; ++col) {
      float s = float(c.x[r * 16 + col]);
      for (int k = 0; k < K; ++k) s += operand(a.x[r * K + k]) * operand(b.x[k * 16 + col]);
      out.x[r * 16 + col] = Tc(s);
    }
  d = out;
}
}  // namespace nvcuda::wmma
