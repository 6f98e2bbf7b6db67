// CPU embedding family: gather rows by index, scatter-add gradient rows back.
#include <cstring>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/parallel.h"

namespace nn::backend {
using namespace nn::cpu;

void CpuBackend::gather_rows(const Tensor& src, const Tensor& index, Tensor& out) {
  const int64_t V = src.shape()[0], M = index.numel();
  const size_t row = src.numel() == 0 ? 0 : src.nbytes() / size_t(V);
  for (int64_t i = 0; i < M; ++i) {
    int64_t r = index_at(index, i);
    NN_CHECK(r >= 0 && r < V, "index ", r, " at position ", i, " is out of range for ", V,
             " rows");
  }
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
    for (int64_t i = 0; i < M; ++i) {
      int64_t r = index_at(index, i);
      NN_CHECK(r >= 0 && r < V, "index ", r, " at position ", i, " is out of range for ", V,
               " rows");
    }
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

}  // namespace nn::backend
