// CPU dropout: the keep mask comes from Philox at (seed, offset + i / 4, lane i % 4), the
// same stream the CUDA kernel draws, so a mask does not depend on threads or launch layout.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/parallel.h"
#include "backend/cpu/philox_batch.h"

namespace nn::backend {
using namespace nn::cpu;

void CpuBackend::dropout_forward(const Tensor& x, double p, uint64_t seed, uint64_t offset,
                                 Tensor& out, Tensor& mask) {
  dispatch_float_compute(x.dtype(), "dropout", [&]<typename T, typename C>() {
    const T* px = x.data<T>();
    T* po = out.data<T>();
    uint8_t* pm = mask.data<uint8_t>();
    const int64_t n = x.numel(), blocks = (n + 3) / 4;
    const C scale = C(1.0 / (1.0 - p));
    // Keep when to_uniform(u) = (u >> 8) * 2^-24 >= float(p), which (both sides exact) is
    // u >= cut: a compare on the raw integers, with no float conversion per element.
    const uint64_t cut64 = uint64_t(std::ceil(double(float(p)) * 16777216.0)) << 8;
    const bool keep_none = cut64 > UINT32_MAX;
    const uint32_t cut = keep_none ? 0u : uint32_t(cut64);
    // Threads take whole batches of counters; element i uses counter offset + i / 4.
    const int64_t batches = (blocks + kPhiloxBatch - 1) / kPhiloxBatch;
    parallel_for(0, batches, std::max<int64_t>(1, kGrain / (4 * kPhiloxBatch)), [&](int64_t b, int64_t e) {
      uint32_t r[4][kPhiloxBatch];
      uint32_t keep4[kPhiloxBatch];
      for (int64_t bt = b; bt < e; ++bt) {
        const int64_t blk0 = bt * kPhiloxBatch;
        philox_batch(seed, offset + uint64_t(blk0), r);
        // element 4k + lane's keep flag in byte `lane` of keep4[k]: the mask bytes in order
        // (little-endian), built with whole-vector compares instead of a lane interleave
#pragma omp simd
        for (int k = 0; k < kPhiloxBatch; ++k)
          keep4[k] = uint32_t(r[0][k] >= cut) | uint32_t(r[1][k] >= cut) << 8 |
                     uint32_t(r[2][k] >= cut) << 16 | uint32_t(r[3][k] >= cut) << 24;
        const int64_t i0 = blk0 * 4, n_here = std::min<int64_t>(4 * kPhiloxBatch, n - i0);
        const T* xi = px + i0;
        T* oi = po + i0;
        uint8_t* mi = pm + i0;
        if (keep_none) std::memset(mi, 0, size_t(n_here));
        else std::memcpy(mi, keep4, size_t(n_here));
        // a local copy: read through the lambda's reference, scale would be reloaded per
        // element (the stores might alias it) and the loop would stay scalar
        // (the product is taken for every element and then selected: a conditional 16-bit
        // conversion is control flow that keeps the loop scalar)
        const C sc = scale;
#pragma omp simd
        for (int64_t j = 0; j < n_here; ++j) {
          const C v = C(xi[j]) * sc;
          put(oi[j], mi[j] ? v : C(0));
        }
      }
    });
  });
}

void CpuBackend::dropout_backward(const Tensor& grad, const Tensor& mask, double p,
                                  Tensor& grad_x) {
  dispatch_float_compute(grad.dtype(), "dropout_backward", [&]<typename T, typename C>() {
    const C scale = C(1.0 / (1.0 - p));
    map<T, T, uint8_t>(grad_x, [scale](T g, uint8_t m) {
      const C v = C(g) * scale;  // taken always, then selected, as in the forward
      return m ? v : C(0);
    }, grad, mask);
  });
}

}  // namespace nn::backend
