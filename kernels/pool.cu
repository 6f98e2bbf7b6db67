// Pooling: max (with its argmax), average and adaptive average, forward and backward, NCHW
// and NHWC.
#include "kernels/pool.cuh"

#include <algorithm>

#include "kernels/common.cuh"

namespace nn::kernels {
namespace {

// ---- pooling ---------------------------------------------------------------------------------
// Element i (in memory order) of a (planes, Hd, Wd) tensor in g's layout: its row h and
// column w, and n and c such that its plane starts at n * Hd * Wd * es + c (es, the element
// stride: C in NHWC, 1 in NCHW): for NHWC the image and the channel, for NCHW the plane and 0.
template <typename I>
__device__ __forceinline__ void pool_split(bool nhwc, I C, I i, I Hd, I Wd, I& n, I& c, I& h,
                                           I& w) {
  c = 0;
  if (nhwc) {
    c = i % C;
    i /= C;
  }
  w = i % Wd;
  i /= Wd;
  h = i % Hd;
  n = i / Hd;
}
// The same with the plane index (n * C + c in NHWC).
__device__ __forceinline__ void pool_pos(const PoolGeom& g, int64_t i, int64_t Hd, int64_t Wd,
                                         int64_t& pl, int64_t& h, int64_t& w) {
  int64_t n, c;
  pool_split<int64_t>(g.nhwc, g.C, i, Hd, Wd, n, c, h, w);
  pl = g.nhwc ? n * g.C + c : n;
}
// The memory index of (plane, h, w) in a (planes, Hd, Wd) tensor in g's layout.
__device__ __forceinline__ int64_t pool_at(const PoolGeom& g, int64_t pl, int64_t h, int64_t w,
                                           int64_t Hd, int64_t Wd) {
  return g.nhwc ? ((pl / g.C * Hd + h) * Wd + w) * g.C + pl % g.C : (pl * Hd + h) * Wd + w;
}

// Max pooling: the element's position decomposed once, then a plane base and an element
// stride (C in NHWC, 1 in NCHW) instead of divisions per window tap; index arithmetic in I
// (int when every count fits, else int64).
template <typename T, typename I>
__global__ void max_pool_kernel(const T* x, T* y, int64_t* idx, PoolGeom g) {
  const I C = I(g.C), H = I(g.H), W = I(g.W), OH = I(g.OH), OW = I(g.OW);
  const I n = I(g.planes) * OH * OW, es = g.nhwc ? C : I(1);
  for (I o = I(blockIdx.x) * I(blockDim.x) + I(threadIdx.x); o < n;
       o += I(gridDim.x) * I(blockDim.x)) {
    I img, c, oh, ow;
    pool_split<I>(g.nhwc, C, o, OH, OW, img, c, oh, ow);
    const I base = img * H * W * es + c;
    acc_t<T> best = 0;
    I arg = -1;
    for (int i = 0; i < g.kh; ++i) {
      const I ih = oh * g.sh - g.ph + i * g.dh;
      if (ih < 0 || ih >= H) continue;
      for (int j = 0; j < g.kw; ++j) {
        const I iw = ow * g.sw - g.pw + j * g.dw;
        if (iw < 0 || iw >= W) continue;
        const acc_t<T> v = load(x[base + (ih * W + iw) * es]);
        if (arg < 0 || v > best || v != v) {  // a NaN, once taken, stays
          best = v;
          arg = ih * W + iw;
        }
      }
    }
    y[o] = convert<T>(best);
    idx[o] = int64_t(arg);
  }
}

// Each input element sums the gradients of the outputs whose window (and argmax) chose it:
// the outputs covering row ih are oh in [ceil((ih + ph - (kh-1) dh) / sh), (ih + ph) / sh]
// (those where ih + ph - oh sh is a multiple of dh), and likewise for columns.
template <typename T, typename I>
__global__ void max_pool_backward_kernel(const T* grad, const int64_t* idx, T* gx, PoolGeom g) {
  const I C = I(g.C), H = I(g.H), W = I(g.W), OH = I(g.OH), OW = I(g.OW);
  const I n = I(g.planes) * H * W, es = g.nhwc ? C : I(1);
  for (I e = I(blockIdx.x) * I(blockDim.x) + I(threadIdx.x); e < n;
       e += I(gridDim.x) * I(blockDim.x)) {
    I img, c, ih, iw;
    pool_split<I>(g.nhwc, C, e, H, W, img, c, ih, iw);
    const I base = img * OH * OW * es + c;
    const int64_t self = int64_t(ih) * W + iw;
    const I top = ih + g.ph, left = iw + g.pw;
    const I hlo = top - I(g.kh - 1) * g.dh, wlo = left - I(g.kw - 1) * g.dw;
    const I oh0 = hlo <= 0 ? I(0) : (hlo + g.sh - 1) / g.sh;
    const I ow0 = wlo <= 0 ? I(0) : (wlo + g.sw - 1) / g.sw;
    const I oh1 = min(OH - 1, top / g.sh), ow1 = min(OW - 1, left / g.sw);
    acc_t<T> s = 0;
    for (I oh = oh0; oh <= oh1; ++oh) {
      if (g.dh != 1 && (top - oh * g.sh) % g.dh) continue;
      for (I ow = ow0; ow <= ow1; ++ow) {
        if (g.dw != 1 && (left - ow * g.sw) % g.dw) continue;
        const I o = base + (oh * OW + ow) * es;
        if (idx[o] == self) s += acc_t<T>(load(grad[o]));
      }
    }
    gx[e] = convert<T>(s);
  }
}

__device__ __forceinline__ void avg_window(const PoolGeom& g, int64_t oh, int64_t ow, int64_t& h0,
                                           int64_t& h1, int64_t& w0, int64_t& w1, float& div) {
  h0 = oh * g.sh - g.ph;
  w0 = ow * g.sw - g.pw;
  h1 = min(h0 + g.kh, g.H + g.ph);
  w1 = min(w0 + g.kw, g.W + g.pw);
  const float padded = float((h1 - h0) * (w1 - w0));
  h0 = max(h0, int64_t(0));
  w0 = max(w0, int64_t(0));
  h1 = min(h1, g.H);
  w1 = min(w1, g.W);
  div = g.count_include_pad ? padded : float((h1 - h0) * (w1 - w0));
}

template <typename T>
__global__ void avg_pool_kernel(const T* x, T* y, PoolGeom g) {
  const int64_t n = g.planes * g.OH * g.OW, stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t o = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; o < n; o += stride) {
    int64_t pl, oh, ow;
    pool_pos(g, o, g.OH, g.OW, pl, oh, ow);
    int64_t h0, h1, w0, w1;
    float div;
    avg_window(g, oh, ow, h0, h1, w0, w1, div);
    acc_t<T> s = 0;
    for (int64_t ih = h0; ih < h1; ++ih)
      for (int64_t iw = w0; iw < w1; ++iw)
        s += acc_t<T>(load(x[pool_at(g, pl, ih, iw, g.H, g.W)]));
    y[o] = convert<T>(div > 0 ? s / acc_t<T>(div) : acc_t<T>(0));
  }
}

template <typename T>
__global__ void avg_pool_backward_kernel(const T* grad, T* gx, PoolGeom g) {
  const int64_t n = g.planes * g.H * g.W, stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += stride) {
    int64_t pl, ih, iw;
    pool_pos(g, e, g.H, g.W, pl, ih, iw);
    acc_t<T> s = 0;
    for (int i = 0; i < g.kh; ++i) {
      int64_t t = ih + g.ph - i;
      if (t < 0 || t % g.sh) continue;
      int64_t oh = t / g.sh;
      if (oh >= g.OH) continue;
      for (int j = 0; j < g.kw; ++j) {
        int64_t u = iw + g.pw - j;
        if (u < 0 || u % g.sw) continue;
        int64_t ow = u / g.sw;
        if (ow >= g.OW) continue;
        int64_t h0, h1, w0, w1;
        float div;
        avg_window(g, oh, ow, h0, h1, w0, w1, div);
        if (div > 0)
          s += acc_t<T>(load(grad[pool_at(g, pl, oh, ow, g.OH, g.OW)])) / acc_t<T>(div);
      }
    }
    gx[e] = convert<T>(s);
  }
}

__device__ __forceinline__ int64_t a_start(int64_t o, int64_t out, int64_t in) { return o * in / out; }
__device__ __forceinline__ int64_t a_end(int64_t o, int64_t out, int64_t in) {
  return ((o + 1) * in + out - 1) / out;
}

template <typename T>
__global__ void adaptive_avg_kernel(const T* x, T* y, PoolGeom g) {
  const int64_t n = g.planes * g.OH * g.OW, stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t o = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; o < n; o += stride) {
    int64_t pl, oh, ow;
    pool_pos(g, o, g.OH, g.OW, pl, oh, ow);
    const int64_t h0 = a_start(oh, g.OH, g.H), h1 = a_end(oh, g.OH, g.H);
    const int64_t w0 = a_start(ow, g.OW, g.W), w1 = a_end(ow, g.OW, g.W);
    acc_t<T> s = 0;
    for (int64_t ih = h0; ih < h1; ++ih)
      for (int64_t iw = w0; iw < w1; ++iw)
        s += acc_t<T>(load(x[pool_at(g, pl, ih, iw, g.H, g.W)]));
    y[o] = convert<T>(s / acc_t<T>((h1 - h0) * (w1 - w0)));
  }
}

template <typename T>
__global__ void adaptive_avg_backward_kernel(const T* grad, T* gx, PoolGeom g) {
  const int64_t n = g.planes * g.H * g.W, stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += stride) {
    int64_t pl, ih, iw;
    pool_pos(g, e, g.H, g.W, pl, ih, iw);
    acc_t<T> s = 0;
    const int64_t oh0 = max(int64_t(0), ih * g.OH / g.H - 1), oh1 = min(g.OH, (ih + 1) * g.OH / g.H + 2);
    const int64_t ow0 = max(int64_t(0), iw * g.OW / g.W - 1), ow1 = min(g.OW, (iw + 1) * g.OW / g.W + 2);
    for (int64_t oh = oh0; oh < oh1; ++oh) {
      const int64_t h0 = a_start(oh, g.OH, g.H), h1 = a_end(oh, g.OH, g.H);
      if (ih < h0 || ih >= h1) continue;
      for (int64_t ow = ow0; ow < ow1; ++ow) {
        const int64_t w0 = a_start(ow, g.OW, g.W), w1 = a_end(ow, g.OW, g.W);
        if (iw < w0 || iw >= w1) continue;
        s += acc_t<T>(load(grad[pool_at(g, pl, oh, ow, g.OH, g.OW)])) /
             acc_t<T>((h1 - h0) * (w1 - w0));
      }
    }
    gx[e] = convert<T>(s);
  }
}

}  // namespace

#define NN_POOL_LAUNCH(kernel, n, ...)                                       \
  do {                                                                       \
    if ((n) == 0) return;                                                    \
    dispatch_float(t, #kernel, [&]<typename T>() {                           \
      kernel<T><<<grid_for(n), kThreads, 0, s>>>(__VA_ARGS__);               \
      NN_CUDA_CHECK_LAUNCH();                                                \
    });                                                                      \
  } while (0)

namespace {
// int index arithmetic when the input, the output and a grid stride's overshoot all fit.
bool pool_fits_int(const PoolGeom& g) {
  const int64_t most = std::max(g.planes * g.H * g.W, g.planes * g.OH * g.OW);
  return most < (int64_t(1) << 30);
}
}  // namespace

void launch_max_pool(DType t, const void* x, void* y, int64_t* idx, const PoolGeom& g,
                     cudaStream_t s) {
  const int64_t n = g.planes * g.OH * g.OW;
  if (n == 0) return;
  dispatch_float(t, "max_pool", [&]<typename T>() {
    auto kernel = pool_fits_int(g) ? max_pool_kernel<T, int> : max_pool_kernel<T, int64_t>;
    kernel<<<grid_for(n), kThreads, 0, s>>>(static_cast<const T*>(x), static_cast<T*>(y), idx, g);
    NN_CUDA_CHECK_LAUNCH();
  });
}
void launch_max_pool_backward(DType t, const void* grad, const int64_t* idx, void* grad_x,
                              const PoolGeom& g, cudaStream_t s) {
  const int64_t n = g.planes * g.H * g.W;
  if (n == 0) return;
  dispatch_float(t, "max_pool_backward", [&]<typename T>() {
    auto kernel = pool_fits_int(g) ? max_pool_backward_kernel<T, int>
                                   : max_pool_backward_kernel<T, int64_t>;
    kernel<<<grid_for(n), kThreads, 0, s>>>(static_cast<const T*>(grad), idx,
                                            static_cast<T*>(grad_x), g);
    NN_CUDA_CHECK_LAUNCH();
  });
}
void launch_avg_pool(DType t, const void* x, void* y, const PoolGeom& g, cudaStream_t s) {
  NN_POOL_LAUNCH(avg_pool_kernel, g.planes * g.OH * g.OW, static_cast<const T*>(x),
                 static_cast<T*>(y), g);
}
void launch_avg_pool_backward(DType t, const void* grad, void* grad_x, const PoolGeom& g,
                              cudaStream_t s) {
  NN_POOL_LAUNCH(avg_pool_backward_kernel, g.planes * g.H * g.W, static_cast<const T*>(grad),
                 static_cast<T*>(grad_x), g);
}
void launch_adaptive_avg_pool(DType t, const void* x, void* y, const PoolGeom& g, cudaStream_t s) {
  NN_POOL_LAUNCH(adaptive_avg_kernel, g.planes * g.OH * g.OW, static_cast<const T*>(x),
                 static_cast<T*>(y), g);
}
void launch_adaptive_avg_pool_backward(DType t, const void* grad, void* grad_x, const PoolGeom& g,
                                       cudaStream_t s) {
  NN_POOL_LAUNCH(adaptive_avg_backward_kernel, g.planes * g.H * g.W, static_cast<const T*>(grad),
                 static_cast<T*>(grad_x), g);
}

}  // namespace nn::kernels
