// CPU pool family: max/avg/adaptive-avg 2-D pooling, over (N*C) planes in parallel, or for
// channels-last tensors over output rows with the channels as vectors.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/parallel.h"
#include "core/util.h"

namespace nn::backend {
using namespace nn::cpu;

namespace {
// One output row of a 2x2, stride-2 max pool without window arithmetic: r0 is the first of
// its two input rows (row length W), which start at flat index base. The same order and NaN
// rule as the general path, written as selects so the loop vectorises.
template <typename T>
void max_pool_2x2_row(const T* r0, int64_t W, int64_t OW, int64_t base, T* out, int64_t* arg) {
  const T* r1 = r0 + W;
#pragma omp simd
  for (int64_t ow = 0; ow < OW; ++ow) {
    const int64_t c = 2 * ow;
    const T v1 = r0[c + 1], v2 = r1[c], v3 = r1[c + 1];
    T best = r0[c];
    int64_t at = base + c;
    bool take = v1 > best || v1 != v1;
    best = take ? v1 : best;
    at = take ? base + c + 1 : at;
    take = v2 > best || v2 != v2;
    best = take ? v2 : best;
    at = take ? base + W + c : at;
    take = v3 > best || v3 != v3;
    best = take ? v3 : best;
    at = take ? base + W + c + 1 : at;
    out[ow] = best;
    arg[ow] = at;
  }
}
}  // namespace

namespace {
// ---- channels-last: each output pixel's window walked once, the C channels as vectors ------

// Runs f(n, oh) for every output row of every image, rows spread over threads.
template <typename F>
void for_output_rows(int64_t N, int64_t OH, int64_t work_per_row, F&& f) {
  parallel_for(0, N * OH, std::max<int64_t>(1, kGrain / (work_per_row + 1)), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) f(r / OH, r % OH);
  });
}

// The same taps in the same order, and the same rule (the first, a larger one, or a NaN), as
// the row-major path; indices h * W + w per channel.
template <typename T>
void max_pool_nhwc(const T* px, int64_t N, int64_t C, int64_t H, int64_t W, int64_t OH,
                   int64_t OW, const Pool2dParams& p, T* po, int64_t* pi) {
  for_output_rows(N, OH, OW * C * p.kernel[0] * p.kernel[1], [&](int64_t n, int64_t oh) {
    for (int64_t ow = 0; ow < OW; ++ow) {
      T* o = po + ((n * OH + oh) * OW + ow) * C;
      int64_t* oi = pi + ((n * OH + oh) * OW + ow) * C;
      bool any = false;
      for (int64_t kh = 0; kh < p.kernel[0]; ++kh) {
        const int64_t ih = oh * p.stride[0] - p.padding[0] + kh * p.dilation[0];
        if (ih < 0 || ih >= H) continue;
        for (int64_t kw = 0; kw < p.kernel[1]; ++kw) {
          const int64_t iw = ow * p.stride[1] - p.padding[1] + kw * p.dilation[1];
          if (iw < 0 || iw >= W) continue;
          const T* v = px + ((n * H + ih) * W + iw) * C;
          const int64_t at = ih * W + iw;
          if (!any) {
            std::copy(v, v + C, o);
            std::fill(oi, oi + C, at);
            any = true;
            continue;
          }
#pragma omp simd
          for (int64_t c = 0; c < C; ++c) {
            const bool take = v[c] > o[c] || v[c] != v[c];
            o[c] = take ? v[c] : o[c];
            oi[c] = take ? at : oi[c];
          }
        }
      }
      if (!any) {  // a window wholly in the padding
        std::fill(o, o + C, T(0));
        std::fill(oi, oi + C, int64_t(-1));
      }
    }
  });
}
}  // namespace

void CpuBackend::max_pool2d_forward(const Tensor& x, Tensor& out, Tensor& indices,
                                    const Pool2dParams& p) {
  dispatch_float(x.dtype(), "max_pool2d", [&]<typename T>() {
    const int64_t planes = x.shape()[0] * x.shape()[1], H = x.shape()[2], W = x.shape()[3];
    const int64_t OH = out.shape()[2], OW = out.shape()[3];
    const T* px = x.data<T>();
    T* po = out.data<T>();
    int64_t* pi = indices.data<int64_t>();
    if (is_channels_last(x))
      return max_pool_nhwc(px, x.shape()[0], x.shape()[1], H, W, OH, OW, p, po, pi);
    const bool simple2x2 = p.kernel[0] == 2 && p.kernel[1] == 2 && p.stride[0] == 2 &&
                           p.stride[1] == 2 && p.padding[0] == 0 && p.padding[1] == 0 &&
                           p.dilation[0] == 1 && p.dilation[1] == 1 &&
                           2 * OH <= H && 2 * OW <= W;  // (not with ceil_mode's partial windows)
    parallel_for(0, planes, std::max<int64_t>(1, kGrain / (H * W + 1)), [&](int64_t b, int64_t e) {
      for (int64_t pl = b; pl < e; ++pl) {
        const T* in = px + pl * H * W;
        T* o = po + pl * OH * OW;
        int64_t* oi = pi + pl * OH * OW;
        if (simple2x2) {
          for (int64_t oh = 0; oh < OH; ++oh)
            max_pool_2x2_row(in + 2 * oh * W, W, OW, 2 * oh * W, o + oh * OW, oi + oh * OW);
          continue;
        }
        for (int64_t oh = 0; oh < OH; ++oh)
          for (int64_t ow = 0; ow < OW; ++ow) {
            T best = T(0);
            int64_t arg = -1;
            for (int64_t kh = 0; kh < p.kernel[0]; ++kh) {
              int64_t ih = oh * p.stride[0] - p.padding[0] + kh * p.dilation[0];
              if (ih < 0 || ih >= H) continue;
              for (int64_t kw = 0; kw < p.kernel[1]; ++kw) {
                int64_t iw = ow * p.stride[1] - p.padding[1] + kw * p.dilation[1];
                if (iw < 0 || iw >= W) continue;
                T v = in[ih * W + iw];
                // the first element, a larger one, or a NaN (nothing compares above a NaN,
                // so once taken it stays)
                if (arg < 0 || v > best || v != v) {
                  best = v;
                  arg = ih * W + iw;
                }
              }
            }
            o[oh * OW + ow] = best;
            oi[oh * OW + ow] = arg;
          }
      }
    });
  });
}

void CpuBackend::max_pool2d_backward(const Tensor& grad_out, const Tensor& indices,
                                     Tensor& grad_x, const Pool2dParams&) {
  dispatch_float(grad_out.dtype(), "max_pool2d_backward", [&]<typename T>() {
    const int64_t planes = grad_x.shape()[0] * grad_x.shape()[1];
    const int64_t HW = grad_x.shape()[2] * grad_x.shape()[3];
    const int64_t OHW = grad_out.shape()[2] * grad_out.shape()[3];
    const T* pg = grad_out.data<T>();
    const int64_t* pi = indices.data<int64_t>();
    T* px = grad_x.data<T>();
    if (is_channels_last(grad_x)) {  // each image's gradient scattered from its outputs
      const int64_t C = grad_x.shape()[1];
      parallel_for(0, grad_x.shape()[0], std::max<int64_t>(1, kGrain / (HW * C + 1)), [&](int64_t b, int64_t e) {
        for (int64_t n = b; n < e; ++n) {
          T* gx = px + n * HW * C;
          std::fill(gx, gx + HW * C, T(0));
          for (int64_t i = n * OHW * C; i < (n + 1) * OHW * C; i += C)
            for (int64_t c = 0; c < C; ++c)
              if (pi[i + c] >= 0) gx[pi[i + c] * C + c] += pg[i + c];
        }
      });
      return;
    }
    parallel_for(0, planes, std::max<int64_t>(1, kGrain / (HW + 1)), [&](int64_t b, int64_t e) {
      for (int64_t pl = b; pl < e; ++pl) {
        T* gx = px + pl * HW;
        std::fill(gx, gx + HW, T(0));
        for (int64_t i = 0; i < OHW; ++i) {
          int64_t arg = pi[pl * OHW + i];
          if (arg >= 0) gx[arg] += pg[pl * OHW + i];
        }
      }
    });
  });
}

namespace {
// The window of output (oh, ow) for average pooling, clipped to the image, and its divisor.
struct AvgWindow {
  int64_t h0, h1, w0, w1;
  double divisor;
};
AvgWindow avg_window(int64_t oh, int64_t ow, int64_t H, int64_t W, const Pool2dParams& p) {
  int64_t h0 = oh * p.stride[0] - p.padding[0], w0 = ow * p.stride[1] - p.padding[1];
  int64_t h1 = std::min(h0 + p.kernel[0], H + p.padding[0]);
  int64_t w1 = std::min(w0 + p.kernel[1], W + p.padding[1]);
  double padded = double((h1 - h0) * (w1 - w0));
  h0 = std::max<int64_t>(h0, 0); w0 = std::max<int64_t>(w0, 0);
  h1 = std::min(h1, H); w1 = std::min(w1, W);
  double inside = double((h1 - h0) * (w1 - w0));
  return {h0, h1, w0, w1, p.count_include_pad ? padded : inside};
}

// Channels-last average pooling over the windows window(oh, ow) gives: the forward sums each
// window in double per channel, as the row-major path does.
template <typename T, typename Window>
void avg_pool_nhwc_forward(const T* px, int64_t N, int64_t C, int64_t H, int64_t W, int64_t OH,
                           int64_t OW, int64_t window_size, Window&& window, T* po) {
  for_output_rows(N, OH, OW * C * window_size, [&](int64_t n, int64_t oh) {
    std::vector<double> s(static_cast<size_t>(C));
    for (int64_t ow = 0; ow < OW; ++ow) {
      const AvgWindow a = window(oh, ow);
      std::fill(s.begin(), s.end(), 0.0);
      for (int64_t ih = a.h0; ih < a.h1; ++ih)
        for (int64_t iw = a.w0; iw < a.w1; ++iw) {
          const T* v = px + ((n * H + ih) * W + iw) * C;
#pragma omp simd
          for (int64_t c = 0; c < C; ++c) s[c] += double(v[c]);
        }
      T* o = po + ((n * OH + oh) * OW + ow) * C;
      for (int64_t c = 0; c < C; ++c) o[c] = T(a.divisor > 0 ? s[c] / a.divisor : 0);
    }
  });
}

template <typename T, typename Window>
void avg_pool_nhwc_backward(const T* pg, int64_t N, int64_t C, int64_t H, int64_t W, int64_t OH,
                            int64_t OW, Window&& window, T* px) {
  parallel_for(0, N, std::max<int64_t>(1, kGrain / (H * W * C + 1)), [&](int64_t b, int64_t e) {
    std::vector<T> gv(static_cast<size_t>(C));
    for (int64_t n = b; n < e; ++n) {
      T* gx = px + n * H * W * C;
      std::fill(gx, gx + H * W * C, T(0));
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          const AvgWindow a = window(oh, ow);
          if (a.divisor <= 0) continue;
          const T* g = pg + ((n * OH + oh) * OW + ow) * C;
          for (int64_t c = 0; c < C; ++c) gv[c] = T(g[c] / a.divisor);
          for (int64_t ih = a.h0; ih < a.h1; ++ih)
            for (int64_t iw = a.w0; iw < a.w1; ++iw) {
              T* d = gx + (ih * W + iw) * C;
#pragma omp simd
              for (int64_t c = 0; c < C; ++c) d[c] += gv[c];
            }
        }
    }
  });
}
}  // namespace

void CpuBackend::avg_pool2d_forward(const Tensor& x, Tensor& out, const Pool2dParams& p) {
  dispatch_float(x.dtype(), "avg_pool2d", [&]<typename T>() {
    const int64_t planes = x.shape()[0] * x.shape()[1], H = x.shape()[2], W = x.shape()[3];
    const int64_t OH = out.shape()[2], OW = out.shape()[3];
    const T* px = x.data<T>();
    T* po = out.data<T>();
    if (is_channels_last(x))
      return avg_pool_nhwc_forward(px, x.shape()[0], x.shape()[1], H, W, OH, OW,
                                   p.kernel[0] * p.kernel[1],
                                   [&](int64_t oh, int64_t ow) { return avg_window(oh, ow, H, W, p); }, po);
    parallel_for(0, planes, std::max<int64_t>(1, kGrain / (H * W + 1)), [&](int64_t b, int64_t e) {
      for (int64_t pl = b; pl < e; ++pl)
        for (int64_t oh = 0; oh < OH; ++oh)
          for (int64_t ow = 0; ow < OW; ++ow) {
            AvgWindow a = avg_window(oh, ow, H, W, p);
            double s = 0;
            for (int64_t ih = a.h0; ih < a.h1; ++ih)
              for (int64_t iw = a.w0; iw < a.w1; ++iw) s += px[(pl * H + ih) * W + iw];
            po[(pl * OH + oh) * OW + ow] = T(a.divisor > 0 ? s / a.divisor : 0);
          }
    });
  });
}

void CpuBackend::avg_pool2d_backward(const Tensor& grad_out, Tensor& grad_x,
                                     const Pool2dParams& p) {
  dispatch_float(grad_out.dtype(), "avg_pool2d_backward", [&]<typename T>() {
    const int64_t planes = grad_x.shape()[0] * grad_x.shape()[1];
    const int64_t H = grad_x.shape()[2], W = grad_x.shape()[3];
    const int64_t OH = grad_out.shape()[2], OW = grad_out.shape()[3];
    const T* pg = grad_out.data<T>();
    T* px = grad_x.data<T>();
    if (is_channels_last(grad_x))
      return avg_pool_nhwc_backward(pg, grad_x.shape()[0], grad_x.shape()[1], H, W, OH, OW,
                                    [&](int64_t oh, int64_t ow) { return avg_window(oh, ow, H, W, p); }, px);
    parallel_for(0, planes, std::max<int64_t>(1, kGrain / (H * W + 1)), [&](int64_t b, int64_t e) {
      for (int64_t pl = b; pl < e; ++pl) {
        std::fill(px + pl * H * W, px + (pl + 1) * H * W, T(0));
        for (int64_t oh = 0; oh < OH; ++oh)
          for (int64_t ow = 0; ow < OW; ++ow) {
            AvgWindow a = avg_window(oh, ow, H, W, p);
            if (a.divisor <= 0) continue;
            T g = T(pg[(pl * OH + oh) * OW + ow] / a.divisor);
            for (int64_t ih = a.h0; ih < a.h1; ++ih)
              for (int64_t iw = a.w0; iw < a.w1; ++iw) px[(pl * H + ih) * W + iw] += g;
          }
      }
    });
  });
}

namespace {
inline int64_t start_index(int64_t o, int64_t out, int64_t in) { return (o * in) / out; }
inline int64_t end_index(int64_t o, int64_t out, int64_t in) {
  return ((o + 1) * in + out - 1) / out;
}
AvgWindow adaptive_window(int64_t oh, int64_t ow, int64_t H, int64_t W, int64_t OH, int64_t OW) {
  const int64_t h0 = start_index(oh, OH, H), h1 = end_index(oh, OH, H);
  const int64_t w0 = start_index(ow, OW, W), w1 = end_index(ow, OW, W);
  return {h0, h1, w0, w1, double((h1 - h0) * (w1 - w0))};
}
}  // namespace

void CpuBackend::adaptive_avg_pool2d_forward(const Tensor& x, Tensor& out) {
  dispatch_float(x.dtype(), "adaptive_avg_pool2d", [&]<typename T>() {
    const int64_t planes = x.shape()[0] * x.shape()[1], H = x.shape()[2], W = x.shape()[3];
    const int64_t OH = out.shape()[2], OW = out.shape()[3];
    const T* px = x.data<T>();
    T* po = out.data<T>();
    if (is_channels_last(x))
      return avg_pool_nhwc_forward(px, x.shape()[0], x.shape()[1], H, W, OH, OW,
                                   (H / OH + 1) * (W / OW + 1),
                                   [&](int64_t oh, int64_t ow) { return adaptive_window(oh, ow, H, W, OH, OW); }, po);
    parallel_for(0, planes, std::max<int64_t>(1, kGrain / (H * W + 1)), [&](int64_t b, int64_t e) {
      for (int64_t pl = b; pl < e; ++pl)
        for (int64_t oh = 0; oh < OH; ++oh) {
          int64_t h0 = start_index(oh, OH, H), h1 = end_index(oh, OH, H);
          for (int64_t ow = 0; ow < OW; ++ow) {
            int64_t w0 = start_index(ow, OW, W), w1 = end_index(ow, OW, W);
            double s = 0;
            for (int64_t ih = h0; ih < h1; ++ih)
              for (int64_t iw = w0; iw < w1; ++iw) s += px[(pl * H + ih) * W + iw];
            po[(pl * OH + oh) * OW + ow] = T(s / double((h1 - h0) * (w1 - w0)));
          }
        }
    });
  });
}

void CpuBackend::adaptive_avg_pool2d_backward(const Tensor& grad_out, Tensor& grad_x) {
  dispatch_float(grad_out.dtype(), "adaptive_avg_pool2d_backward", [&]<typename T>() {
    const int64_t planes = grad_x.shape()[0] * grad_x.shape()[1];
    const int64_t H = grad_x.shape()[2], W = grad_x.shape()[3];
    const int64_t OH = grad_out.shape()[2], OW = grad_out.shape()[3];
    const T* pg = grad_out.data<T>();
    T* px = grad_x.data<T>();
    if (is_channels_last(grad_x))
      return avg_pool_nhwc_backward(pg, grad_x.shape()[0], grad_x.shape()[1], H, W, OH, OW,
                                    [&](int64_t oh, int64_t ow) { return adaptive_window(oh, ow, H, W, OH, OW); }, px);
    parallel_for(0, planes, std::max<int64_t>(1, kGrain / (H * W + 1)), [&](int64_t b, int64_t e) {
      for (int64_t pl = b; pl < e; ++pl) {
        std::fill(px + pl * H * W, px + (pl + 1) * H * W, T(0));
        for (int64_t oh = 0; oh < OH; ++oh) {
          int64_t h0 = start_index(oh, OH, H), h1 = end_index(oh, OH, H);
          for (int64_t ow = 0; ow < OW; ++ow) {
            int64_t w0 = start_index(ow, OW, W), w1 = end_index(ow, OW, W);
            T g = T(pg[(pl * OH + oh) * OW + ow] / double((h1 - h0) * (w1 - w0)));
            for (int64_t ih = h0; ih < h1; ++ih)
              for (int64_t iw = w0; iw < w1; ++iw) px[(pl * H + ih) * W + iw] += g;
          }
        }
      }
    });
  });
}

}  // namespace nn::backend
