#include <algorithm>
#include <cfloat>

#include "kernels/reduce.cuh"

namespace nn::kernels {
namespace {

// Accumulator: float for 16-bit and f32, double for f64, int64 for integers.
template <typename T>
using racc_t = std::conditional_t<std::is_integral_v<T>, int64_t, acc_t<T>>;

template <typename A>
struct Combine {
  ReduceOp op;
  __device__ A identity() const {
    if (op == ReduceOp::sum || op == ReduceOp::mean) return A(0);
    if constexpr (std::is_integral_v<A>) return op == ReduceOp::max ? INT64_MIN : INT64_MAX;
    else return op == ReduceOp::max ? A(-INFINITY) : A(INFINITY);
  }
  __device__ A operator()(A a, A b) const {
    if (op == ReduceOp::sum || op == ReduceOp::mean) return a + b;
    if constexpr (!std::is_integral_v<A>) {
      if (a != a) return a;  // NaN propagates
      if (b != b) return b;
    }
    return op == ReduceOp::max ? (a > b ? a : b) : (a < b ? a : b);
  }
};

// Block-wide combine; the result is valid in thread 0.
template <typename A>
__device__ A block_combine(A v, const Combine<A>& c) {
  __shared__ A shared[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int o = 16; o > 0; o /= 2) v = c(v, __shfl_down_sync(0xffffffffu, v, o));
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  const int warps = (blockDim.x + 31) / 32;
  v = int(threadIdx.x) < warps ? shared[threadIdx.x] : c.identity();
  if (warp == 0)
    for (int o = 16; o > 0; o /= 2) v = c(v, __shfl_down_sync(0xffffffffu, v, o));
  return v;
}

// v combined with p[i * stride] for i = first, first + step, ... below n, four loads in
// flight per thread (one accumulator each).
template <typename T, typename A>
__device__ __forceinline__ A combine_strided(const T* p, int64_t first, int64_t step, int64_t n,
                                             int64_t stride, A v, const Combine<A>& c) {
  A v1 = c.identity(), v2 = c.identity(), v3 = c.identity();
  int64_t i = first;
  for (; i + 3 * step < n; i += 4 * step) {
    const A x0 = A(load(p[i * stride])), x1 = A(load(p[(i + step) * stride]));
    const A x2 = A(load(p[(i + 2 * step) * stride])), x3 = A(load(p[(i + 3 * step) * stride]));
    v = c(v, x0);
    v1 = c(v1, x1);
    v2 = c(v2, x2);
    v3 = c(v3, x3);
  }
  for (; i < n; i += step) v = c(v, A(load(p[i * stride])));
  return c(c(v, v1), c(v2, v3));
}

// v combined with p[i] for i = first, first + step, ... below n, read as four-element vectors
// (16 bytes of f32) where p is aligned to one, four vectors in flight per thread; the last
// n % 4 elements one by one. Elsewhere combine_strided's loads.
template <typename T, typename A>
__device__ __forceinline__ A combine_contiguous(const T* p, int64_t first, int64_t step, int64_t n,
                                                A v, const Combine<A>& c) {
  if (reinterpret_cast<uintptr_t>(p) % sizeof(Quad<T>) != 0)
    return combine_strided(p, first, step, n, 1, v, c);
  const Quad<T>* q = reinterpret_cast<const Quad<T>*>(p);
  const int64_t nq = n / 4;
  A v1 = c.identity();
  auto add = [&](A& acc, const Quad<T>& x) {
#pragma unroll
    for (int j = 0; j < 4; ++j) acc = c(acc, A(load(x.v[j])));
  };
  int64_t i = first;
  for (; i + 3 * step < nq; i += 4 * step) {
    const Quad<T> x0 = q[i], x1 = q[i + step], x2 = q[i + 2 * step], x3 = q[i + 3 * step];
    add(v, x0);
    add(v1, x1);
    add(v, x2);
    add(v1, x3);
  }
  for (; i < nq; i += step) add(v, q[i]);
  for (int64_t j = 4 * nq + first; j < n; j += step) v = c(v, A(load(p[j])));
  return c(v, v1);
}

// The result as the output holds it (mean divides by the count).
template <typename T, typename A>
__device__ __forceinline__ T finished(A v, const Combine<A>& c, double count) {
  if (c.op == ReduceOp::mean) v = A(double(v) / count);
  return convert<T>(v);
}

// B > 1: block (k, s) combines rows a in its share of A (or, when A is small, its share of
// B) for output k into ws[k * S + s].
template <typename T, typename A>
__global__ void reduce_rows(const T* x, int64_t Adim, int64_t K, int64_t B, int S, Combine<A> c,
                            A* ws) {
  const int64_t k = blockIdx.x;
  const int s = blockIdx.y;
  A v = c.identity();
  if (Adim >= S) {
    for (int64_t a = s; a < Adim; a += S)
      v = combine_contiguous(x + (a * K + k) * B, int64_t(threadIdx.x), int64_t(blockDim.x), B, v, c);
  } else {
    for (int64_t a = 0; a < Adim; ++a)
      v = combine_contiguous(x + (a * K + k) * B, int64_t(s) * blockDim.x + threadIdx.x,
                             int64_t(S) * blockDim.x, B, v, c);
  }
  v = block_combine(v, c);
  if (threadIdx.x == 0) ws[k * S + s] = v;
}

// Short rows and many outputs (no split: S == 1): one warp per output, eight per block,
// written straight to out. A block per output spent more time combining its 256 threads and
// starting than reading a row of a thousand elements (49% of a copy's rate on an H200).
template <typename T, typename A>
__global__ void reduce_rows_warp(const T* x, int64_t Adim, int64_t K, int64_t B, Combine<A> c,
                                 double count, T* out) {
  const int64_t k = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (k >= K) return;  // the whole warp: k is the same for its lanes
  A v = c.identity();
  for (int64_t a = 0; a < Adim; ++a) v = combine_contiguous(x + (a * K + k) * B, lane, 32, B, v, c);
  for (int o = 16; o > 0; o /= 2) v = c(v, __shfl_down_sync(0xffffffffu, v, o));
  if (lane == 0) out[k] = finished<T>(v, c, count);
}

// B == 1: columns. Threads x run over k (coalesced), threads y and blocks y over a.
template <typename T, typename A>
__global__ void reduce_columns(const T* x, int64_t Adim, int64_t K, int S, Combine<A> c, A* ws) {
  __shared__ A part[8][33];
  const int64_t k = int64_t(blockIdx.x) * 32 + threadIdx.x;
  A v = c.identity();
  if (k < K)
    v = combine_strided(x + k, int64_t(blockIdx.y) * 8 + threadIdx.y, int64_t(S) * 8, Adim, K, v, c);
  part[threadIdx.y][threadIdx.x] = v;
  __syncthreads();
  if (threadIdx.y == 0 && k < K) {
    for (int i = 1; i < 8; ++i) v = c(v, part[i][threadIdx.x]);
    ws[k * S + blockIdx.y] = v;
  }
}

// One warp per output combines its S partials.
template <typename T, typename A>
__global__ void reduce_finish(const A* ws, int64_t K, int S, Combine<A> c, double count, T* out) {
  const int64_t k = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (k >= K) return;  // the whole warp: k is the same for its lanes
  A v = c.identity();
  for (int s = lane; s < S; s += 32) v = c(v, ws[k * S + s]);
  for (int o = 16; o > 0; o /= 2) v = c(v, __shfl_down_sync(0xffffffffu, v, o));
  if (lane == 0) out[k] = finished<T>(v, c, count);
}

template <typename T>
__global__ void argmax_rows(const T* x, int64_t D, int64_t* out) {
  const T* row = x + int64_t(blockIdx.x) * D;
  using A = acc_t<T>;
  A best = A(0);
  int64_t arg = -1;
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
    A v = A(load(row[i]));
    bool nan_v = v != v, nan_b = best != best;
    if (arg < 0 || (!nan_b && (nan_v || v > best))) { best = v; arg = i; }
  }
  __shared__ A sv[kThreads];
  __shared__ int64_t si[kThreads];
  sv[threadIdx.x] = best;
  si[threadIdx.x] = arg;
  __syncthreads();
  for (int o = blockDim.x / 2; o > 0; o /= 2) {
    if (int(threadIdx.x) < o) {
      A v = sv[threadIdx.x + o], b = sv[threadIdx.x];
      int64_t iv = si[threadIdx.x + o], ib = si[threadIdx.x];
      bool take = iv >= 0 && (ib < 0 || (b == b && (v != v || v > b || (v == b && iv < ib))) ||
                              (b != b && v != v && iv < ib));
      if (take) { sv[threadIdx.x] = v; si[threadIdx.x] = iv; }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = si[0];
}

// Outputs of up to this many elements (with one split each) take a warp each.
constexpr int64_t kWarpRowMax = 4096;

// Splits per output of a reduction of (A, K, B) over A and B; 0 where a warp per output
// takes it, written straight to the output (no workspace).
int reduce_splits(int64_t A, int64_t K, int64_t B) {
  if (B == 1) return work_splits(ceil_div(K, 32), ceil_div(A, 8), 64);
  const int S = work_splits(K, A * B, 4096);
  return S == 1 && A * B <= kWarpRowMax ? 0 : S;
}
}  // namespace

size_t reduce_workspace_bytes(DType t, int64_t A, int64_t K, int64_t B) {
  size_t acc = (t == DType::f64 || t == DType::i32 || t == DType::i64 || t == DType::u8) ? 8 : 4;
  return size_t(K) * size_t(reduce_splits(A, K, B)) * acc;
}

void launch_reduce(ReduceOp op, DType t, const void* x, int64_t A, int64_t K, int64_t B,
                   void* out, void* workspace, cudaStream_t s) {
  if (K == 0) return;
  dispatch_all(t, [&]<typename T>() {
    using Ac = racc_t<T>;
    Combine<Ac> c{op};
    Ac* ws = static_cast<Ac*>(workspace);
    const T* px = static_cast<const T*>(x);
    const int S = reduce_splits(A, K, B);
    if (S == 0) {
      reduce_rows_warp<T, Ac><<<grid_for(K * 32), kThreads, 0, s>>>(
          px, A, K, B, c, double(A) * double(B), static_cast<T*>(out));
      NN_CUDA_CHECK_LAUNCH();
      return;
    }
    if (B == 1) {
      reduce_columns<T, Ac><<<dim3(blocks_exact(ceil_div(K, 32), "reduce"), unsigned(S)), dim3(32, 8), 0, s>>>(
          px, A, K, S, c, ws);
    } else {
      reduce_rows<T, Ac><<<dim3(blocks_exact(K, "reduce"), unsigned(S)), kThreads, 0, s>>>(px, A, K, B, S, c, ws);
    }
    NN_CUDA_CHECK_LAUNCH();
    reduce_finish<T, Ac><<<grid_for(K * 32), kThreads, 0, s>>>(ws, K, S, c, double(A) * double(B),
                                                           static_cast<T*>(out));
    NN_CUDA_CHECK_LAUNCH();
  });
}

void launch_argmax(DType t, const void* x, int64_t rows, int64_t D, int64_t* out, cudaStream_t s) {
  if (rows == 0) return;
  dispatch_all(t, [&]<typename T>() {
    argmax_rows<T><<<blocks_exact(rows, "argmax"), kThreads, 0, s>>>(static_cast<const T*>(x), D, out);
    NN_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace nn::kernels
