// CPU norm family: batch norm (per channel over N and spatial; row-major or channels-last)
// and layer norm (per row).
#include <algorithm>
#include <cmath>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/parallel.h"
#include "backend/cpu/row_math.h"
#include "core/util.h"

namespace nn::backend {
using namespace nn::cpu;

namespace {
template <typename T>
const T* opt(const Tensor& t) { return t.defined() ? t.data<T>() : nullptr; }
template <typename T>
T* opt_mut(Tensor& t) { return t.defined() ? t.data<T>() : nullptr; }

// ---- channels-last reductions (for_row_blocks and add_row_sums: parallel.h) --------------

// v * w + b, rounded once where the CPU has FMA: written out, so that each element type's
// loop rounds alike (GCC contracts some loops into FMAs and not others).
template <typename C>
inline C mul_add(C v, C w, C b) {
#ifdef __FMA__
  return std::fma(v, w, b);
#else
  return v * w + b;
#endif
}

// The type channels-last sums run in within a block of rows: f32 for f32 and 16-bit data
// (twice the lanes of double; the blocks' sums are combined in double), f64 for f64. A block
// whose f32 sums overflow (values beyond about 1e36, or deviations beyond 1e18) is summed
// again in double.
template <typename D>
using BnAcc = std::conditional_t<std::is_same_v<D, double>, double, float>;

bool all_finite(const std::vector<double>& v) {
  for (double e : v)
    if (!std::isfinite(e)) return false;
  return true;
}

// Rows [r0, r1)'s mean and sum of squared deviations per channel, with sums in A: a first
// mean, then the deviations from it (rounded to A) and their squares, the mean corrected by
// the deviations' mean and the squares by its square (the corrected two-pass method: the
// first mean's rounding error does not reach the variance).
template <typename A, typename T>
void block_moments(int64_t r0, int64_t r1, int64_t C, const T* px, std::vector<double>& bm,
                   std::vector<double>& bq) {
  std::vector<double> bd(size_t(C), 0.0);
  std::fill(bm.begin(), bm.end(), 0.0);
  std::fill(bq.begin(), bq.end(), 0.0);
  add_row_sums(r0, r1, C, [&](int64_t r, int64_t c) { return A(px[r * C + c]); }, bm.data());
  const double nb = double(r1 - r0);
  std::vector<A> m0(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) m0[c] = A(bm[c] / nb);
  add_row_sums(
      r0, r1, C, [&](int64_t r, int64_t c) { return A(px[r * C + c]) - m0[c]; }, bd.data(),
      [&](int64_t r, int64_t c) {
        const A d = A(px[r * C + c]) - m0[c];
        return d * d;
      },
      bq.data());
  for (int64_t c = 0; c < C; ++c) {
    bm[c] = double(m0[c]) + bd[c] / nb;
    bq[c] -= bd[c] * bd[c] / nb;
  }
}

// Each channel's mean and biased variance: per block its own mean and sum of squared
// deviations, blocks merged with Chan et al.'s pairwise update (no cancellation).
template <typename T>
void channel_moments(int64_t R, int64_t C, const T* px, std::vector<double>& mean,
                     std::vector<double>& var) {
  using A = BnAcc<T>;
  const int64_t nt = row_block_slots(R, C);
  std::vector<double> n(size_t(nt), 0.0), m(size_t(nt * C), 0.0), m2(size_t(nt * C), 0.0);
  const int64_t slots = for_row_blocks(R, C, [&](int64_t t, int64_t r0, int64_t r1) {
    std::vector<double> bm(static_cast<size_t>(C)), bq(static_cast<size_t>(C));
    block_moments<A>(r0, r1, C, px, bm, bq);
    if (!std::is_same_v<A, double> && !(all_finite(bm) && all_finite(bq)))
      block_moments<double>(r0, r1, C, px, bm, bq);
    const double nb = double(r1 - r0);
    double* tm = m.data() + t * C;
    double* tq = m2.data() + t * C;
    const double na = n[t], nab = na + nb;
    for (int64_t c = 0; c < C; ++c) {
      const double d = bm[c] - tm[c];
      tm[c] += d * nb / nab;
      tq[c] += bq[c] + d * d * na * nb / nab;
    }
    n[t] = nab;
  });
  mean.assign(m.begin(), m.begin() + C);
  var.assign(m2.begin(), m2.begin() + C);
  double na = n[0];
  for (int64_t t = 1; t < slots; ++t) {
    const double nb = n[t], nab = na + nb;
    for (int64_t c = 0; c < C; ++c) {
      const double d = m[t * C + c] - mean[c];
      mean[c] += d * nb / nab;
      var[c] += m2[t * C + c] + d * d * na * nb / nab;
    }
    na = nab;
  }
  for (auto& v : var) v /= double(R);
}

// Batch norm's per-channel arguments, as raw pointers (null where a tensor is undefined).
template <typename T>
struct BnArgs {
  const T* w;
  const T* b;
  T* rm;
  T* rv;
  T* save_mean;
  T* save_invstd;
};

// Channel c's output map y = ((x - hi) - lo) a + b, where hi + lo is the mean to about twice
// T's precision: x - hi is exact for x near the mean, so values far from zero keep their
// deviations (a x + (b - mean a) would cancel: 1e4 + 0.01 randn in f32 lost 2% of y). From the
// batch statistics (training, when the running averages are updated too) or the running ones;
// the mean and 1/std used are saved.
template <typename T>
struct BnMap {
  T a, hi, lo, b;
  T operator()(T x) const { return mul_add((x - hi) - lo, a, b); }
};
template <typename T>
BnMap<T> bn_channel(const BnArgs<T>& p, int64_t c, double mean, double var, int64_t count,
                    bool training, double momentum, double eps) {
  if (training) {
    if (p.rm) p.rm[c] = T((1 - momentum) * p.rm[c] + momentum * mean);
    if (p.rv)
      p.rv[c] = T((1 - momentum) * p.rv[c] +
                  momentum * (count > 1 ? var * double(count) / double(count - 1) : var));
  } else {
    mean = p.rm[c];
    var = p.rv[c];
  }
  const double inv = 1.0 / std::sqrt(var + eps);
  p.save_mean[c] = T(mean);
  p.save_invstd[c] = T(inv);
  const T hi = T(mean);
  return {T((p.w ? p.w[c] : 1) * inv), hi, T(mean - double(hi)), T(p.b ? p.b[c] : 0)};
}

// Channels-last: rows of C channels, each channel's sums vectorised across the channels.
// D is the data's type (x, y, gradients), T the parameters' and statistics': both T, or bf16
// data with f32 parameters (computed in f32, each result rounded once).
// The forward's epilogue: y = max(bn(x) + z, 0) with z and the ReLU each optional (z null:
// none), computed in T and rounded once.
template <typename D, typename T>
struct BnTail {
  const D* z;
  bool relu;
  // elements [at, at + n) of y = tail(f(x)), f being map(i) for the run's i-th element; the
  // choices are template arguments, so that each loop vectorises
  template <typename Map>
  void apply(int64_t at, int64_t n, const D* px, D* po, Map map) const {
    if (z) relu ? run<true, true>(at, n, px, po, map) : run<true, false>(at, n, px, po, map);
    else relu ? run<false, true>(at, n, px, po, map) : run<false, false>(at, n, px, po, map);
  }
  template <bool kZ, bool kRelu, typename Map>
  void run(int64_t at, int64_t n, const D* px, D* po, Map& map) const {
    const D* x = px + at;
    const D* zr = kZ ? z + at : nullptr;
    D* o = po + at;
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
      T v = map(i)(T(x[i]));
      if constexpr (kZ) v = v + T(zr[i]);
      if constexpr (kRelu) v = v <= T(0) ? T(0) : v;  // NaN stays NaN
      put(o[i], v);
    }
  }
};

template <typename D, typename T>
void bn_forward_nhwc(int64_t R, int64_t C, const D* px, const BnArgs<T>& p, bool training,
                     double momentum, double eps, const BnTail<D, T>& tail, D* po) {
  std::vector<double> mean(size_t(C), 0.0), var(size_t(C), 0.0);
  if (training) channel_moments(R, C, px, mean, var);
  // the maps' parts as arrays, so the loop below vectorises across channels
  std::vector<T> a(static_cast<size_t>(C)), hi(a), lo(a), b(a);
  for (int64_t c = 0; c < C; ++c) {
    const BnMap<T> f = bn_channel(p, c, mean[c], var[c], R, training, momentum, eps);
    a[c] = f.a, hi[c] = f.hi, lo[c] = f.lo, b[c] = f.b;
  }
  parallel_for(0, R, std::max<int64_t>(1, kGrain / std::max<int64_t>(1, C)), [&](int64_t rb, int64_t re) {
    for (int64_t r = rb; r < re; ++r) {
      tail.apply(r * C, C, px, po, [&](int64_t c) { return BnMap<T>{a[c], hi[c], lo[c], b[c]}; });
    }
  });
}

// The gradient batch norm's output gets, read as B: grad, or where the forward ended in a
// ReLU (kMask) whose output was y, grad where y is not <= 0 (NaN passes, as in PyTorch). A compile-time choice, so that the loops
// vectorise (a test of y per element would keep them scalar).
template <bool kMask, typename B, typename D>
inline B masked(const D* g, const D* y, int64_t i) {
  const B v = B(g[i]);  // read unconditionally: a load under the condition stays scalar
  if constexpr (kMask) return B(y[i]) <= B(0) ? B(0) : v;
  else return v;
}

// o = keep ? g : 0, copied as it is stored (16-bit values as their bits: no rounding to do).
template <typename D>
inline void copy_or_zero(const D& g, bool keep, D& o) {
  if constexpr (std::is_same_v<D, BFloat16> || std::is_same_v<D, Half>) {
    const uint16_t b = g.bits;
    o.bits = keep ? b : uint16_t(0);
  } else {
    const D v = g;
    o = keep ? v : D(0);
  }
}

// kZ: the residual's gradient gz (the masked grad) is wanted. The sweep that sums then writes
// it, and the dx pass reads it back in place of grad and y: one stream fewer than masking
// again.
template <bool kMask, bool kZ, typename D, typename T>
void bn_backward_nhwc(int64_t R, int64_t C, const D* pg, const D* py, const D* px, const T* pw,
                      const T* sm, const T* si, bool training, D* gx, D* gz, T* gw, T* gb) {
  using A = BnAcc<D>;
  // sum(g) and sum(g * (x - mean)) per channel, in one sweep
  std::vector<double> part(size_t(row_block_slots(R, C) * 2 * C), 0.0);
  auto block_sums = [&]<typename B>(int64_t r0, int64_t r1, std::vector<double>& bs) {
    std::fill(bs.begin(), bs.end(), 0.0);
    add_row_sums(
        r0, r1, C,
        [&](int64_t r, int64_t c) {
          const int64_t i = r * C + c;
          const B v = masked<kMask, B>(pg, py, i);
          if constexpr (kZ) copy_or_zero(pg[i], kMask ? !(B(py[i]) <= B(0)) : true, gz[i]);
          return v;
        },
        bs.data(),
        [&](int64_t r, int64_t c) {
          return masked<kMask, B>(pg, py, r * C + c) * (B(px[r * C + c]) - B(sm[c]));
        },
        bs.data() + C);
  };
  const int64_t slots = for_row_blocks(R, C, [&](int64_t t, int64_t r0, int64_t r1) {
    std::vector<double> bs(static_cast<size_t>(2 * C));
    block_sums.template operator()<A>(r0, r1, bs);
    if (!std::is_same_v<A, double> && !all_finite(bs))  // f32 overflow: again in double
      block_sums.template operator()<double>(r0, r1, bs);
    double* acc = part.data() + t * 2 * C;
    for (int64_t j = 0; j < 2 * C; ++j) acc[j] += bs[j];
  });
  std::vector<double> s(part.begin(), part.begin() + 2 * C);
  for (int64_t t = 1; t < slots; ++t)
    for (int64_t j = 0; j < 2 * C; ++j) s[j] += part[t * 2 * C + j];
  // dx = k1 (g - k2 - (x - mean) k3), per channel's constants computed in double and used
  // in A (f32 but for f64 data) with an explicit FMA, so that every data type rounds alike
  std::vector<A> k1(static_cast<size_t>(C)), k2(k1), k3(k1), mu(k1);
  for (int64_t c = 0; c < C; ++c) {
    const double inv = si[c], sg = s[c], sgx = s[C + c] * inv;
    if (gw) gw[c] = T(sgx);
    if (gb) gb[c] = T(sg);
    k1[c] = A((pw ? double(pw[c]) : 1.0) * inv);
    k2[c] = A(sg / double(R));
    k3[c] = A(sgx / double(R) * inv);
    mu[c] = A(sm[c]);
  }
  if (!gx) return;
  // the masked grad: gz where the sweep wrote it, else grad masked by y again
  constexpr bool kMaskDx = kMask && !kZ;
  const D* pgm = kZ ? gz : pg;
  parallel_for(0, R, std::max<int64_t>(1, kGrain / std::max<int64_t>(1, C)), [&](int64_t rb, int64_t re) {
    for (int64_t r = rb; r < re; ++r) {
      const D* x = px + r * C;
      const D* g = pgm + r * C;
      const D* y = kMaskDx ? py + r * C : nullptr;
      D* d = gx + r * C;
      if (training) {
#pragma omp simd
        for (int64_t c = 0; c < C; ++c)
          put(d[c], k1[c] * mul_add(mu[c] - A(x[c]), k3[c], masked<kMaskDx, A>(g, y, c) - k2[c]));
      } else {
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) put(d[c], masked<kMaskDx, T>(g, y, c) * T(k1[c]));
      }
    }
  });
}

template <typename D, typename T>
void bn_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& running_mean,
                Tensor& running_var, bool training, double momentum, double eps,
                const BnTail<D, T>& tail, Tensor& out, Tensor& save_mean, Tensor& save_invstd) {
  const int64_t N = x.shape()[0], C = x.shape()[1], S = x.numel() / std::max<int64_t>(1, N * C);
  const D* px = x.data<D>();
  D* po = out.data<D>();
  const BnArgs<T> args{opt<T>(weight), opt<T>(bias), opt_mut<T>(running_mean),
                       opt_mut<T>(running_var), save_mean.data<T>(), save_invstd.data<T>()};
  const int64_t count = N * S;
  if (is_channels_last(x))
    return bn_forward_nhwc(count, C, px, args, training, momentum, eps, tail, po);
  // channels in parallel, enough of them a thread to be worth a parallel region
  parallel_for(0, C, grain_for(double(count)), [&](int64_t cb, int64_t ce) {
    for (int64_t c = cb; c < ce; ++c) {
      double mean = 0, var = 0;
      if (training) {
        // The sums are reductions the compiler may reorder (omp simd): one serial chain of
        // double additions would cost its latency, four cycles, per element.
        double s = 0;
        for (int64_t n = 0; n < N; ++n) {
          const D* p = px + (n * C + c) * S;
#pragma omp simd reduction(+ : s)
          for (int64_t k = 0; k < S; ++k) s += double(p[k]);
        }
        mean = s / double(count);
        double q = 0;
        for (int64_t n = 0; n < N; ++n) {
          const D* p = px + (n * C + c) * S;
#pragma omp simd reduction(+ : q)
          for (int64_t k = 0; k < S; ++k) { double d = double(p[k]) - mean; q += d * d; }
        }
        var = q / double(count);
      }
      const BnMap<T> f = bn_channel(args, c, mean, var, count, training, momentum, eps);
      for (int64_t n = 0; n < N; ++n) {
        tail.apply((n * C + c) * S, S, px, po, [&](int64_t) { return f; });
      }
    }
  });
}

// y: the forward's output where it ended in a ReLU (undefined: it did not); grad_z: the
// residual's gradient, the masked grad (undefined: not wanted).
template <bool kMask, typename D, typename T>
void bn_backward(const Tensor& grad, const Tensor& y, const Tensor& x, const Tensor& weight,
                 const Tensor& save_mean, const Tensor& save_invstd, bool training,
                 Tensor& grad_x, Tensor& grad_z, Tensor& grad_weight, Tensor& grad_bias) {
  const int64_t N = x.shape()[0], C = x.shape()[1], S = x.numel() / std::max<int64_t>(1, N * C);
  const D* px = x.data<D>();
  const D* pg = grad.data<D>();
  const D* py = opt<D>(y);
  D* gz = opt_mut<D>(grad_z);
  const T* pw = opt<T>(weight);
  const T* sm = save_mean.data<T>();
  const T* si = save_invstd.data<T>();
  D* gx = opt_mut<D>(grad_x);
  T* gw = opt_mut<T>(grad_weight);
  T* gb = opt_mut<T>(grad_bias);
  if (is_channels_last(x))
    return gz ? bn_backward_nhwc<kMask, true>(N * S, C, pg, py, px, pw, sm, si, training, gx, gz,
                                              gw, gb)
              : bn_backward_nhwc<kMask, false>(N * S, C, pg, py, px, pw, sm, si, training, gx,
                                               gz, gw, gb);
  const double count = double(N * S);
  parallel_for(0, C, grain_for(count), [&](int64_t cb, int64_t ce) {
    for (int64_t c = cb; c < ce; ++c) {
      const double mean = sm[c], inv = si[c];
      double sg = 0, sgx = 0;  // sum(g), sum(g * xhat)
      for (int64_t n = 0; n < N; ++n) {
        const int64_t at = (n * C + c) * S;
        const D* p = px + at;
        const D* g = pg + at;
        const D* y = py ? py + at : nullptr;
#pragma omp simd reduction(+ : sg, sgx)
        for (int64_t k = 0; k < S; ++k) {
          const double gk = masked<kMask, double>(g, y, k);
          sg += gk;
          sgx += gk * (double(p[k]) - mean);
        }
      }
      sgx *= inv;  // sum(g * xhat), the common factor taken out of the loop
      if (gw) gw[c] = T(sgx);
      if (gb) gb[c] = T(sg);
      if (!gx && !gz) continue;
      const double w = pw ? pw[c] : 1.0;
      for (int64_t n = 0; n < N; ++n) {
        const int64_t at = (n * C + c) * S;
        const D* p = px + at;
        const D* g = pg + at;
        const D* y = py ? py + at : nullptr;
        if (gz)
          for (int64_t k = 0; k < S; ++k) put(gz[at + k], masked<kMask, double>(g, y, k));
        if (!gx) continue;
        D* d = gx + at;
        if (training) {
          // dx = w * inv / m * (m * g - sum(g) - xhat * sum(g * xhat))
          const double k1 = w * inv, k2 = sg / count, k3 = sgx / count;
          for (int64_t k = 0; k < S; ++k)
            put(d[k], T(k1 * (masked<kMask, double>(g, y, k) - k2 - (double(p[k]) - mean) * inv * k3)));
        } else {
          const T k1 = T(w * inv);
          for (int64_t k = 0; k < S; ++k) put(d[k], masked<kMask, T>(g, y, k) * k1);
        }
      }
    }
  });
}
}  // namespace

// bf16 data with f32 parameters and statistics (what autocast gives, sent natively by the
// upcast16 layer), else one float type throughout. Plain batch norm is the fused one without
// residual and ReLU.
namespace {
template <typename F>
void dispatch_bn(DType t, const char* name, F&& f) {
  if (t == DType::bf16) return f.template operator()<BFloat16, float>();
  dispatch_float(t, name, [&]<typename T>() { f.template operator()<T, T>(); });
}
void bn_forward_any(const Tensor& x, const Tensor& z, bool relu, const Tensor& weight,
                    const Tensor& bias, Tensor& running_mean, Tensor& running_var, bool training,
                    double momentum, double eps, Tensor& out, Tensor& save_mean,
                    Tensor& save_invstd) {
  dispatch_bn(x.dtype(), "batch_norm", [&]<typename D, typename T>() {
    bn_forward<D, T>(x, weight, bias, running_mean, running_var, training, momentum, eps,
                     BnTail<D, T>{opt<D>(z), relu}, out, save_mean, save_invstd);
  });
}
void bn_backward_any(const Tensor& grad, const Tensor& out, const Tensor& x, const Tensor& weight,
                     const Tensor& save_mean, const Tensor& save_invstd, bool training,
                     Tensor& grad_x, Tensor& grad_z, Tensor& grad_weight, Tensor& grad_bias) {
  dispatch_bn(x.dtype(), "batch_norm_backward", [&]<typename D, typename T>() {
    auto run = [&]<bool kMask>() {
      bn_backward<kMask, D, T>(grad, out, x, weight, save_mean, save_invstd, training, grad_x,
                               grad_z, grad_weight, grad_bias);
    };
    if (out.defined()) run.template operator()<true>();
    else run.template operator()<false>();
  });
}
}  // namespace

void CpuBackend::batch_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                    Tensor& running_mean, Tensor& running_var, bool training,
                                    double momentum, double eps, Tensor& out, Tensor& save_mean,
                                    Tensor& save_invstd) {
  bn_forward_any(x, Tensor(), false, weight, bias, running_mean, running_var, training, momentum,
                 eps, out, save_mean, save_invstd);
}
void CpuBackend::batch_norm_relu_forward(const Tensor& x, const Tensor& z, const Tensor& weight,
                                         const Tensor& bias, Tensor& running_mean,
                                         Tensor& running_var, bool training, double momentum,
                                         double eps, Tensor& out, Tensor& save_mean,
                                         Tensor& save_invstd, Tensor& reserve) {
  reserve = Tensor();  // the backward needs only out
  bn_forward_any(x, z, true, weight, bias, running_mean, running_var, training, momentum, eps,
                 out, save_mean, save_invstd);
}

void CpuBackend::batch_norm_backward(const Tensor& grad, const Tensor& x, const Tensor& weight,
                                     const Tensor& save_mean, const Tensor& save_invstd,
                                     bool training, Tensor& grad_x, Tensor& grad_weight,
                                     Tensor& grad_bias) {
  Tensor no_z;
  bn_backward_any(grad, Tensor(), x, weight, save_mean, save_invstd, training, grad_x, no_z,
                  grad_weight, grad_bias);
}
void CpuBackend::batch_norm_relu_backward(const Tensor& grad, const Tensor& out, const Tensor& x,
                                          const Tensor& weight, const Tensor& /*bias*/,
                                          const Tensor& save_mean, const Tensor& save_invstd,
                                          const Tensor& /*reserve*/, bool training, double /*eps*/,
                                          Tensor& grad_x, Tensor& grad_z, Tensor& grad_weight,
                                          Tensor& grad_bias) {
  bn_backward_any(grad, out, x, weight, save_mean, save_invstd, training, grad_x, grad_z,
                  grad_weight, grad_bias);
}

namespace {

// Row r of a (rows, D) array as C values: the row itself where T is C, else widened into buf
// (one conversion per element, where each pass over a 16-bit row would convert again).
template <typename C, typename T>
const C* row_as(const T* p, int64_t r, int64_t D, std::vector<C>& buf) {
  if constexpr (std::is_same_v<T, C>) {
    return p + r * D;
  } else {
    buf.resize(size_t(D));
    C* b = buf.data();
#pragma omp simd
    for (int64_t i = 0; i < D; ++i) b[i] = C(p[r * D + i]);
    return b;
  }
}

// Layer norm over rows of D; T is every tensor's type and C the type the affine step runs
// in: T itself, or f32 for f16 and bf16 (the widened path's values, one rounding each).
// Statistics are in double.
template <typename T, typename C>
void layer_norm_forward_typed(const Tensor& x, const Tensor& weight, const Tensor& bias,
                              double eps, Tensor& out, Tensor& mean, Tensor& rstd) {
  const int64_t D = x.shape().back(), R = x.numel() / std::max<int64_t>(1, D);
  const T* px = x.data<T>();
  T* po = out.data<T>();
  const T* pw = opt<T>(weight);
  const T* pb = opt<T>(bias);
  C* pm = mean.data<C>();  // the statistics in the compute type (f32 for 16-bit rows)
  C* pr = rstd.data<C>();
  parallel_for(0, R, std::max<int64_t>(1, kGrain / (D + 1)), [&](int64_t b, int64_t e) {
    // the parameters in C, ones and zeros where absent: a loop without branches vectorises
    std::vector<C> wc(D, C(1)), bc(D, C(0));
    for (int64_t i = 0; i < D; ++i) {
      if (pw) wc[i] = C(pw[i]);
      if (pb) bc[i] = C(pb[i]);
    }
    std::vector<C> xbuf;
    for (int64_t r = b; r < e; ++r) {
      const C* row = row_as(px, r, D, xbuf);
      // in an order that does not depend on T, so 16-bit rows give their widening's values
      const double mu = row_sum(row, D) / double(D);
      const double q = fixed_order_sum(D, [&](int64_t i) {
        const double d = double(row[i]) - mu;
        return d * d;
      });
      const double inv = 1.0 / std::sqrt(q / double(D) + eps);
      pm[r] = C(mu);
      pr[r] = C(inv);
      T* o = po + r * D;
#pragma omp simd
      for (int64_t i = 0; i < D; ++i) {
        const C v = C((double(row[i]) - mu) * inv);
        put(o[i], mul_add(v, wc[i], bc[i]));
      }
    }
  });
}

template <typename T, typename C>
void layer_norm_backward_typed(const Tensor& grad, const Tensor& x, const Tensor& weight,
                               const Tensor& mean, const Tensor& rstd, Tensor& grad_x,
                               Tensor& grad_weight, Tensor& grad_bias) {
  const int64_t D = x.shape().back(), R = x.numel() / std::max<int64_t>(1, D);
  const T* px = x.data<T>();
  const T* pg = grad.data<T>();
  const T* pw = opt<T>(weight);
  const C* pm = mean.data<C>();
  const C* pr = rstd.data<C>();
  T* gx = opt_mut<T>(grad_x);
  const int nt = parallel_slots();
  // Per-thread partial sums for the weight and bias gradients.
  std::vector<std::vector<double>> pgw(nt, std::vector<double>(grad_weight.defined() ? D : 0, 0.0));
  std::vector<std::vector<double>> pgb(nt, std::vector<double>(grad_bias.defined() ? D : 0, 0.0));
  parallel_for_slots(0, R, std::max<int64_t>(1, kGrain / (D + 1)), [&](int t, int64_t b, int64_t e) {
    double* wsum = pgw[t].empty() ? nullptr : pgw[t].data();
    double* bsum = pgb[t].empty() ? nullptr : pgb[t].data();
    std::vector<double> wd(D, 1.0);  // the weight in double, ones where absent
    if (pw)
      for (int64_t i = 0; i < D; ++i) wd[i] = double(pw[i]);
    std::vector<C> xbuf, gbuf;
    for (int64_t r = b; r < e; ++r) {
      const C* row = row_as(px, r, D, xbuf);
      const C* g = row_as(pg, r, D, gbuf);
      const double mu = double(pm[r]), inv = double(pr[r]);
      double a = 0, c = 0;  // mean(g*w), mean(g*w*xhat)
#pragma omp simd reduction(+ : a, c)
      for (int64_t i = 0; i < D; ++i) {
        double xh = (double(row[i]) - mu) * inv;
        double gw = double(g[i]) * wd[i];
        a += gw;
        c += gw * xh;
        if (wsum) wsum[i] += double(g[i]) * xh;
        if (bsum) bsum[i] += double(g[i]);
      }
      a /= double(D);
      c /= double(D);
      if (!gx) continue;
      T* d = gx + r * D;
#pragma omp simd
      for (int64_t i = 0; i < D; ++i) {
        double xh = (double(row[i]) - mu) * inv;
        double gw = double(g[i]) * wd[i];
        put(d[i], C(inv * (gw - a - xh * c)));
      }
    }
  });
  auto sum_parts = [&](std::vector<std::vector<double>>& parts, Tensor& dst) {
    if (!dst.defined()) return;
    T* p = dst.data<T>();
    for (int64_t i = 0; i < D; ++i) {
      double s = 0;
      for (int t = 0; t < nt; ++t) s += parts[t][i];
      put(p[i], C(s));
    }
  };
  sum_parts(pgw, grad_weight);
  sum_parts(pgb, grad_bias);
}

}  // namespace

void CpuBackend::layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                    double eps, Tensor& out, Tensor& mean, Tensor& rstd) {
  dispatch_float_compute(x.dtype(), "layer_norm", [&]<typename T, typename C>() {
    layer_norm_forward_typed<T, C>(x, weight, bias, eps, out, mean, rstd);
  });
}

void CpuBackend::layer_norm_backward(const Tensor& grad, const Tensor& x, const Tensor& weight,
                                     const Tensor& mean, const Tensor& rstd, Tensor& grad_x,
                                     Tensor& grad_weight, Tensor& grad_bias) {
  dispatch_float_compute(x.dtype(), "layer_norm_backward", [&]<typename T, typename C>() {
    layer_norm_backward_typed<T, C>(grad, x, weight, mean, rstd, grad_x, grad_weight, grad_bias);
  });
}

}  // namespace nn::backend
