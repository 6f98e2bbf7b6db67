// The geometry of a CPU convolution call and the per-image loop shared by the row-major
// (conv.cpp) and channels-last (conv_nhwc.cpp) paths (internal).
#pragma once
#include <omp.h>

#include <cstdint>

#include "backend/backend.h"
#include "core/first_error.h"

namespace nn::backend::conv_detail {

struct ConvGeom {
  int64_t N, C, H, W, O, KH, KW, OH, OW, G, Cg, Og, Kdim, P;
  int64_t sh, sw, ph, pw, dh, dw;
  int64_t taps() const { return KH * KW; }
  // 1x1, stride 1, no padding: the image itself is the column matrix.
  bool pointwise() const {
    return KH == 1 && KW == 1 && sh == 1 && sw == 1 && ph == 0 && pw == 0;
  }
  // The leading dimension of the row-major path's column matrices (Kdim, P): P and 16 floats
  // more, 32 more if that is a multiple of 4 KB, so that rows are never a multiple of 4 KB
  // apart. With P = 1024 (32 x 32 images) the GEMM's packing read 8 rows 4 KB apart, which
  // share one set of the L1 cache, and ran at half speed.
  int64_t col_ld() const { return (P + 16) % 1024 == 0 ? P + 32 : P + 16; }
  // Multiply-adds of the whole convolution (each of its three products has as many).
  double macs() const { return double(N) * double(O) * double(P) * double(Kdim); }
};

// From the logical (N, C, H, W) shapes of x, (O, C/groups, KH, KW) of w and of the output.
inline ConvGeom geom(const Shape& x, const Shape& w, const Shape& out, const Conv2dParams& p) {
  ConvGeom g{};
  g.N = x[0]; g.C = x[1]; g.H = x[2]; g.W = x[3];
  g.O = w[0]; g.KH = w[2]; g.KW = w[3];
  g.OH = out[2]; g.OW = out[3];
  g.G = p.groups; g.Cg = g.C / g.G; g.Og = g.O / g.G;
  g.Kdim = g.Cg * g.KH * g.KW; g.P = g.OH * g.OW;
  g.sh = p.stride[0]; g.sw = p.stride[1]; g.ph = p.padding[0]; g.pw = p.padding[1];
  g.dh = p.dilation[0]; g.dw = p.dilation[1];
  return g;
}

// Below this many multiply-adds a convolution runs on one thread: a parallel region costs
// microseconds, and far more when the cores are busy with other work (a test suite, a second
// process), which a tiny convolution cannot earn back.
inline constexpr double kParallelMacs = 1 << 18;

// Runs f(i, thread_slot) for every work item i in [0, N) (images, or pieces of images):
// threads over items when there are enough of them and the convolution is worth it (`macs`:
// its multiply-adds; GEMMs single-threaded inside), else the items in turn with the GEMM's
// own threads.
template <typename F>
void for_each_item(int64_t N, double macs, F&& f) {
  int nt = omp_get_max_threads();
  if (N >= nt && nt > 1 && macs >= kParallelMacs && !omp_in_parallel()) {
    FirstError error;  // e.g. std::bad_alloc from a thread's scratch buffer
#pragma omp parallel num_threads(nt)
    {
      int t = omp_get_thread_num();
#pragma omp for schedule(static)
      for (int64_t n = 0; n < N; ++n) error.run([&] { f(n, t); });
    }
    error.rethrow();
  } else {
    for (int64_t n = 0; n < N; ++n) f(n, 0);
  }
}

}  // namespace nn::backend::conv_detail
