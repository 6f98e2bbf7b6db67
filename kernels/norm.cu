// Layer norm, forward and backward (a block or a warp per row), and dropout + residual add +
// layer norm in one pass.
#include "kernels/norm.cuh"

#include <algorithm>
#include <type_traits>

#include "kernels/common.cuh"
#include "kernels/math.cuh"
#include "kernels/philox.h"

namespace nn::kernels {
namespace {

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

}  // namespace

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

}  // namespace nn::kernels

// ---- batch norm over channels-last data -------------------------------------------------
namespace nn::kernels {
namespace {

// Rows per block of bn_nhwc_partials (threads x: 32 channels), and rows in flight per thread:
// a warp's row of 16-bit data is 64 bytes, so twice as many of those.
constexpr int kBnRows = 8;
template <typename T>
constexpr int kBnUnroll = sizeof(T) == 2 ? 8 : 4;

// Mean and sum of squared deviations of a set of n values (Chan et al.'s pairwise merge).
struct Moments {
  double n = 0, mean = 0, m2 = 0;
  __device__ void merge(const Moments& o) {
    if (o.n == 0) return;
    if (n == 0) { *this = o; return; }
    const double t = n + o.n, d = o.mean - mean;
    mean += d * (o.n / t);
    m2 += o.m2 + d * d * (n * (o.n / t));
    n = t;
  }
};

// Rows of split s of bn_nhwc_partials (r = s * kBnRows + y + k * S * kBnRows below R, for
// y < kBnRows): kBnRows a whole round of S * kBnRows rows, and its share of the last round.
__device__ __forceinline__ int64_t bn_split_rows(int64_t R, int S, int s) {
  const int64_t step = int64_t(S) * kBnRows, left = R % step - int64_t(s) * kBnRows;
  return R / step * kBnRows + (left < 0 ? 0 : left > kBnRows ? kBnRows : left);
}

// Per-channel partials over row splits: threads x run over 32 channels (coalesced), threads
// y and blocks y over rows. Forward: sums of d = x - m and d^2 with m the split's first value
// (so that the squares' sum is no difference of large numbers, and an outlier there shifts one
// split's values, not the channel's), written as the split's mean deviation from m and its
// squared deviations from its mean; bn_nhwc_finish adds m back in double. Backward: sums of g
// and of g (x - mean), mean the saved one. Channel c's split s writes ws[c * S + s] and
// ws[(C + c) * S + s].
template <bool kBackward, typename T>
__global__ void bn_nhwc_partials(const T* x, const T* g, const float* mean, int64_t R,
                                 int64_t C, int S, float* ws) {
  __shared__ float pa[kBnRows][33], pb[kBnRows][33];
  const int64_t c = int64_t(blockIdx.x) * 32 + threadIdx.x;
  const int64_t step = int64_t(S) * kBnRows;
  float a = 0, b = 0, m = 0;
  if (c < C) {
    m = kBackward ? mean[c] : float(load(x[int64_t(blockIdx.y) * kBnRows * C + c]));
    auto add = [&](float xv, float gv) {
      const float d = xv - m;
      a += kBackward ? gv : d;
      b += kBackward ? gv * d : d * d;
    };
    int64_t r = int64_t(blockIdx.y) * kBnRows + threadIdx.y;
    constexpr int U = kBnUnroll<T>;
    for (; r + (U - 1) * step < R; r += U * step) {
      float xv[U], gv[U];
#pragma unroll
      for (int j = 0; j < U; ++j) {
        xv[j] = float(load(x[(r + j * step) * C + c]));
        gv[j] = kBackward ? float(load(g[(r + j * step) * C + c])) : 0.f;
      }
#pragma unroll
      for (int j = 0; j < U; ++j) add(xv[j], gv[j]);
    }
    for (; r < R; r += step) add(float(load(x[r * C + c])), kBackward ? float(load(g[r * C + c])) : 0.f);
  }
  pa[threadIdx.y][threadIdx.x] = a;
  pb[threadIdx.y][threadIdx.x] = b;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    for (int i = 1; i < kBnRows; ++i) {
      a += pa[i][threadIdx.x];
      b += pb[i][threadIdx.x];
    }
    if (!kBackward) {
      const float n = float(bn_split_rows(R, S, blockIdx.y)), d = a / n, v = b - a * d;
      a = d;                  // the split's mean, less m
      b = v < 0.f ? 0.f : v;  // its squared deviations (NaN stays NaN)
    }
    ws[c * S + blockIdx.y] = a;
    ws[(C + c) * S + blockIdx.y] = b;
  }
}

// The per-channel f32 arrays of a pass, null where not wanted (the running statistics, the
// parameter gradients): the forward writes mean, invstd and the running statistics, the
// backward reads saved_mean and saved_invstd and writes the parameters' gradients.
struct BnChannels {
  const float* w = nullptr;
  const float* b = nullptr;
  float* mean = nullptr;
  float* invstd = nullptr;
  float* running_mean = nullptr;
  float* running_var = nullptr;
  const float* saved_mean = nullptr;
  const float* saved_invstd = nullptr;
  float* grad_w = nullptr;
  float* grad_b = nullptr;
};

// A warp per channel (its lanes over the splits, then merged across the warp; a thread per
// channel took S serial merges, 528 for ResNet-50's first stage at batch 256): the splits
// merged in double, then the statistics and the coefficients of the pass that writes the
// output, into coef[5 C] (p, q, r, and the mean as hi + lo, so that x - mean keeps its bits
// where the mean is large beside the spread).
// Forward: out = p ((x - hi) - lo) + r with p = w invstd, r = b; the mean, 1 / sqrt(var +
// eps) (var biased) and the running statistics (var unbiased, as the CPU backend).
// Backward: grad_b = sum g, grad_w = invstd sum g (x - mean), and grad_x = a (g - grad_b / n -
// xhat grad_w / n) with a = w invstd, xhat = (x - mean) invstd: out = p g + q ((x - hi) - lo)
// + r with p = a, q = -a invstd grad_w / n, r = -a grad_b / n.
template <bool kBackward, typename T>
__global__ void bn_nhwc_finish(const float* ws, const T* x, int64_t R, int64_t C, int S,
                               double eps, double momentum, BnChannels ch, float* coef) {
  const int64_t c = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (c >= C) return;  // the whole warp: c is the same for its lanes
  const double n = double(R);
  float* p = coef;
  float* q = coef + C;
  float* r = coef + 2 * C;
  float* hi = coef + 3 * C;
  float* lo = coef + 4 * C;
  if (!kBackward) {
    Moments mo;
    for (int s = lane; s < S; s += 32)
      mo.merge(Moments{double(bn_split_rows(R, S, s)),
                               double(load(x[int64_t(s) * kBnRows * C + c])) + ws[c * S + s],
                               ws[(C + c) * S + s]});
    for (int o = 16; o > 0; o /= 2)
      mo.merge(Moments{__shfl_down_sync(0xffffffffu, mo.n, o),
                               __shfl_down_sync(0xffffffffu, mo.mean, o),
                               __shfl_down_sync(0xffffffffu, mo.m2, o)});
    if (lane != 0) return;
    const double m = mo.mean, var = mo.m2 / n;
    const double is = 1.0 / sqrt(var + eps);
    ch.mean[c] = float(m);
    ch.invstd[c] = float(is);
    if (ch.running_mean)
      ch.running_mean[c] = float((1 - momentum) * ch.running_mean[c] + momentum * m);
    if (ch.running_var)
      ch.running_var[c] = float((1 - momentum) * ch.running_var[c] +
                                momentum * (R > 1 ? var * n / (n - 1) : var));
    p[c] = float(double(ch.w[c]) * is);
    q[c] = 0.f;
    r[c] = ch.b[c];
    hi[c] = float(m);
    lo[c] = float(m - double(hi[c]));
  } else {
    double a = 0, b = 0;
    for (int s = lane; s < S; s += 32) {
      a += ws[c * S + s];
      b += ws[(C + c) * S + s];
    }
    a = warp_sum(a);
    b = warp_sum(b);
    if (lane != 0) return;
    const double is = ch.saved_invstd[c], gw = b * is;
    if (ch.grad_b) ch.grad_b[c] = float(a);
    if (ch.grad_w) ch.grad_w[c] = float(gw);
    const double pc = double(ch.w[c]) * is, qc = -pc * is * gw / n;
    p[c] = float(pc);
    q[c] = float(qc);
    r[c] = float(-pc * a / n);
    hi[c] = ch.saved_mean[c];
    lo[c] = 0.f;  // (the saved mean is the f32 the partials took)
  }
}

// Forward: out = p[c] ((x - hi[c]) - lo[c]) + r[c] (g unused); backward: out = p[c] g +
// q[c] ((x - hi[c]) - lo[c]) + r[c]; over R x C, four elements a step where C is a
// multiple of four and every pointer is aligned to its quads.
template <bool kBackward, bool kQuads, typename T>
__global__ void bn_nhwc_apply(const T* x, const T* g, const float* coef, int64_t R, int64_t C,
                              T* out) {
  const float* p = coef;
  const float* q = coef + C;
  const float* r = coef + 2 * C;
  const float* hi = coef + 3 * C;
  const float* lo = coef + 4 * C;
  // one output from its channel's coefficients
  auto one = [](float xv, float gv, float pc, float qc, float rc, float hc, float lc) {
    const float d = (xv - hc) - lc;
    return kBackward ? pc * gv + qc * d + rc : pc * d + rc;
  };
  const int64_t n = R * C, stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  // (a 32-bit remainder where the sizes allow: a 64-bit one is a long instruction sequence)
  const bool narrow = n <= int64_t(UINT32_MAX);
  if (kQuads) {
    const Quad<T>* xq = reinterpret_cast<const Quad<T>*>(x);
    const Quad<T>* gq = reinterpret_cast<const Quad<T>*>(g);
    Quad<T>* oq = reinterpret_cast<Quad<T>*>(out);
    // the coefficients of four channels as one vector each (C % 4 == 0: c0 is a multiple of 4)
    auto quad = [&](const float* v, int64_t c0) { return reinterpret_cast<const Quad<float>*>(v)[c0 / 4]; };
    for (int64_t i = first; i < n / 4; i += stride) {
      const int64_t c0 = narrow ? int64_t(uint32_t(4 * i) % uint32_t(C)) : (4 * i) % C;
      const Quad<T> a = xq[i];
      Quad<T> b{}, o;
      if (kBackward) b = gq[i];
      const Quad<float> pq = quad(p, c0), rq = quad(r, c0), hq = quad(hi, c0), lq = quad(lo, c0);
      Quad<float> qq{};
      if (kBackward) qq = quad(q, c0);
#pragma unroll
      for (int j = 0; j < 4; ++j)
        o.v[j] = convert<T>(one(float(load(a.v[j])), kBackward ? float(load(b.v[j])) : 0.f,
                                pq.v[j], qq.v[j], rq.v[j], hq.v[j], lq.v[j]));
      oq[i] = o;
    }
  } else {
    for (int64_t i = first; i < n; i += stride) {
      const int64_t c = narrow ? int64_t(uint32_t(i) % uint32_t(C)) : i % C;
      out[i] = convert<T>(one(float(load(x[i])), kBackward ? float(load(g[i])) : 0.f, p[c], q[c],
                              r[c], hi[c], lo[c]));
    }
  }
}

// Row splits of each tile of 32 channels (work_splits), with at least kBnRows * 64 = 512 rows
// and, where the 1024 splits allow, at most 8192 a split: a split's squared deviations are
// summed in f32 from its first value, and an outlier there costs more the longer the split
// (a value 100 standard deviations out: a relative error of 1.3e-3 in the variance over
// 16,000 rows, 6.5e-2 over a million).
int bn_splits(int64_t R, int64_t C) {
  return work_splits(ceil_div(C, 32), R, kBnRows * 64, ceil_div(R, 8192));
}

template <bool kBackward, typename T>
void launch_apply(const T* x, const T* g, const float* coef, int64_t R, int64_t C, T* out,
                  cudaStream_t s) {
  const bool quads = C % 4 == 0 && aligned_to(coef, sizeof(Quad<float>)) && aligned_to(x, sizeof(Quad<T>)) &&
                     aligned_to(out, sizeof(Quad<T>)) &&
                     (!kBackward || aligned_to(g, sizeof(Quad<T>)));
  if (quads)
    bn_nhwc_apply<kBackward, true, T><<<grid_for(R * C / 4), kThreads, 0, s>>>(x, g, coef, R, C, out);
  else
    bn_nhwc_apply<kBackward, false, T><<<grid_for(R * C), kThreads, 0, s>>>(x, g, coef, R, C, out);
  NN_CUDA_CHECK_LAUNCH();
}

}  // namespace

size_t batch_norm_nhwc_workspace_bytes(int64_t R, int64_t C) {
  return (size_t(2 * C) * size_t(bn_splits(R, C)) + size_t(5 * C)) * sizeof(float);
}

namespace {
// One pass of batch norm over channels-last data: the partial sums, the finish, and (where
// out is given) the pass that writes the output; g is the gradient in the backward.
template <bool kBackward>
void batch_norm_nhwc(DType t, const void* x, const void* g, int64_t R, int64_t C, double eps,
                     double momentum, const BnChannels& ch, void* out, void* workspace,
                     cudaStream_t s) {
  if (R == 0 || C == 0) return;
  const int S = bn_splits(R, C);
  float* ws = static_cast<float*>(workspace);
  float* coef = ws + 2 * C * S;
  dispatch_float(t, "batch_norm over channels-last data", [&]<typename T>() {
    if constexpr (std::is_same_v<T, double>) {
      NN_ERROR("batch_norm over channels-last data: f32, f16 or bf16 on CUDA, got f64");
    } else {
      const T* px = static_cast<const T*>(x);
      const T* pg = static_cast<const T*>(g);
      const dim3 grid(blocks_exact(ceil_div(C, 32), "batch_norm"), unsigned(S));
      bn_nhwc_partials<kBackward, T><<<grid, dim3(32, kBnRows), 0, s>>>(px, pg, ch.saved_mean, R, C, S, ws);
      NN_CUDA_CHECK_LAUNCH();
      bn_nhwc_finish<kBackward, T><<<grid_for(C * 32), kThreads, 0, s>>>(ws, px, R, C, S, eps,
                                                                         momentum, ch, coef);
      NN_CUDA_CHECK_LAUNCH();
      if (out) launch_apply<kBackward, T>(px, pg, coef, R, C, static_cast<T*>(out), s);
    }
  });
}
}  // namespace

void launch_batch_norm_nhwc_forward(DType t, const void* x, const float* w, const float* b,
                                    int64_t R, int64_t C, double eps, double momentum,
                                    float* running_mean, float* running_var, void* y,
                                    float* mean, float* invstd, void* workspace, cudaStream_t s) {
  const BnChannels ch{.w = w, .b = b, .mean = mean, .invstd = invstd,
                      .running_mean = running_mean, .running_var = running_var};
  batch_norm_nhwc<false>(t, x, nullptr, R, C, eps, momentum, ch, y, workspace, s);
}

void launch_batch_norm_nhwc_backward(DType t, const void* grad, const void* x, const float* w,
                                     const float* mean, const float* invstd, int64_t R,
                                     int64_t C, void* grad_x, float* grad_w, float* grad_b,
                                     void* workspace, cudaStream_t s) {
  const BnChannels ch{.w = w, .saved_mean = mean, .saved_invstd = invstd, .grad_w = grad_w,
                      .grad_b = grad_b};
  batch_norm_nhwc<true>(t, x, grad, R, C, 0.0, 0.0, ch, grad_x, workspace, s);
}

}  // namespace nn::kernels
