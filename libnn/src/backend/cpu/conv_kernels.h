// The f32 tile kernels of the CPU backend's channels-last convolutions (internal).
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
struct ConvForwardArgs {
  int64_t taps, kc;
  const float* const* a;
  int64_t a_stride, a_off;
  const float* b;
  const float* bias;
  float* c;
  int64_t ldc;
  int rows, cols;
  bool accumulate;
};

// Weight-gradient tile: c (rows x cols, leading dimension ldc) += sum over the pixels p of
//   dy[p * ldy + r] * (ptab[p * taps + tap[v]] + chan[v])[l]   for column j = v * vec + l,
// i.e. output channels down the rows and vec-wide runs of one tap's channels across the
// columns. Columns past `cols` must still name readable memory; they are not stored.
struct ConvWeightGradArgs {
  int64_t pixels;
  const float* dy;
  int64_t ldy;
  const float* const* ptab;
  int64_t taps;
  const int64_t* tap;
  const int64_t* chan;
  float* c;
  int64_t ldc;
  int rows, cols;
};

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

}  // namespace nn::cpu
