// CPU embedding family: gather rows by index, scatter-add gradient rows back, and weighted
// bags of rows (embedding_bag) without the gathered rows.
#include <algorithm>
#include <cstring>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/parallel.h"

namespace nn::backend {
using namespace nn::cpu;

namespace {
void check_rows(const Tensor& index, int64_t V) {
  for (int64_t i = 0, M = index.numel(); i < M; ++i) {
    int64_t r = index_at(index, i);
    NN_CHECK(r >= 0 && r < V, "index ", r, " at position ", i, " is out of range for ", V,
             " rows");
  }
}
}  // namespace

void CpuBackend::gather_rows(const Tensor& src, const Tensor& index, Tensor& out) {
  const int64_t V = src.shape()[0], M = index.numel();
  const size_t row = src.numel() == 0 ? 0 : src.nbytes() / size_t(V);
  check_rows(index, V);
  const char* ps = static_cast<const char*>(src.data_ptr());
  char* po = static_cast<char*>(out.data_ptr());
  parallel_for(0, M, std::max<int64_t>(1, int64_t(kGrain * 4 / (row + 1))), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) std::memcpy(po + i * row, ps + index_at(index, i) * row, row);
  });
}

void CpuBackend::scatter_add_rows(const Tensor& grad, const Tensor& index, int64_t skip_index,
                                  Tensor& out) {
  dispatch_float(grad.dtype(), "scatter_add_rows", [&]<typename T>() {
    const int64_t V = out.shape()[0], M = index.numel(), D = V ? out.numel() / V : 0;
    const T* pg = grad.data<T>();
    T* po = out.data<T>();
    check_rows(index, V);
    // Threads own column ranges, so repeated indices never race.
    parallel_for(0, D, 64, [&](int64_t b, int64_t e) {
      for (int64_t i = 0; i < M; ++i) {
        int64_t r = index_at(index, i);
        if (r == skip_index) continue;
        T* dst = po + r * D;
        const T* src = pg + i * D;
        for (int64_t k = b; k < e; ++k) dst[k] += src[k];
      }
    });
  });
}

void CpuBackend::embedding_bag_forward(const Tensor& table, const Tensor& index,
                                       const Tensor& weights, Tensor& out) {
  dispatch_float(table.dtype(), "embedding_bag", [&]<typename T>() {
    const int64_t V = table.shape()[0], D = table.shape()[1];
    const int64_t N = index.shape()[0], L = index.shape()[1];
    check_rows(index, V);
    const T* pt = table.data<T>();
    const T* pw = weights.data<T>();
    T* po = out.data<T>();
    parallel_for(0, N, std::max<int64_t>(1, kGrain / std::max<int64_t>(1, L * D)),
                 [&](int64_t b, int64_t e) {
      for (int64_t n = b; n < e; ++n) {
        T* o = po + n * D;
        std::fill(o, o + D, T(0));
        for (int64_t l = 0; l < L; ++l) {
          const T w = pw[n * L + l];
          if (w == T(0)) continue;
          const T* row = pt + index_at(index, n * L + l) * D;
#pragma omp simd
          for (int64_t d = 0; d < D; ++d) o[d] += w * row[d];
        }
      }
    });
  });
}

void CpuBackend::embedding_bag_backward(const Tensor& grad, const Tensor& index,
                                        const Tensor& weights, Tensor& grad_table) {
  dispatch_float(grad.dtype(), "embedding_bag_backward", [&]<typename T>() {
    const int64_t V = grad_table.shape()[0], D = grad_table.shape()[1];
    const int64_t N = index.shape()[0], L = index.shape()[1];
    check_rows(index, V);
    const T* pg = grad.data<T>();
    const T* pw = weights.data<T>();
    T* pt = grad_table.data<T>();
    // Threads own column ranges, so bags sharing a row never race.
    parallel_for(0, D, 16, [&](int64_t b, int64_t e) {
      for (int64_t n = 0; n < N; ++n) {
        const T* g = pg + n * D;
        for (int64_t l = 0; l < L; ++l) {
          const T w = pw[n * L + l];
          if (w == T(0)) continue;
          T* dst = pt + index_at(index, n * L + l) * D;
#pragma omp simd
          for (int64_t d = b; d < e; ++d) dst[d] += w * g[d];
        }
      }
    });
  });
}

}  // namespace nn::backend
