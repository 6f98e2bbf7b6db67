// CPU optim family: SGD and Adam/AdamW update steps, in place, as PyTorch defines them, and the
// list primitives for mixed precision's unscaling and gradient clipping.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/parallel.h"
#include "kernels/clip.h"

namespace nn::backend {
using namespace nn::cpu;

void CpuBackend::sgd_step(std::vector<SgdSlot>& slots, double momentum, double dampening,
                          bool nesterov) {
  for (auto& s : slots) {
    dispatch_float(s.param.dtype(), "sgd_step", [&]<typename T>() {
      T* p = s.param.data<T>();
      const T* g = s.grad.data<T>();
      T* buf = momentum != 0 ? s.momentum.data<T>() : nullptr;
      const T lr_ = T(s.lr), mom = T(momentum), damp = T(1 - dampening), wd = T(s.weight_decay);
      const bool first = s.first_step;
      parallel_for(0, s.param.numel(), kGrain, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          T d = g[i] + wd * p[i];
          if (buf) {
            buf[i] = first ? d : mom * buf[i] + damp * d;
            d = nesterov ? d + mom * buf[i] : buf[i];
          }
          p[i] -= lr_ * d;
        }
      });
    });
  }
}

void CpuBackend::adamw_step(std::vector<AdamWSlot>& slots, double beta1, double beta2,
                            double eps) {
  for (auto& s : slots) {
    dispatch_float(s.param.dtype(), "adamw_step", [&]<typename T>() {
      T* p = s.param.data<T>();
      const T* g = s.grad.data<T>();
      T* m = s.exp_avg.data<T>();
      T* v = s.exp_avg_sq.data<T>();
      const double bc1 = 1 - std::pow(beta1, double(s.step));
      const double bc2 = 1 - std::pow(beta2, double(s.step));
      const T decay = T(1 - s.lr * s.weight_decay), b1 = T(beta1), b2 = T(beta2), l2 = T(s.l2);
      const T step_size = T(s.lr / bc1), inv_sqrt_bc2 = T(1 / std::sqrt(bc2)), eps_ = T(eps);
      parallel_for(0, s.param.numel(), kGrain, [&](int64_t b, int64_t e) {
#pragma omp simd
        for (int64_t i = b; i < e; ++i) {
          const T gi = g[i] + l2 * p[i];
          m[i] = b1 * m[i] + (T(1) - b1) * gi;
          v[i] = b2 * v[i] + (T(1) - b2) * gi * gi;
          p[i] = p[i] * decay - step_size * m[i] / (std::sqrt(v[i]) * inv_sqrt_bc2 + eps_);
        }
      });
    });
  }
}

namespace {
// p[b, e) times f, rounded to T; true when a result is inf or NaN.
template <typename T, typename A>
bool scale_span(T* p, int64_t b, int64_t e, A f) {
  bool bad = false;
  for (int64_t i = b; i < e; ++i) {
    const T r = T(A(p[i]) * f);
    p[i] = r;
    bad |= !std::isfinite(A(r));
  }
  return bad;
}

// Calls f.template operator()<T, A>() for a floating tensor: T its element type, A the type
// its arithmetic runs in (f32 for 16-bit).
template <typename F>
void dispatch_with_acc(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::f32: f.template operator()<float, float>(); return;
    case DType::f64: f.template operator()<double, double>(); return;
    case DType::f16: f.template operator()<Half, float>(); return;
    case DType::bf16: f.template operator()<BFloat16, float>(); return;
    default: NN_ERROR(op, ": tensors must be floating point, got ", dtype_name(t));
  }
}
}  // namespace

void CpuBackend::scale_grads(std::vector<Tensor>& grads, double factor, Tensor& found_inf) {
  std::atomic<bool> bad{false};
  for (auto& g : grads)
    dispatch_with_acc(g.dtype(), "scale_grads", [&]<typename T, typename A>() {
      T* p = g.data<T>();
      parallel_for(0, g.numel(), kGrain, [&](int64_t b, int64_t e) {
        if (scale_span<T, A>(p, b, e, A(factor))) bad = true;
      });
    });
  if (bad) found_inf.data<float>()[0] = 1.f;
}

void CpuBackend::clip_grads(std::vector<Tensor>& grads, const Tensor& sum_squares, double max_norm) {
  NN_CHECK(sum_squares.dtype() == DType::f64 && sum_squares.numel() == 1 && sum_squares.device() == kCPU,
           "clip_grads: sum_squares must be one f64 value on the CPU");
  const double f = kernels::clip_factor(sum_squares.data<double>()[0], max_norm);
  if (f == 1.0) return;
  Tensor unused = zeros({}, kF32);
  scale_grads(grads, f, unused);
}

void CpuBackend::sum_squares(const std::vector<Tensor>& tensors, Tensor& out) {
  double total = 0;  // each tensor summed in double, in a fixed order of chunks
  for (const auto& t : tensors)
    dispatch_with_acc(t.dtype(), "sum_squares", [&]<typename T, typename A>() {
      const T* p = t.data<T>();
      const int64_t n = t.numel(), chunk = 1 << 16, chunks = (n + chunk - 1) / chunk;
      std::vector<double> part(size_t(chunks), 0.0);
      parallel_for(0, chunks, 1, [&](int64_t b, int64_t e) {
        for (int64_t c = b; c < e; ++c) {
          double s = 0;
          for (int64_t i = c * chunk; i < std::min(n, (c + 1) * chunk); ++i) {
            const double v = double(A(p[i]));
            s += v * v;
          }
          part[size_t(c)] = s;
        }
      });
      for (double s : part) total += s;
    });
  NN_CHECK(out.dtype() == DType::f64 && out.numel() == 1, "sum_squares: out must be one f64 value");
  out.data<double>()[0] = total;
}

}  // namespace nn::backend
