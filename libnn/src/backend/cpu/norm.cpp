// CPU norm family: batch norm (per channel over N and spatial) and layer norm (per row).
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/parallel.h"

namespace nn::backend {
using namespace nn::cpu;

namespace {
template <typename T>
const T* opt(const Tensor& t) { return t.defined() ? t.data<T>() : nullptr; }
template <typename T>
T* opt_mut(Tensor& t) { return t.defined() ? t.data<T>() : nullptr; }
}  // namespace

void CpuBackend::batch_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                    Tensor& running_mean, Tensor& running_var, bool training,
                                    double momentum, double eps, Tensor& out, Tensor& save_mean,
                                    Tensor& save_invstd) {
  dispatch_float(x.dtype(), "batch_norm", [&]<typename T>() {
    const int64_t N = x.shape()[0], C = x.shape()[1], S = x.numel() / std::max<int64_t>(1, N * C);
    const T* px = x.data<T>();
    T* po = out.data<T>();
    const T* pw = opt<T>(weight);
    const T* pb = opt<T>(bias);
    T* rm = opt_mut<T>(running_mean);
    T* rv = opt_mut<T>(running_var);
    T* sm = save_mean.data<T>();
    T* si = save_invstd.data<T>();
    const int64_t count = N * S;
    parallel_for(0, C, 1, [&](int64_t cb, int64_t ce) {
      for (int64_t c = cb; c < ce; ++c) {
        double mean, var;
        if (training) {
          // The sums are reductions the compiler may reorder (omp simd): one serial chain of
          // double additions would cost its latency, four cycles, per element.
          double s = 0;
          for (int64_t n = 0; n < N; ++n) {
            const T* p = px + (n * C + c) * S;
#pragma omp simd reduction(+ : s)
            for (int64_t k = 0; k < S; ++k) s += double(p[k]);
          }
          mean = s / double(count);
          double q = 0;
          for (int64_t n = 0; n < N; ++n) {
            const T* p = px + (n * C + c) * S;
#pragma omp simd reduction(+ : q)
            for (int64_t k = 0; k < S; ++k) { double d = double(p[k]) - mean; q += d * d; }
          }
          var = q / double(count);
          if (rm) rm[c] = T((1 - momentum) * rm[c] + momentum * mean);
          if (rv)
            rv[c] = T((1 - momentum) * rv[c] +
                      momentum * (count > 1 ? var * double(count) / double(count - 1) : var));
        } else {
          mean = rm[c];
          var = rv[c];
        }
        double inv = 1.0 / std::sqrt(var + eps);
        sm[c] = T(mean);
        si[c] = T(inv);
        const T a = T((pw ? pw[c] : 1) * inv);
        const T b = T((pb ? pb[c] : 0) - mean * double(a));
        for (int64_t n = 0; n < N; ++n) {
          const T* p = px + (n * C + c) * S;
          T* o = po + (n * C + c) * S;
          for (int64_t k = 0; k < S; ++k) o[k] = p[k] * a + b;
        }
      }
    });
  });
}

void CpuBackend::batch_norm_backward(const Tensor& grad, const Tensor& x, const Tensor& weight,
                                     const Tensor& save_mean, const Tensor& save_invstd,
                                     bool training, Tensor& grad_x, Tensor& grad_weight,
                                     Tensor& grad_bias) {
  dispatch_float(x.dtype(), "batch_norm_backward", [&]<typename T>() {
    const int64_t N = x.shape()[0], C = x.shape()[1], S = x.numel() / std::max<int64_t>(1, N * C);
    const T* px = x.data<T>();
    const T* pg = grad.data<T>();
    const T* pw = opt<T>(weight);
    const T* sm = save_mean.data<T>();
    const T* si = save_invstd.data<T>();
    T* gx = opt_mut<T>(grad_x);
    T* gw = opt_mut<T>(grad_weight);
    T* gb = opt_mut<T>(grad_bias);
    const double count = double(N * S);
    parallel_for(0, C, 1, [&](int64_t cb, int64_t ce) {
      for (int64_t c = cb; c < ce; ++c) {
        const double mean = sm[c], inv = si[c];
        double sg = 0, sgx = 0;  // sum(g), sum(g * xhat)
        for (int64_t n = 0; n < N; ++n) {
          const T* p = px + (n * C + c) * S;
          const T* g = pg + (n * C + c) * S;
#pragma omp simd reduction(+ : sg, sgx)
          for (int64_t k = 0; k < S; ++k) {
            sg += double(g[k]);
            sgx += double(g[k]) * (double(p[k]) - mean);
          }
        }
        sgx *= inv;  // sum(g * xhat), the common factor taken out of the loop
        if (gw) gw[c] = T(sgx);
        if (gb) gb[c] = T(sg);
        if (!gx) continue;
        const double w = pw ? pw[c] : 1.0;
        for (int64_t n = 0; n < N; ++n) {
          const T* p = px + (n * C + c) * S;
          const T* g = pg + (n * C + c) * S;
          T* d = gx + (n * C + c) * S;
          if (training) {
            // dx = w * inv / m * (m * g - sum(g) - xhat * sum(g * xhat))
            const double k1 = w * inv, k2 = sg / count, k3 = sgx / count;
            for (int64_t k = 0; k < S; ++k)
              d[k] = T(k1 * (double(g[k]) - k2 - (double(p[k]) - mean) * inv * k3));
          } else {
            const T k1 = T(w * inv);
            for (int64_t k = 0; k < S; ++k) d[k] = g[k] * k1;
          }
        }
      }
    });
  });
}

void CpuBackend::layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                    double eps, Tensor& out, Tensor& mean, Tensor& rstd) {
  dispatch_float(x.dtype(), "layer_norm", [&]<typename T>() {
    const int64_t D = x.shape().back(), R = x.numel() / std::max<int64_t>(1, D);
    const T* px = x.data<T>();
    T* po = out.data<T>();
    const T* pw = opt<T>(weight);
    const T* pb = opt<T>(bias);
    T* pm = mean.data<T>();
    T* pr = rstd.data<T>();
    parallel_for(0, R, std::max<int64_t>(1, kGrain / (D + 1)), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const T* row = px + r * D;
        double s = 0;  // reductions the compiler may reorder, as in batch_norm_forward
#pragma omp simd reduction(+ : s)
        for (int64_t i = 0; i < D; ++i) s += double(row[i]);
        const double mu = s / double(D);
        double q = 0;
#pragma omp simd reduction(+ : q)
        for (int64_t i = 0; i < D; ++i) { double d = double(row[i]) - mu; q += d * d; }
        const double inv = 1.0 / std::sqrt(q / double(D) + eps);
        pm[r] = T(mu);
        pr[r] = T(inv);
        T* o = po + r * D;
        for (int64_t i = 0; i < D; ++i) {
          T v = T((row[i] - mu) * inv);
          o[i] = v * (pw ? pw[i] : T(1)) + (pb ? pb[i] : T(0));
        }
      }
    });
  });
}

void CpuBackend::layer_norm_backward(const Tensor& grad, const Tensor& x, const Tensor& weight,
                                     const Tensor& mean, const Tensor& rstd, Tensor& grad_x,
                                     Tensor& grad_weight, Tensor& grad_bias) {
  dispatch_float(x.dtype(), "layer_norm_backward", [&]<typename T>() {
    const int64_t D = x.shape().back(), R = x.numel() / std::max<int64_t>(1, D);
    const T* px = x.data<T>();
    const T* pg = grad.data<T>();
    const T* pw = opt<T>(weight);
    const T* pm = mean.data<T>();
    const T* pr = rstd.data<T>();
    T* gx = opt_mut<T>(grad_x);
    const int nt = omp_get_max_threads();
    // Per-thread partial sums for the weight and bias gradients.
    std::vector<std::vector<double>> pgw(nt, std::vector<double>(grad_weight.defined() ? D : 0, 0.0));
    std::vector<std::vector<double>> pgb(nt, std::vector<double>(grad_bias.defined() ? D : 0, 0.0));
    parallel_for(0, R, std::max<int64_t>(1, kGrain / (D + 1)), [&](int64_t b, int64_t e) {
      const int t = omp_get_thread_num();
      double* wsum = pgw[t].empty() ? nullptr : pgw[t].data();
      double* bsum = pgb[t].empty() ? nullptr : pgb[t].data();
      for (int64_t r = b; r < e; ++r) {
        const T* row = px + r * D;
        const T* g = pg + r * D;
        const double mu = pm[r], inv = pr[r];
        double a = 0, c = 0;  // mean(g*w), mean(g*w*xhat)
#pragma omp simd reduction(+ : a, c)
        for (int64_t i = 0; i < D; ++i) {
          double xh = (double(row[i]) - mu) * inv;
          double gw = double(g[i]) * (pw ? double(pw[i]) : 1.0);
          a += gw;
          c += gw * xh;
          if (wsum) wsum[i] += double(g[i]) * xh;
          if (bsum) bsum[i] += double(g[i]);
        }
        a /= double(D);
        c /= double(D);
        if (!gx) continue;
        T* d = gx + r * D;
        for (int64_t i = 0; i < D; ++i) {
          double xh = (row[i] - mu) * inv;
          double gw = double(g[i]) * (pw ? pw[i] : 1.0);
          d[i] = T(inv * (gw - a - xh * c));
        }
      }
    });
    auto sum_parts = [&](std::vector<std::vector<double>>& parts, Tensor& dst) {
      if (!dst.defined()) return;
      T* p = dst.data<T>();
      for (int64_t i = 0; i < D; ++i) {
        double s = 0;
        for (int t = 0; t < nt; ++t) s += parts[t][i];
        p[i] = T(s);
      }
    };
    sum_parts(pgw, grad_weight);
    sum_parts(pgb, grad_bias);
  });
}

}  // namespace nn::backend
