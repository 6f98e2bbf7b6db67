#include "kernels/math.cuh"
#include "kernels/softmax.cuh"

namespace nn::kernels {
namespace {

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ double warp_max(double v) {
  for (int o = 16; o > 0; o /= 2) v = fmax(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// One warp per row of a last-dim softmax (inner == 1).
template <typename T>
__global__ void softmax_rows(const T* x, T* y, int64_t rows, int64_t D, bool log) {
  using A = acc_t<T>;
  const int64_t r = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  const T* xr = x + r * D;
  T* yr = y + r * D;
  A m = A(-INFINITY);
  for (int64_t i = lane; i < D; i += 32) m = fmax(m, A(load(xr[i])));
  m = warp_max(m);
  if (m == A(-INFINITY)) m = A(0);  // a row of -inf: avoid inf - inf
  A sum = 0;
  for (int64_t i = lane; i < D; i += 32) sum += m_exp(A(load(xr[i])) - m);
  sum = warp_sum(sum);
  // (x - m) - log(sum): rounding m + log(sum) first would cost log(sum) the bits of m's size
  const A ls = m_log(sum), inv = A(1) / sum;
  for (int64_t i = lane; i < D; i += 32) {
    A v = A(load(xr[i]));
    yr[i] = convert<T>(log ? (v - m) - ls : m_exp(v - m) * inv);
  }
}

// Rows of up to 32 * kHeldPerLane elements: the row is read once into registers (kHeldPerLane
// a lane), and its max, its sum and the output come from there. softmax_rows reads a row
// three times (75% of a copy's rate on an H200 at D = 1024, `kernels_bench --device cuda`,
// 2026-11-30). The same sums in the same order as softmax_rows.
constexpr int kHeldPerLane = 32;
template <typename T>
__global__ void softmax_rows_held(const T* x, T* y, int64_t rows, int64_t D, bool log) {
  using A = acc_t<T>;
  const int64_t r = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  const T* xr = x + r * D;
  T* yr = y + r * D;
  A v[kHeldPerLane];
  A m = A(-INFINITY);
#pragma unroll
  for (int j = 0; j < kHeldPerLane; ++j) {
    const int64_t i = lane + 32 * j;
    v[j] = i < D ? A(load(xr[i])) : A(-INFINITY);
    m = fmax(m, v[j]);
  }
  m = warp_max(m);
  if (m == A(-INFINITY)) m = A(0);  // a row of -inf: avoid inf - inf
  A sum = 0;
#pragma unroll
  for (int j = 0; j < kHeldPerLane; ++j)
    if (lane + 32 * j < D) sum += m_exp(v[j] - m);
  sum = warp_sum(sum);
  const A ls = m_log(sum), inv = A(1) / sum;  // (as softmax_rows)
#pragma unroll
  for (int j = 0; j < kHeldPerLane; ++j) {
    const int64_t i = lane + 32 * j;
    if (i < D) yr[i] = convert<T>(log ? (v[j] - m) - ls : m_exp(v[j] - m) * inv);
  }
}

// One thread per (outer, inner) column when the dim is not the last (coalesced over inner).
template <typename T>
__global__ void softmax_columns(const T* x, T* y, int64_t outer, int64_t D, int64_t inner,
                                bool log) {
  using A = acc_t<T>;
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= outer * inner) return;
  const int64_t base = (c / inner) * D * inner + c % inner;
  A m = A(-INFINITY);
  for (int64_t d = 0; d < D; ++d) m = fmax(m, A(load(x[base + d * inner])));
  if (m == A(-INFINITY)) m = A(0);
  A sum = 0;
  for (int64_t d = 0; d < D; ++d) sum += m_exp(A(load(x[base + d * inner])) - m);
  const A ls = m_log(sum), inv = A(1) / sum;  // (as softmax_rows)
  for (int64_t d = 0; d < D; ++d) {
    A v = A(load(x[base + d * inner]));
    y[base + d * inner] = convert<T>(log ? (v - m) - ls : m_exp(v - m) * inv);
  }
}

// Backward over (outer, D, inner): softmax dx = y (g - sum(g y)); log_softmax dx = g - e^y sum(g).
template <typename T>
__global__ void softmax_backward_kernel(const T* g, const T* y, T* gx, int64_t outer, int64_t D,
                                        int64_t inner, bool log) {
  using A = acc_t<T>;
  const bool rows = inner == 1;
  const int64_t c = rows ? (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32
                         : int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int lane = rows ? threadIdx.x % 32 : 0, step = rows ? 32 : 1;
  if (c >= outer * inner) return;
  const int64_t base = (c / inner) * D * inner + c % inner;
  A acc = 0;
  for (int64_t d = lane; d < D; d += step) {
    A gv = A(load(g[base + d * inner]));
    acc += log ? gv : gv * A(load(y[base + d * inner]));
  }
  if (rows) acc = warp_sum(acc);
  for (int64_t d = lane; d < D; d += step) {
    const int64_t i = base + d * inner;
    A gv = A(load(g[i])), yv = A(load(y[i]));
    gx[i] = convert<T>(log ? gv - m_exp(yv) * acc : yv * (gv - acc));
  }
}

template <typename T>
__global__ void cross_entropy_kernel(const T* x, const int64_t* target, int64_t N, int64_t C,
                                     double smoothing, int64_t ignore, T* loss, acc_t<T>* lse,
                                     int* bad) {
  using A = acc_t<T>;
  const int64_t r = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (r >= N) return;
  const T* xr = x + r * C;
  A m = A(-INFINITY), rowsum = 0;
  for (int64_t i = lane; i < C; i += 32) {
    A v = A(load(xr[i]));
    m = fmax(m, v);
    rowsum += v;
  }
  m = warp_max(m);
  rowsum = warp_sum(rowsum);
  A s = 0;
  for (int64_t i = lane; i < C; i += 32) s += m_exp(A(load(xr[i])) - m);
  s = warp_sum(s);
  if (lane != 0) return;
  // the loss in double, as the CPU's: log(s) keeps its bits beside a large m
  const double l = double(m) + log(double(s));
  lse[r] = A(l);
  const int64_t t = target[r];
  if (t == ignore) {
    loss[r] = convert<T>(A(0));
  } else if (t < 0 || t >= C) {
    *bad = 1;
    loss[r] = convert<T>(A(NAN));
  } else {
    // the smoothing term only when there is smoothing: 0 * (-inf) from a masked logit is NaN
    const double smooth = smoothing != 0 ? smoothing / double(C) * double(rowsum) : 0.0;
    loss[r] = convert<T>(A(l - (1.0 - smoothing) * double(load(xr[t])) - smooth));
  }
}

template <typename T>
__global__ void cross_entropy_backward_kernel(const T* g, const T* x, const int64_t* target,
                                              const acc_t<T>* lse, int64_t N, int64_t C,
                                              double smoothing, int64_t ignore, T* gx) {
  using A = acc_t<T>;
  const int64_t n = N * C, stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t r = i / C, c = i % C, t = target[r];
    if (t == ignore) { gx[i] = convert<T>(A(0)); continue; }
    // p = 0 at a -inf logit, as on the CPU (a row all -inf has a NaN log-sum-exp)
    const A v = A(load(x[i]));
    const A p = v == A(-INFINITY) ? A(0) : m_exp(v - lse[r]);
    A d = p - A(smoothing) / A(C) - (c == t ? A(1) - A(smoothing) : A(0));
    gx[i] = convert<T>(A(load(g[r])) * d);
  }
}

}  // namespace

void launch_softmax(DType t, const void* x, void* y, int64_t outer, int64_t D, int64_t inner,
                    bool log, cudaStream_t s) {
  if (outer * D * inner == 0) return;
  dispatch_float(t, "softmax", [&]<typename T>() {
    if (inner == 1 && D <= 32 * kHeldPerLane)
      softmax_rows_held<T><<<grid_for(outer * 32), kThreads, 0, s>>>(
          static_cast<const T*>(x), static_cast<T*>(y), outer, D, log);
    else if (inner == 1)
      softmax_rows<T><<<grid_for(outer * 32), kThreads, 0, s>>>(
          static_cast<const T*>(x), static_cast<T*>(y), outer, D, log);
    else
      softmax_columns<T><<<grid_for(outer * inner), kThreads, 0, s>>>(
          static_cast<const T*>(x), static_cast<T*>(y), outer, D, inner, log);
    NN_CUDA_CHECK_LAUNCH();
  });
}

void launch_softmax_backward(DType t, const void* grad, const void* y, void* grad_x,
                             int64_t outer, int64_t D, int64_t inner, bool log, cudaStream_t s) {
  if (outer * D * inner == 0) return;
  dispatch_float(t, "softmax_backward", [&]<typename T>() {
    int64_t threads = inner == 1 ? outer * 32 : outer * inner;
    softmax_backward_kernel<T><<<grid_for(threads), kThreads, 0, s>>>(
        static_cast<const T*>(grad), static_cast<const T*>(y), static_cast<T*>(grad_x), outer,
        D, inner, log);
    NN_CUDA_CHECK_LAUNCH();
  });
}

void launch_cross_entropy(DType t, const void* logits, const int64_t* target, int64_t N,
                          int64_t C, double smoothing, int64_t ignore_index, void* loss,
                          void* lse, int* bad, cudaStream_t s) {
  if (N == 0) return;
  dispatch_float(t, "cross_entropy", [&]<typename T>() {
    cross_entropy_kernel<T><<<grid_for(N * 32), kThreads, 0, s>>>(
        static_cast<const T*>(logits), target, N, C, smoothing, ignore_index,
        static_cast<T*>(loss), static_cast<acc_t<T>*>(lse), bad);
    NN_CUDA_CHECK_LAUNCH();
  });
}

void launch_cross_entropy_backward(DType t, const void* grad_loss, const void* logits,
                                   const int64_t* target, const void* lse, int64_t N, int64_t C,
                                   double smoothing, int64_t ignore_index, void* grad_logits,
                                   cudaStream_t s) {
  if (N * C == 0) return;
  dispatch_float(t, "cross_entropy_backward", [&]<typename T>() {
    cross_entropy_backward_kernel<T><<<grid_for(N * C), kThreads, 0, s>>>(
        static_cast<const T*>(grad_loss), static_cast<const T*>(logits), target,
        static_cast<const acc_t<T>*>(lse), N, C, smoothing, ignore_index,
        static_cast<T*>(grad_logits));
    NN_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace nn::kernels
