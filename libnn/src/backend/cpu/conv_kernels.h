// The tile kernels of the CPU backend's channels-last convolutions (internal).
//
// A channels-last (NHWC) convolution is a matrix product whose rows are output pixels and
// whose inner dimension runs over the taps of the kernel window and, within a tap, over the
// C channels of one input pixel, which NHWC stores contiguously. So no column matrix is
// needed: a table of pointers, one per (pixel, tap), to that pixel's C channels (or to zeros
// where the tap falls in the padding) lets the kernels read the image in place (the
// "indirect GEMM" of XNNPACK; oneDNN's NHWC convolutions work the same way). The drivers are
// in conv_nhwc.cpp.
#pragma once
#include <cstdint>

namespace nn::cpu {

// Forward tile: c (rows x cols, leading dimension ldc) = sum over taps t and channels k of
//   a[r * a_stride + t][a_off + k] * b[(t * kc + k) * nr + j]
// plus c itself when accumulating, or bias[j] (if given) when not. Rows past `rows` read
// valid memory (the caller points them at zeros) and are not stored; b is packed nr wide,
// 64-byte aligned, zero past `cols`.
// The bf16 tiles (ConvForwardBf16Args) take k in pairs: a's pointers are to bf16 channels,
// kc even, and b holds each pair of consecutive k (one 32-bit word) for each of the nr
// columns, as VDPBF16PS wants; the bias and the sums are f32. With c_bf16 set (and not
// accumulating) they store the results rounded to bf16 there instead of into c.
template <typename T, typename P>
struct ConvForwardArgsOf {
  int64_t taps, kc;
  const T* const* a;
  int64_t a_stride, a_off;
  const P* b;
  const float* bias;
  float* c;
  int64_t ldc;
  int rows, cols;
  bool accumulate;
  uint16_t* c_bf16 = nullptr;
};
using ConvForwardArgs = ConvForwardArgsOf<float, float>;
using ConvForwardBf16Args = ConvForwardArgsOf<uint16_t, uint32_t>;

// Weight-gradient tile: c (rows x cols, leading dimension ldc) += sum over the pixels p of
//   dy[p * ldy + r] * (ptab[p * taps + tap[v]] + chan[v])[l]   for column j = v * vec + l,
// i.e. output channels down the rows and vec-wide runs of one tap's channels across the
// columns, over `steps` pixels. Columns past `cols` must still name readable memory; they are
// not stored.
// The bf16 tile (ConvWeightGradBf16Args) steps over pixel pairs q (pixels 2q, 2q + 1), dy
// packed as one 32-bit word per pair and row, dy[q * ldy + r] = (bf16 of pixel 2q) | (bf16 of
// pixel 2q + 1) << 16, with at least `mr` rows a pair (zeros past `rows`); ptab holds the taps
// of 2 * steps pixels. Its runs of a tap's channels are 16 wide (C a multiple of 16).
template <typename T, typename Y>
struct ConvWeightGradArgsOf {
  int64_t steps;
  const Y* dy;
  int64_t ldy;
  const T* const* ptab;
  int64_t taps;
  const int64_t* tap;
  const int64_t* chan;
  float* c;
  int64_t ldc;
  int rows, cols;
};
using ConvWeightGradArgs = ConvWeightGradArgsOf<float, float>;
using ConvWeightGradBf16Args = ConvWeightGradArgsOf<uint16_t, uint32_t>;

struct ConvTile {
  int mr, nr;  // tile rows and columns
  void (*run)(const void* args);  // ConvForwardArgs or ConvWeightGradArgs
};

struct ConvKernels {
  int vec;                 // floats per vector register: 16 (AVX-512) or 8 (AVX2)
  ConvTile forward_narrow; // one vector of output channels (for vec or fewer)
  ConvTile forward_wide;   // two vectors
  ConvTile weight_grad;    // two vectors
};

// The kernels for the current f32 kernel choice (cpu::f32_kernel(): AVX-512 or AVX2 + FMA),
// or nullptr where there are none (another CPU, or LIBNN_CPU_GEMM=eigen): the callers then
// take the column-matrix path.
const ConvKernels* conv_kernels();

// The tiles for bf16 operands (ConvForwardBf16Args, ConvWeightGradBf16Args), on CPUs with
// AVX512_BF16 while cpu::bf16_gemm_native(); else nullptr.
struct ConvBf16Kernels {
  int vec;                  // f32 sums per vector register: 16
  ConvTile forward_narrow;  // one vector of output channels
  ConvTile forward_wide;    // two vectors
  ConvTile weight_grad;     // two vectors (ConvWeightGradBf16Args)
};
const ConvBf16Kernels* conv_bf16_kernels();

}  // namespace nn::cpu
