// CPU softmax family: softmax / log_softmax over one dim, and their backward.
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/parallel.h"
#include "backend/cpu/row_math.h"

namespace nn::backend {
using namespace nn::cpu;

namespace {
// Shape seen as (outer, D, inner): the softmax dim is D, elements along it are `inner` apart.
struct Lanes {
  int64_t outer = 1, D = 1, inner = 1;
};
Lanes lanes(const Shape& s, int64_t dim) {
  Lanes l;
  for (int64_t i = 0; i < dim; ++i) l.outer *= s[i];
  l.D = s[dim];
  for (size_t i = dim + 1; i < s.size(); ++i) l.inner *= s[i];
  return l;
}
// One contiguous row of D > 0 values; sums in double, as the strided path's.
template <typename T>
void forward_row(const T* x, int64_t D, bool log, T* y) {
  T m = ConstRowMap<T>(x, D).maxCoeff();  // a NaN anywhere makes every output NaN
  if (std::isinf(m) && m < 0) m = 0;      // all -inf: avoid inf - inf
  const double sum = exp_sum(x, D, m, y);
  // (x - m) - log(sum): rounding m + log(sum) first would cost log(sum) the bits of m's size
  if (log) RowMap<T>(y, D) = (ConstRowMap<T>(x, D) - m) - T(std::log(sum));
  else RowMap<T>(y, D) *= T(1.0 / sum);
}

template <typename T>
void backward_row(const T* g, const T* y, int64_t D, bool log, T* dx) {
  if (log) {  // y = log p: dx = g - p * sum(g)
    RowMap<T>(dx, D) = ConstRowMap<T>(g, D) - ConstRowMap<T>(y, D).exp() * T(row_sum(g, D));
    at_neg_inf(y, D, [&](int64_t d) { dx[d] = g[d]; });  // p = exp(-inf) = 0 exactly
  } else {  // y = p: dx = p * (g - sum(g * p))
    double acc = 0;
#pragma omp simd reduction(+ : acc)
    for (int64_t d = 0; d < D; ++d) acc += double(g[d]) * double(y[d]);
    RowMap<T>(dx, D) = ConstRowMap<T>(y, D) * (ConstRowMap<T>(g, D) - T(acc));
  }
}

// f16 and bf16 rows: each row widened into f32 buffers, computed by the f32 row code and
// rounded once (the widened path's values in one pass). Rows are contiguous (inner == 1).
template <typename T>
void forward_rows16(const T* x, int64_t R, int64_t D, bool log, T* y) {
  parallel_for(0, R, std::max<int64_t>(1, kGrain / (D + 1)), [&](int64_t b, int64_t e) {
    Eigen::ArrayXf xs(D), ys(D);  // 64-byte aligned, as exp_sum needs
    for (int64_t r = b; r < e; ++r) {
#pragma omp simd
      for (int64_t d = 0; d < D; ++d) xs[d] = float(x[r * D + d]);
      forward_row(xs.data(), D, log, ys.data());
#pragma omp simd
      for (int64_t d = 0; d < D; ++d) put(y[r * D + d], ys[d]);
    }
  });
}
template <typename T>
void backward_rows16(const T* g, const T* y, int64_t R, int64_t D, bool log, T* dx) {
  parallel_for(0, R, std::max<int64_t>(1, kGrain / (D + 1)), [&](int64_t b, int64_t e) {
    Eigen::ArrayXf gs(D), ys(D), ds(D);
    for (int64_t r = b; r < e; ++r) {
#pragma omp simd
      for (int64_t d = 0; d < D; ++d) {
        gs[d] = float(g[r * D + d]);
        ys[d] = float(y[r * D + d]);
      }
      backward_row(gs.data(), ys.data(), D, log, ds.data());
#pragma omp simd
      for (int64_t d = 0; d < D; ++d) put(dx[r * D + d], ds[d]);
    }
  });
}
}  // namespace

bool CpuBackend::native16_softmax(const Tensor& x, int64_t dim) {
  return lanes(x.shape(), dim).inner == 1;
}

void CpuBackend::softmax_forward(const Tensor& x, int64_t dim, bool log, Tensor& out) {
  if (dispatch16(x.dtype(), [&]<typename T>() {
        NN_CHECK(native16_softmax(x, dim), "softmax: 16-bit rows must be contiguous here");
        const Lanes l = lanes(x.shape(), dim);
        forward_rows16(x.data<T>(), l.outer, l.D, log, out.data<T>());
      }))
    return;
  dispatch_float(x.dtype(), "softmax", [&]<typename T>() {
    Lanes l = lanes(x.shape(), dim);
    const T* px = x.data<T>();
    T* po = out.data<T>();
    parallel_for(0, l.outer * l.inner, std::max<int64_t>(1, kGrain / (l.D + 1)),
                 [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        if (l.inner == 1 && l.D > 0) {  // a contiguous row: Eigen's vectorised max and exp
          forward_row(px + r * l.D, l.D, log, po + r * l.D);
          continue;
        }
        const int64_t base = (r / l.inner) * l.D * l.inner + r % l.inner, s = l.inner;
        T m = -INFINITY;
        for (int64_t d = 0; d < l.D; ++d) m = std::max(m, px[base + d * s]);
        if (std::isinf(m) && m < 0) m = 0;  // all -inf: avoid inf - inf
        double sum = 0;
        for (int64_t d = 0; d < l.D; ++d) sum += std::exp(double(px[base + d * s] - m));
        if (log) {
          const T ls = T(std::log(sum));  // (as forward_row)
          for (int64_t d = 0; d < l.D; ++d) po[base + d * s] = (px[base + d * s] - m) - ls;
        } else {
          T inv = T(1.0 / sum);
          for (int64_t d = 0; d < l.D; ++d) po[base + d * s] = std::exp(px[base + d * s] - m) * inv;
        }
      }
    });
  });
}

void CpuBackend::softmax_backward(const Tensor& grad, const Tensor& y, int64_t dim, bool log,
                                  Tensor& grad_x) {
  if (dispatch16(y.dtype(), [&]<typename T>() {
        NN_CHECK(native16_softmax(y, dim), "softmax: 16-bit rows must be contiguous here");
        const Lanes l = lanes(y.shape(), dim);
        backward_rows16(grad.data<T>(), y.data<T>(), l.outer, l.D, log, grad_x.data<T>());
      }))
    return;
  dispatch_float(y.dtype(), "softmax_backward", [&]<typename T>() {
    Lanes l = lanes(y.shape(), dim);
    const T* pg = grad.data<T>();
    const T* py = y.data<T>();
    T* px = grad_x.data<T>();
    parallel_for(0, l.outer * l.inner, std::max<int64_t>(1, kGrain / (l.D + 1)),
                 [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        if (l.inner == 1) {
          backward_row(pg + r * l.D, py + r * l.D, l.D, log, px + r * l.D);
          continue;
        }
        const int64_t base = (r / l.inner) * l.D * l.inner + r % l.inner, s = l.inner;
        double acc = 0;
        if (log) {
          // y = log p: dx = g - p * sum(g)
          for (int64_t d = 0; d < l.D; ++d) acc += pg[base + d * s];
          for (int64_t d = 0; d < l.D; ++d)
            px[base + d * s] = pg[base + d * s] - std::exp(py[base + d * s]) * T(acc);
        } else {
          // y = p: dx = p * (g - sum(g * p))
          for (int64_t d = 0; d < l.D; ++d) acc += double(pg[base + d * s]) * py[base + d * s];
          for (int64_t d = 0; d < l.D; ++d)
            px[base + d * s] = py[base + d * s] * (pg[base + d * s] - T(acc));
        }
      }
    });
  });
}

}  // namespace nn::backend
