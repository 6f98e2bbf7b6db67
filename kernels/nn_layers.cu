#include "kernels/clip.h"
#include "kernels/math.cuh"
#include "kernels/nn_layers.cuh"
#include "kernels/philox.h"

#include <algorithm>
#include <vector>

namespace nn::kernels {
namespace {

template <typename A>
__device__ A block_sum(A v) {
  __shared__ A shared[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int o = 16; o > 0; o /= 2) v += __shfl_down_sync(0xffffffffu, v, o);
  __syncthreads();  // shared may still be read by a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  const int warps = (blockDim.x + 31) / 32;
  v = threadIdx.x < warps ? shared[threadIdx.x] : A(0);
  if (warp == 0)
    for (int o = 16; o > 0; o /= 2) v += __shfl_down_sync(0xffffffffu, v, o);
  if (threadIdx.x == 0) shared[0] = v;
  __syncthreads();
  return shared[0];  // every thread gets the total
}

// ---- dropout ---------------------------------------------------------------------------------
// Four elements per thread (one Philox draw); with Vec, aligned quads move as one vector load
// and store and the four mask bytes as one 32-bit store.
template <typename T>
struct alignas(4 * sizeof(T)) Quad {
  T v[4];
};

template <typename T, bool Vec>
__global__ void dropout_kernel(const T* x, T* y, uint8_t* mask, int64_t n, float p, acc_t<T> scale,
                               uint64_t seed, uint64_t offset) {
  using A = acc_t<T>;
  const int64_t blocks = (n + 3) / 4, stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t blk = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; blk < blocks; blk += stride) {
    float u[4];
    rng::uniform4(seed, offset + uint64_t(blk), u);
    if (Vec && blk * 4 + 4 <= n) {
      const Quad<T> xv = *reinterpret_cast<const Quad<T>*>(x + blk * 4);
      Quad<T> yv;
      uint32_t bits = 0;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const bool keep = u[k] >= p;
        bits |= uint32_t(keep) << (8 * k);  // byte k of the little-endian word
        yv.v[k] = convert<T>(keep ? A(load(xv.v[k])) * A(scale) : A(0));
      }
      *reinterpret_cast<Quad<T>*>(y + blk * 4) = yv;
      *reinterpret_cast<uint32_t*>(mask + blk * 4) = bits;
      continue;
    }
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      int64_t i = blk * 4 + k;
      if (i >= n) break;
      bool keep = u[k] >= p;
      mask[i] = keep;
      y[i] = convert<T>(keep ? A(load(x[i])) * A(scale) : A(0));
    }
  }
}
template <typename T, bool Vec>
__global__ void dropout_backward_kernel(const T* g, const uint8_t* mask, T* gx, int64_t n,
                                        acc_t<T> scale) {
  using A = acc_t<T>;
  const int64_t blocks = (n + 3) / 4, stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t blk = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; blk < blocks; blk += stride) {
    if (Vec && blk * 4 + 4 <= n) {
      const Quad<T> gv = *reinterpret_cast<const Quad<T>*>(g + blk * 4);
      const uint32_t bits = *reinterpret_cast<const uint32_t*>(mask + blk * 4);
      Quad<T> out;
#pragma unroll
      for (int k = 0; k < 4; ++k)
        out.v[k] = convert<T>(((bits >> (8 * k)) & 0xffu) ? A(load(gv.v[k])) * A(scale) : A(0));
      *reinterpret_cast<Quad<T>*>(gx + blk * 4) = out;
      continue;
    }
    for (int64_t i = blk * 4; i < n && i < blk * 4 + 4; ++i)
      gx[i] = convert<T>(mask[i] ? A(load(g[i])) * A(scale) : A(0));
  }
}


// ---- layer norm ------------------------------------------------------------------------------
// W: the affine parameters' type, T's or f32 for 16-bit data (mixed precision).
template <typename T, typename W>
__global__ void layer_norm_kernel(const T* x, const W* w, const W* b, int64_t D, double eps, T* y,
                                  acc_t<T>* mean, acc_t<T>* rstd) {
  using A = acc_t<T>;
  const int64_t r = blockIdx.x;
  const T* xr = x + r * D;
  A s = 0;
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) s += A(load(xr[i]));
  const A mu = block_sum(s) / A(D);
  A q = 0;
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
    A d = A(load(xr[i])) - mu;
    q += d * d;
  }
  const A inv = m_rsqrt(block_sum(q) / A(D) + A(eps));
  if (threadIdx.x == 0) {
    mean[r] = mu;
    rstd[r] = inv;
  }
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
    A v = (A(load(xr[i])) - mu) * inv;
    if (w) v *= A(load(w[i]));
    if (b) v += A(load(b[i]));
    y[r * D + i] = convert<T>(v);
  }
}

template <typename T, typename W>
__global__ void layer_norm_backward_rows(const T* g, const T* x, const W* w, const acc_t<T>* mean,
                                         const acc_t<T>* rstd, int64_t D, T* gx) {
  using A = acc_t<T>;
  const int64_t r = blockIdx.x;
  const A mu = A(load(mean[r])), inv = A(load(rstd[r]));
  A a = 0, c = 0;
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
    A gw = A(load(g[r * D + i])) * (w ? A(load(w[i])) : A(1));
    a += gw;
    c += gw * (A(load(x[r * D + i])) - mu) * inv;
  }
  a = block_sum(a) / A(D);
  c = block_sum(c) / A(D);
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
    A gw = A(load(g[r * D + i])) * (w ? A(load(w[i])) : A(1));
    A xh = (A(load(x[r * D + i])) - mu) * inv;
    gx[r * D + i] = convert<T>(inv * (gw - a - xh * c));
  }
}

// Rows of up to 32 * VPT elements (BERT's 768, ResNet-free models' usual widths): one warp
// per row holding it in registers, lane + 32 k coalesced, warp shuffles instead of block
// barriers. Longer rows use the block-per-row kernels above.
template <typename A>
__device__ __forceinline__ A warp_sum(A v) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;  // in every lane
}

template <typename T, typename W, int VPT>
__global__ void layer_norm_warp(const T* x, const W* w, const W* b, int64_t R, int D, double eps,
                                T* y, acc_t<T>* mean, acc_t<T>* rstd) {
  using A = acc_t<T>;
  const int lane = threadIdx.x % 32;
  const int64_t r = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (r >= R) return;  // the whole warp
  const T* xr = x + r * D;
  A v[VPT];
  A s = 0;
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int i = lane + 32 * k;
    v[k] = i < D ? A(load(xr[i])) : A(0);
    s += v[k];
  }
  const A mu = warp_sum(s) / A(D);
  A q = 0;
#pragma unroll
  for (int k = 0; k < VPT; ++k)
    if (lane + 32 * k < D) q += (v[k] - mu) * (v[k] - mu);
  const A inv = m_rsqrt(warp_sum(q) / A(D) + A(eps));
  if (lane == 0) {
    mean[r] = mu;
    rstd[r] = inv;
  }
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int i = lane + 32 * k;
    if (i >= D) break;
    A o = (v[k] - mu) * inv;
    if (w) o *= A(load(w[i]));
    if (b) o += A(load(b[i]));
    y[r * D + i] = convert<T>(o);
  }
}

template <typename T, typename W, int VPT>
__global__ void layer_norm_backward_warp(const T* g, const T* x, const W* w, const acc_t<T>* mean,
                                         const acc_t<T>* rstd, int64_t R, int D, T* gx) {
  using A = acc_t<T>;
  const int lane = threadIdx.x % 32;
  const int64_t r = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (r >= R) return;
  const A mu = A(load(mean[r])), inv = A(load(rstd[r]));
  A gw[VPT], xh[VPT];
  A a = 0, c = 0;
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int i = lane + 32 * k;
    gw[k] = i < D ? A(load(g[r * D + i])) * (w ? A(load(w[i])) : A(1)) : A(0);
    xh[k] = i < D ? (A(load(x[r * D + i])) - mu) * inv : A(0);
    a += gw[k];
    c += gw[k] * xh[k];
  }
  a = warp_sum(a) / A(D);
  c = warp_sum(c) / A(D);
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int i = lane + 32 * k;
    if (i >= D) break;
    gx[r * D + i] = convert<T>(inv * (gw[k] - a - xh[k] * c));
  }
}

// Calls f.template operator()<VPT>() with the register count for rows of D, or returns false
// when D is past the warp kernels' reach.
template <typename F>
bool dispatch_vpt(int64_t D, F&& f) {
  if (D <= 128) f.template operator()<4>();
  else if (D <= 256) f.template operator()<8>();
  else if (D <= 512) f.template operator()<16>();
  else if (D <= 1024) f.template operator()<32>();
  else return false;
  return true;
}

// Column sums of g * xhat and g over rows, in S slices: ws[0][s][d], ws[1][s][d].
template <typename T>
__global__ void layer_norm_backward_columns(const T* g, const T* x, const acc_t<T>* mean, const acc_t<T>* rstd,
                                            int64_t R, int64_t D, int S, acc_t<T>* ws) {
  using A = acc_t<T>;
  __shared__ A pw[8][33], pb[8][33];
  const int64_t d = int64_t(blockIdx.x) * 32 + threadIdx.x;
  A sw = 0, sb = 0;
  if (d < D)
    for (int64_t r = int64_t(blockIdx.y) * 8 + threadIdx.y; r < R; r += int64_t(S) * 8) {
      A gv = A(load(g[r * D + d]));
      sw += gv * (A(load(x[r * D + d])) - A(load(mean[r]))) * A(load(rstd[r]));
      sb += gv;
    }
  pw[threadIdx.y][threadIdx.x] = sw;
  pb[threadIdx.y][threadIdx.x] = sb;
  __syncthreads();
  if (threadIdx.y == 0 && d < D) {
    for (int i = 1; i < 8; ++i) {
      sw += pw[i][threadIdx.x];
      sb += pb[i][threadIdx.x];
    }
    ws[int64_t(blockIdx.y) * D + d] = sw;
    ws[(int64_t(S) + blockIdx.y) * D + d] = sb;
  }
}
template <typename T, typename W>
__global__ void layer_norm_backward_finish(const acc_t<T>* ws, int64_t D, int S, W* gw, W* gb) {
  const int64_t d = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (d >= D) return;
  acc_t<T> sw = 0, sb = 0;
  for (int s = 0; s < S; ++s) {
    sw += ws[int64_t(s) * D + d];
    sb += ws[(int64_t(S) + s) * D + d];
  }
  if (gw) gw[d] = convert<W>(sw);
  if (gb) gb[d] = convert<W>(sb);
}
int ln_splits(int64_t R) { return int(std::clamp<int64_t>(ceil_div(R, 64), 1, 256)); }

// ---- dropout + residual add + layer norm ------------------------------------------------------
// A warp per row as layer_norm_warp, but lane l holds quads l + 32 k: the four elements of one
// Philox draw and of one vector load. Each value is rounded where the ops it fuses round it
// (dropout's output to x's type, the sum to the residual's), so it equals them up to the
// order of the row sums.
constexpr int kLnQuads = 8;  // quads per lane: rows up to 32 * 8 * 4 = 1024

template <typename X, typename T, typename W>
__global__ void dropout_add_layer_norm_warp(const X* x, const T* res, const W* w, const W* b,
                                            int64_t R, int D, double eps, rng::DropoutDraw drop,
                                            T* sum, uint8_t* mask, T* y, acc_t<T>* mean, acc_t<T>* rstd) {
  using A = acc_t<T>;
  using AX = acc_t<X>;
  const int lane = threadIdx.x % 32;
  const int64_t r = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (r >= R) return;  // the whole warp
  const int nq = D / 4;
  const int64_t row = r * D;
  A v[kLnQuads][4];
  A s = 0;
#pragma unroll
  for (int k = 0; k < kLnQuads; ++k) {
    const int q = lane + 32 * k;
    if (q >= nq) continue;
    const int64_t i = row + 4 * q;
    const Quad<X> xv = *reinterpret_cast<const Quad<X>*>(x + i);
    const Quad<T> rv = *reinterpret_cast<const Quad<T>*>(res + i);
    rng::U32x4 u{};
    if (drop.active()) u = rng::philox(drop.seed, drop.offset + uint64_t(i / 4));
    Quad<T> sv;
    uint32_t bits = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const bool keep = !drop.active() || drop.keeps(rng::lane(u, uint32_t(j)));
      bits |= uint32_t(keep) << (8 * j);
      const X d = convert<X>(keep ? AX(load(xv.v[j])) * AX(drop.scale) : AX(0));
      sv.v[j] = convert<T>(A(load(rv.v[j])) + A(load(d)));
      v[k][j] = A(load(sv.v[j]));
      s += v[k][j];
    }
    *reinterpret_cast<Quad<T>*>(sum + i) = sv;
    if (drop.active()) *reinterpret_cast<uint32_t*>(mask + i) = bits;
  }
  const A mu = warp_sum(s) / A(D);
  A sq = 0;
#pragma unroll
  for (int k = 0; k < kLnQuads; ++k)
    if (lane + 32 * k < nq)
#pragma unroll
      for (int j = 0; j < 4; ++j) sq += (v[k][j] - mu) * (v[k][j] - mu);
  const A inv = m_rsqrt(warp_sum(sq) / A(D) + A(eps));
  if (lane == 0) {
    mean[r] = mu;
    rstd[r] = inv;
  }
#pragma unroll
  for (int k = 0; k < kLnQuads; ++k) {
    const int q = lane + 32 * k;
    if (q >= nq) continue;
    Quad<T> o;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      A e = (v[k][j] - mu) * inv;
      if (w) e *= A(load(w[4 * q + j]));
      if (b) e += A(load(b[4 * q + j]));
      o.v[j] = convert<T>(e);
    }
    *reinterpret_cast<Quad<T>*>(y + row + 4 * q) = o;
  }
}

template <typename X, typename T, typename W>
__global__ void dropout_add_layer_norm_backward_warp(const T* g, const T* sum, const W* w,
                                                     const acc_t<T>* mean, const acc_t<T>* rstd,
                                                     const uint8_t* mask, acc_t<X> scale,
                                                     int64_t R, int D, T* gsum, X* gx) {
  using A = acc_t<T>;
  using AX = acc_t<X>;
  const int lane = threadIdx.x % 32;
  const int64_t r = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (r >= R) return;
  const int nq = D / 4;
  const int64_t row = r * D;
  const A mu = A(load(mean[r])), inv = A(load(rstd[r]));
  A gw[kLnQuads][4], xh[kLnQuads][4];
  A a = 0, c = 0;
#pragma unroll
  for (int k = 0; k < kLnQuads; ++k) {
    const int q = lane + 32 * k;
    if (q >= nq) continue;
    const Quad<T> gv = *reinterpret_cast<const Quad<T>*>(g + row + 4 * q);
    const Quad<T> sv = *reinterpret_cast<const Quad<T>*>(sum + row + 4 * q);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      gw[k][j] = A(load(gv.v[j])) * (w ? A(load(w[4 * q + j])) : A(1));
      xh[k][j] = (A(load(sv.v[j])) - mu) * inv;
      a += gw[k][j];
      c += gw[k][j] * xh[k][j];
    }
  }
  a = warp_sum(a) / A(D);
  c = warp_sum(c) / A(D);
#pragma unroll
  for (int k = 0; k < kLnQuads; ++k) {
    const int q = lane + 32 * k;
    if (q >= nq) continue;
    const int64_t i = row + 4 * q;
    Quad<T> o;
#pragma unroll
    for (int j = 0; j < 4; ++j) o.v[j] = convert<T>(inv * (gw[k][j] - a - xh[k][j] * c));
    *reinterpret_cast<Quad<T>*>(gsum + i) = o;
    if (!gx) continue;
    // the promotion's backward (a rounding to X), then dropout's
    const uint32_t bits = mask ? *reinterpret_cast<const uint32_t*>(mask + i) : 0x01010101u;
    Quad<X> ox;
#pragma unroll
    for (int j = 0; j < 4; ++j)
      ox.v[j] = convert<X>(((bits >> (8 * j)) & 0xffu) ? AX(load(convert<X>(o.v[j]))) * scale
                                                        : AX(0));
    *reinterpret_cast<Quad<X>*>(gx + i) = ox;
  }
}

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

// ---- embedding rows --------------------------------------------------------------------------
template <typename W>
__global__ void gather_rows_kernel(const W* src, int64_t V, int64_t words, const int64_t* idx,
                                   int64_t M, W* out, int* bad) {
  const int64_t n = M * words, stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += stride) {
    const int64_t m = e / words, w = e % words, r = idx[m];
    if (r < 0 || r >= V) {
      *bad = 1;
      continue;
    }
    out[e] = src[r * words + w];
  }
}

// T is f32 or f64 (dispatch_sum): the sums are atomic adds.
template <typename T>
__global__ void scatter_add_rows_kernel(const T* grad, const int64_t* idx, int64_t M, int64_t D,
                                        int64_t V, int64_t skip, T* out, int* bad) {
  const int64_t n = M * D, stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += stride) {
    const int64_t m = e / D, d = e % D, r = idx[m];
    if (r == skip) continue;
    if (r < 0 || r >= V) {
      *bad = 1;
      continue;
    }
    atomicAdd(out + r * D + d, grad[e]);
  }
}

// One block per bag, threads over the columns; weights in acc_t<T> (f64 for f64, else f32).
template <typename T>
__global__ void embedding_bag_kernel(const T* table, int64_t V, int64_t D, const int64_t* idx,
                                     const acc_t<T>* w, int64_t L, T* out, int* bad) {
  using A = acc_t<T>;
  const int64_t n = blockIdx.x;
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
    A acc = 0;
    for (int64_t l = 0; l < L; ++l) {
      const A wl = w[n * L + l];
      const int64_t r = idx[n * L + l];
      if (r < 0 || r >= V) {
        *bad = 1;
        continue;
      }
      if (wl != A(0)) acc += wl * load(table[r * D + d]);
    }
    out[n * D + d] = convert<T>(acc);
  }
}

// T is f32 or f64 (dispatch_sum): the sums are atomic adds.
template <typename T>
__global__ void embedding_bag_backward_kernel(const T* grad, const int64_t* idx,
                                              const T* w, int64_t N, int64_t L, int64_t D,
                                              int64_t V, T* grad_table, int* bad) {
  const int64_t total = N * L * D, stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const int64_t nl = e / D, d = e % D, r = idx[nl];
    if (r < 0 || r >= V) {
      *bad = 1;
      continue;
    }
    const T wl = w[nl];
    if (wl != T(0)) atomicAdd(grad_table + r * D + d, wl * grad[(nl / L) * D + d]);
  }
}

// ---- optimizers ------------------------------------------------------------------------------
constexpr int kMaxTensors = 32;
constexpr int kPerThread = 4;
template <typename S>
struct TensorList {
  S t[kMaxTensors];
  int64_t block_start[kMaxTensors + 1];
  int count;
};

__device__ __forceinline__ int find_tensor(const int64_t* starts, int count, int64_t block) {
  int i = 0;
  while (i + 1 < count && starts[i + 1] <= block) ++i;
  return i;
}

// One unit of a copy: a value converted, or a quad of them (one 16-byte load of four f32
// values and one 8-byte store of their 16-bit roundings, as the elementwise cast moves them).
template <typename D, typename S>
struct CopyUnit {
  __device__ static D move(const S& v) { return convert<D>(v); }
};
template <typename D, typename S>
struct CopyUnit<Quad<D>, Quad<S>> {
  __device__ static Quad<D> move(const Quad<S>& v) {
    Quad<D> o;
#pragma unroll
    for (int j = 0; j < 4; ++j) o.v[j] = convert<D>(v.v[j]);
    return o;
  }
};

// Pair i's n units from S to D: words of one dtype's bytes (S = D, the widest unit every
// pair's addresses and size are multiples of), values converted, or quads of them.
template <typename S, typename D>
__global__ void copy_many_kernel(TensorList<CopyPair> list) {
  const int ti = find_tensor(list.block_start, list.count, blockIdx.x);
  const CopyPair& pr = list.t[ti];
  const S* src = static_cast<const S*>(pr.src);
  D* dst = static_cast<D*>(pr.dst);
  const int64_t base = (int64_t(blockIdx.x) - list.block_start[ti]) * blockDim.x * kPerThread;
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) {
    const int64_t i = base + int64_t(k) * blockDim.x + threadIdx.x;
    if (i < pr.n) dst[i] = CopyUnit<D, S>::move(src[i]);
  }
}

// The hyperparameters come in double and are rounded once to the type the step computes
// in (f64 for f64 parameters, f32 otherwise), as the CPU backend does.
template <typename T>
__global__ void sgd_kernel(TensorList<SgdTensor> list, double momentum_, double dampening,
                           bool nesterov) {
  using A = acc_t<T>;
  const int ti = find_tensor(list.block_start, list.count, blockIdx.x);
  const SgdTensor& st = list.t[ti];
  T* p = static_cast<T*>(st.param);
  const T* g = static_cast<const T*>(st.grad);
  T* buf = static_cast<T*>(st.momentum);
  const A lr = A(st.lr), momentum = A(momentum_), keep = A(1 - dampening), wd = A(st.weight_decay);
  const int64_t base = (int64_t(blockIdx.x) - list.block_start[ti]) * blockDim.x * kPerThread;
  for (int k = 0; k < kPerThread; ++k) {
    const int64_t i = base + int64_t(k) * blockDim.x + threadIdx.x;
    if (i >= st.n) break;
    A pv = A(load(p[i]));
    A d = A(load(g[i])) + wd * pv;
    if (buf) {
      A b = st.first_step ? d : momentum * A(load(buf[i])) + keep * d;
      buf[i] = convert<T>(b);
      d = nesterov ? d + momentum * b : b;
    }
    p[i] = convert<T>(pv - lr * d);
  }
}

template <typename T>
__global__ void adamw_kernel(TensorList<AdamWTensor> list, double beta1_, double beta2_,
                             double eps_) {
  using A = acc_t<T>;
  const A beta1 = A(beta1_), beta2 = A(beta2_), eps = A(eps_);
  const int ti = find_tensor(list.block_start, list.count, blockIdx.x);
  const AdamWTensor& st = list.t[ti];
  T* p = static_cast<T*>(st.param);
  const T* g = static_cast<const T*>(st.grad);
  T* m = static_cast<T*>(st.exp_avg);
  T* v = static_cast<T*>(st.exp_avg_sq);
  const int64_t base = (int64_t(blockIdx.x) - list.block_start[ti]) * blockDim.x * kPerThread;
  for (int k = 0; k < kPerThread; ++k) {
    const int64_t i = base + int64_t(k) * blockDim.x + threadIdx.x;
    if (i >= st.n) break;
    const A gv = A(load(g[i]));
    const A mv = beta1 * A(load(m[i])) + (A(1) - beta1) * gv;
    const A vv = beta2 * A(load(v[i])) + (A(1) - beta2) * gv * gv;
    m[i] = convert<T>(mv);
    v[i] = convert<T>(vv);
    const A pv = A(load(p[i])) * A(st.decay);
    p[i] = convert<T>(pv - A(st.step_size) * mv / (m_sqrt(vv) * A(st.inv_sqrt_bc2) + eps));
  }
}

// This thread's elements of its block's tensor times `factor` in place; true when a rounded
// result is inf or NaN.
template <typename T>
__device__ bool scale_block(const TensorList<FlatTensor>& list, acc_t<T> factor) {
  using A = acc_t<T>;
  const int ti = find_tensor(list.block_start, list.count, blockIdx.x);
  const FlatTensor& st = list.t[ti];
  T* p = static_cast<T*>(st.data);
  const int64_t base = (int64_t(blockIdx.x) - list.block_start[ti]) * blockDim.x * kPerThread;
  bool bad = false;
  for (int k = 0; k < kPerThread; ++k) {
    const int64_t i = base + int64_t(k) * blockDim.x + threadIdx.x;
    if (i >= st.n) break;
    const T r = convert<T>(A(load(p[i])) * factor);
    p[i] = r;
    bad |= !isfinite(load(r));
  }
  return bad;
}

template <typename T>
__global__ void scale_kernel(TensorList<FlatTensor> list, acc_t<T> factor, float* found) {
  if (scale_block<T>(list, factor)) *found = 1.f;  // every writer stores the same value
}

// The factor from the sum of squares on the device: nothing is read or written where it is 1.
template <typename T>
__global__ void clip_kernel(TensorList<FlatTensor> list, const double* sum_squares, double max_norm) {
  const double f = clip_factor(*sum_squares, max_norm);
  if (f != 1.0) scale_block<T>(list, acc_t<T>(f));
}

// One partial sum of squares per block, in block order; sum_partials adds them in a fixed
// order (deterministic, no atomics).
template <typename T>
__global__ void sum_squares_kernel(TensorList<FlatTensor> list, double* partials) {
  using A = double;
  const int ti = find_tensor(list.block_start, list.count, blockIdx.x);
  const FlatTensor& st = list.t[ti];
  const T* p = static_cast<const T*>(st.data);
  const int64_t base = (int64_t(blockIdx.x) - list.block_start[ti]) * blockDim.x * kPerThread;
  A v = 0;
  for (int k = 0; k < kPerThread; ++k) {
    const int64_t i = base + int64_t(k) * blockDim.x + threadIdx.x;
    if (i >= st.n) break;
    const A x = A(load(p[i]));
    v += x * x;
  }
  v = block_sum(v);
  if (threadIdx.x == 0) partials[blockIdx.x] = v;
}
template <typename A>
__global__ void sum_partials(const A* partials, int64_t n, A* out) {
  A v = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) v += partials[i];
  v = block_sum(v);
  if (threadIdx.x == 0) *out = v;
}

// Launches `kernel` over the tensors in groups of kMaxTensors.
template <typename S, typename Launch>
void multi_tensor(const S* tensors, int count, Launch launch) {
  for (int first = 0; first < count; first += kMaxTensors) {
    TensorList<S> list{};
    list.count = std::min(kMaxTensors, count - first);
    int64_t blocks = 0;
    for (int i = 0; i < list.count; ++i) {
      list.t[i] = tensors[first + i];
      list.block_start[i] = blocks;
      blocks += ceil_div(list.t[i].n, int64_t(kThreads) * kPerThread);
    }
    list.block_start[list.count] = blocks;
    if (blocks > 0) launch(list, unsigned(blocks));
  }
}

}  // namespace

void launch_dropout(DType t, const void* x, void* y, uint8_t* mask, int64_t n, double p,
                    uint64_t seed, uint64_t offset, cudaStream_t s) {
  if (n == 0) return;
  dispatch_float(t, "dropout", [&]<typename T>() {
    const bool vec = aligned_to(x, 4 * sizeof(T)) && aligned_to(y, 4 * sizeof(T)) && aligned_to(mask, 4);
    auto kernel = vec ? dropout_kernel<T, true> : dropout_kernel<T, false>;
    kernel<<<grid_for(ceil_div(n, 4)), kThreads, 0, s>>>(static_cast<const T*>(x),
                                                           static_cast<T*>(y), mask, n, float(p),
                                                           acc_t<T>(1.0 / (1.0 - p)), seed, offset);
    NN_CUDA_CHECK_LAUNCH();
  });
}

void launch_dropout_backward(DType t, const void* grad, const uint8_t* mask, void* grad_x,
                             int64_t n, double p, cudaStream_t s) {
  if (n == 0) return;
  dispatch_float(t, "dropout_backward", [&]<typename T>() {
    const bool vec = aligned_to(grad, 4 * sizeof(T)) && aligned_to(grad_x, 4 * sizeof(T)) &&
                     aligned_to(mask, 4);
    auto kernel = vec ? dropout_backward_kernel<T, true> : dropout_backward_kernel<T, false>;
    kernel<<<grid_for(ceil_div(n, 4)), kThreads, 0, s>>>(static_cast<const T*>(grad), mask,
                                                           static_cast<T*>(grad_x), n,
                                                           acc_t<T>(1.0 / (1.0 - p)));
    NN_CUDA_CHECK_LAUNCH();
  });
}

namespace {
// Calls f.template operator()<T, W>() with W the parameters' device type: T's own, or float
// for 16-bit T (f32 parameters with 16-bit data, as the ops layer allows).
template <typename F>
void dispatch_with_params(DType t, DType wt, const char* op, F&& f) {
  dispatch_float(t, op, [&]<typename T>() {
    if (wt == t) return f.template operator()<T, T>();
    if (wt == DType::f32 && (t == DType::f16 || t == DType::bf16))
      return f.template operator()<T, float>();
    NN_ERROR(op, ": parameters of dtype ", dtype_name(wt), " with data of dtype ",
             dtype_name(t));
  });
}
}  // namespace

void launch_layer_norm(DType t, DType wt, const void* x, const void* w, const void* b,
                       int64_t R, int64_t D, double eps, void* y, void* mean, void* rstd,
                       cudaStream_t s) {
  if (R == 0) return;
  dispatch_with_params(t, wt, "layer_norm", [&]<typename T, typename W>() {
    const bool warp = dispatch_vpt(D, [&]<int VPT>() {
      layer_norm_warp<T, W, VPT><<<grid_for(R, 1, kThreads / 32), kThreads, 0, s>>>(
          static_cast<const T*>(x), static_cast<const W*>(w), static_cast<const W*>(b), R, int(D),
          eps, static_cast<T*>(y), static_cast<acc_t<T>*>(mean), static_cast<acc_t<T>*>(rstd));
    });
    if (!warp)
      layer_norm_kernel<T, W><<<blocks_exact(R, "layer_norm"), kThreads, 0, s>>>(
          static_cast<const T*>(x), static_cast<const W*>(w), static_cast<const W*>(b), D,
          eps, static_cast<T*>(y), static_cast<acc_t<T>*>(mean), static_cast<acc_t<T>*>(rstd));
    NN_CUDA_CHECK_LAUNCH();
  });
}

size_t layer_norm_workspace_bytes(int64_t R, int64_t D) {
  return size_t(2) * size_t(ln_splits(R)) * size_t(D) * sizeof(double);
}

void launch_layer_norm_backward(DType t, DType wt, const void* grad, const void* x,
                                const void* w, const void* mean, const void* rstd, int64_t R,
                                int64_t D, void* grad_x, void* grad_w, void* grad_b,
                                void* workspace, cudaStream_t s) {
  dispatch_with_params(t, wt, "layer_norm_backward", [&]<typename T, typename W>() {
    const T* g = static_cast<const T*>(grad);
    const T* px = static_cast<const T*>(x);
    const acc_t<T>* pm = static_cast<const acc_t<T>*>(mean);
    const acc_t<T>* pr = static_cast<const acc_t<T>*>(rstd);
    if (grad_x && R > 0) {
      const bool warp = dispatch_vpt(D, [&]<int VPT>() {
        layer_norm_backward_warp<T, W, VPT><<<grid_for(R, 1, kThreads / 32), kThreads, 0, s>>>(
            g, px, static_cast<const W*>(w), pm, pr, R, int(D), static_cast<T*>(grad_x));
      });
      if (!warp)
        layer_norm_backward_rows<T, W><<<blocks_exact(R, "layer_norm_backward"), kThreads, 0, s>>>(
            g, px, static_cast<const W*>(w), pm, pr, D, static_cast<T*>(grad_x));
      NN_CUDA_CHECK_LAUNCH();
    }
    if ((grad_w || grad_b) && D > 0) {
      const int S = ln_splits(R);
      auto* ws = static_cast<acc_t<T>*>(workspace);
      layer_norm_backward_columns<T><<<dim3(blocks_exact(ceil_div(D, 32), "layer_norm_backward"), unsigned(S)), dim3(32, 8), 0, s>>>(
          g, px, pm, pr, R, D, S, ws);
      NN_CUDA_CHECK_LAUNCH();
      layer_norm_backward_finish<T, W><<<grid_for(D), kThreads, 0, s>>>(
          ws, D, S, static_cast<W*>(grad_w), static_cast<W*>(grad_b));
      NN_CUDA_CHECK_LAUNCH();
    }
  });
}

namespace {
// f.template operator()<X, T, W>() for x's type X (T's, or a 16-bit type under an f32 T).
template <typename F>
void dispatch_residual(DType xt, DType t, DType wt, const char* op, F&& f) {
  dispatch_with_params(t, wt, op, [&]<typename T, typename W>() {
    if (xt == t) return f.template operator()<T, T, W>();
    if constexpr (std::is_same_v<T, float>) {
      if (xt == DType::f16) return f.template operator()<__half, T, W>();
      if (xt == DType::bf16) return f.template operator()<__nv_bfloat16, T, W>();
    }
    NN_ERROR(op, ": input of dtype ", dtype_name(xt), " with a residual of dtype ",
             dtype_name(t));
  });
}
}  // namespace

bool dropout_add_layer_norm_fits(int64_t D,
                                 const std::vector<std::pair<const void*, size_t>>& quads) {
  if (D <= 0 || D % 4 != 0 || D > 32 * kLnQuads * 4) return false;
  for (const auto& [p, element_bytes] : quads)
    if (!aligned_to(p, 4 * element_bytes)) return false;
  return true;
}

void launch_dropout_add_layer_norm(DType xt, DType t, DType wt, const void* x,
                                   const void* residual, const void* w, const void* b,
                                   int64_t R, int64_t D, double eps, double p, uint64_t seed,
                                   uint64_t offset, void* sum, uint8_t* mask, void* y,
                                   void* mean, void* rstd, cudaStream_t s) {
  if (R == 0) return;
  rng::DropoutDraw drop;
  if (p > 0) {
    drop.seed = seed;
    drop.offset = offset;
    drop.p = float(p);
    drop.scale = 1.0 / (1.0 - p);
  }
  dispatch_residual(xt, t, wt, "dropout_add_layer_norm", [&]<typename X, typename T, typename W>() {
    dropout_add_layer_norm_warp<X, T, W><<<grid_for(R, 1, kThreads / 32), kThreads, 0, s>>>(
        static_cast<const X*>(x), static_cast<const T*>(residual), static_cast<const W*>(w),
        static_cast<const W*>(b), R, int(D), eps, drop, static_cast<T*>(sum), mask,
        static_cast<T*>(y), static_cast<acc_t<T>*>(mean), static_cast<acc_t<T>*>(rstd));
    NN_CUDA_CHECK_LAUNCH();
  });
}

void launch_dropout_add_layer_norm_backward(DType xt, DType t, DType wt, const void* grad,
                                            const void* sum, const void* w, const void* mean,
                                            const void* rstd, const uint8_t* mask, double p,
                                            int64_t R, int64_t D, void* grad_sum, void* grad_x,
                                            cudaStream_t s) {
  if (R == 0) return;
  dispatch_residual(xt, t, wt, "dropout_add_layer_norm_backward",
                    [&]<typename X, typename T, typename W>() {
    auto kernel = dropout_add_layer_norm_backward_warp<X, T, W>;
    kernel<<<grid_for(R, 1, kThreads / 32), kThreads, 0, s>>>(
        static_cast<const T*>(grad), static_cast<const T*>(sum), static_cast<const W*>(w),
        static_cast<const acc_t<T>*>(mean), static_cast<const acc_t<T>*>(rstd), p > 0 ? mask : nullptr,
        acc_t<X>(p > 0 ? 1.0 / (1.0 - p) : 1.0), R, int(D), static_cast<T*>(grad_sum),
        static_cast<X*>(grad_x));
    NN_CUDA_CHECK_LAUNCH();
  });
}

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

void launch_gather_rows(const void* src, int64_t V, size_t row_bytes, const int64_t* idx,
                        int64_t M, void* out, int* bad, cudaStream_t s) {
  if (M == 0 || row_bytes == 0) return;
  const bool words4 = row_bytes % 4 == 0 && reinterpret_cast<uintptr_t>(src) % 4 == 0 &&
                      reinterpret_cast<uintptr_t>(out) % 4 == 0;
  if (words4) {
    int64_t words = int64_t(row_bytes / 4);
    gather_rows_kernel<uint32_t><<<grid_for(M * words), kThreads, 0, s>>>(
        static_cast<const uint32_t*>(src), V, words, idx, M, static_cast<uint32_t*>(out), bad);
  } else {
    int64_t words = int64_t(row_bytes);
    gather_rows_kernel<uint8_t><<<grid_for(M * words), kThreads, 0, s>>>(
        static_cast<const uint8_t*>(src), V, words, idx, M, static_cast<uint8_t*>(out), bad);
  }
  NN_CUDA_CHECK_LAUNCH();
}

void launch_scatter_add_rows(DType t, const void* grad, const int64_t* idx, int64_t M, int64_t D,
                             int64_t V, int64_t skip, void* out, int* bad, cudaStream_t s) {
  if (M * D == 0) return;
  dispatch_sum(t, "scatter_add_rows", [&]<typename T>() {
    scatter_add_rows_kernel<T><<<grid_for(M * D), kThreads, 0, s>>>(
        static_cast<const T*>(grad), idx, M, D, V, skip, static_cast<T*>(out), bad);
    NN_CUDA_CHECK_LAUNCH();
  });
}

void launch_embedding_bag(DType t, const void* table, int64_t V, int64_t D, const int64_t* idx,
                          const void* w, int64_t N, int64_t L, void* out, int* bad, cudaStream_t s) {
  if (N * D == 0) return;
  const int threads = int(std::min<int64_t>(kThreads, (D + 31) / 32 * 32));
  dispatch_float(t, "embedding_bag", [&]<typename T>() {
    embedding_bag_kernel<T><<<blocks_exact(N, "embedding_bag"), threads, 0, s>>>(
        static_cast<const T*>(table), V, D, idx, static_cast<const acc_t<T>*>(w), L,
        static_cast<T*>(out), bad);
    NN_CUDA_CHECK_LAUNCH();
  });
}

void launch_embedding_bag_backward(DType t, const void* grad, const int64_t* idx, const void* w,
                                   int64_t N, int64_t L, int64_t D, int64_t V, void* grad_table,
                                   int* bad, cudaStream_t s) {
  if (N * L * D == 0) return;
  dispatch_sum(t, "embedding_bag_backward", [&]<typename T>() {
    embedding_bag_backward_kernel<T><<<grid_for(N * L * D), kThreads, 0, s>>>(
        static_cast<const T*>(grad), idx, static_cast<const T*>(w), N, L, D, V,
        static_cast<T*>(grad_table), bad);
    NN_CUDA_CHECK_LAUNCH();
  });
}

bool copy_many_converts(DType st, DType dt) {
  return st == dt || (st == DType::f32 && (dt == DType::f16 || dt == DType::bf16));
}

void launch_copy_many(DType st, DType dt, const CopyPair* pairs, int count, cudaStream_t s) {
  if (st != dt) {
    NN_CHECK(copy_many_converts(st, dt), "copy_many: no batched conversion from ",
             dtype_name(st), " to ", dtype_name(dt));
    // in quads when every pair is whole aligned quads (a layer's input, weight and bias)
    std::vector<CopyPair> quads(pairs, pairs + count);
    bool by_quads = true;
    for (auto& pr : quads) {
      by_quads = by_quads && pr.n % 4 == 0 && aligned_to(pr.src, 16) && aligned_to(pr.dst, 8);
      pr.n /= 4;
    }
    auto go = [&]<typename D>() {
      if (by_quads) {
        multi_tensor(quads.data(), count, [&](const TensorList<CopyPair>& list, unsigned blocks) {
          copy_many_kernel<Quad<float>, Quad<D>><<<blocks, kThreads, 0, s>>>(list);
          NN_CUDA_CHECK_LAUNCH();
        });
        return;
      }
      multi_tensor(pairs, count, [&](const TensorList<CopyPair>& list, unsigned blocks) {
        copy_many_kernel<float, D><<<blocks, kThreads, 0, s>>>(list);
        NN_CUDA_CHECK_LAUNCH();
      });
    };
    if (dt == DType::f16) return go.template operator()<__half>();
    return go.template operator()<__nv_bfloat16>();
  }
  // one dtype: bytes, moved in the widest word every pair's addresses and size allow
  size_t word = 16;
  std::vector<CopyPair> words(pairs, pairs + count);
  for (auto& pr : words) pr.n *= int64_t(element_size(st));
  for (const auto& pr : words)
    while (word > 1 && !(aligned_to(pr.src, word) && aligned_to(pr.dst, word) &&
                         pr.n % int64_t(word) == 0))
      word /= 2;
  for (auto& pr : words) pr.n /= int64_t(word);
  auto go = [&]<typename Word>() {
    multi_tensor(words.data(), count, [&](const TensorList<CopyPair>& list, unsigned blocks) {
      copy_many_kernel<Word, Word><<<blocks, kThreads, 0, s>>>(list);
      NN_CUDA_CHECK_LAUNCH();
    });
  };
  switch (word) {
    case 16: return go.template operator()<uint4>();
    case 8: return go.template operator()<uint2>();
    case 4: return go.template operator()<uint32_t>();
    case 2: return go.template operator()<uint16_t>();
    default: return go.template operator()<uint8_t>();
  }
}

void launch_sgd(DType t, const SgdTensor* tensors, int count, double momentum, double dampening,
                bool nesterov, cudaStream_t s) {
  dispatch_float(t, "sgd_step", [&]<typename T>() {
    multi_tensor(tensors, count, [&](const TensorList<SgdTensor>& list, unsigned blocks) {
      sgd_kernel<T><<<blocks, kThreads, 0, s>>>(list, momentum, dampening, nesterov);
      NN_CUDA_CHECK_LAUNCH();
    });
  });
}

void launch_adamw(DType t, const AdamWTensor* tensors, int count, double beta1, double beta2,
                  double eps, cudaStream_t s) {
  dispatch_float(t, "adamw_step", [&]<typename T>() {
    multi_tensor(tensors, count, [&](const TensorList<AdamWTensor>& list, unsigned blocks) {
      adamw_kernel<T><<<blocks, kThreads, 0, s>>>(list, beta1, beta2, eps);
      NN_CUDA_CHECK_LAUNCH();
    });
  });
}

void launch_scale(DType t, const FlatTensor* tensors, int count, double factor,
                  float* found_inf, cudaStream_t s) {
  dispatch_float(t, "scale_grads", [&]<typename T>() {
    multi_tensor(tensors, count, [&](const TensorList<FlatTensor>& list, unsigned blocks) {
      scale_kernel<T><<<blocks, kThreads, 0, s>>>(list, acc_t<T>(factor), found_inf);
      NN_CUDA_CHECK_LAUNCH();
    });
  });
}

void launch_clip(DType t, const FlatTensor* tensors, int count, const double* sum_squares,
                 double max_norm, cudaStream_t s) {
  dispatch_float(t, "clip_grads", [&]<typename T>() {
    multi_tensor(tensors, count, [&](const TensorList<FlatTensor>& list, unsigned blocks) {
      clip_kernel<T><<<blocks, kThreads, 0, s>>>(list, sum_squares, max_norm);
      NN_CUDA_CHECK_LAUNCH();
    });
  });
}

int64_t sum_squares_partials(const FlatTensor* tensors, int count) {
  int64_t blocks = 0;
  for (int i = 0; i < count; ++i) blocks += ceil_div(tensors[i].n, int64_t(kThreads) * kPerThread);
  return blocks;
}

void launch_sum_squares(DType t, const FlatTensor* tensors, int count, void* partials, void* out,
                        cudaStream_t s) {
  dispatch_float(t, "sum_squares", [&]<typename T>() {
    using A = double;
    A* part = static_cast<A*>(partials);
    int64_t at = 0;  // each group's blocks write after the previous group's
    multi_tensor(tensors, count, [&](const TensorList<FlatTensor>& list, unsigned blocks) {
      sum_squares_kernel<T><<<blocks, kThreads, 0, s>>>(list, part + at);
      NN_CUDA_CHECK_LAUNCH();
      at += blocks;
    });
    sum_partials<A><<<1, 1024, 0, s>>>(part, at, static_cast<A*>(out));
    NN_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace nn::kernels
