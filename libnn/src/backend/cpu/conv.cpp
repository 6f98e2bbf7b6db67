// CPU conv family: im2col + GEMM per image, images spread over OpenMP threads. Channels-last
// calls go to conv_nhwc.cpp.
#include <algorithm>
#include <cstring>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "backend/cpu/conv_geom.h"
#include "backend/cpu/conv_nhwc.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/eigen_util.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/parallel.h"
#include "core/util.h"

namespace nn::backend {
using namespace nn::cpu;

namespace {
using namespace conv_detail;

// The output columns [ow0, ow1) whose input column ow * sw + off lies inside the image.
std::pair<int64_t, int64_t> inside_columns(const ConvGeom& g, int64_t off) {
  int64_t ow0 = 0, ow1 = g.OW;
  while (ow0 < g.OW && ow0 * g.sw + off < 0) ++ow0;
  while (ow1 > ow0 && (ow1 - 1) * g.sw + off >= g.W) --ow1;
  return {ow0, ow1};
}

// Stride 1 and output as wide as the input (the "same" convolutions): a row (c, kh, kw) of
// col is then the image plane shifted by `shift` rows and `off` columns, so its output rows
// [oh0, oh1) that see the image are one contiguous stretch [d0, d1) of the plane, apart from
// the columns outside [ow0, ow1) (at most the padding at each end of a row), which the
// callers fix up. One long copy instead of a short one per output row: the short ones cost
// more in calls than in bytes.
struct SameRow {
  int64_t shift, oh0, oh1, d0, d1;  // d0, d1: positions in the col row; the plane's is d + shift * W + off
  bool empty() const { return d1 <= d0; }
};
std::optional<SameRow> same_row(const ConvGeom& g, int64_t kh, int64_t ow0, int64_t ow1) {
  if (g.sh != 1 || g.sw != 1 || g.OW != g.W) return std::nullopt;
  SameRow r{};
  r.shift = kh * g.dh - g.ph;
  r.oh0 = std::clamp<int64_t>(-r.shift, 0, g.OH);
  r.oh1 = std::clamp<int64_t>(g.H - r.shift, r.oh0, g.OH);
  if (r.oh1 > r.oh0 && ow1 > ow0) {
    r.d0 = r.oh0 * g.OW + ow0;
    r.d1 = (r.oh1 - 1) * g.OW + ow1;
  }  // else no tap of the row sees the image: d0 = d1 = 0
  return r;
}

// col (Kdim, P), leading dimension col_ld(), from one group of one image x (Cg, H, W).
template <typename T>
void im2col(const T* x, const ConvGeom& g, T* col) {
  for (int64_t c = 0; c < g.Cg; ++c)
    for (int64_t kh = 0; kh < g.KH; ++kh)
      for (int64_t kw = 0; kw < g.KW; ++kw) {
        T* row = col + ((c * g.KH + kh) * g.KW + kw) * g.col_ld();
        const T* plane = x + c * g.H * g.W;
        const int64_t off = kw * g.dw - g.pw;
        int64_t ow0, ow1;  // not structured bindings: Clang's OpenMP regions cannot capture those
        std::tie(ow0, ow1) = inside_columns(g, off);
        if (const auto r = same_row(g, kh, ow0, ow1)) {
          std::fill(row, row + r->d0, T(0));
          std::fill(row + r->d1, row + g.P, T(0));
          if (r->empty()) continue;
          std::memcpy(row + r->d0, plane + r->d0 + r->shift * g.W + off, sizeof(T) * size_t(r->d1 - r->d0));
          for (int64_t oh = r->oh0; oh < r->oh1; ++oh) {  // columns outside the image
            std::fill(row + oh * g.OW, row + oh * g.OW + ow0, T(0));
            std::fill(row + oh * g.OW + ow1, row + (oh + 1) * g.OW, T(0));
          }
          continue;
        }
        for (int64_t oh = 0; oh < g.OH; ++oh) {
          T* dst = row + oh * g.OW;
          int64_t ih = oh * g.sh - g.ph + kh * g.dh;
          if (ih < 0 || ih >= g.H) {
            std::memset(dst, 0, sizeof(T) * g.OW);
            continue;
          }
          const T* src = plane + ih * g.W;
          for (int64_t ow = 0; ow < ow0; ++ow) dst[ow] = T(0);
          if (g.sw == 1) {
            std::memcpy(dst + ow0, src + ow0 + off, sizeof(T) * (ow1 - ow0));
          } else {
            for (int64_t ow = ow0; ow < ow1; ++ow) dst[ow] = src[ow * g.sw + off];
          }
          for (int64_t ow = ow1; ow < g.OW; ++ow) dst[ow] = T(0);
        }
      }
}

// x (Cg, H, W) += col (Kdim, P), leading dimension col_ld(), folded back. col is scratch: the
// entries of columns outside the image may be zeroed on the way.
template <typename T>
void col2im(T* col, const ConvGeom& g, T* x) {
  for (int64_t c = 0; c < g.Cg; ++c)
    for (int64_t kh = 0; kh < g.KH; ++kh)
      for (int64_t kw = 0; kw < g.KW; ++kw) {
        T* row = col + ((c * g.KH + kh) * g.KW + kw) * g.col_ld();
        T* plane = x + c * g.H * g.W;
        const int64_t off = kw * g.dw - g.pw;
        int64_t ow0, ow1;  // not structured bindings: Clang's OpenMP regions cannot capture those
        std::tie(ow0, ow1) = inside_columns(g, off);
        if (const auto r = same_row(g, kh, ow0, ow1)) {
          if (r->empty()) continue;
          for (int64_t oh = r->oh0; oh < r->oh1; ++oh) {  // these fall outside the image
            std::fill(row + oh * g.OW, row + oh * g.OW + ow0, T(0));
            std::fill(row + oh * g.OW + ow1, row + (oh + 1) * g.OW, T(0));
          }
          const int64_t delta = r->shift * g.W + off;
#pragma omp simd
          for (int64_t q = r->d0; q < r->d1; ++q) plane[q + delta] += row[q];
          continue;
        }
        for (int64_t oh = 0; oh < g.OH; ++oh) {
          int64_t ih = oh * g.sh - g.ph + kh * g.dh;
          if (ih < 0 || ih >= g.H) continue;
          const T* src = row + oh * g.OW;
          T* dst = plane + ih * g.W;
          if (g.sw == 1) {
            T* d = dst + off;
#pragma omp simd
            for (int64_t ow = ow0; ow < ow1; ++ow) d[ow] += src[ow];
          } else {
            for (int64_t ow = ow0; ow < ow1; ++ow) dst[ow * g.sw + off] += src[ow];
          }
        }
      }
}

}  // namespace

void CpuBackend::conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias,
                                Tensor& out, const Conv2dParams& p) {
  if (is_channels_last(x)) return conv2d_forward_nhwc(x, w, bias, out, p);
  dispatch_product(x, w, out, "conv2d", [&]<typename T>() {
    using A = gemm_result_t<T>;  // f32 sums and folds for bf16 operands
    ConvGeom g = geom(x.shape(), w.shape(), out.shape(), p);
    const T* px = static_cast<const T*>(x.data_ptr());
    const T* pw = static_cast<const T*>(w.data_ptr());
    const A* pb = bias.defined() ? bias.data<A>() : nullptr;
    A* po = out.data<A>();
    std::vector<std::vector<T>> cols(omp_get_max_threads());
    for_each_item(g.N, g.macs(), [&](int64_t n, int t) {
      auto& col = cols[t];
      if (!g.pointwise()) col.resize(size_t(g.Kdim * g.col_ld()));
      for (int64_t gr = 0; gr < g.G; ++gr) {
        const T* xi = px + (n * g.C + gr * g.Cg) * g.H * g.W;
        auto cols_of_x = row_major(xi, g.P);
        if (!g.pointwise()) {
          im2col(xi, g, col.data());
          cols_of_x = row_major<T>(col.data(), g.col_ld());
        }
        A* o = po + (n * g.O + gr * g.Og) * g.P;
        gemm_of<T>(g.Og, g.P, g.Kdim, A(1), row_major(pw + gr * g.Og * g.Kdim, g.Kdim), cols_of_x,
                   A(0), o, g.P);
        if (pb) rmap(o, g.Og, g.P, g.P).colwise() += crmap(pb + gr * g.Og, g.Og, 1, 1).col(0);
      }
    });
  });
}

void CpuBackend::conv2d_backward_input(const Tensor& grad_out, const Tensor& w, Tensor& grad_x,
                                       const Conv2dParams& p) {
  if (is_channels_last(grad_x)) return conv2d_backward_input_nhwc(grad_out, w, grad_x, p);
  dispatch_product(grad_out, w, grad_x, "conv2d_backward_input", [&]<typename T>() {
    using A = gemm_result_t<T>;  // f32 sums and folds for bf16 operands
    ConvGeom g = geom(grad_x.shape(), w.shape(), grad_out.shape(), p);
    const T* pg = static_cast<const T*>(grad_out.data_ptr());
    const T* pw = static_cast<const T*>(w.data_ptr());
    A* px = grad_x.data<A>();
    std::vector<std::vector<A>> cols(omp_get_max_threads());
    for_each_item(g.N, g.macs(), [&](int64_t n, int t) {
      auto& col = cols[t];
      for (int64_t gr = 0; gr < g.G; ++gr) {
        A* xi = px + (n * g.C + gr * g.Cg) * g.H * g.W;
        auto Wt = row_major(pw + gr * g.Og * g.Kdim, g.Kdim).t();
        auto Gm = row_major(pg + (n * g.O + gr * g.Og) * g.P, g.P);
        if (g.pointwise()) {
          gemm_of<T>(g.Cg, g.P, g.Og, A(1), Wt, Gm, A(0), xi, g.P);
        } else {
          col.resize(size_t(g.Kdim * g.col_ld()));
          gemm_of<T>(g.Kdim, g.P, g.Og, A(1), Wt, Gm, A(0), col.data(), g.col_ld());
          std::memset(xi, 0, sizeof(A) * g.Cg * g.H * g.W);
          col2im(col.data(), g, xi);
        }
      }
    });
  });
}

void CpuBackend::conv2d_backward_weight(const Tensor& grad_out, const Tensor& x, Tensor& grad_w,
                                        const Conv2dParams& p) {
  if (is_channels_last(x)) return conv2d_backward_weight_nhwc(grad_out, x, grad_w, p);
  dispatch_product(grad_out, x, grad_w, "conv2d_backward_weight", [&]<typename T>() {
    using A = gemm_result_t<T>;  // f32 sums and folds for bf16 operands
    ConvGeom g = geom(x.shape(), grad_w.shape(), grad_out.shape(), p);
    const T* pg = static_cast<const T*>(grad_out.data_ptr());
    const T* px = static_cast<const T*>(x.data_ptr());
    int nt = omp_get_max_threads();
    // One private accumulator per thread, summed at the end.
    std::vector<RowMat<A>> acc(nt, RowMat<A>::Zero(g.O, g.Kdim));
    std::vector<std::vector<T>> cols(nt);
    for_each_item(g.N, g.macs(), [&](int64_t n, int t) {
      auto& col = cols[t];
      if (!g.pointwise()) col.resize(size_t(g.Kdim * g.col_ld()));
      for (int64_t gr = 0; gr < g.G; ++gr) {
        const T* xi = px + (n * g.C + gr * g.Cg) * g.H * g.W;
        auto cols_of_x = row_major(xi, g.P);
        if (!g.pointwise()) {
          im2col(xi, g, col.data());
          cols_of_x = row_major<T>(col.data(), g.col_ld());
        }
        gemm_of<T>(g.Og, g.Kdim, g.P, A(1), row_major(pg + (n * g.O + gr * g.Og) * g.P, g.P),
                   cols_of_x.t(), A(1), acc[t].data() + gr * g.Og * g.Kdim, g.Kdim);
      }
    });
    auto out = rmap(grad_w.data<A>(), g.O, g.Kdim, g.Kdim);
    out = acc[0];
    for (int t = 1; t < nt; ++t) out += acc[t];
  });
}

}  // namespace nn::backend
