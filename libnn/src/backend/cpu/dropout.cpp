// CPU dropout: the keep mask comes from Philox at (seed, offset + i / 4, lane i % 4), the
// same stream the CUDA kernel draws, so a mask does not depend on threads or launch layout.
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/parallel.h"
#include "backend/cpu/philox_batch.h"

namespace nn::backend {
using namespace nn::cpu;

void CpuBackend::dropout_forward(const Tensor& x, double p, uint64_t seed, uint64_t offset,
                                 Tensor& out, Tensor& mask) {
  dispatch_float(x.dtype(), "dropout", [&]<typename T>() {
    const T* px = x.data<T>();
    T* po = out.data<T>();
    uint8_t* pm = mask.data<uint8_t>();
    const int64_t n = x.numel(), blocks = (n + 3) / 4;
    const T scale = T(1.0 / (1.0 - p));
    const float pf = float(p);
    // Threads take whole batches of counters; element i uses counter offset + i / 4.
    const int64_t batches = (blocks + kPhiloxBatch - 1) / kPhiloxBatch;
    parallel_for(0, batches, std::max<int64_t>(1, kGrain / (4 * kPhiloxBatch)), [&](int64_t b, int64_t e) {
      uint32_t r[4][kPhiloxBatch];
      float u[4 * kPhiloxBatch];
      for (int64_t bt = b; bt < e; ++bt) {
        const int64_t blk0 = bt * kPhiloxBatch;
        philox_batch(seed, offset + uint64_t(blk0), r);
        for (int lane = 0; lane < 4; ++lane)
          for (int k = 0; k < kPhiloxBatch; ++k) u[4 * k + lane] = rng::to_uniform(r[lane][k]);
        const int64_t i0 = blk0 * 4, n_here = std::min<int64_t>(4 * kPhiloxBatch, n - i0);
        const T* xi = px + i0;
        T* oi = po + i0;
        uint8_t* mi = pm + i0;
#pragma omp simd
        for (int64_t j = 0; j < n_here; ++j) {
          bool keep = u[j] >= pf;
          mi[j] = keep;
          oi[j] = keep ? xi[j] * scale : T(0);
        }
      }
    });
  });
}

void CpuBackend::dropout_backward(const Tensor& grad, const Tensor& mask, double p,
                                  Tensor& grad_x) {
  dispatch_float(grad.dtype(), "dropout_backward", [&]<typename T>() {
    const T scale = T(1.0 / (1.0 - p));
    map<T, T, uint8_t>(grad_x, [scale](T g, uint8_t m) { return m ? g * scale : T(0); }, grad,
                       mask);
  });
}

}  // namespace nn::backend
