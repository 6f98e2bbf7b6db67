// CPU conv family, channels-last (NHWC). A pixel's C channels are contiguous, so the product
// that a convolution is (rows: output pixels; inner dimension: taps x channels) can read the
// image in place through a table of pointers, one per (pixel, tap), where the row-major path
// must first copy every tap into a column matrix. f32 with one group runs that way on the
// tile kernels of conv_kernels.cpp:
//   forward          y (pixels, O) = taps of x (pixels, T x C) . w^T, w (O, T, C) packed;
//   input gradient   stride 1: the forward of dy with w's taps mirrored and O and C swapped
//                    (a transposed convolution is a convolution); 1 x 1 with a stride and no
//                    padding: that, over the output's grid, spread over the sampled pixels;
//   weight gradient  dw (O, T x C) += dy^T (O, pixels) . taps of x (pixels, T x C).
// bf16 has tiles of its own (pairs of channels or pixels a step). Everything else (f64,
// groups, other strided input gradients, CPUs without AVX2) goes through an NHWC column
// matrix and cpu::gemm, the layout twin of conv.cpp.
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
enum BufferTag { kOffsets, kPacked, kZeros, kPointers, kAccumulator, kPackedDy, kPackedX };
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
// With one group and undilated rows, a window row's KW taps whose ends both fall inside the
// image read KW x C contiguous elements, copied at once: a convolution with few channels (the
// 7 x 7 stem's 3) would otherwise copy a few bytes per call.
template <typename T>
void im2col(const ConvGeom& g, const int64_t* off, const T* x, int64_t gr, T* col) {
  if (g.Cg == 0) return;  // nothing to copy (and x may be null: memcpy must not see it)
  const bool rows = g.G == 1 && g.dw == 1 && g.KW > 1;
  const int64_t n = g.P * g.taps(), run = g.KW * g.C;
  for (int64_t i = 0; i < n;) {
    if (rows && i % g.KW == 0 && off[i] >= 0 && off[i + g.KW - 1] >= 0) {
      std::memcpy(col, x + off[i], sizeof(T) * size_t(run));
      col += run;
      i += g.KW;
      continue;
    }
    if (off[i] < 0) std::fill(col, col + g.Cg, T(0));
    else std::memcpy(col, x + off[i] + gr * g.Cg, sizeof(T) * size_t(g.Cg));
    col += g.Cg;
    ++i;
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

// The column matrix (b P, taps x Cg) of group gr of the b images from x on: a pointwise
// convolution's pixels themselves (the images follow one another), else im2col's into buf.
template <typename T>
MatRef<T> columns(const ConvGeom& g, const int64_t* off, const T* x, int64_t b, int64_t gr,
                  std::vector<T>& buf) {
  if (g.pointwise()) return {x + gr * g.Cg, g.C, 1};
  buf.resize(size_t(b * g.P * g.Kdim));
  for (int64_t i = 0; i < b; ++i)
    im2col(g, off, x + i * g.H * g.W * g.C, gr, buf.data() + i * g.P * g.Kdim);
  return row_major<T>(buf.data(), g.Kdim);
}

// Images one product of the column path takes: one, or with `batched` (bf16 operands on the
// AMX tile) as many as make about 1024 rows (pixels) while their column matrix stays within
// a budget (pointwise convolutions have none: their images are their own). An image of
// 7 x 7 or 14 x 14 pixels makes a product of 49 or 196 rows, whose weights (up to
// 2048 x 4608) the GEMM packs again for each one: on AMX, where the arithmetic is fast, that
// packing took more time than the product (bf16 ResNet-50's last stages). The forward
// (bf16 taps) and the input gradient (f32 sums to fold) keep their column matrix within L2
// (1 MB; a 14 x 14 3 x 3 layer ran slower with 10 MB than image by image); the weight
// gradient's products (bf16 taps) gain more from long K (32 MB).
enum class Pass { forward, input_grad, weight_grad };
int64_t images_per_product(const ConvGeom& g, bool batched, Pass pass) {
  if (!batched || g.P >= 1024 || g.N <= 1) return 1;
  const int64_t by_rows = (1024 + g.P - 1) / g.P;
  const int64_t per_image = g.pointwise() ? 0 : g.P * g.Kdim * (pass == Pass::input_grad ? 4 : 2);
  const int64_t budget = pass == Pass::weight_grad ? int64_t(32) << 20 : int64_t(1) << 20;
  const int64_t by_bytes = per_image > 0 ? std::max<int64_t>(1, budget / per_image) : by_rows;
  const int64_t most = std::max<int64_t>(1, std::min({g.N, by_rows, by_bytes}));
  // as many runs for each thread (for_each_item's static schedule), of even sizes: 16 images
  // in runs of 6 left one of two threads with 4 images and the other with 12
  const int64_t nt = omp_get_max_threads();
  const int64_t runs_per_thread = std::max<int64_t>(1, ceil_div(g.N, most * nt));
  return std::max<int64_t>(1, ceil_div(g.N, runs_per_thread * nt));
}

// T is the operands' type: float, double, or uint16_t for bf16 bits, whose products
// (cpu::gemm_of) sum into A = f32 results. R is the result's type: A, or uint16_t for a bf16
// result of bf16 operands, whose images are summed in this thread's f32 buffer and then
// rounded into it, once each value (with AMX, where the bf16 tiles are not used).
template <typename A, typename R>
A* image_sums(R* out, int64_t offset, int64_t n) {
  if constexpr (std::is_same_v<A, R>) return out + offset;
  else return thread_buffer<A, kAccumulator>(size_t(n));
}
template <typename A, typename R>
void round_image(const A* sums, R* out, int64_t offset, int64_t n) {
  if constexpr (!std::is_same_v<A, R>) {
    static_assert(std::is_same_v<A, float> && std::is_same_v<R, uint16_t>);
    R* o = out + offset;
    for (int64_t i = 0; i < n; ++i) o[i] = float_to_bf16_bits(sums[i]);
  }
}

// Each function below works on runs of `batch` images (images_per_product), one product per
// run and group.
template <typename T, typename A = gemm_result_t<T>, typename R = A>
void forward_cols(const ConvGeom& g, const T* x, const T* w, const A* bias, R* y,
                  int64_t batch = 1) {
  const int64_t* off = tap_offsets(g);
  std::vector<std::vector<T>> cols(omp_get_max_threads());
  for_each_item(ceil_div(g.N, batch), g.macs(), [&](int64_t run, int t) {
    const int64_t n0 = run * batch, b = std::min(batch, g.N - n0), rows = b * g.P;
    const T* xi = x + n0 * g.H * g.W * g.C;
    A* yi = image_sums<A>(y, n0 * g.P * g.O, rows * g.O);
    for (int64_t gr = 0; gr < g.G; ++gr) {
      gemm_of<T>(rows, g.Og, g.Kdim, A(1), columns(g, off, xi, b, gr, cols[t]),
                 group_weights(g, w, gr).t(), A(0), yi + gr * g.Og, g.O);
    }
    if (bias)
      for (int64_t p = 0; p < rows; ++p)
        for (int64_t o = 0; o < g.O; ++o) yi[p * g.O + o] += bias[o];
    round_image(yi, y, n0 * g.P * g.O, rows * g.O);
  });
}

template <typename T, typename A = gemm_result_t<T>, typename R = A>
void backward_input_cols(const ConvGeom& g, const T* dy, const T* w, R* dx, int64_t batch = 1) {
  const int64_t* off = tap_offsets(g);
  std::vector<std::vector<A>> cols(omp_get_max_threads());
  for_each_item(ceil_div(g.N, batch), g.macs(), [&](int64_t run, int t) {
    const int64_t n0 = run * batch, b = std::min(batch, g.N - n0), rows = b * g.P;
    const T* dyi = dy + n0 * g.P * g.O;
    const int64_t image = g.H * g.W * g.C;
    A* dxi = image_sums<A>(dx, n0 * image, b * image);
    if (!g.pointwise()) std::fill(dxi, dxi + b * image, A(0));
    for (int64_t gr = 0; gr < g.G; ++gr) {
      const MatRef<T> dyg{dyi + gr * g.Og, g.O, 1};  // (b P, Og)
      if (g.pointwise()) {  // the gradient of the group's pixels directly, no folding
        gemm_of<T>(rows, g.Cg, g.Og, A(1), dyg, group_weights(g, w, gr), A(0), dxi + gr * g.Cg, g.C);
        continue;
      }
      cols[t].resize(size_t(rows * g.Kdim));
      gemm_of<T>(rows, g.Kdim, g.Og, A(1), dyg, group_weights(g, w, gr), A(0), cols[t].data(), g.Kdim);
      for (int64_t i = 0; i < b; ++i)
        col2im(g, off, cols[t].data() + i * g.P * g.Kdim, gr, dxi + i * image);
    }
    round_image(dxi, dx, n0 * image, b * image);
  });
}

template <typename T, typename A = gemm_result_t<T>>
void backward_weight_cols(const ConvGeom& g, const T* x, const T* dy, A* dw, int64_t batch = 1) {
  const int64_t* off = tap_offsets(g);
  const int nt = omp_get_max_threads();
  std::vector<std::vector<A>> acc(nt);  // one accumulator per thread, summed below
  std::vector<std::vector<T>> cols(nt);
  for_each_item(ceil_div(g.N, batch), g.macs(), [&](int64_t run, int t) {
    const int64_t n0 = run * batch, b = std::min(batch, g.N - n0);
    acc[t].resize(size_t(g.O * g.Kdim), A(0));
    const T* xi = x + n0 * g.H * g.W * g.C;
    const T* dyi = dy + n0 * g.P * g.O;
    for (int64_t gr = 0; gr < g.G; ++gr) {
      const MatRef<T> dygt{dyi + gr * g.Og, 1, g.O};  // (Og, b P)
      gemm_of<T>(g.Og, g.Kdim, b * g.P, A(1), dygt, columns(g, off, xi, b, gr, cols[t]), A(1),
                 acc[t].data() + gr * g.Og * g.Kdim, g.Kdim);
    }
  });
  std::fill(dw, dw + g.O * g.Kdim, A(0));
  for (const auto& a : acc)
    for (size_t i = 0; i < a.size(); ++i) dw[i] += a[i];
}

// ---- the tile kernels' path (f32, one group) ------------------------------------------------

// Room for n elements of type P, 64-byte aligned, in this thread's buffer Tag.
template <typename P, BufferTag Tag>
P* aligned_buffer(size_t n) {
  P* v = thread_buffer<P, Tag>(n + 64 / sizeof(P));
  return v + (64 - reinterpret_cast<uintptr_t>(v) % 64) % 64 / sizeof(P);
}
// n zeros of type P, 64-byte aligned, in this thread's buffer Tag.
template <typename P, BufferTag Tag>
P* aligned_zeros(size_t n) {
  P* v = aligned_buffer<P, Tag>(n);
  std::fill(v, v + n, P(0));
  return v;
}

// At least n elements of zeros, where the pointer tables point for taps in the padding.
template <typename T>
const T* zeros_for(int64_t n) { return thread_buffer<T, kZeros>(size_t(n)); }  // never written

// This thread's pointers of pixels [f0, f1) of the images at x, each `image` elements long
// with P output pixels (pixel f is pixel f % P of image f / P; a range within image 0 is
// that image's pixels): tab[(f - f0) * taps + t] from the offsets, `zero` (at least C zeros)
// in the padding and for `extra` more rows of taps.
template <typename T>
const T** fill_pointers(const int64_t* off, int64_t taps, int64_t P, const T* x, int64_t image,
                        const T* zero, int64_t f0, int64_t f1, int64_t extra) {
  const T** tab = thread_buffer<const T*, kPointers>(size_t((f1 - f0 + extra) * taps));
  const T** d = tab;
  for (int64_t f = f0; f < f1;) {
    const int64_t n = f / P, p = f % P, run = std::min(f1 - f, P - p);
    const T* xi = x + n * image;
    const int64_t* o = off + p * taps;
    for (int64_t i = 0; i < run * taps; ++i) *d++ = o[i] < 0 ? zero : xi + o[i];
    f += run;
  }
  std::fill(d, d + extra * taps, zero);
  return tab;
}

// How the forward tiles take operands of type T: f32 one channel a step, bf16 (uint16_t bits)
// a pair of channels a step, packed as one 32-bit word per output channel (P); sums are f32.
template <typename T>
struct TileOperand;
template <>
struct TileOperand<float> {
  using P = float;
  static constexpr int64_t KP = 1;  // channels a packed element holds
  using Args = ConvForwardArgs;
  static P pack(const float* k, int64_t) { return k[0]; }
};
template <>
struct TileOperand<uint16_t> {
  using P = uint32_t;
  static constexpr int64_t KP = 2;
  using Args = ConvForwardBf16Args;
  static P pack(const uint16_t* k, int64_t sc) { return uint32_t(k[0]) | uint32_t(k[sc]) << 16; }
};

// The forward tile for g's output channels.
template <class Kernels>
const ConvTile& forward_tile(const ConvGeom& g, const Kernels& k) {
  return g.O <= k.vec ? k.forward_narrow : k.forward_wide;
}

// The forward's channel slices: a packed block of the weights (taps x kc / KP x NR elements,
// read once per tile) stays within 128 KB.
template <typename T>
int64_t forward_slices(const ConvGeom& g, const ConvTile& tile) {
  constexpr int64_t KP = TileOperand<T>::KP;
  return ceil_div(g.C, std::max<int64_t>(KP, 32768 * KP / (g.taps() * tile.nr)));
}

// The weights as forward_tiles reads them: output channel o, tap t, input channel c at
// p[o * so + t * st + c * sc]. A forward's own w (O, taps, C) is dense(); the input gradient
// reads the same array transposed and mirrored (backward_input_tiles).
template <typename T>
struct WeightsView {
  const T* p;
  int64_t so, st, sc;
  static WeightsView dense(const ConvGeom& g, const T* w) { return {w, g.taps() * g.C, g.C, 1}; }
};

// y (N, P, O) = the convolution of x (N, H, W, C) with w (O, taps, C), plus bias (O) if given,
// on the tiles of k (ConvKernels for f32, ConvBf16Kernels for bf16, which need C even). With
// y16 (bf16 tiles in one channel slice only) the results go there rounded to bf16 instead.
template <typename T, class Kernels>
void forward_tiles(const ConvGeom& g, const Kernels& k, const T* x, WeightsView<T> w,
                   const float* bias, float* y, uint16_t* y16 = nullptr) {
  using Op = TileOperand<T>;
  using P = typename Op::P;
  constexpr int64_t KP = Op::KP;
  const ConvTile& tile = forward_tile(g, k);
  const int64_t MR = tile.mr, NR = tile.nr, T_ = g.taps(), C = g.C, O = g.O, P_ = g.P;
  // Channels in slices of kc (a multiple of KP).
  const int64_t slices = forward_slices<T>(g, tile);
  NN_CHECK(!y16 || slices == 1, "conv2d: bf16 results of a convolution in ", slices, " slices");
  const int64_t kc = ceil_div(ceil_div(C, slices), KP) * KP, panels = ceil_div(O, NR);
  // Panel j (output channels j NR ..), slice s: (taps, kcs / KP, NR) at (j C + s kc) / KP taps NR.
  P* bp = aligned_zeros<P, kPacked>(size_t(panels * T_ * C / KP * NR));
  parallel_for(0, panels, std::max<int64_t>(1, kGrain / (T_ * C * NR)), [&](int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < j1; ++j)
      for (int64_t c0 = 0; c0 < C; c0 += kc) {
        const int64_t kcs = std::min(kc, C - c0);
        P* blk = bp + (j * C + c0) / KP * T_ * NR;
        for (int64_t t = 0; t < T_; ++t)
          for (int64_t c = 0; c < kcs; c += KP)
            for (int64_t jj = 0; jj < NR && j * NR + jj < O; ++jj)
              blk[(t * kcs + c) / KP * NR + jj] =
                  Op::pack(w.p + (j * NR + jj) * w.so + t * w.st + (c0 + c) * w.sc, w.sc);
      }
  });
  const int64_t* off = tap_offsets(g);
  const T* zero = zeros_for<T>(C);
  // The N x P pixels, flattened (y's rows), in chunks whose inputs for one slice stay near
  // while every panel passes over them (8192 elements: larger chunks measured no faster),
  // at least two a thread. Chunks may span images, so the late stages' 49-pixel images do
  // not cut them short.
  const int64_t total = g.N * P_, want = 2 * int64_t(omp_get_max_threads());
  const int64_t chunk = std::max(MR, std::min(8192 / kc, ceil_div(total, want)) / MR * MR);
  const int64_t chunks = ceil_div(total, chunk);
  for_each_item(chunks, g.macs(), [&](int64_t item, int) {
    const FlushDenormals ftz;
    const int64_t p0 = item * chunk, p1 = std::min(total, p0 + chunk);
    const T** tab = fill_pointers<T>(off, T_, P_, x, g.H * g.W * C, zero, p0, p1, MR);
    const int64_t yo = p0 * O;
    for (int64_t j = 0; j < panels; ++j)
      for (int64_t c0 = 0; c0 < C; c0 += kc) {
        const int64_t kcs = std::min(kc, C - c0);
        for (int64_t r = 0; r < p1 - p0; r += MR) {
          const int64_t at = yo + r * O + j * NR;
          const typename Op::Args a{T_, kcs, tab + r * T_, T_, c0, bp + (j * C + c0) / KP * T_ * NR,
                                    c0 == 0 && bias ? bias + j * NR : nullptr, y ? y + at : nullptr,
                                    O, int(std::min(MR, p1 - p0 - r)), int(std::min(NR, O - j * NR)),
                                    c0 > 0, y16 ? y16 + at : nullptr};
          tile.run(&a);
        }
      }
  });
}

// dx of a stride-1 convolution: the forward convolution of dy with w (O, taps, C) turned into
// (C, taps, O) with its taps mirrored, padded by the kernel's extent less the padding. This is
// that forward's geometry.
ConvGeom transposed(const ConvGeom& g) {
  ConvGeom tg = g;
  tg.H = g.OH; tg.W = g.OW; tg.C = tg.Cg = g.O;
  tg.OH = g.H; tg.OW = g.W; tg.O = tg.Og = g.C;
  tg.P = g.H * g.W; tg.Kdim = g.taps() * g.O;
  tg.ph = (g.KH - 1) * g.dh - g.ph;
  tg.pw = (g.KW - 1) * g.dw - g.pw;
  return tg;
}
// Its weights: output channel c, tap t, input channel o are w's (o, taps - 1 - t, c), read in
// place while packing (a transposed copy first cost as much as a 1 x 1 layer's product).
template <typename T, class Kernels>
void backward_input_tiles(const ConvGeom& g, const Kernels& k, const T* dy, const T* w,
                          float* dx, uint16_t* dx16 = nullptr) {
  const int64_t T_ = g.taps();
  const WeightsView<T> wt{w + (T_ - 1) * g.C, 1, -g.C, T_ * g.C};
  forward_tiles(transposed(g), k, dy, wt, nullptr, dx, dx16);
}

// A 1 x 1 convolution with a stride and no padding: only the pixels the stride samples get an
// input gradient, dy's pixel times w^T. That is the stride-1 input gradient of a 1 x 1
// convolution over the output's grid: the tiles compute it into a scratch image (from the
// caching allocator, not a buffer kept for good: it is as large as a layer's activations),
// which is then spread over dx with zeros between. (The column path took
// half as long again as the forward of the same shape.)
bool strided_pointwise(const ConvGeom& g) {
  return g.KH == 1 && g.KW == 1 && g.ph == 0 && g.pw == 0 && (g.sh > 1 || g.sw > 1);
}
ConvGeom sampled_grid(const ConvGeom& g) {  // that stride-1 convolution
  ConvGeom g1 = g;
  g1.H = g.OH;
  g1.W = g.OW;
  g1.sh = g1.sw = 1;
  return g1;
}
template <typename T, class Kernels, typename R>  // R: float, or uint16_t for bf16 results
void backward_input_strided_pointwise(const ConvGeom& g, const Kernels& k, const T* dy,
                                      const T* w, R* dx) {
  const int64_t C = g.C, OH = g.OH, OW = g.OW;
  const Tensor scratch = empty({g.N * OH * OW * C}, TensorOptions(std::is_same_v<R, float> ? kF32 : kBF16));
  R* s = static_cast<R*>(scratch.data_ptr());
  if constexpr (std::is_same_v<R, float>) backward_input_tiles(sampled_grid(g), k, dy, w, s);
  else backward_input_tiles(sampled_grid(g), k, dy, w, nullptr, s);
  parallel_for(0, g.N * g.H, std::max<int64_t>(1, kGrain / std::max<int64_t>(1, g.W * C)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t n = r / g.H, ih = r % g.H;
      R* d = dx + r * g.W * C;
      if (ih % g.sh != 0 || ih / g.sh >= OH) {
        std::fill(d, d + g.W * C, R(0));
        continue;
      }
      const R* src = s + (n * OH + ih / g.sh) * OW * C;
      for (int64_t iw = 0; iw < g.W; ++iw, d += C) {
        if (iw % g.sw == 0 && iw / g.sw < OW) std::copy(src + iw / g.sw * C, src + (iw / g.sw + 1) * C, d);
        else std::fill(d, d + C, R(0));
      }
    }
  });
}

// dw (O, taps, C) = sum over images and pixels of dy (N, P, O) times the taps of x. Needs C a
// multiple of the vector width (a vector of columns never straddles two taps). bf16 x and dy
// (f32 dw) take the pixels in pairs, each chunk's dy rows and then each tile column's x
// packed into pair words first (ConvWeightGradBf16Args): the tiles then read both in order,
// where reading x through the pointers at a stride of C channels, for hundreds of pixels,
// had them fight over a few cache sets.
template <typename T, class Kernels>
void backward_weight_tiles(const ConvGeom& g, const Kernels& k, const T* x, const T* dy,
                           float* dw) {
  constexpr bool pairs = std::is_same_v<T, uint16_t>;
  const ConvTile& tile = k.weight_grad;
  const int64_t MR = tile.mr, NR = tile.nr, NV = NR / k.vec, T_ = g.taps(), C = g.C, O = g.O;
  const int64_t P = g.P, Kdim = T_ * C;
  const int64_t* off = tap_offsets(g);
  const T* zero = zeros_for<T>(std::max(C, O));  // padding taps; a last pair's missing row
  // The N x P pixels, flattened (dy's rows), in chunks that may span images (the late
  // stages' images have 49 pixels). Each chunk reads and writes the whole accumulator, so
  // the fewer the better, but its inputs and dy rows should stay in L2 while every tile
  // passes over them. bf16 with 512 input channels or more takes at least 512 pixels a
  // chunk: measured on ResNet-50's layers (docs/benchmarks.md), 10-40% faster there, where
  // layers with fewer channels lost up to 8% and f32 (x read in place) lost too. An even
  // count, so that only the last chunk can end in half a pair.
  const int64_t total = g.N * P, want = 2 * int64_t(omp_get_max_threads());
  int64_t chunk = std::max<int64_t>(16, 131072 / (C + O));  // fits L2
  if (pairs && C >= 512) chunk = std::max<int64_t>(chunk, 512);
  chunk = std::min(chunk, ceil_div(total, want));           // two items a thread
  chunk = std::max<int64_t>(2, ceil_div(chunk, 2) * 2);     // even
  const int64_t chunks = ceil_div(total, chunk);
  if constexpr (pairs) NN_CHECK(MR == 8, "conv2d: the bf16 weight-gradient tile's rows are not pack_rows' 8");
  // One accumulator per thread (its buffer, zeroed at its first item), summed below.
  std::vector<float*> acc(size_t(omp_get_max_threads()), nullptr);
  for_each_item(chunks, g.macs(), [&](int64_t item, int th) {
    const FlushDenormals ftz;
    const int64_t p0 = item * chunk, p1 = std::min(total, p0 + chunk);
    if (!acc[th]) {
      acc[th] = thread_buffer<float, kAccumulator>(size_t(O * Kdim));
      std::fill(acc[th], acc[th] + O * Kdim, 0.f);
    }
    float* const a = acc[th];
    const T* const* tab = fill_pointers<T>(off, T_, P, x, g.H * g.W * C, zero, p0, p1, pairs);
    const T* dyi = dy + p0 * O;
    // The columns of tile k0: NV vectors of one tap's channels each (past Kdim: tap 0,
    // channel 0, read and not stored).
    auto columns = [&](int64_t k0, int64_t (&tap)[4], int64_t (&chan)[4]) {
      for (int64_t v = 0; v < 4; ++v) {
        const int64_t j = v < NV && k0 + v * k.vec < Kdim ? k0 + v * k.vec : 0;
        tap[v] = j / C;
        chan[v] = j % C;
      }
    };
    if constexpr (pairs) {
      const int64_t steps = ceil_div(p1 - p0, 2);
      // dy block by block of MR rows: dyp[(b * steps + q) * MR + r] for row b * MR + r.
      uint32_t* dyp = aligned_buffer<uint32_t, kPackedDy>(size_t(ceil_div(O, MR) * steps * MR));
      const ConvPackRowsArgs ra{steps, dyi, O, (p1 - p0) % 2 ? zero : nullptr, dyp};
      k.pack_rows(&ra);
      // Packing reads dy from memory at its bandwidth, with the tiles idle; so while they
      // run, the next chunk's dy rows (this thread's next item under the static split) are
      // fetched into L2 a slice a tile.
      const char* next = reinterpret_cast<const char*>(dyi + (p1 - p0) * O);
      const int64_t next_bytes = (std::min(total, p1 + chunk) - p1) * O * int64_t(sizeof(T));
      const int64_t tiles = ceil_div(Kdim, NR) * ceil_div(O, MR);
      const int64_t per_tile = ceil_div(ceil_div(next_bytes, 64), tiles) * 64;
      int64_t fetched = 0;
      uint16_t* xp = aligned_buffer<uint16_t, kPackedX>(size_t(steps * NV * 32));
      for (int64_t k0 = 0; k0 < Kdim; k0 += NR) {
        int64_t tap[4], chan[4];
        columns(k0, tap, chan);
        const ConvPackPairsArgs pa{steps, tab, T_, tap, chan, int(NV), xp};
        k.pack_pairs(&pa);
        for (int64_t o0 = 0; o0 < O; o0 += MR) {
          const ConvWeightGradBf16Args ta{steps, dyp + o0 * steps, xp, a + o0 * Kdim + k0, Kdim,
                                          int(std::min(MR, O - o0)), int(std::min(NR, Kdim - k0))};
          tile.run(&ta);
          for (const int64_t end = std::min(next_bytes, fetched + per_tile); fetched < end; fetched += 64)
            __builtin_prefetch(next + fetched, 0, 2);
        }
      }
    } else {
      for (int64_t o0 = 0; o0 < O; o0 += MR)
        for (int64_t k0 = 0; k0 < Kdim; k0 += NR) {
          int64_t tap[4], chan[4];
          columns(k0, tap, chan);
          const ConvWeightGradArgs ta{p1 - p0, dyi + o0, O, tab, T_, tap, chan, a + o0 * Kdim + k0,
                                      Kdim, int(std::min(MR, O - o0)), int(std::min(NR, Kdim - k0))};
          tile.run(&ta);
        }
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
// The bf16 tile kernels, where this CPU has them and the product's inner channels (`inner`: C
// forward, O for the input gradient) come in pairs.
const ConvBf16Kernels* bf16_tiles_for(const ConvGeom& g, int64_t inner) {
  return g.G == 1 && g.C > 0 && g.O > 0 && inner % 2 == 0 ? conv_bf16_kernels() : nullptr;
}
// Whether products of T operands run on the AMX tile (bf16 bits, with AMX on).
template <typename T>
bool amx_products() {
  return std::is_same_v<T, uint16_t> && bf16_gemm_amx();
}
// Operand types with tile kernels (f32, bf16 bits), and those kernels for g (or null).
template <typename T>
constexpr bool has_tiles = std::is_same_v<T, float> || std::is_same_v<T, uint16_t>;
template <typename T>
auto tiles_of(const ConvGeom& g, int64_t inner) {
  if constexpr (std::is_same_v<T, float>) return tiles_for(g);
  else return bf16_tiles_for(g, inner);
}
}  // namespace

void conv2d_forward_nhwc(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out,
                         const Conv2dParams& p) {
  dispatch_product(x, w, out, "conv2d", [&]<typename T>() {
    using A = gemm_result_t<T>;
    const ConvGeom g = geom(x.shape(), w.shape(), out.shape(), p);
    const A* pb = bias.defined() ? bias.data<A>() : nullptr;
    const T* px = static_cast<const T*>(x.data_ptr());
    const T* pw = static_cast<const T*>(w.data_ptr());
    if constexpr (has_tiles<T>)
      if (const auto* k = tiles_of<T>(g, g.C))
        return forward_tiles(g, *k, px, WeightsView<T>::dense(g, pw), pb, out.data<float>());
    forward_cols(g, px, pw, pb, out.data<A>(),
                 images_per_product(g, amx_products<T>(), Pass::forward));
  });
}

bool conv2d_forward_nhwc_bf16(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out,
                              const Conv2dParams& p) {
  const ConvGeom g = geom(x.shape(), w.shape(), out.shape(), p);
  if (bf16_gemm_amx()) {
    forward_cols<uint16_t>(g, static_cast<const uint16_t*>(x.data_ptr()),
                           static_cast<const uint16_t*>(w.data_ptr()),
                           bias.defined() ? bias.data<float>() : nullptr,
                           static_cast<uint16_t*>(out.data_ptr()),
                           images_per_product(g, true, Pass::forward));
    return true;
  }
  const ConvBf16Kernels* k = bf16_tiles_for(g, g.C);
  if (!k || forward_slices<uint16_t>(g, forward_tile(g, *k)) > 1) return false;
  forward_tiles(g, *k, static_cast<const uint16_t*>(x.data_ptr()),
                WeightsView<uint16_t>::dense(g, static_cast<const uint16_t*>(w.data_ptr())),
                bias.defined() ? bias.data<float>() : nullptr, nullptr,
                static_cast<uint16_t*>(out.data_ptr()));
  return true;
}

bool conv2d_backward_input_nhwc_bf16(const Tensor& grad_out, const Tensor& w, Tensor& grad_x,
                                     const Conv2dParams& p) {
  const ConvGeom g = geom(grad_x.shape(), w.shape(), grad_out.shape(), p);
  if (bf16_gemm_amx()) {
    backward_input_cols<uint16_t>(g, static_cast<const uint16_t*>(grad_out.data_ptr()),
                                  static_cast<const uint16_t*>(w.data_ptr()),
                                  static_cast<uint16_t*>(grad_x.data_ptr()),
                                  images_per_product(g, true, Pass::input_grad));
    return true;
  }
  const ConvBf16Kernels* k = bf16_tiles_for(g, g.O);
  const bool strided = strided_pointwise(g);
  if (!k || ((g.sh != 1 || g.sw != 1) && !strided)) return false;
  const ConvGeom tg = transposed(strided ? sampled_grid(g) : g);
  if (forward_slices<uint16_t>(tg, forward_tile(tg, *k)) > 1) return false;
  const auto* dy = static_cast<const uint16_t*>(grad_out.data_ptr());
  const auto* pw = static_cast<const uint16_t*>(w.data_ptr());
  auto* dx = static_cast<uint16_t*>(grad_x.data_ptr());
  if (strided) backward_input_strided_pointwise(g, *k, dy, pw, dx);
  else backward_input_tiles(g, *k, dy, pw, nullptr, dx);
  return true;
}

void conv2d_backward_input_nhwc(const Tensor& grad_out, const Tensor& w, Tensor& grad_x,
                                const Conv2dParams& p) {
  dispatch_product(grad_out, w, grad_x, "conv2d_backward_input", [&]<typename T>() {
    using A = gemm_result_t<T>;
    const ConvGeom g = geom(grad_x.shape(), w.shape(), grad_out.shape(), p);
    const T* pg = static_cast<const T*>(grad_out.data_ptr());
    const T* pw = static_cast<const T*>(w.data_ptr());
    if constexpr (has_tiles<T>) {
      const auto* k = tiles_of<T>(g, g.O);  // dy's O channels are the inner ones
      if (k && g.sh == 1 && g.sw == 1)
        return backward_input_tiles(g, *k, pg, pw, grad_x.data<float>());
      if (k && strided_pointwise(g))
        return backward_input_strided_pointwise(g, *k, pg, pw, grad_x.data<float>());
    }
    backward_input_cols(g, pg, pw, grad_x.data<A>(),
                        images_per_product(g, amx_products<T>(), Pass::input_grad));
  });
}

void conv2d_backward_weight_nhwc(const Tensor& grad_out, const Tensor& x, Tensor& grad_w,
                                 const Conv2dParams& p) {
  dispatch_product(grad_out, x, grad_w, "conv2d_backward_weight", [&]<typename T>() {
    using A = gemm_result_t<T>;
    const ConvGeom g = geom(x.shape(), grad_w.shape(), grad_out.shape(), p);
    const T* pg = static_cast<const T*>(grad_out.data_ptr());
    const T* px = static_cast<const T*>(x.data_ptr());
    if constexpr (has_tiles<T>) {
      const auto* k = tiles_of<T>(g, g.C);
      if (k && g.C % k->vec == 0)
        return backward_weight_tiles(g, *k, px, pg, grad_w.data<float>());
    }
    backward_weight_cols(g, px, pg, grad_w.data<A>(),
                         images_per_product(g, amx_products<T>(), Pass::weight_grad));
  });
}

}  // namespace nn::backend
