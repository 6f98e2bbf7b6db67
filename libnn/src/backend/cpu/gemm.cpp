// The CPU GEMM. f32 on a CPU with AVX2 + FMA: a packed, cache-blocked product in the manner
// of Goto and van de Geijn's "Anatomy of high-performance matrix multiplication":
//   for each NC-wide column block of B, for each KC-deep slice of K:
//     pack B's slice into NR-wide panels (kc x NR each, row by row);
//     for each MC-tall row block of A: pack it into MR-tall panels (kc x MR, column by column),
//       then run the MR x NR micro-kernel over every (A panel, B panel) pair.
// Two micro-kernels share that loop nest: AVX2 keeps a 6 x 16 tile of C in 12 ymm registers
// (12 FMAs per k from 2 loads of B and 6 broadcasts of A); AVX-512 keeps an 8 x 32 tile in 16
// zmm registers (16 FMAs per k from 2 loads and 8 broadcasts), twice the flops per
// instruction, which is twice the rate on CPUs with two 512-bit FMA units. Partial tiles at
// the edges go through a small buffer. With several threads, C is cut into one block per
// thread (packed_sgemm). bf16 operands run an AVX512_BF16 tile or, on CPUs with AMX, an AMX
// tile (below) in the same loop nest. Every other case (f64, matrix-vector shapes, a CPU without AVX2/FMA,
// a non-x86 build) is Eigen's product.
#include "backend/cpu/gemm.h"

#include "backend/cpu/denormals.h"
#include "core/env.h"
#include "core/first_error.h"

#include <omp.h>

#include <Eigen/Core>
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "nn/dtype.h"

// x86-64 with GCC or Clang: the kernel is compiled for AVX2 + FMA whatever the build's -march
// (function target attributes) and chosen at run time when the CPU has both, so portable
// builds (LIBNN_NATIVE=OFF: the Docker images, the sanitizer build) run it too.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#ifdef __linux__
#include <sys/syscall.h>
#include <unistd.h>
#endif
#define LIBNN_PACKED_SGEMM 1
#define LIBNN_AVX2 __attribute__((target("avx2,fma")))
#define LIBNN_AVX512 __attribute__((target("avx512f,avx2,fma")))
#endif

namespace nn::cpu {
namespace {

// Products below this many flops run on the calling thread alone.
constexpr double kParallelFlops = 2e6;

template <typename T>
void eigen_gemm(int64_t M, int64_t N, int64_t K, T alpha, MatRef<T> A, MatRef<T> B, T beta,
                T* C, int64_t ldc) {
  using RowMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using ColMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;
  using Rows = Eigen::Map<const RowMat, 0, Eigen::OuterStride<>>;
  using Cols = Eigen::Map<const ColMat, 0, Eigen::OuterStride<>>;
  Eigen::Map<RowMat, 0, Eigen::OuterStride<>> c(C, M, N, Eigen::OuterStride<>(ldc));
  auto run = [&](const auto& a, const auto& b) {
    if (beta == T(0)) {
      c.noalias() = alpha * a * b;
    } else {
      if (beta != T(1)) c *= beta;
      c.noalias() += alpha * a * b;
    }
  };
  // Unit-stride views keep Eigen on its fast paths (matrix-vector ones included); an operand
  // with neither stride 1 is copied into `buf` first.
  auto unit_stride = [](MatRef<T>& X, int64_t rows, int64_t cols, RowMat& buf) {
    if (X.cs == 1 || X.rs == 1) return;
    buf.resize(rows, cols);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) buf(i, j) = X.p[i * X.rs + j * X.cs];
    X = row_major<T>(buf.data(), cols);
  };
  RowMat a_copy, b_copy;
  unit_stride(A, M, K, a_copy);
  unit_stride(B, K, N, b_copy);
  auto with_b = [&](const auto& a) {
    if (B.cs == 1) run(a, Rows(B.p, K, N, Eigen::OuterStride<>(B.rs)));
    else run(a, Cols(B.p, K, N, Eigen::OuterStride<>(B.cs)));
  };
  if (A.cs == 1) with_b(Rows(A.p, M, K, Eigen::OuterStride<>(A.rs)));
  else with_b(Cols(A.p, M, K, Eigen::OuterStride<>(A.cs)));
}

// C = beta * C for an empty inner dimension (beta == 0 writes zeros without reading C).
template <typename T>
void scale_c(int64_t M, int64_t N, T beta, T* C, int64_t ldc) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == T(0) ? T(0) : beta * C[i * ldc + j];
}

#ifdef LIBNN_PACKED_SGEMM
constexpr int64_t ceil_to(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// 64-byte aligned scratch that only grows; one per calling thread and packed element type.
template <typename E>
struct Scratch {
  struct Free { void operator()(E* p) const { std::free(p); } };
  std::unique_ptr<E[], Free> buf;
  size_t cap = 0;
  E* get(size_t n) {
    if (n > cap) {
      size_t bytes = (n * sizeof(E) + 63) / 64 * 64;
      buf.reset(static_cast<E*>(std::aligned_alloc(64, bytes)));
      if (!buf) throw std::bad_alloc();
      cap = n;
    }
    return buf.get();
  }
};

// Transposes the 8 x 8 block held in r[0..7] (row i in r[i]).
LIBNN_AVX2 inline void transpose8(__m256 r[8]) {
  __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
  r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
  r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
  r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
  r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
  r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
  r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
  r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

// Rows [i0, i0 + h) x columns [p0, p0 + kc) of A into dst (kc x MR, column by column),
// rows past h zero.
template <int64_t MR>
LIBNN_AVX2 void pack_a(const MatRef<float>& A, int64_t i0, int64_t h, int64_t p0, int64_t kc,
                       float* dst) {
  if (A.cs == 1 && h == MR) {
    // A row-major: 8 columns of up to 8 rows at a time, transposed in registers.
    int64_t k = 0;
    for (; k + 8 <= kc; k += 8)
      for (int64_t g = 0; g < MR; g += 8) {
        const int rows = int(std::min<int64_t>(8, MR - g));
        const __m256i lanes = _mm256_cmpgt_epi32(_mm256_set1_epi32(rows),
                                                 _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        __m256 r[8];
        for (int i = 0; i < 8; ++i)
          r[i] = i < rows ? _mm256_loadu_ps(A.p + (i0 + g + i) * A.rs + p0 + k)
                          : _mm256_setzero_ps();
        transpose8(r);
        for (int i = 0; i < 8; ++i) _mm256_maskstore_ps(dst + (k + i) * MR + g, lanes, r[i]);
      }
    for (; k < kc; ++k)
      for (int64_t i = 0; i < MR; ++i) dst[k * MR + i] = A.p[(i0 + i) * A.rs + p0 + k];
    return;
  }
  if (A.cs == 1) {
    for (int64_t r = 0; r < h; ++r) {
      const float* src = A.p + (i0 + r) * A.rs + p0;
      for (int64_t k = 0; k < kc; ++k) dst[k * MR + r] = src[k];
    }
  } else {
    for (int64_t k = 0; k < kc; ++k) {
      const float* src = A.p + i0 * A.rs + (p0 + k) * A.cs;
      for (int64_t r = 0; r < h; ++r) dst[k * MR + r] = src[r * A.rs];
    }
  }
  for (int64_t r = h; r < MR; ++r)
    for (int64_t k = 0; k < kc; ++k) dst[k * MR + r] = 0.f;
}

// Rows [p0, p0 + kc) x columns [j0, j0 + w) of B into dst (kc x NR, row by row), columns
// past w zero. dst is 32-byte aligned.
template <int64_t NR>
LIBNN_AVX2 void pack_b(const MatRef<float>& B, int64_t p0, int64_t kc, int64_t j0, int64_t w,
                       float* dst) {
  if (B.cs == 1) {
    for (int64_t k = 0; k < kc; ++k) {
      const float* src = B.p + (p0 + k) * B.rs + j0;
      float* d = dst + k * NR;
      if (w == NR) {
        for (int64_t q = 0; q < NR; q += 8) _mm256_store_ps(d + q, _mm256_loadu_ps(src + q));
      } else {
        for (int64_t j = 0; j < w; ++j) d[j] = src[j];
        for (int64_t j = w; j < NR; ++j) d[j] = 0.f;
      }
    }
  } else if (B.rs == 1 && w == NR) {
    // B column-major (a transpose read in place): 8 x 8 blocks transposed in registers.
    int64_t k = 0;
    for (; k + 8 <= kc; k += 8)
      for (int64_t half = 0; half < NR; half += 8) {
        const float* src = B.p + (p0 + k) + (j0 + half) * B.cs;
        __m256 r[8];
        for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * B.cs);
        transpose8(r);
        for (int i = 0; i < 8; ++i) _mm256_store_ps(dst + (k + i) * NR + half, r[i]);
      }
    for (; k < kc; ++k)
      for (int64_t j = 0; j < NR; ++j) dst[k * NR + j] = B.p[(p0 + k) + (j0 + j) * B.cs];
  } else {
    for (int64_t j = 0; j < w; ++j) {
      const float* src = B.p + p0 * B.rs + (j0 + j) * B.cs;
      for (int64_t k = 0; k < kc; ++k) dst[k * NR + j] = src[k * B.rs];
    }
    for (int64_t j = w; j < NR; ++j)
      for (int64_t k = 0; k < kc; ++k) dst[k * NR + j] = 0.f;
  }
}

// p[0..8) = alpha * x + beta * p[0..8), p not read unless read_c.
LIBNN_AVX2 inline void store_tile(float* p, __m256 x, __m256 alpha, __m256 beta, bool read_c) {
  x = _mm256_mul_ps(x, alpha);
  if (read_c) x = _mm256_fmadd_ps(beta, _mm256_loadu_ps(p), x);
  _mm256_storeu_ps(p, x);
}

// The micro-kernels: c (MR x NR, leading dimension ldc) = alpha * Ap * Bp + beta * c, with
// Ap packed kc x MR and Bp packed kc x NR (aligned to the vector width); beta == 0 never
// reads c. The fully unrolled loops over the tile's rows keep acc in registers.
// Each tile also names its operands' element type (In), the packed panels' element type
// (Packed), how many packed elements a panel row of a kc-deep slice takes (units), its two
// packers, the loop nest's blocking (KC, MC, NC: MC % MR == 0, NC % NR == 0) and a Scope
// that each thread holds while it runs the tile's kernels (AMX's tile configuration).
struct VectorTileBase {
  static constexpr int64_t KC = 256, MC = 144, NC = 3072;
  struct Scope {};
};

template <int64_t MR_, int64_t NR_>
struct F32Tile : VectorTileBase {
  static constexpr int64_t MR = MR_, NR = NR_;
  using In = float;
  using Packed = float;
  static int64_t units(int64_t kc) { return kc; }
  LIBNN_AVX2 static void pack_a(const MatRef<float>& A, int64_t i0, int64_t h, int64_t p0,
                                int64_t kc, float* dst) {
    cpu::pack_a<MR>(A, i0, h, p0, kc, dst);
  }
  LIBNN_AVX2 static void pack_b(const MatRef<float>& B, int64_t p0, int64_t kc, int64_t j0,
                                int64_t w, float* dst) {
    cpu::pack_b<NR>(B, p0, kc, j0, w, dst);
  }
};

struct Avx2Tile : F32Tile<6, 16> {
  LIBNN_AVX2 static void kernel(int64_t kc, const float* __restrict Ap,
                                const float* __restrict Bp, float* c, int64_t ldc, float alpha,
                                float beta) {
    __m256 acc[MR][2];
#pragma GCC unroll 6
    for (int r = 0; r < MR; ++r) {
      acc[r][0] = acc[r][1] = _mm256_setzero_ps();
      _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc), _MM_HINT_T0);
    }
#pragma GCC unroll 4
    for (int64_t k = 0; k < kc; ++k) {
      const __m256 b0 = _mm256_load_ps(Bp), b1 = _mm256_load_ps(Bp + 8);
#pragma GCC unroll 6
      for (int r = 0; r < MR; ++r) {
        const __m256 a = _mm256_broadcast_ss(Ap + r);
        acc[r][0] = _mm256_fmadd_ps(a, b0, acc[r][0]);
        acc[r][1] = _mm256_fmadd_ps(a, b1, acc[r][1]);
      }
      Ap += MR;
      Bp += NR;
    }
    const __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
    const bool read_c = beta != 0.f;
#pragma GCC unroll 6
    for (int r = 0; r < MR; ++r) {
      store_tile(c + r * ldc, acc[r][0], va, vb, read_c);
      store_tile(c + r * ldc + 8, acc[r][1], va, vb, read_c);
    }
  }
};

// The AVX-512 tiles' (8 x 32 of C in 16 zmm) first and last steps: accumulators zeroed and
// C's rows prefetched; c = alpha * acc + beta * c, c not read when beta == 0.
template <int MR>
LIBNN_AVX512 inline void start_tile512(__m512 (&acc)[MR][2], const float* c, int64_t ldc) {
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
    acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc + 16), _MM_HINT_T0);
  }
}
template <int MR>
LIBNN_AVX512 inline void store_tile512(const __m512 (&acc)[MR][2], float* c, int64_t ldc,
                                       float alpha, float beta) {
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
  const bool read_c = beta != 0.f;
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
    for (int h = 0; h < 2; ++h) {
      float* p = c + r * ldc + 16 * h;
      __m512 x = _mm512_mul_ps(acc[r][h], va);
      if (read_c) x = _mm512_fmadd_ps(vb, _mm512_loadu_ps(p), x);
      _mm512_storeu_ps(p, x);
    }
}

struct Avx512Tile : F32Tile<8, 32> {
  // Not inlined into the AVX2-compiled loop nest (a call per kc x 8 x 32 tile).
  LIBNN_AVX512 __attribute__((noinline)) static void kernel(int64_t kc,
                                                            const float* __restrict Ap,
                                                            const float* __restrict Bp, float* c,
                                                            int64_t ldc, float alpha,
                                                            float beta) {
    __m512 acc[MR][2];
    start_tile512(acc, c, ldc);
#pragma GCC unroll 4
    for (int64_t k = 0; k < kc; ++k) {
      const __m512 b0 = _mm512_load_ps(Bp), b1 = _mm512_load_ps(Bp + 16);
#pragma GCC unroll 8
      for (int r = 0; r < MR; ++r) {
        const __m512 a = _mm512_set1_ps(Ap[r]);
        acc[r][0] = _mm512_fmadd_ps(a, b0, acc[r][0]);
        acc[r][1] = _mm512_fmadd_ps(a, b1, acc[r][1]);
      }
      Ap += MR;
      Bp += NR;
    }
    store_tile512(acc, c, ldc, alpha, beta);
  }
};

// bf16 operands on a CPU with AVX512_BF16: VDPBF16PS multiplies 16 pairs of bf16 values and
// adds both products of each pair into an f32 lane, so one instruction does the work of two
// f32 FMAs. The panels therefore hold pairs of consecutive K values: A's panel is
// ceil(kc / 2) x MR 32-bit words (row r's A[r][2u], A[r][2u + 1] in the low and high half of
// word u), B's is ceil(kc / 2) x NR words (B[2u][j], B[2u + 1][j]); an odd kc pads the last
// pair with zero. The tile is the AVX-512 one, 8 x 32 in 16 zmm accumulators. The
// instruction flushes denormal inputs and results to zero whatever MXCSR says, and rounds
// each of its two additions to nearest even.
#define LIBNN_AVX512BF16 __attribute__((target("avx512f,avx512bw,avx512bf16,avx2,fma")))

inline uint32_t bf16_pair(uint16_t lo, uint16_t hi) { return uint32_t(lo) | uint32_t(hi) << 16; }
// The mask of the first n of 32 16-bit lanes (all of them for n >= 32).
inline __mmask32 first_lanes(int64_t n) { return n >= 32 ? ~__mmask32(0) : (__mmask32(1) << n) - 1; }

struct Bf16Tile : VectorTileBase {
  static constexpr int64_t MR = 8, NR = 32;
  using In = uint16_t;
  using Packed = uint32_t;
  static int64_t units(int64_t kc) { return (kc + 1) / 2; }

  // Rows [i0, i0 + h) x columns [p0, p0 + kc) of A into dst (ceil(kc / 2) x MR words).
  LIBNN_AVX512BF16 static void pack_a(const MatRef<uint16_t>& A, int64_t i0, int64_t h,
                                      int64_t p0, int64_t kc, uint32_t* dst) {
    const int64_t ku = (kc + 1) / 2;
    int64_t u = 0;
    if (A.cs == 1 && h == MR) {
      // A row-major: each pair is one 32-bit word of a row; 8 x 8 word blocks transposed.
      for (; 2 * (u + 8) <= kc; u += 8) {
        __m256 r[8];
        for (int i = 0; i < 8; ++i)
          r[i] = _mm256_castsi256_ps(_mm256_loadu_si256(
              reinterpret_cast<const __m256i*>(A.p + (i0 + i) * A.rs + p0 + 2 * u)));
        transpose8(r);
        for (int i = 0; i < 8; ++i)
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + (u + i) * MR),
                              _mm256_castps_si256(r[i]));
      }
    } else if (A.rs == 1 && h == MR) {
      // A column-major (a transpose read in place): two columns of 8 rows interleaved.
      for (; 2 * u + 1 < kc; ++u) {
        const uint16_t* c0 = A.p + i0 + (p0 + 2 * u) * A.cs;
        const __m128i x0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(c0));
        const __m128i x1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(c0 + A.cs));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + u * MR), _mm_unpacklo_epi16(x0, x1));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + u * MR + 4), _mm_unpackhi_epi16(x0, x1));
      }
    }
    for (; u < ku; ++u)
      for (int64_t r = 0; r < MR; ++r) {
        if (r >= h) { dst[u * MR + r] = 0; continue; }
        const uint16_t* row = A.p + (i0 + r) * A.rs + (p0 + 2 * u) * A.cs;
        dst[u * MR + r] = bf16_pair(row[0], 2 * u + 1 < kc ? row[A.cs] : uint16_t(0));
      }
  }

  // Rows [p0, p0 + kc) x columns [j0, j0 + w) of B into dst (ceil(kc / 2) x NR words,
  // 64-byte aligned), columns past w zero.
  LIBNN_AVX512BF16 static void pack_b(const MatRef<uint16_t>& B, int64_t p0, int64_t kc,
                                      int64_t j0, int64_t w, uint32_t* dst) {
    const int64_t ku = (kc + 1) / 2;
    int64_t u = 0, wide = 0;  // pairs packed, and in how many columns (the rest: below)
    if (B.cs == 1) {
      // B row-major: rows 2u and 2u + 1 (w <= 32 values each, the rest read as zero)
      // interleaved into two registers.
      alignas(64) static constexpr uint16_t lo_idx[32] = {
          0, 32, 1, 33, 2, 34, 3, 35, 4, 36, 5, 37, 6, 38, 7, 39,
          8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
      const __m512i lo = _mm512_load_si512(lo_idx);
      const __m512i hi = _mm512_add_epi16(lo, _mm512_set1_epi16(16));
      const __mmask32 m = first_lanes(w);
      for (; 2 * u + 1 < kc; ++u) {
        const uint16_t* r0 = B.p + (p0 + 2 * u) * B.rs + j0;
        const __m512i x0 = _mm512_maskz_loadu_epi16(m, r0);
        const __m512i x1 = _mm512_maskz_loadu_epi16(m, r0 + B.rs);
        _mm512_store_si512(dst + u * NR, _mm512_permutex2var_epi16(x0, lo, x1));
        _mm512_store_si512(dst + u * NR + 16, _mm512_permutex2var_epi16(x0, hi, x1));
      }
      wide = NR;
    } else if (B.rs == 1) {
      // B column-major (a transpose read in place): each pair is one 32-bit word of a column;
      // 8 x 8 word blocks transposed, in the groups of 8 columns that w fills.
      wide = w / 8 * 8;
      for (; 2 * (u + 8) <= kc; u += 8)
        for (int64_t g = 0; g < wide; g += 8) {
          __m256 r[8];
          for (int i = 0; i < 8; ++i)
            r[i] = _mm256_castsi256_ps(_mm256_loadu_si256(
                reinterpret_cast<const __m256i*>(B.p + (j0 + g + i) * B.cs + p0 + 2 * u)));
          transpose8(r);
          for (int i = 0; i < 8; ++i)
            _mm256_store_si256(reinterpret_cast<__m256i*>(dst + (u + i) * NR + g),
                               _mm256_castps_si256(r[i]));
        }
    }
    for (int64_t v = 0; v < ku; ++v)
      for (int64_t j = v < u ? wide : 0; j < NR; ++j) {
        if (j >= w) { dst[v * NR + j] = 0; continue; }
        const uint16_t* col = B.p + (p0 + 2 * v) * B.rs + (j0 + j) * B.cs;
        dst[v * NR + j] = bf16_pair(col[0], 2 * v + 1 < kc ? col[B.rs] : uint16_t(0));
      }
  }

  LIBNN_AVX512BF16 __attribute__((noinline)) static void kernel(
      int64_t kc, const uint32_t* __restrict Ap, const uint32_t* __restrict Bp, float* c,
      int64_t ldc, float alpha, float beta) {
    __m512 acc[MR][2];
    start_tile512(acc, c, ldc);
    const int64_t ku = (kc + 1) / 2;
#pragma GCC unroll 4
    for (int64_t u = 0; u < ku; ++u) {
      const __m512bh b0 = (__m512bh)_mm512_load_si512(Bp);
      const __m512bh b1 = (__m512bh)_mm512_load_si512(Bp + 16);
#pragma GCC unroll 8
      for (int r = 0; r < MR; ++r) {
        const __m512bh a = (__m512bh)_mm512_set1_epi32(int(Ap[r]));
        acc[r][0] = _mm512_dpbf16_ps(acc[r][0], a, b0);
        acc[r][1] = _mm512_dpbf16_ps(acc[r][1], a, b1);
      }
      Ap += MR;
      Bp += NR;
    }
    store_tile512(acc, c, ldc, alpha, beta);
  }
};

// bf16 operands on a CPU with AMX (AMX-TILE and AMX-BF16: Intel Xeon since Sapphire Rapids):
// TDPBF16PS multiplies a 16 x 32 tile of A by a 32 x 16 tile of B (each tile 16 rows of 64
// bytes in a tile register) into a 16 x 16 f32 tile of C, 16384 flops an instruction where
// VDPBF16PS does 64. The 32 x 32 tile of C is four tile registers (0-3); each 32-deep step of
// K loads two tiles of A (4, 5: rows 0-15, 16-31) and two of B (6, 7: columns 0-15, 16-31)
// and runs four products. B's panel is the AVX512_BF16 tile's (pairs of consecutive K
// values in a word, 32 columns a row), its rows zero up to a multiple of 16; A's panel is
// one 32 x 16-word block per step (row r's K values 32s .. 32s + 31 in its row of the
// block), zero past kc, so a tile of A is 16 consecutive rows of 64 bytes. As VDPBF16PS, the
// products flush denormal inputs and results to zero and round to nearest even.
#define LIBNN_AMX __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512bf16,avx2,fma")))

struct AmxTile {
  static constexpr int64_t MR = 32, NR = 32, KC = 512, MC = 128, NC = 3072;
  using In = uint16_t;
  using Packed = uint32_t;
  static constexpr int64_t kStep = 16;  // words of K (32 values) a step
  static int64_t units(int64_t kc) { return ceil_to(kc, 2 * kStep) / 2; }

  // Every thread loads the tile configuration (eight 16 x 64-byte tiles) before its first
  // tile instruction and releases the tiles after its product.
  struct Scope {
    LIBNN_AMX Scope() {
      struct alignas(64) Config {
        uint8_t palette, start_row, reserved[14];
        uint16_t colsb[16];
        uint8_t rows[16];
      } config{};
      config.palette = 1;
      for (int t = 0; t < 8; ++t) {
        config.colsb[t] = 64;
        config.rows[t] = 16;
      }
      // GCC 12's _tile_loadconfig tells the compiler it reads 8 bytes, which let the stores
      // above be dropped: the instruction with the whole configuration as its operand.
      asm volatile("ldtilecfg %0" : : "m"(config));
    }
    LIBNN_AMX ~Scope() { _tile_release(); }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
  };

  // Word u of row r of a panel of width U = units(kc) words.
  static int64_t at(int64_t r, int64_t u) { return (u / kStep) * MR * kStep + r * kStep + u % kStep; }

  // Rows [i0, i0 + h) x columns [p0, p0 + kc) of A into dst (MR x units(kc) words as above).
  LIBNN_AMX static void pack_a(const MatRef<uint16_t>& A, int64_t i0, int64_t h, int64_t p0,
                               int64_t kc, uint32_t* dst) {
    const int64_t U = units(kc), kp = (kc + 1) / 2;  // words, words holding a value
    int64_t done = 0;  // pairs packed for every row
    if (A.cs == 1) {
      // A row-major: each step's 32 values of a row are 64 bytes of it.
      for (int64_t r = 0; r < h; ++r) {
        const uint16_t* row = A.p + (i0 + r) * A.rs + p0;
        for (int64_t u = 0; u < U; u += kStep) {
          _mm512_storeu_si512(dst + at(r, u),
                              _mm512_maskz_loadu_epi16(first_lanes(kc - 2 * u), row + 2 * u));
        }
      }
      done = U;
    } else if (A.rs == 1 && h == MR) {
      // A column-major (a transpose read in place): two columns of 8 rows interleaved into
      // the rows' words, 8 x 8 word blocks transposed.
      for (int64_t g = 0; g < MR; g += 8)
        for (int64_t u = 0; 2 * (u + 8) <= kc; u += 8) {
          __m256 w[8];
          for (int i = 0; i < 8; ++i) {
            const uint16_t* c0 = A.p + i0 + g + (p0 + 2 * (u + i)) * A.cs;
            const __m128i x0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(c0));
            const __m128i x1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(c0 + A.cs));
            w[i] = _mm256_castsi256_ps(
                _mm256_set_m128i(_mm_unpackhi_epi16(x0, x1), _mm_unpacklo_epi16(x0, x1)));
          }
          transpose8(w);
          for (int j = 0; j < 8; ++j)
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + at(g + j, u)),
                                _mm256_castps_si256(w[j]));
        }
      done = kc / 16 * 8;
    }
    for (int64_t r = 0; r < MR; ++r)
      for (int64_t u = r < h ? done : 0; u < U; ++u) {
        uint32_t word = 0;
        if (r < h && u < kp) {
          const uint16_t* x = A.p + (i0 + r) * A.rs + (p0 + 2 * u) * A.cs;
          word = bf16_pair(x[0], 2 * u + 1 < kc ? x[A.cs] : uint16_t(0));
        }
        dst[at(r, u)] = word;
      }
  }

  // Rows [p0, p0 + kc) x columns [j0, j0 + w) of B into dst (units(kc) x NR words, 64-byte
  // aligned), columns past w and rows past kc zero.
  LIBNN_AMX static void pack_b(const MatRef<uint16_t>& B, int64_t p0, int64_t kc, int64_t j0,
                               int64_t w, uint32_t* dst) {
    Bf16Tile::pack_b(B, p0, kc, j0, w, dst);
    const int64_t kp = (kc + 1) / 2;
    std::memset(dst + kp * NR, 0, size_t(units(kc) - kp) * NR * sizeof(uint32_t));
  }

  // c = alpha * Ap Bp + beta * c. With alpha 1 and beta 0 or 1 (every product of the
  // library's ops but a few), the tiles of C start from c (or zero) and are stored to it;
  // otherwise they pass through a local buffer.
  LIBNN_AMX __attribute__((noinline)) static void kernel(int64_t kc, const uint32_t* Ap,
                                                         const uint32_t* Bp, float* c,
                                                         int64_t ldc, float alpha, float beta) {
    const bool direct = alpha == 1.f && (beta == 0.f || beta == 1.f);
    const int64_t ld = ldc * int64_t(sizeof(float));
    if (direct && beta == 1.f) {
      _tile_loadd(0, c, ld);
      _tile_loadd(1, c + 16, ld);
      _tile_loadd(2, c + 16 * ldc, ld);
      _tile_loadd(3, c + 16 * ldc + 16, ld);
    } else {
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
    }
    const int64_t U = units(kc);
    constexpr int64_t kRow = kStep * sizeof(uint32_t), kBRow = NR * sizeof(uint32_t);
    for (int64_t u = 0; u < U; u += kStep) {
      const uint32_t* a = Ap + u * MR;
      const uint32_t* b = Bp + u * NR;
      _tile_loadd(4, a, kRow);
      _tile_loadd(6, b, kBRow);
      _tile_loadd(7, b + 16, kBRow);
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(1, 4, 7);
      _tile_loadd(5, a + 16 * kStep, kRow);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
    if (direct) {
      _tile_stored(0, c, ld);
      _tile_stored(1, c + 16, ld);
      _tile_stored(2, c + 16 * ldc, ld);
      _tile_stored(3, c + 16 * ldc + 16, ld);
      return;
    }
    alignas(64) float tile[MR * NR];
    constexpr int64_t kTileRow = NR * sizeof(float);
    _tile_stored(0, tile, kTileRow);
    _tile_stored(1, tile + 16, kTileRow);
    _tile_stored(2, tile + 16 * NR, kTileRow);
    _tile_stored(3, tile + 16 * NR + 16, kTileRow);
    const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
    for (int64_t r = 0; r < MR; ++r)
      for (int64_t q = 0; q < NR; q += 16) {
        float* p = c + r * ldc + q;
        __m512 x = _mm512_mul_ps(_mm512_load_ps(tile + r * NR + q), va);
        if (beta != 0.f) x = _mm512_fmadd_ps(vb, _mm512_loadu_ps(p), x);
        _mm512_storeu_ps(p, x);
      }
  }
};

// An h x w corner tile (h <= MR, w <= NR) through a full tile in a local buffer.
template <class Tile, typename P = typename Tile::Packed>
LIBNN_AVX2 void edge_kernel(int64_t kc, const P* Ap, const P* Bp, float* c, int64_t ldc,
                            int64_t h, int64_t w, float alpha, float beta) {
  constexpr int64_t MR = Tile::MR, NR = Tile::NR;
  alignas(64) float tile[MR * NR];
  Tile::kernel(kc, Ap, Bp, tile, NR, alpha, 0.f);
  for (int64_t i = 0; i < h; ++i)
    for (int64_t j = 0; j < w; ++j) {
      float& d = c[i * ldc + j];
      d = beta == 0.f ? tile[i * NR + j] : tile[i * NR + j] + beta * d;
    }
}

// One thread's product: the loop nest of the file comment with this thread's own buffers.
// With few rows (M <= 4 MR: up to 32 with the AVX-512 tile, 24 with AVX2's, so a
// convolution's 16 or 32 output channels), each B element meets
// only M rows of A, so moving B costs as much as the arithmetic: each B panel is then packed
// right before its tiles run and read back from L1, instead of the whole kc x nc slice being
// packed first and read back from L2 or beyond (the stage-1 convolution of the CIFAR
// ResNet-20, 16 x 1024 x 144, went from 40 to 32 us a product).
template <class Tile>
LIBNN_AVX2 void sgemm_serial(int64_t M, int64_t N, int64_t K, float alpha,
                             MatRef<typename Tile::In> A, MatRef<typename Tile::In> B, float beta,
                             float* C, int64_t ldc) {
  constexpr int64_t MR = Tile::MR, NR = Tile::NR, KC = Tile::KC, MC = Tile::MC, NC = Tile::NC;
  using P = typename Tile::Packed;
  const FlushDenormals ftz;
  static thread_local Scratch<P> a_scratch, b_scratch;
  // packed elements per panel row: a KC slice takes units(kc) rows of MR (or NR) elements
  auto units = [](int64_t kc) { return Tile::units(kc); };
  const int64_t ku_max = units(std::min(K, KC));
  const bool one_block = M <= 4 * MR;
  P* bpack = b_scratch.get(size_t(ku_max * (one_block ? NR : ceil_to(std::min(N, NC), NR))));
  P* apack = a_scratch.get(size_t(ku_max * ceil_to(std::min(M, MC), MR)));
  [[maybe_unused]] const typename Tile::Scope scope;
  auto tiles = [&](int64_t ic, int64_t mc, int64_t w, int64_t kc, const P* bp, float beta_k,
                   float* Cj) {
    for (int64_t i = 0; i < mc; i += MR) {
      const int64_t h = std::min(MR, mc - i);
      float* c = Cj + (ic + i) * ldc;
      const P* ap = apack + i * units(kc);
      if (h == MR && w == NR) Tile::kernel(kc, ap, bp, c, ldc, alpha, beta_k);
      else edge_kernel<Tile>(kc, ap, bp, c, ldc, h, w, alpha, beta_k);
    }
  };
  for (int64_t jc = 0; jc < N; jc += NC) {
    const int64_t nc = std::min(NC, N - jc);
    for (int64_t pc = 0; pc < K; pc += KC) {
      const int64_t kc = std::min(KC, K - pc);
      const float beta_k = pc == 0 ? beta : 1.f;
      const int64_t ku = units(kc);
      if (one_block) {
        for (int64_t i = 0; i < M; i += MR)
          Tile::pack_a(A, i, std::min(MR, M - i), pc, kc, apack + i * ku);
        for (int64_t j = 0; j < nc; j += NR) {
          const int64_t w = std::min(NR, nc - j);
          Tile::pack_b(B, pc, kc, jc + j, w, bpack);
          tiles(0, M, w, kc, bpack, beta_k, C + jc + j);
        }
        continue;
      }
      for (int64_t j = 0; j < nc; j += NR)
        Tile::pack_b(B, pc, kc, jc + j, std::min(NR, nc - j), bpack + j * ku);
      for (int64_t ic = 0; ic < M; ic += MC) {
        const int64_t mc = std::min(MC, M - ic);
        for (int64_t i = 0; i < mc; i += MR)
          Tile::pack_a(A, ic + i, std::min(MR, mc - i), pc, kc, apack + i * ku);
        for (int64_t j = 0; j < nc; j += NR)
          tiles(ic, mc, std::min(NR, nc - j), kc, bpack + j * ku, beta_k, C + jc + j);
      }
    }
  }
}

// Several threads: C is cut into a grid of nt blocks (rows in multiples of MR, columns in
// multiples of NR), each an independent product on its own thread: no barriers, and each
// thread packs only the rows of A and columns of B its block needs. The grid is the one whose
// blocks read the least of A and B.
template <class Tile>
void packed_sgemm(int64_t M, int64_t N, int64_t K, float alpha, MatRef<typename Tile::In> A,
                  MatRef<typename Tile::In> B, float beta, float* C, int64_t ldc, int nt) {
  constexpr int64_t MR = Tile::MR, NR = Tile::NR;
  int best_tm = 1;
  double best_cost = -1;
  for (int tm = 1; tm <= nt; ++tm) {
    if (nt % tm) continue;
    const int tn = nt / tm;
    const int64_t rows = ceil_to((M + tm - 1) / tm, MR), cols = ceil_to((N + tn - 1) / tn, NR);
    // a grid that would leave a thread without a block is skipped
    if ((tm > 1 && rows * (tm - 1) >= M) || (tn > 1 && cols * (tn - 1) >= N)) continue;
    const double cost = double(rows) + double(cols);
    if (best_cost < 0 || cost < best_cost) { best_cost = cost; best_tm = tm; }
  }
  const int tm = best_tm, tn = nt / tm;
  const int64_t rows = ceil_to((M + tm - 1) / tm, MR), cols = ceil_to((N + tn - 1) / tn, NR);
  if (tm * tn == 1) return sgemm_serial<Tile>(M, N, K, alpha, A, B, beta, C, ldc);
  FirstError error;  // an exception must not leave an OpenMP region
#pragma omp parallel num_threads(tm * tn)
  {
    // Block t of the grid on thread t, and the blocks of threads the team lacks (OpenMP may
    // give fewer than asked for: OMP_DYNAMIC, OMP_THREAD_LIMIT) on the others in turn: a
    // block left out was C's memory as the allocator had left it.
    for (int t = omp_get_thread_num(); t < tm * tn; t += omp_get_num_threads()) {
      const int64_t r0 = (t / tn) * rows, c0 = (t % tn) * cols;
      const int64_t m = std::min(rows, M - r0), n = std::min(cols, N - c0);
      if (m > 0 && n > 0)
        error.run([&] {
          sgemm_serial<Tile>(m, n, K, alpha, {A.p + r0 * A.rs, A.rs, A.cs},
                             {B.p + c0 * B.cs, B.rs, B.cs}, beta, C + r0 * ldc + c0, ldc);
        });
    }
  }
  error.rethrow();
}
#endif
}  // namespace

bool f32_kernel_supported(F32Kernel k) {
  switch (k) {
    case F32Kernel::eigen: return true;
#ifdef LIBNN_PACKED_SGEMM
    case F32Kernel::avx2: {
      static const bool has = [] {
        __builtin_cpu_init();  // in case this first runs from a static initialiser
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
      }();
      return has;
    }
    case F32Kernel::avx512: {
      static const bool has = [] {
        __builtin_cpu_init();
        return f32_kernel_supported(F32Kernel::avx2) && __builtin_cpu_supports("avx512f");
      }();
      return has;
    }
#endif
    default: return false;
  }
}

namespace {
// The widest kernel this CPU has, unless LIBNN_CPU_GEMM (eigen, avx2, avx512) names another
// it supports; any other value is reported once on stderr and ignored.
F32Kernel initial_kernel() {
  const F32Kernel best = f32_kernel_supported(F32Kernel::avx512) ? F32Kernel::avx512
                         : f32_kernel_supported(F32Kernel::avx2) ? F32Kernel::avx2
                                                                  : F32Kernel::eigen;
  const char* env = std::getenv("LIBNN_CPU_GEMM");
  if (!env || !*env) return best;
  const std::string v = env;
  if (v != "eigen" && v != "avx2" && v != "avx512") {
    std::fprintf(stderr, "libnn: LIBNN_CPU_GEMM=%s ignored (eigen, avx2 or avx512)\n", env);
    return best;
  }
  const F32Kernel asked = v == "eigen" ? F32Kernel::eigen
                          : v == "avx2" ? F32Kernel::avx2
                                        : F32Kernel::avx512;
  if (f32_kernel_supported(asked)) return asked;
  std::fprintf(stderr, "libnn: LIBNN_CPU_GEMM=%s ignored: this CPU or build lacks it\n", env);
  return best;
}

std::atomic<F32Kernel>& chosen_kernel() {
  static std::atomic<F32Kernel> k{initial_kernel()};
  return k;
}
}  // namespace

F32Kernel f32_kernel() { return chosen_kernel().load(std::memory_order_relaxed); }

void set_f32_kernel(F32Kernel k) {
  if (!f32_kernel_supported(k)) throw std::invalid_argument("set_f32_kernel: not supported here");
  chosen_kernel().store(k, std::memory_order_relaxed);
}

template <typename T>
void gemm(int64_t M, int64_t N, int64_t K, T alpha, MatRef<T> A, MatRef<T> B, T beta, T* C,
          int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) return scale_c(M, N, beta, C, ldc);
#ifdef LIBNN_PACKED_SGEMM
  // Matrix-vector shapes (one row, or fewer columns than a tile) stay with Eigen, whose
  // products for them read each operand once instead of padding tiles. Fewer columns than
  // the AVX-512 tile run the AVX2 one.
  if constexpr (std::is_same_v<T, float>) {
    const F32Kernel k = f32_kernel();
    if (M >= 2 && N >= Avx2Tile::NR && k != F32Kernel::eigen) {
      const double flops = 2.0 * double(M) * double(N) * double(K);
      const int nt = omp_in_parallel() || flops < kParallelFlops ? 1 : omp_get_max_threads();
      if (k == F32Kernel::avx512 && N >= Avx512Tile::NR)
        return packed_sgemm<Avx512Tile>(M, N, K, alpha, A, B, beta, C, ldc, nt);
      return packed_sgemm<Avx2Tile>(M, N, K, alpha, A, B, beta, C, ldc, nt);
    }
  }
#endif
  eigen_gemm(M, N, K, alpha, A, B, beta, C, ldc);
}

namespace {
// AMX needs the CPU's AMX-TILE and AMX-BF16 (CPUID leaf 7: EDX bits 24 and 22) and, on Linux,
// this process's leave to use the tile data registers (arch_prctl ARCH_REQ_XCOMP_PERM for
// XFEATURE_XTILEDATA, which fails where the kernel or the machine's hypervisor does not
// enable them). Asked once, for the whole process.
bool amx_available() {
#if defined(LIBNN_PACKED_SGEMM) && defined(__linux__)
  static const bool has = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    if (!((d >> 24) & 1u) || !((d >> 22) & 1u)) return false;
    constexpr long kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return has;
#else
  return false;
#endif
}

std::atomic<bool>& amx_wanted() {
  static std::atomic<bool> on{env_switch("LIBNN_CPU_AMX", true)};
  return on;
}
}  // namespace

bool bf16_amx_supported() {
  static const bool has = [] {
#ifdef LIBNN_PACKED_SGEMM
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512bf16") &&
           f32_kernel_supported(F32Kernel::avx512) && amx_available();
#else
    return false;
#endif
  }();
  return has;
}

// The switch first: with LIBNN_CPU_AMX=0 the process never asks for the tile registers.
bool bf16_amx() { return amx_wanted().load(std::memory_order_relaxed) && bf16_amx_supported(); }

void set_bf16_amx(bool on) {
  if (on && !bf16_amx_supported()) throw std::invalid_argument("set_bf16_amx: no AMX here");
  amx_wanted().store(on, std::memory_order_relaxed);
}

bool bf16_gemm_amx() { return bf16_gemm_native() && bf16_amx(); }

bool bf16_gemm_native() {
#ifdef LIBNN_PACKED_SGEMM
  static const bool has = [] {
    __builtin_cpu_init();
    return f32_kernel_supported(F32Kernel::avx512) && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512bf16");
  }();
  return has && f32_kernel() == F32Kernel::avx512;
#else
  return false;
#endif
}

void gemm_bf16(int64_t M, int64_t N, int64_t K, float alpha, MatRef<uint16_t> A,
               MatRef<uint16_t> B, float beta, float* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) return scale_c(M, N, beta, C, ldc);
#ifdef LIBNN_PACKED_SGEMM
  // (AMX is asked for, and the process's tile registers with it, only by a product it can run.)
  if (bf16_gemm_native() && M >= 2 && N >= 16) {
    const double flops = 2.0 * double(M) * double(N) * double(K);
    const int nt = omp_in_parallel() || flops < kParallelFlops ? 1 : omp_get_max_threads();
    if (bf16_amx()) return packed_sgemm<AmxTile>(M, N, K, alpha, A, B, beta, C, ldc, nt);
    if (N >= Bf16Tile::NR) return packed_sgemm<Bf16Tile>(M, N, K, alpha, A, B, beta, C, ldc, nt);
  }
#endif
  // Elsewhere (matrix-vector shapes too): the operands widened to f32, the f32 product.
  auto widen = [](const MatRef<uint16_t>& X, int64_t rows, int64_t cols) {
    std::vector<float> f(size_t(rows * cols));
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) f[size_t(i * cols + j)] = bf16_bits_to_float(X.p[i * X.rs + j * X.cs]);
    return f;
  };
  const std::vector<float> a = widen(A, M, K), b = widen(B, K, N);
  gemm<float>(M, N, K, alpha, row_major(a.data(), K), row_major(b.data(), N), beta, C, ldc);
}

template void gemm<float>(int64_t, int64_t, int64_t, float, MatRef<float>, MatRef<float>, float,
                          float*, int64_t);
template void gemm<double>(int64_t, int64_t, int64_t, double, MatRef<double>, MatRef<double>,
                           double, double*, int64_t);

}  // namespace nn::cpu
