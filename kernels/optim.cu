// Multi-tensor kernels: one launch over a list of tensors for the optimizer steps, gradient
// scaling and clipping, the sum of squares, and several copies at once (concat's parts).
#include "kernels/optim.cuh"

#include <algorithm>
#include <vector>

#include "kernels/clip.h"
#include "kernels/common.cuh"
#include "kernels/math.cuh"

namespace nn::kernels {
namespace {

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
    const A p0 = A(load(p[i])), gv = A(load(g[i])) + A(st.l2) * p0;
    const A mv = beta1 * A(load(m[i])) + (A(1) - beta1) * gv;
    const A vv = beta2 * A(load(v[i])) + (A(1) - beta2) * gv * gv;
    m[i] = convert<T>(mv);
    v[i] = convert<T>(vv);
    const A pv = p0 * A(st.decay);
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
