// CPU loss family: cross entropy fused with log_softmax, with label smoothing.
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/parallel.h"
#include "backend/cpu/row_math.h"

namespace nn::backend {
using namespace nn::cpu;

namespace {
void check_targets(const Tensor& target, int64_t C, int64_t ignore_index) {
  for (int64_t i = 0; i < target.numel(); ++i) {
    int64_t t = index_at(target, i);
    NN_CHECK(t == ignore_index || (t >= 0 && t < C), "cross_entropy: target ", t,
             " at position ", i, " is out of range for ", C, " classes");
  }
}
}  // namespace

void CpuBackend::cross_entropy_forward(const Tensor& logits, const Tensor& target,
                                       double smoothing, int64_t ignore_index, Tensor& loss,
                                       Tensor& lse) {
  dispatch_float(logits.dtype(), "cross_entropy", [&]<typename T>() {
    const int64_t N = logits.shape()[0], C = logits.shape()[1];
    check_targets(target, C, ignore_index);
    const T* px = logits.data<T>();
    T* pl = loss.data<T>();
    T* ps = lse.data<T>();
    parallel_for(0, N, std::max<int64_t>(1, kGrain / (C + 1)), [&](int64_t b, int64_t e) {
      Eigen::Array<T, Eigen::Dynamic, 1> ex(C);  // the row's exponentials (aligned: exp_sum)
      for (int64_t i = b; i < e; ++i) {
        const int64_t t = index_at(target, i);
        if (C == 0) {  // no classes: only ignored targets get here (check_targets)
          ps[i] = T(-INFINITY);
          pl[i] = T(0);
          continue;
        }
        // A NaN logit makes the loss NaN whichever maximum it leaves.
        const T* row = px + i * C;
        const T m = ConstRowMap<T>(row, C).maxCoeff();
        const double l = double(m) + std::log(exp_sum(row, C, m, ex.data()));
        ps[i] = T(l);
        if (t == ignore_index) { pl[i] = T(0); continue; }
        // (1-eps) * (lse - x_t) + eps/C * sum_c (lse - x_c); the smoothing term only when there
        // is smoothing: 0 * (-inf) from a masked logit (-inf) is NaN
        const double smooth = smoothing != 0 ? smoothing / double(C) * row_sum(row, C) : 0.0;
        pl[i] = T(l - (1.0 - smoothing) * double(row[t]) - smooth);
      }
    });
  });
}

void CpuBackend::cross_entropy_backward(const Tensor& grad_loss, const Tensor& logits,
                                        const Tensor& target, const Tensor& lse,
                                        double smoothing, int64_t ignore_index,
                                        Tensor& grad_logits) {
  dispatch_float(logits.dtype(), "cross_entropy_backward", [&]<typename T>() {
    const int64_t N = logits.shape()[0], C = logits.shape()[1];
    const T* px = logits.data<T>();
    const T* pg = grad_loss.data<T>();
    const T* ps = lse.data<T>();
    T* pd = grad_logits.data<T>();
    const T off = T(smoothing / double(C));
    parallel_for(0, N, std::max<int64_t>(1, kGrain / (C + 1)), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        T* d = pd + i * C;
        int64_t t = index_at(target, i);
        if (t == ignore_index) {
          for (int64_t c = 0; c < C; ++c) d[c] = T(0);
          continue;
        }
        const T g = pg[i], l = ps[i];
        RowMap<T>(d, C) = g * ((ConstRowMap<T>(px + i * C, C) - l).exp() - off);
        at_neg_inf(px + i * C, C, [&](int64_t c) { d[c] = g * (T(0) - off); });  // p = 0
        d[t] -= g * T(1.0 - smoothing);
      }
    });
  });
}

}  // namespace nn::backend
