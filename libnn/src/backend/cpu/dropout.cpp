// CPU dropout: the keep mask comes from Philox at (seed, offset + i / 4, lane i % 4), the
// same stream the CUDA kernel draws, so a mask does not depend on threads or launch layout.
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/parallel.h"
#include "kernels/philox.h"

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
    parallel_for(0, blocks, kGrain / 4, [&](int64_t b, int64_t e) {
      for (int64_t blk = b; blk < e; ++blk) {
        float u[4];
        rng::uniform4(seed, offset + uint64_t(blk), u);
        for (int k = 0; k < 4 && blk * 4 + k < n; ++k) {
          int64_t i = blk * 4 + k;
          pm[i] = u[k] >= pf;
          po[i] = pm[i] ? px[i] * scale : T(0);
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
