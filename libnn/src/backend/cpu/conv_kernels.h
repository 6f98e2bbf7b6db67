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
struct ConvWeightGradArgs {
  int64_t steps;
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

// The bf16 weight gradient steps over pixel pairs q (pixels 2q, 2q + 1), both operands packed
// in pairs as VDPBF16PS takes them (zeros stand in for a missing last pixel):
// - x's columns by ConvPackPairsArgs: xp[(q * nv + v) * 32 + 2l + h] = column v * 16 + l of
//   pixel 2q + h, 64-byte aligned;
// - dy's `mr` rows of the tile: dy[q * mr + r] = (bf16 of pixel 2q) | (bf16 of pixel 2q + 1)
//   << 16, zeros past `rows`.
// c (rows x cols, leading dimension ldc) += sum over q of dy's rows times x's columns.
struct ConvWeightGradBf16Args {
  int64_t steps;
  const uint32_t* dy;
  const uint16_t* xp;
  float* c;
  int64_t ldc;
  int rows, cols;
};
// Columns of x for that tile: out[(q * nv + v) * 32 + 2l + h] = (ptab[(2q + h) * taps +
// tap[v]] + chan[v])[l] for q < steps, v < nv, l < 16: each run 16 channels of one tap (C a
// multiple of 16), ptab holding the taps of 2 * steps pixels.
struct ConvPackPairsArgs {
  int64_t steps;
  const uint16_t* const* ptab;
  int64_t taps;
  const int64_t* tap;
  const int64_t* chan;
  int nv;
  uint16_t* out;
};
// dy's rows for that tile: out[(b * steps + q) * 8 + r] = (channel 8b + r of row 2q) | (of row
// 2q + 1) << 16 for q < steps and 8b + r < O rounded up to 8 (zeros past O), row 2q at dy +
// 2q * O; the last pair's second row is `last` instead when `last` is set (zeros, at least O).
struct ConvPackRowsArgs {
  int64_t steps;
  const uint16_t* dy;
  int64_t O;
  const uint16_t* last;
  uint32_t* out;
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

// The tiles for bf16 operands (ConvForwardBf16Args, ConvWeightGradBf16Args), on CPUs with
// AVX512_BF16 while cpu::bf16_gemm_native() and not cpu::bf16_gemm_amx(); else nullptr. (With AMX
// the column-matrix path's products, on gemm_bf16's AMX tile, are faster: 2x for ResNet-50's
// bf16 training step on the 2-core Xeon of docs/benchmarks.md, where VDPBF16PS runs at half
// the rate it has on Zen 4.)
struct ConvBf16Kernels {
  int vec;                  // f32 sums per vector register: 16
  ConvTile forward_narrow;  // one vector of output channels
  ConvTile forward_wide;    // two vectors
  ConvTile weight_grad;     // two vectors (ConvWeightGradBf16Args)
  void (*pack_pairs)(const ConvPackPairsArgs*);  // x's columns for weight_grad
  void (*pack_rows)(const ConvPackRowsArgs*);    // dy's rows for it (its mr is 8)
};
const ConvBf16Kernels* conv_bf16_kernels();

}  // namespace nn::cpu
