// CPU conv family, channels-last (NHWC). A pixel's C channels are contiguous, so the product
// that a convolution is (rows: output pixels; inner dimension: taps x channels) can read the
// image in place through a table of pointers, one per (pixel, tap), where the row-major path
// must first copy every tap into a column matrix. f32 with one group runs that way on the
// tile kernels of conv_kernels.cpp:
//   forward          y (pixels, O) = taps of x (pixels, T x C) . w^T, w (O, T, C) packed;
//   input gradient   stride 1: the forward of dy with w's taps mirrored and O and C swapped
//                    (a transposed convolution is a convolution); other strides below;
//   weight gradient  dw (O, T x C) += dy^T (O, pixels) . taps of x (pixels, T x C).
// Everything else (f64, groups, the input gradient of strided convolutions, CPUs without
// AVX2) goes through an NHWC column matrix and cpu::gemm, the layout twin of conv.cpp.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "backend/cpu/conv_geom.h"
#include "backend/cpu/conv_kernels.h"
#include "backend/cpu/conv_nhwc.h"
#include "backend/cpu/denormals.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/parallel.h"

namespace nn::backend {
using namespace nn::cpu;
using namespace conv_detail;

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// This thread's buffer number Tag, at least n long: it outlives the call and only grows, so
// large scratch (packed weights, gradient accumulators) does not come fresh from the system,
// page faults and all, on every call. Contents are whatever the last user left.
enum BufferTag { kOffsets, kPacked, kMirrored, kZeros, kPointers, kAccumulator };
template <typename T, BufferTag Tag>
T* thread_buffer(size_t n) {
  static thread_local std::vector<T> v;
  if (v.size() < n) v.resize(n);
  return v.data();
}

// Element offsets into one image (H, W, C) of every (output pixel, tap) pair: off[p * taps +
// t] is where tap t of output pixel p reads its channels, or -1 where it falls in the padding.
// The same for every image, so computed once a call (into this thread's buffer).
const int64_t* tap_offsets(const ConvGeom& g) {
  int64_t* const off = thread_buffer<int64_t, kOffsets>(size_t(g.P * g.taps()));
  int64_t* o = off;
  for (int64_t oh = 0; oh < g.OH; ++oh)
    for (int64_t ow = 0; ow < g.OW; ++ow)
      for (int64_t kh = 0; kh < g.KH; ++kh) {
        const int64_t ih = oh * g.sh - g.ph + kh * g.dh;
        for (int64_t kw = 0; kw < g.KW; ++kw) {
          const int64_t iw = ow * g.sw - g.pw + kw * g.dw;
          *o++ = ih >= 0 && ih < g.H && iw >= 0 && iw < g.W ? (ih * g.W + iw) * g.C : -1;
        }
      }
  return off;
}

// ---- the column-matrix path (any float type, groups) --------------------------------------

// col (P, taps x Cg) of group gr of image x: col[p][t * Cg + c] = channel gr * Cg + c of the
// pixel tap t of p reads, zero in the padding.
template <typename T>
void im2col(const ConvGeom& g, const int64_t* off, const T* x, int64_t gr, T* col) {
  if (g.Cg == 0) return;  // nothing to copy (and x may be null: memcpy must not see it)
  for (int64_t i = 0; i < g.P * g.taps(); ++i, col += g.Cg) {
    if (off[i] < 0) std::fill(col, col + g.Cg, T(0));
    else std::memcpy(col, x + off[i] + gr * g.Cg, sizeof(T) * size_t(g.Cg));
  }
}

// Group gr of image x += col folded back (the adjoint of im2col).
template <typename T>
void col2im(const ConvGeom& g, const int64_t* off, const T* col, int64_t gr, T* x) {
  if (g.Cg == 0) return;
  for (int64_t i = 0; i < g.P * g.taps(); ++i, col += g.Cg) {
    if (off[i] < 0) continue;
    T* d = x + off[i] + gr * g.Cg;
#pragma omp simd
    for (int64_t c = 0; c < g.Cg; ++c) d[c] += col[c];
  }
}

// The weights of group gr: (Og, taps x Cg) row-major.
template <typename T>
MatRef<T> group_weights(const ConvGeom& g, const T* w, int64_t gr) {
  return row_major(w + gr * g.Og * g.Kdim, g.Kdim);
}

// The column matrix (P, taps x Cg) of group gr of image x: a pointwise convolution's pixels
// themselves, else im2col's into buf.
template <typename T>
MatRef<T> columns(const ConvGeom& g, const int64_t* off, const T* x, int64_t gr,
                  std::vector<T>& buf) {
  if (g.pointwise()) return {x + gr * g.Cg, g.C, 1};
  buf.resize(size_t(g.P * g.Kdim));
  im2col(g, off, x, gr, buf.data());
  return row_major<T>(buf.data(), g.Kdim);
}

template <typename T>
void forward_cols(const ConvGeom& g, const T* x, const T* w, const T* bias, T* y) {
  const int64_t* off = tap_offsets(g);
  std::vector<std::vector<T>> cols(omp_get_max_threads());
  for_each_item(g.N, [&](int64_t n, int t) {
    const T* xi = x + n * g.H * g.W * g.C;
    T* yi = y + n * g.P * g.O;
    for (int64_t gr = 0; gr < g.G; ++gr) {
      cpu::gemm<T>(g.P, g.Og, g.Kdim, T(1), columns(g, off, xi, gr, cols[t]),
                   group_weights(g, w, gr).t(), T(0), yi + gr * g.Og, g.O);
    }
    if (bias)
      for (int64_t p = 0; p < g.P; ++p)
        for (int64_t o = 0; o < g.O; ++o) yi[p * g.O + o] += bias[o];
  });
}

template <typename T>
void backward_input_cols(const ConvGeom& g, const T* dy, const T* w, T* dx) {
  const int64_t* off = tap_offsets(g);
  std::vector<std::vector<T>> cols(omp_get_max_threads());
  for_each_item(g.N, [&](int64_t n, int t) {
    const T* dyi = dy + n * g.P * g.O;
    T* dxi = dx + n * g.H * g.W * g.C;
    if (!g.pointwise()) std::fill(dxi, dxi + g.H * g.W * g.C, T(0));
    for (int64_t gr = 0; gr < g.G; ++gr) {
      const MatRef<T> dyg{dyi + gr * g.Og, g.O, 1};  // (P, Og)
      if (g.pointwise()) {  // the gradient of the group's pixels directly, no folding
        cpu::gemm<T>(g.P, g.Cg, g.Og, T(1), dyg, group_weights(g, w, gr), T(0), dxi + gr * g.Cg, g.C);
        continue;
      }
      cols[t].resize(size_t(g.P * g.Kdim));
      cpu::gemm<T>(g.P, g.Kdim, g.Og, T(1), dyg, group_weights(g, w, gr), T(0), cols[t].data(), g.Kdim);
      col2im(g, off, cols[t].data(), gr, dxi);
    }
  });
}

template <typename T>
void backward_weight_cols(const ConvGeom& g, const T* x, const T* dy, T* dw) {
  const int64_t* off = tap_offsets(g);
  const int nt = omp_get_max_threads();
  std::vector<std::vector<T>> acc(nt), cols(nt);  // one accumulator per thread, summed below
  for_each_item(g.N, [&](int64_t n, int t) {
    acc[t].resize(size_t(g.O * g.Kdim), T(0));
    const T* xi = x + n * g.H * g.W * g.C;
    const T* dyi = dy + n * g.P * g.O;
    for (int64_t gr = 0; gr < g.G; ++gr) {
      const MatRef<T> dygt{dyi + gr * g.Og, 1, g.O};  // (Og, P)
      cpu::gemm<T>(g.Og, g.Kdim, g.P, T(1), dygt, columns(g, off, xi, gr, cols[t]), T(1),
                   acc[t].data() + gr * g.Og * g.Kdim, g.Kdim);
    }
  });
  std::fill(dw, dw + g.O * g.Kdim, T(0));
  for (const auto& a : acc)
    for (size_t i = 0; i < a.size(); ++i) dw[i] += a[i];
}

// ---- the tile kernels' path (f32, one group) ------------------------------------------------

// n zeros, 64-byte aligned, in this thread's buffer Tag.
template <BufferTag Tag>
float* aligned_zeros(size_t n) {
  float* v = thread_buffer<float, Tag>(n + 16);
  v += (64 - reinterpret_cast<uintptr_t>(v) % 64) % 64 / sizeof(float);
  std::fill(v, v + n, 0.f);
  return v;
}

// At least n floats of zeros, where the pointer tables point for taps in the padding.
const float* zeros_for(int64_t n) { return thread_buffer<float, kZeros>(size_t(n)); }  // never written

// This thread's pointers of pixels [p0, p1) of image x: tab[(p - p0) * taps + t] from the
// offsets, `zero` (at least C floats of zeros) in the padding and for `extra` more rows of taps.
const float** fill_pointers(const int64_t* off, int64_t taps, const float* x, const float* zero,
                            int64_t p0, int64_t p1, int64_t extra) {
  const int64_t n = (p1 - p0) * taps;
  const float** tab = thread_buffer<const float*, kPointers>(size_t(n + extra * taps));
  const int64_t* o = off + p0 * taps;
  for (int64_t i = 0; i < n; ++i) tab[i] = o[i] < 0 ? zero : x + o[i];
  std::fill(tab + n, tab + n + extra * taps, zero);
  return tab;
}

// Pixels a work item, `chunk` or fewer (a multiple of `unit`) when the N images would give
// fewer than two items a thread (small batches, late layers' small images), so that threads
// get work and the static split stays even.
int64_t finer_for_threads(int64_t N, int64_t P, int64_t unit, int64_t chunk) {
  const int64_t want = 2 * omp_get_max_threads();
  if (N * ceil_div(P, chunk) >= want) return chunk;
  return std::min(chunk, std::max(unit, ceil_div(ceil_div(P, ceil_div(want, N)), unit) * unit));
}

// y (N, P, O) = the convolution of x (N, H, W, C) with w (O, taps, C), plus bias (O) if given.
void forward_tiles(const ConvGeom& g, const ConvKernels& k, const float* x, const float* w,
                   const float* bias, float* y) {
  const ConvTile& tile = g.O <= k.vec ? k.forward_narrow : k.forward_wide;
  const int64_t MR = tile.mr, NR = tile.nr, T = g.taps(), C = g.C, O = g.O, P = g.P;
  // Channels in slices of kc, so that a packed block of the weights (taps x kc x NR floats,
  // read once per tile) stays within 128 KB.
  const int64_t slices = ceil_div(C, std::max<int64_t>(1, 32768 / (T * NR)));
  const int64_t kc = ceil_div(C, slices), panels = ceil_div(O, NR);
  // Panel j (output channels j NR ..), slice s: (taps, kcs, NR) at (j C + s kc) taps NR.
  float* bp = aligned_zeros<kPacked>(size_t(panels * T * C * NR));
  parallel_for(0, panels, std::max<int64_t>(1, kGrain / (T * C * NR)), [&](int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < j1; ++j)
      for (int64_t s = 0; s < slices; ++s) {
        const int64_t c0 = s * kc, kcs = std::min(kc, C - c0);
        float* blk = bp + (j * C + c0) * T * NR;
        for (int64_t t = 0; t < T; ++t)
          for (int64_t c = 0; c < kcs; ++c)
            for (int64_t jj = 0; jj < NR && j * NR + jj < O; ++jj)
              blk[(t * kcs + c) * NR + jj] = w[((j * NR + jj) * T + t) * C + c0 + c];
      }
  });
  const int64_t* off = tap_offsets(g);
  const float* zero = zeros_for(C);
  // Pixels in chunks whose inputs for one slice stay in L2 while every panel passes over them.
  const int64_t chunk = finer_for_threads(
      g.N, P, MR, std::clamp<int64_t>(8192 / kc / MR * MR, MR, ceil_div(P, MR) * MR));
  const int64_t chunks = ceil_div(P, chunk);
  for_each_item(g.N * chunks, [&](int64_t item, int) {
    const FlushDenormals ftz;
    const int64_t n = item / chunks, p0 = item % chunks * chunk, p1 = std::min(P, p0 + chunk);
    const float** tab = fill_pointers(off, T, x + n * g.H * g.W * C, zero, p0, p1, MR);
    float* yi = y + (n * P + p0) * O;
    for (int64_t j = 0; j < panels; ++j)
      for (int64_t s = 0; s < slices; ++s) {
        const int64_t c0 = s * kc, kcs = std::min(kc, C - c0);
        for (int64_t r = 0; r < p1 - p0; r += MR) {
          const ConvForwardArgs a{T, kcs, tab + r * T, T, c0, bp + (j * C + c0) * T * NR,
                                  s == 0 && bias ? bias + j * NR : nullptr, yi + r * O + j * NR, O,
                                  int(std::min(MR, p1 - p0 - r)), int(std::min(NR, O - j * NR)),
                                  s > 0};
          tile.run(&a);
        }
      }
  });
}

// dx of a stride-1 convolution: the forward convolution of dy with w (O, taps, C) turned into
// (C, taps, O) with its taps mirrored, padded by the kernel's extent less the padding.
void backward_input_tiles(const ConvGeom& g, const ConvKernels& k, const float* dy,
                          const float* w, float* dx) {
  const int64_t T = g.taps();
  float* wt = thread_buffer<float, kMirrored>(size_t(g.C * T * g.O));
  for (int64_t o = 0; o < g.O; ++o)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < g.C; ++c) wt[(c * T + (T - 1 - t)) * g.O + o] = w[(o * T + t) * g.C + c];
  ConvGeom tg = g;
  tg.H = g.OH; tg.W = g.OW; tg.C = tg.Cg = g.O;
  tg.OH = g.H; tg.OW = g.W; tg.O = tg.Og = g.C;
  tg.P = g.H * g.W; tg.Kdim = T * g.O;
  tg.ph = (g.KH - 1) * g.dh - g.ph;
  tg.pw = (g.KW - 1) * g.dw - g.pw;
  forward_tiles(tg, k, dy, wt, nullptr, dx);
}

// dw (O, taps, C) = sum over images and pixels of dy (N, P, O) times the taps of x. Needs C a
// multiple of the vector width (a vector of columns never straddles two taps).
void backward_weight_tiles(const ConvGeom& g, const ConvKernels& k, const float* x,
                           const float* dy, float* dw) {
  const ConvTile& tile = k.weight_grad;
  const int64_t MR = tile.mr, NR = tile.nr, NV = NR / k.vec, T = g.taps(), C = g.C, O = g.O;
  const int64_t P = g.P, Kdim = T * C;
  const int64_t* off = tap_offsets(g);
  const float* zero = zeros_for(C);
  // Pixels in chunks whose dy rows and inputs stay in L2 while every tile passes over them.
  const int64_t chunk = finer_for_threads(g.N, P, 16, std::min(P, std::max<int64_t>(16, 32768 / (C + O))));
  const int64_t chunks = ceil_div(P, chunk);
  // One accumulator per thread (its buffer, zeroed at its first item), summed below.
  std::vector<float*> acc(size_t(omp_get_max_threads()), nullptr);
  for_each_item(g.N * chunks, [&](int64_t item, int th) {
    const FlushDenormals ftz;
    const int64_t n = item / chunks, p0 = item % chunks * chunk, p1 = std::min(P, p0 + chunk);
    if (!acc[th]) {
      acc[th] = thread_buffer<float, kAccumulator>(size_t(O * Kdim));
      std::fill(acc[th], acc[th] + O * Kdim, 0.f);
    }
    const float* const* tab = fill_pointers(off, T, x + n * g.H * g.W * C, zero, p0, p1, 0);
    for (int64_t o0 = 0; o0 < O; o0 += MR)
      for (int64_t k0 = 0; k0 < Kdim; k0 += NR) {
        int64_t tap[4] = {}, chan[4] = {};  // columns past Kdim read tap 0, channel 0
        for (int64_t v = 0; v < NV && k0 + v * k.vec < Kdim; ++v) {
          tap[v] = (k0 + v * k.vec) / C;
          chan[v] = (k0 + v * k.vec) % C;
        }
        const ConvWeightGradArgs a{p1 - p0, dy + (n * P + p0) * O + o0, O, tab, T, tap,
                                   chan, acc[th] + o0 * Kdim + k0, Kdim,
                                   int(std::min(MR, O - o0)), int(std::min(NR, Kdim - k0))};
        tile.run(&a);
      }
  });
  std::fill(dw, dw + O * Kdim, 0.f);
  for (const float* a : acc)
    if (a)
      for (int64_t i = 0; i < O * Kdim; ++i) dw[i] += a[i];
}

// The tile kernels, for f32 with one group and some channels in and out, where this CPU has
// them (zero channels: the column path's empty products give the bias, or zeros).
const ConvKernels* tiles_for(const ConvGeom& g) {
  return g.G == 1 && g.C > 0 && g.O > 0 ? conv_kernels() : nullptr;
}
}  // namespace

void conv2d_forward_nhwc(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out,
                         const Conv2dParams& p) {
  dispatch_float(x.dtype(), "conv2d", [&]<typename T>() {
    const ConvGeom g = geom(x.shape(), w.shape(), out.shape(), p);
    const T* pb = bias.defined() ? bias.data<T>() : nullptr;
    if constexpr (std::is_same_v<T, float>) {
      if (const ConvKernels* k = tiles_for(g))
        return forward_tiles(g, *k, x.data<float>(), w.data<float>(), pb, out.data<float>());
    }
    forward_cols(g, x.data<T>(), w.data<T>(), pb, out.data<T>());
  });
}

void conv2d_backward_input_nhwc(const Tensor& grad_out, const Tensor& w, Tensor& grad_x,
                                const Conv2dParams& p) {
  dispatch_float(w.dtype(), "conv2d_backward_input", [&]<typename T>() {
    const ConvGeom g = geom(grad_x.shape(), w.shape(), grad_out.shape(), p);
    if constexpr (std::is_same_v<T, float>) {
      const ConvKernels* k = tiles_for(g);
      if (k && g.sh == 1 && g.sw == 1)
        return backward_input_tiles(g, *k, grad_out.data<float>(), w.data<float>(),
                                    grad_x.data<float>());
    }
    backward_input_cols(g, grad_out.data<T>(), w.data<T>(), grad_x.data<T>());
  });
}

void conv2d_backward_weight_nhwc(const Tensor& grad_out, const Tensor& x, Tensor& grad_w,
                                 const Conv2dParams& p) {
  dispatch_float(x.dtype(), "conv2d_backward_weight", [&]<typename T>() {
    const ConvGeom g = geom(x.shape(), grad_w.shape(), grad_out.shape(), p);
    if constexpr (std::is_same_v<T, float>) {
      const ConvKernels* k = tiles_for(g);
      if (k && g.C % k->vec == 0)
        return backward_weight_tiles(g, *k, x.data<float>(), grad_out.data<float>(),
                                     grad_w.data<float>());
    }
    backward_weight_cols(g, x.data<T>(), grad_out.data<T>(), grad_w.data<T>());
  });
}

}  // namespace nn::backend
