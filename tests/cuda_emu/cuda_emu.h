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
#include <type_traits>

// Host-compiler builds leave __shared__ empty: here a block's shared variables are statics
// (one block runs at a time, so one copy is the block's copy).
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
// Runs body once per thread of the grid; `kernel` (may be null) names the kernel for the
// shared-memory opt-in check.
void launch(dim3 grid, dim3 block, size_t smem, cudaStream_t stream, const void* kernel,
            const std::function<void()>& body);

void syncthreads();
// A warp collective over the lanes in `mask`: every lane deposits `value` and reads back
// the value of lane `src` (its own if src < 0); returns after all lanes in mask arrived.
uint64_t warp_exchange(unsigned mask, uint64_t value, int src);
unsigned warp_ballot(unsigned mask, bool pred);
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
static constexpr int warpSize = 32;

inline void __syncthreads() { ::emu::syncthreads(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { ::emu::warp_exchange(mask, 0, -1); }
[[noreturn]] inline void __trap() { ::emu::trap("__trap() called"); }

template <typename T>
T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
  const int lane = ::emu::lane_id();
  return ::emu::from_bits<T>(
      ::emu::warp_exchange(mask, ::emu::to_bits(v), lane / width * width + src % width));
}
template <typename T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  const int lane = ::emu::lane_id(), seg = lane % width;
  const int src = seg + int(delta) < width ? lane + int(delta) : -1;
  return ::emu::from_bits<T>(::emu::warp_exchange(mask, ::emu::to_bits(v), src));
}
template <typename T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  const int lane = ::emu::lane_id(), seg = lane % width;
  const int src = seg >= int(delta) ? lane - int(delta) : -1;
  return ::emu::from_bits<T>(::emu::warp_exchange(mask, ::emu::to_bits(v), src));
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  const int lane = ::emu::lane_id();
  const int src = (lane ^ lane_mask) / width == lane / width ? lane ^ lane_mask : -1;
  return ::emu::from_bits<T>(::emu::warp_exchange(mask, ::emu::to_bits(v), src));
}
inline unsigned __ballot_sync(unsigned mask, int pred) { return ::emu::warp_ballot(mask, pred != 0); }
inline int __any_sync(unsigned mask, int pred) { return ::emu::warp_ballot(mask, pred != 0) != 0; }
inline int __all_sync(unsigned mask, int pred) {
  return (::emu::warp_ballot(mask, pred != 0) & mask) == (::emu::warp_ballot(mask, true) & mask);
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
  if constexpr (std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>)
    *p = T(float(old) + float(v));
  else
    *p = old + v;
  return old;
}
template <typename T>
T atomicMax(T* p, T v) {
  T old = *p;
  *p = old < v ? v : old;
  return old;
}
template <typename T>
T atomicMin(T* p, T v) {
  T old = *p;
  *p = v < old ? v : old;
  return old;
}
template <typename T>
T atomicCAS(T* p, T compare, T v) {
  T old = *p;
  if (old == compare) *p = v;
  return old;
}
template <typename T>
T atomicExch(T* p, T v) {
  T old = *p;
  *p = v;
  return old;
}
inline unsigned short atomicCAS(unsigned short* p, unsigned short compare, unsigned short v) {
  unsigned short old = *p;
  if (old == compare) *p = v;
  return old;
}
template <typename T>
T __ldg(const T* p) {
  return *p;
}

// Device math the host library lacks.
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __saturatef(float x) { return x < 0.f ? 0.f : (x > 1.f ? 1.f : x); }
inline int __float_as_int(float x) { return ::emu::from_bits<int>(::emu::to_bits(x)); }
inline float __int_as_float(int x) { return ::emu::from_bits<float>(::emu::to_bits(x)); }
inline unsigned __float_as_uint(float x) { return ::emu::from_bits<unsigned>(::emu::to_bits(x)); }
inline float __uint_as_float(unsigned x) { return ::emu::from_bits<float>(::emu::to_bits(x)); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(unsigned(x)); }
inline unsigned __umulhi(unsigned a, unsigned b) { return unsigned((uint64_t(a) * b) >> 32); }
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
  return (unsigned long long)((unsigned __int128)a * b >> 64);
}
using std::isfinite;
using std::isinf;
using std::isnan;
using std::max;
using std::min;
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline float fminf(float a, float b) { return std::fmin(a, b); }
inline float fmaxf(float a, float b) { return std::fmax(a, b); }

// nvcuda::wmma over 16x16x16 tiles. Every lane keeps the whole tile (the hardware spreads
// it over the lanes in an unspecified layout, which code may only touch uniformly, as ours
// does) but owns, as on the hardware, only some of the accumulator's elements (e % 32 ==
// lane): a store writes those alone, so a load-multiply-store of an accumulator in shared
// memory by one lane never feeds another lane's load, and reading elements other lanes
// stored without a __syncwarp between shows up as a wrong value.
namespace nvcuda::wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
  static constexpr int num_elements = 256;
  T x[256];
};

template <typename Use, int M, int N, int K, typename T, typename L>
void fill_fragment(fragment<Use, M, N, K, T, L>& f, T v) {
  for (auto& e : f.x) e = v;
}
template <typename Use, int M, int N, int K, typename T, typename L>
void fill_fragment(fragment<Use, M, N, K, T, L>& f, float v)
  requires(!std::is_same_v<T, float>)
{
  for (auto& e : f.x) e = T(v);
}
// a row-major or column-major source: element (r, c) at p[r * ld + c] or p[c * ld + r]
template <typename Use, int M, int N, int K, typename T, typename L>
void load_matrix_sync(fragment<Use, M, N, K, T, L>& f, const T* p, unsigned ld) {
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c)
      f.x[r * 16 + c] = std::is_same_v<L, col_major> ? p[c * ld + r] : p[r * ld + c];
}
template <int M, int N, int K, typename T>
void load_matrix_sync(fragment<accumulator, M, N, K, T, void>& f, const T* p, unsigned ld,
                      layout_t layout) {
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c)
      f.x[r * 16 + c] = layout == mem_col_major ? p[c * ld + r] : p[r * ld + c];
}
template <int M, int N, int K, typename T>
void store_matrix_sync(T* p, const fragment<accumulator, M, N, K, T, void>& f, unsigned ld,
                       layout_t layout) {
  const int lane = ::emu::lane_id();
  for (int e = lane; e < 256; e += 32) {  // each lane stores the elements it owns
    const int r = e / 16, c = e % 16;
    (layout == mem_col_major ? p[c * ld + r] : p[r * ld + c]) = f.x[e];
  }
}
// d = a b + c with products and sums in f32 (the tensor cores' accumulation type here)
template <int M, int N, int K, typename Ta, typename La, typename Lb, typename Tc>
void mma_sync(fragment<accumulator, M, N, K, Tc, void>& d,
              const fragment<matrix_a, M, N, K, Ta, La>& a,
              const fragment<matrix_b, M, N, K, Ta, Lb>& b,
              const fragment<accumulator, M, N, K, Tc, void>& c) {
  fragment<accumulator, M, N, K, Tc, void> out;
  for (int r = 0; r < 16; ++r)
    for (int col = 0; col < 16; ++col) {
      float s = float(c.x[r * 16 + col]);
      for (int k = 0; k < 16; ++k) s += float(a.x[r * 16 + k]) * float(b.x[k * 16 + col]);
      out.x[r * 16 + col] = Tc(s);
    }
  d = out;
}
}  // namespace nvcuda::wmma
