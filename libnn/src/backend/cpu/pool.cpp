// CPU pool family: max/avg/adaptive-avg 2-D pooling over (N*C) planes in parallel.
#include <algorithm>
#include <cmath>
#include <limits>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/parallel.h"

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

void CpuBackend::max_pool2d_forward(const Tensor& x, Tensor& out, Tensor& indices,
                                    const Pool2dParams& p) {
  dispatch_float(x.dtype(), "max_pool2d", [&]<typename T>() {
    const int64_t planes = x.shape()[0] * x.shape()[1], H = x.shape()[2], W = x.shape()[3];
    const int64_t OH = out.shape()[2], OW = out.shape()[3];
    const T* px = x.data<T>();
    T* po = out.data<T>();
    int64_t* pi = indices.data<int64_t>();
    const bool simple2x2 = p.kernel[0] == 2 && p.kernel[1] == 2 && p.stride[0] == 2 &&
                           p.stride[1] == 2 && p.padding[0] == 0 && p.padding[1] == 0 &&
                           p.dilation[0] == 1 && p.dilation[1] == 1;
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
}  // namespace

void CpuBackend::avg_pool2d_forward(const Tensor& x, Tensor& out, const Pool2dParams& p) {
  dispatch_float(x.dtype(), "avg_pool2d", [&]<typename T>() {
    const int64_t planes = x.shape()[0] * x.shape()[1], H = x.shape()[2], W = x.shape()[3];
    const int64_t OH = out.shape()[2], OW = out.shape()[3];
    const T* px = x.data<T>();
    T* po = out.data<T>();
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
}  // namespace

void CpuBackend::adaptive_avg_pool2d_forward(const Tensor& x, Tensor& out) {
  dispatch_float(x.dtype(), "adaptive_avg_pool2d", [&]<typename T>() {
    const int64_t planes = x.shape()[0] * x.shape()[1], H = x.shape()[2], W = x.shape()[3];
    const int64_t OH = out.shape()[2], OW = out.shape()[3];
    const T* px = x.data<T>();
    T* po = out.data<T>();
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
