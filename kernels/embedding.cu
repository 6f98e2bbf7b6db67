// Rows of a table: gathered by index, their gradients scatter-added, and weighted bags.
#include "kernels/embedding.cuh"

#include "kernels/common.cuh"

namespace nn::kernels {
namespace {

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

}  // namespace

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

}  // namespace nn::kernels
