// The tile kernels of the channels-last convolutions (see conv_kernels.h): an MR x NR tile
// of the result held in vector registers while the inner dimension streams past, as in the
// GEMM's micro-kernels (gemm.cpp), but with the left operand read through row pointers
// instead of a packed panel. One body (conv_tiles.inc) compiled for AVX2 + FMA, for AVX-512,
// and (its bf16 forward tiles) for AVX512_BF16, each inside a region whose functions all carry
// that target, so portable builds carry them all and pick at run time.
#include "backend/cpu/conv_kernels.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "backend/cpu/gemm.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define LIBNN_CONV_KERNELS 1
#endif

namespace nn::cpu {
#ifdef LIBNN_CONV_KERNELS

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma")
#endif
// The AVX-512 vector operations conv_tiles.inc is written against.
#define LIBNN_AVX512_TILE_OPS                                             \
  using R = __m512;                                                       \
  constexpr int L = 16;                                                   \
  inline R zero() { return _mm512_setzero_ps(); }                         \
  inline R load(const float* p) { return _mm512_load_ps(p); }             \
  inline R loadu(const float* p) { return _mm512_loadu_ps(p); }           \
  inline void storeu(float* p, R x) { _mm512_storeu_ps(p, x); }           \
  inline R bcast(const float* p) { return _mm512_set1_ps(*p); }           \
  inline R fma(R a, R b, R c) { return _mm512_fmadd_ps(a, b, c); }        \
  inline R add(R a, R b) { return _mm512_add_ps(a, b); }
namespace avx512 {
LIBNN_AVX512_TILE_OPS
#include "backend/cpu/conv_tiles.inc"
}  // namespace avx512
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

// The bf16 tiles, for CPUs with AVX512_BF16 (used only where bf16_gemm_native() and not
// bf16_gemm_amx()).
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512bf16,avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512bf16,avx2,fma")
#endif
namespace avx512bf16 {
LIBNN_AVX512_TILE_OPS
#define LIBNN_CONV_TILES_BF16 1
#include "backend/cpu/conv_tiles.inc"
#undef LIBNN_CONV_TILES_BF16
}  // namespace avx512bf16
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#undef LIBNN_AVX512_TILE_OPS

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#endif
namespace avx2 {
using R = __m256;
constexpr int L = 8;
inline R zero() { return _mm256_setzero_ps(); }
inline R load(const float* p) { return _mm256_load_ps(p); }
inline R loadu(const float* p) { return _mm256_loadu_ps(p); }
inline void storeu(float* p, R x) { _mm256_storeu_ps(p, x); }
inline R bcast(const float* p) { return _mm256_broadcast_ss(p); }
inline R fma(R a, R b, R c) { return _mm256_fmadd_ps(a, b, c); }
inline R add(R a, R b) { return _mm256_add_ps(a, b); }
#include "backend/cpu/conv_tiles.inc"
}  // namespace avx2
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

namespace {
template <class Kernel, int MR, int NR>
constexpr ConvTile tile() { return {MR, NR, &Kernel::run}; }

// Tile sizes: 8 broadcasts of the left operand feed 8 (one vector) or 16 FMAs (two), and MR
// row pointers stay in general-purpose registers; AVX2 has 16 vector registers, so its
// two-vector tiles are 6 rows (12 accumulators).
constexpr ConvKernels kAvx512{16, tile<avx512::Forward<8, 1>, 8, 16>(),
                              tile<avx512::Forward<8, 2>, 8, 32>(),
                              tile<avx512::WeightGrad<8, 2>, 8, 32>()};
constexpr ConvKernels kAvx2{8, tile<avx2::Forward<8, 1>, 8, 8>(), tile<avx2::Forward<6, 2>, 6, 16>(),
                            tile<avx2::WeightGrad<6, 2>, 6, 16>()};
// The bf16 tiles as the AVX-512 f32 ones: 8 broadcasts feed 8 or 16 pair-products.
constexpr ConvBf16Kernels kAvx512Bf16{16, tile<avx512bf16::ForwardBf16<8, 1>, 8, 16>(),
                                      tile<avx512bf16::ForwardBf16<8, 2>, 8, 32>(),
                                      tile<avx512bf16::WeightGradBf16<8, 2>, 8, 32>(),
                                      &avx512bf16::pack_pairs, &avx512bf16::pack_rows};
}  // namespace

const ConvBf16Kernels* conv_bf16_kernels() { return bf16_gemm_native() && !bf16_gemm_amx() ? &kAvx512Bf16 : nullptr; }

const ConvKernels* conv_kernels() {
  switch (f32_kernel()) {
    case F32Kernel::avx512: return &kAvx512;
    case F32Kernel::avx2: return &kAvx2;
    default: return nullptr;
  }
}
#else
const ConvKernels* conv_kernels() { return nullptr; }
const ConvBf16Kernels* conv_bf16_kernels() { return nullptr; }
#endif

}  // namespace nn::cpu
