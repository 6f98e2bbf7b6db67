// CPU attention family: per (batch x head) slice, scores in blocks of query rows so the
// (T x S) matrix never exists whole; softmax statistics (log-sum-exp) saved for backward,
// which recomputes the probabilities from them.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/eigen_util.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/parallel.h"

namespace nn::backend {
using namespace nn::cpu;

namespace {
constexpr int64_t kRows = 64;  // query rows per block

// Masked scores of rows [t0, t0 + n) against every key, into s (n, S).
template <typename T>
void scores(const T* q, const T* k, const uint8_t* mask, int64_t t0, int64_t n, int64_t S,
            int64_t D, T scale, RowMat<T>& s) {
  s.resize(n, S);
  cpu::gemm<T>(n, S, D, scale, row_major(q + t0 * D, D), row_major(k, D).t(), T(0), s.data(), S);
  if (mask)
    for (int64_t j = 0; j < S; ++j)
      if (!mask[j]) s.col(j).setConstant(-std::numeric_limits<T>::infinity());
}
}  // namespace

void CpuBackend::attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                   const Tensor& key_mask, double scale, Tensor& out,
                                   Tensor& lse) {
  dispatch_float(q.dtype(), "attention", [&]<typename T>() {
    const int64_t B = q.shape()[0], Tq = q.shape()[1], D = q.shape()[2];
    const int64_t S = k.shape()[1], E = v.shape()[2];
    const T* pq = q.data<T>();
    const T* pk = k.data<T>();
    const T* pv = v.data<T>();
    const uint8_t* pm = key_mask.defined() ? key_mask.data<uint8_t>() : nullptr;
    T* po = out.data<T>();
    // f64 statistics for f64 inputs (exact gradient checks), f32 otherwise
    float* pl32 = lse.dtype() == kF32 ? lse.data<float>() : nullptr;
    double* pl64 = lse.dtype() == kF64 ? lse.data<double>() : nullptr;
    auto set_lse = [&](int64_t i, double v) {
      if (pl64) pl64[i] = v;
      else pl32[i] = float(v);
    };
    parallel_for(0, B, 1, [&](int64_t b0, int64_t b1) {
      RowMat<T> s;
      for (int64_t b = b0; b < b1; ++b) {
        const T* qb = pq + b * Tq * D;
        const T* kb = pk + b * S * D;
        const uint8_t* mb = pm ? pm + b * S : nullptr;
        for (int64_t t0 = 0; t0 < Tq; t0 += kRows) {
          const int64_t n = std::min(kRows, Tq - t0);
          scores(qb, kb, mb, t0, n, S, D, T(scale), s);
          for (int64_t r = 0; r < n; ++r) {
            auto row = s.row(r);
            const T m = S ? row.maxCoeff() : -std::numeric_limits<T>::infinity();
            if (!std::isfinite(double(m))) {  // every key masked
              row.setZero();
              set_lse(b * Tq + t0 + r, -std::numeric_limits<double>::infinity());
              continue;
            }
            row = (row.array() - m).exp();
            const T sum = row.sum();
            row /= sum;
            set_lse(b * Tq + t0 + r, double(m) + std::log(double(sum)));
          }
          cpu::gemm<T>(n, E, S, T(1), row_major(s.data(), S), row_major(pv + b * S * E, E), T(0),
                       po + (b * Tq + t0) * E, E);
        }
      }
    });
  });
}

void CpuBackend::attention_backward(const Tensor& grad_out, const Tensor& q, const Tensor& k,
                                    const Tensor& v, const Tensor& key_mask, const Tensor& out,
                                    const Tensor& lse, double scale, Tensor& grad_q,
                                    Tensor& grad_k, Tensor& grad_v) {
  dispatch_float(q.dtype(), "attention_backward", [&]<typename T>() {
    const int64_t B = q.shape()[0], Tq = q.shape()[1], D = q.shape()[2];
    const int64_t S = k.shape()[1], E = v.shape()[2];
    const T* pq = q.data<T>();
    const T* pk = k.data<T>();
    const T* pv = v.data<T>();
    const T* pg = grad_out.data<T>();
    const T* po = out.data<T>();
    auto lse_at = [&](int64_t i) {
      return lse.dtype() == kF64 ? lse.data<double>()[i] : double(lse.data<float>()[i]);
    };
    const uint8_t* pm = key_mask.defined() ? key_mask.data<uint8_t>() : nullptr;
    T* gq = grad_q.data<T>();
    T* gk = grad_k.data<T>();
    T* gv = grad_v.data<T>();
    parallel_for(0, B, 1, [&](int64_t b0, int64_t b1) {
      RowMat<T> p, dp;
      for (int64_t b = b0; b < b1; ++b) {
        const T* qb = pq + b * Tq * D;
        const T* kb = pk + b * S * D;
        const T* vb = pv + b * S * E;
        const uint8_t* mb = pm ? pm + b * S : nullptr;
        T* gkb = gk + b * S * D;  // dK and dV accumulate over the query blocks
        T* gvb = gv + b * S * E;
        std::fill(gkb, gkb + S * D, T(0));
        std::fill(gvb, gvb + S * E, T(0));
        for (int64_t t0 = 0; t0 < Tq; t0 += kRows) {
          const int64_t n = std::min(kRows, Tq - t0);
          scores(qb, kb, mb, t0, n, S, D, T(scale), p);
          for (int64_t r = 0; r < n; ++r) {  // P = exp(s - lse), recomputed
            const double l = lse_at(b * Tq + t0 + r);
            if (std::isinf(l)) p.row(r).setZero();
            else p.row(r) = (p.row(r).array() - T(l)).exp();
          }
          const T* dOp = pg + (b * Tq + t0) * E;
          auto dO = crmap(dOp, n, E, E);
          auto O = crmap(po + (b * Tq + t0) * E, n, E, E);
          cpu::gemm<T>(S, E, n, T(1), row_major(p.data(), S).t(), row_major(dOp, E), T(1), gvb,
                       E);  // dV += P^T dO
          dp.resize(n, S);
          cpu::gemm<T>(n, S, E, T(1), row_major(dOp, E), row_major(vb, E).t(), T(0), dp.data(),
                       S);  // dP = dO V^T
          // dS = P * (dP - rowsum(dO * O)), the softmax backward per row
          for (int64_t r = 0; r < n; ++r) {
            const T delta = dO.row(r).dot(O.row(r));
            dp.row(r) = p.row(r).array() * (dp.row(r).array() - delta);
          }
          cpu::gemm<T>(n, D, S, T(scale), row_major(dp.data(), S), row_major(kb, D), T(0),
                       gq + (b * Tq + t0) * D, D);  // dQ = dS K * scale
          cpu::gemm<T>(S, D, n, T(scale), row_major(dp.data(), S).t(), row_major(qb + t0 * D, D),
                       T(1), gkb, D);  // dK += dS^T Q * scale
        }
      }
    });
  });
}

}  // namespace nn::backend
