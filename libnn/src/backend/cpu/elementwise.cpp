// CPU elementwise family: copy/cast, fill, random fill, unary and binary maps, where.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include <unsupported/Eigen/SpecialFunctions>

#include "kernels/int_math.h"
#include "kernels/philox.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/parallel.h"
#include "core/util.h"

namespace nn::backend {
using namespace nn::cpu;

namespace {
template <typename To, typename From>
inline To convert(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_same_v<From, Half> || std::is_same_v<From, BFloat16>) {
    return convert<To>(float(v));
  } else if constexpr (std::is_same_v<To, Half> || std::is_same_v<To, BFloat16>) {
    return To(float(v));
  } else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<From>) {
    // Truncate through int64 (saturating), then wrap into narrower types: defined for
    // every input, where a direct out-of-range cast is undefined behaviour.
    return static_cast<To>(kernels::saturate_i64(double(v)));
  } else {
    return static_cast<To>(v);
  }
}

constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;

template <typename T>
inline T unary_value(UnaryOp op, T x, T a, T b) {
  switch (op) {
    case UnaryOp::neg: return -x;
    case UnaryOp::exp: return std::exp(x);
    case UnaryOp::log: return std::log(x);
    case UnaryOp::sqrt: return std::sqrt(x);
    case UnaryOp::rsqrt: return T(1) / std::sqrt(x);
    case UnaryOp::abs: return std::abs(x);
    case UnaryOp::square: return x * x;
    case UnaryOp::relu: return x <= T(0) ? T(0) : x;  // NaN stays NaN
    case UnaryOp::gelu: return T(0.5) * x * (T(1) + std::erf(x * T(kInvSqrt2)));
    case UnaryOp::tanh: return std::tanh(x);
    case UnaryOp::sigmoid: return T(1) / (T(1) + std::exp(-x));
    case UnaryOp::add_scalar: return x + a;
    case UnaryOp::mul_scalar: return x * a;
    case UnaryOp::pow_scalar: return std::pow(x, a);
    case UnaryOp::rsub_scalar: return a - x;
    case UnaryOp::rdiv_scalar: return a / x;
    case UnaryOp::clamp: return x < a ? a : (x > b ? b : x);
    case UnaryOp::div_scalar: return x / a;
    case UnaryOp::log1p: return std::log1p(x);
    case UnaryOp::silu: return x / (T(1) + std::exp(-x));
    case UnaryOp::softplus:
      return x * a > T(kernels::kSoftplusThreshold) ? x : std::log1p(std::exp(x * a)) / a;
    case UnaryOp::leaky_relu: return x > T(0) ? x : x * a;  // (NaN stays NaN)
    case UnaryOp::elu: return x > T(0) ? x : a * std::expm1(x);
  }
  return x;
}

// The ops whose f32 values come from Eigen's vectorised functions (a few ulp from the exact
// value; libm's tanh, exp and erf are a scalar call per element, 10 to 50 times slower):
// forward GELU, tanh, sigmoid and SiLU; with a gradient, GELU's and SiLU's (tanh's and
// sigmoid's gradients read their outputs: plain arithmetic).
bool eigen_op(UnaryOp op, bool backward) {
  switch (op) {
    case UnaryOp::gelu:
    case UnaryOp::silu: return true;
    case UnaryOp::tanh:
    case UnaryOp::sigmoid: return !backward;
    default: return false;
  }
}
// op (an eigen_op) of n f32 values (n a multiple of 16, the buffers 64-byte aligned, so
// every value takes Eigen's packet path), or with pg its gradient times pg; po must not
// overlap px or pg.
void eigen_block(UnaryOp op, const float* px, const float* pg, float* po, int64_t n) {
  using Arr = Eigen::Array<float, Eigen::Dynamic, 1>;
  Eigen::Map<const Arr, Eigen::Aligned64> v(px, n);
  Eigen::Map<Arr, Eigen::Aligned64> o(po, n);
  // one expression each, so Eigen evaluates it in a single pass without temporaries
  switch (op) {
    case UnaryOp::gelu:
      if (!pg) {
        o = 0.5f * v * (1.f + (v * float(kInvSqrt2)).erf());
      } else {
        // (v - v: 0, or NaN at ±inf, where the exact form's x pdf(x) is inf x 0, as in
        // PyTorch's and our f64 gradient; Eigen's exp never returns 0, so without it the
        // gradient read ±inf there)
        o = Eigen::Map<const Arr, Eigen::Aligned64>(pg, n) *
            (0.5f * (1.f + (v * float(kInvSqrt2)).erf()) +
             float(kInvSqrt2Pi) * v * (-0.5f * v * v).exp() + (v - v));
      }
      return;
    case UnaryOp::tanh: {
      // Eigen's tanh is ±1 exactly from |x| = 7.9 (7.99 with FMA), where tanh's gradient
      // 1 - y^2 is still 4e-7 (std::tanh reaches 1 at 9.01): past |x| = 4 it is
      // 1 - 2 / (exp(2|x|) + 1), within an ulp there (no cancellation: the term is small)
      // (Eigen's select of a comparison is scalar code, a call of its tanh per element: 4 ns
      // an element. So the packet tanh first, then, in stretches that reach the tail, the
      // tail for every element and a blend the compiler vectorises.)
      o = v.tanh();
      alignas(64) float tail[1024];
      for (int64_t i0 = 0; i0 < n; i0 += 1024) {
        const int64_t m = std::min<int64_t>(1024, n - i0);
        // (NaN is left as tanh gave it; the largest of the other magnitudes decides)
        if (!(Eigen::Map<const Arr, Eigen::Aligned64>(px + i0, m).abs().template maxCoeff<Eigen::PropagateNumbers>() > 4.f))
          continue;
        Eigen::Map<Arr, Eigen::Aligned64>(tail, m) =
            1.f - 2.f / ((2.f * Eigen::Map<const Arr, Eigen::Aligned64>(px + i0, m).abs()).exp() + 1.f);
#pragma omp simd
        for (int64_t i = 0; i < m; ++i) {
          const float x = px[i0 + i];
          if (std::fabs(x) > 4.f) po[i0 + i] = std::copysign(tail[i], x);
        }
      }
      return;
    }
    // 1 / (1 + exp(-x)): Eigen's logistic() is thousands of ulp off in the negative tail
    case UnaryOp::sigmoid: o = 1.f / (1.f + (-v).exp()); return;
    case UnaryOp::silu:
      if (!pg) {
        o = v / (1.f + (-v).exp());
      } else {  // sigmoid(x) (1 + x (1 - sigmoid(x))), the sigmoid in o first
        o = 1.f / (1.f + (-v).exp());
        o = Eigen::Map<const Arr, Eigen::Aligned64>(pg, n) * o * (1.f + v * (1.f - o));
      }
      return;
    default: NN_ERROR("eigen_block: not a vectorised op");
  }
}
// op over n values (widened to f32, the result rounded to T once), a block at a time through
// aligned buffers, the last block padded: every value is computed by the same packet code
// whatever its position, so results do not depend on where a thread's range starts (Eigen's
// scalar code for unaligned heads and tails rounds exp differently).
template <typename T>
void eigen_span(UnaryOp op, const T* px, const T* pg, T* po, int64_t n) {
  constexpr int64_t kBlock = 1024;
  alignas(64) float xs[kBlock], gs[kBlock], os[kBlock];
  for (int64_t i0 = 0; i0 < n; i0 += kBlock) {
    const int64_t m = std::min(kBlock, n - i0), padded = (m + 15) / 16 * 16;
#pragma omp simd
    for (int64_t i = 0; i < m; ++i) xs[i] = float(px[i0 + i]);
    for (int64_t i = m; i < padded; ++i) xs[i] = gs[i] = 0.f;
    if (pg)
#pragma omp simd
      for (int64_t i = 0; i < m; ++i) gs[i] = float(pg[i0 + i]);
    eigen_block(op, xs, pg ? gs : nullptr, os, padded);
#pragma omp simd
    for (int64_t i = 0; i < m; ++i) put(po[i0 + i], os[i]);
  }
}
// An eigen_op (or with grad its gradient) over tensors of one float type (f16 and bf16
// computed in f32 and rounded once, the values of the widened path) laid out as rows: out
// and grad contiguous, x contiguous or a 2-d view of contiguous rows (a slice of columns, as
// LSTM's cell gate in its four). Returns false, doing nothing, for any other op, dtype or
// layout, or an output that shares memory with an input.
bool eigen_dense(UnaryOp op, const Tensor& x, Tensor& out, const Tensor* grad = nullptr) {
  const bool rows = !x.is_contiguous() && x.dim() == 2 && x.strides()[1] == 1;
  if (!eigen_op(op, grad != nullptr) || !(x.is_contiguous() || rows) || !out.is_contiguous() ||
      (grad && !grad->is_contiguous()) || out.dtype() != x.dtype() ||
      (grad && grad->dtype() != x.dtype()) || out.storage() == x.storage() ||
      (grad && out.storage() == grad->storage()))
    return false;
  auto run = [&]<typename T>() {
    const T* px = x.data<T>();
    const T* pg = grad ? grad->data<T>() : nullptr;
    T* po = out.data<T>();
    if (!rows) {
      parallel_for(0, x.numel(), kGrain, [&](int64_t b, int64_t e) {
        eigen_span<T>(op, px + b, pg ? pg + b : nullptr, po + b, e - b);
      });
      return;
    }
    const int64_t R = x.shape()[0], C = x.shape()[1], ld = x.strides()[0];
    parallel_for(0, R, std::max<int64_t>(1, kGrain / std::max<int64_t>(C, 1)), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r)
        eigen_span<T>(op, px + r * ld, pg ? pg + r * C : nullptr, po + r * C, C);
    });
  };
  switch (x.dtype()) {
    case DType::f32: run.template operator()<float>(); return true;
    case DType::f16: run.template operator()<Half>(); return true;
    case DType::bf16: run.template operator()<BFloat16>(); return true;
    default: return false;
  }
}

// T is the tensors' element type, C the type computed in: T itself, or float for f16 and
// bf16 (each element widened, computed, rounded once: the values of the widened path, one
// pass).
template <typename T, typename C = T>
void unary_typed(UnaryOp op, const Tensor& x, Tensor& out, C a, C b) {
  if (eigen_dense(op, x, out)) return;
  if constexpr (std::is_same_v<T, double>) {
    // f64 (reference computations, gradient checks): one loop, the op chosen per element
    map<T, T>(out, [op, a, b](T v) { return unary_value<C>(op, v, a, b); }, x);
  } else {
    // One instantiation per op keeps the switch out of the inner loop.
#define NN_UNARY_CASE(OP)                                                                   \
  case UnaryOp::OP:                                                                         \
    map<T, T>(out, [a, b](T v) { return unary_value<C>(UnaryOp::OP, C(v), a, b); }, x);    \
    return;
    switch (op) {
      NN_UNARY_CASE(neg) NN_UNARY_CASE(exp) NN_UNARY_CASE(log) NN_UNARY_CASE(sqrt)
      NN_UNARY_CASE(rsqrt) NN_UNARY_CASE(abs) NN_UNARY_CASE(square) NN_UNARY_CASE(relu)
      NN_UNARY_CASE(gelu) NN_UNARY_CASE(tanh) NN_UNARY_CASE(sigmoid) NN_UNARY_CASE(add_scalar)
      NN_UNARY_CASE(mul_scalar) NN_UNARY_CASE(pow_scalar) NN_UNARY_CASE(rsub_scalar)
      NN_UNARY_CASE(rdiv_scalar) NN_UNARY_CASE(clamp) NN_UNARY_CASE(div_scalar)
      NN_UNARY_CASE(log1p) NN_UNARY_CASE(silu) NN_UNARY_CASE(softplus) NN_UNARY_CASE(leaky_relu)
      NN_UNARY_CASE(elu)
    }
#undef NN_UNARY_CASE
  }
}

// The arithmetic binary ops and maximum/minimum of floating types (integer tensors take
// kernels::int_binary, comparisons comparison_mask).
template <typename T>
inline T binary_value(BinaryOp op, T x, T y) {
  switch (op) {
    case BinaryOp::add: return x + y;
    case BinaryOp::sub: return x - y;
    case BinaryOp::mul: return x * y;
    case BinaryOp::div: return x / y;
    case BinaryOp::pow: return T(std::pow(x, y));
    // a NaN in either operand is the result (as amax/amin and argmax have it)
    case BinaryOp::maximum: return x != x || x > y ? x : y;
    case BinaryOp::minimum: return x != x || x < y ? x : y;
    default: return x;  // (not reached: comparisons go through comparison_mask)
  }
}

// The comparisons in one loop a dtype: the operands' order, 0 when unordered (a NaN), 1 less,
// 2 equal, 3 greater, picks a bit of the op's mask. 0 for any other op.
constexpr unsigned comparison_mask(BinaryOp op) {
  switch (op) {
    case BinaryOp::eq: return 0b0100;
    case BinaryOp::ne: return 0b1011;
    case BinaryOp::lt: return 0b0010;
    case BinaryOp::le: return 0b0110;
    case BinaryOp::gt: return 0b1000;
    case BinaryOp::ge: return 0b1100;
    default: return 0;
  }
}
}  // namespace

// Whether a copy between these types goes through an f32 copy: a 16-bit type and one other
// than f32 (f64, an integer, the other 16-bit type). That gives the same values, since a
// 16-bit value converts through f32 either way (convert), and 18 fewer loops to compile.
template <typename A, typename B>
constexpr bool copy_through_f32() {
  constexpr bool a16 = std::is_same_v<A, Half> || std::is_same_v<A, BFloat16>;
  constexpr bool b16 = std::is_same_v<B, Half> || std::is_same_v<B, BFloat16>;
  return !std::is_same_v<A, B> && !std::is_same_v<A, float> && !std::is_same_v<B, float> &&
         (a16 || b16);
}

void CpuBackend::copy(const Tensor& src, Tensor& dst) {
  dispatch_all(dst.dtype(), [&]<typename TD>() {
    dispatch_all(src.dtype(), [&]<typename TS>() {
      if constexpr (copy_through_f32<TD, TS>()) {
        // The f32 temporary holds src's distinct elements: a broadcast source (stride 0)
        // is converted once and expanded again into dst.
        Shape distinct = src.shape(), wide(src.dim());  // wide: f's strides, 0 where src's are
        int64_t step = 1;
        for (int64_t d = src.dim() - 1; d >= 0; --d) {
          if (src.strides()[size_t(d)] == 0) distinct[size_t(d)] = 1;
          wide[size_t(d)] = src.strides()[size_t(d)] == 0 ? 0 : step;
          step *= distinct[size_t(d)];
        }
        Tensor f = empty(distinct, TensorOptions(DType::f32).device(src.device()));
        copy(make_view(src, distinct, src.strides(), src.offset()), f);
        copy(make_view(f, src.shape(), wide, 0), dst);
      } else {
        map<TD, TS>(dst, [](TS v) { return convert<TD>(v); }, src);
      }
    });
  });
}

void CpuBackend::fill(Tensor& dst, double value) {
  dispatch_all(dst.dtype(), [&]<typename T>() {
    T v = convert<T>(value);
    map<T>(dst, [v]() { return v; });
  });
}

void CpuBackend::fill_random(Tensor& dst, RandomKind kind, double a, double b, uint64_t seed,
                             uint64_t offset) {
  auto typed = [&]<typename T>() {  // 16-bit: the f32 value, rounded once
    using W = std::conditional_t<std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>, float, T>;
    constexpr int bits = std::is_same_v<T, Half>       ? rng::kF16UniformBits
                         : std::is_same_v<T, BFloat16> ? rng::kBF16UniformBits
                                                       : 24;
    T* p = dst.data<T>();
    const int64_t n = dst.numel(), blocks = (n + 3) / 4;
    parallel_for(0, blocks, kGrain / 4, [&](int64_t bb, int64_t be) {
      for (int64_t blk = bb; blk < be; ++blk) {
        float r[4];
        if (kind == RandomKind::uniform) {
          rng::uniform4(seed, offset + uint64_t(blk), r);
          if constexpr (bits < 24)
            for (float& u : r) u = rng::keep_bits(u, bits);
        } else {
          rng::normal4(seed, offset + uint64_t(blk), r);
        }
        for (int k = 0; k < 4 && blk * 4 + k < n; ++k) {
          T v = T(kind == RandomKind::uniform ? W(a + (b - a) * r[k]) : W(a + b * r[k]));
          // [a, b): a draw rounded up to b (a 16-bit type's coarse grid, an f32 range of
          // large values) is a, as PyTorch's CUDA kernels have it
          if (kind == RandomKind::uniform && b > a && double(v) >= b) v = T(W(a));
          p[blk * 4 + k] = v;
        }
      }
    });
  };
  if (dispatch16(dst.dtype(), typed)) return;
  dispatch_float(dst.dtype(), "fill_random", typed);
}

void CpuBackend::activate(UnaryOp op, const float* x, float* y, int64_t n) {
  NN_CHECK(op == UnaryOp::tanh || op == UnaryOp::sigmoid, "activate: tanh or sigmoid only");
  eigen_span<float>(op, x, nullptr, y, n);
}
void CpuBackend::activate(UnaryOp op, const double* x, double* y, int64_t n) {
  NN_CHECK(op == UnaryOp::tanh || op == UnaryOp::sigmoid, "activate: tanh or sigmoid only");
  for (int64_t i = 0; i < n; ++i) y[i] = unary_value<double>(op, x[i], 0.0, 0.0);
}

bool CpuBackend::native16(UnaryOp op, const Tensor& x, const Tensor& out) {
  return op != UnaryOp::gelu || (x.is_contiguous() && out.is_contiguous());
}

void CpuBackend::unary(UnaryOp op, const Tensor& x, Tensor& out, double a, double b) {
  auto typed16 = [&]<typename T>() { unary_typed<T, float>(op, x, out, float(a), float(b)); };
  if (dispatch16(x.dtype(), typed16)) return;
  dispatch_numeric(x.dtype(), "unary", [&]<typename T>() {
    if constexpr (std::is_floating_point_v<T>) {
      unary_typed<T>(op, x, out, T(a), T(b));
    } else if (kernels::int_exact(op)) {  // exact, wrapping (kernels/int_math.h)
      int64_t ia, ib;
      kernels::int_scalars<T>(op, a, b, ia, ib);
      map<T, T>(out, [=](T v) { return T(kernels::int_unary(op, int64_t(v), ia, ib)); }, x);
    } else {  // (no op of the library's sends an integer tensor here)
      map<T, T>(out, [=](T v) { return convert<T>(unary_value<double>(op, double(v), a, b)); }, x);
    }
  });
}

namespace {
// T, C as for unary_typed.
template <typename T, typename C = T>
void unary_backward_typed(UnaryOp op, const Tensor& grad, const Tensor& x, const Tensor& y, C a,
                          Tensor& grad_x) {
  switch (op) {
    case UnaryOp::relu:
      map<T, T, T>(grad_x, [](T g, T v) { return C(v) <= C(0) ? C(0) : C(g); }, grad, x);
      return;
    case UnaryOp::gelu:
      if (eigen_dense(op, x, grad_x, &grad)) return;
      map<T, T, T>(grad_x, [](T g, T v_) {
        const C v = C(v_);
        C cdf = C(0.5) * (C(1) + std::erf(v * C(kInvSqrt2)));
        C pdf = C(kInvSqrt2Pi) * std::exp(C(-0.5) * v * v);
        return C(g) * (cdf + v * pdf);
      }, grad, x);
      return;
    case UnaryOp::tanh:
      map<T, T, T>(grad_x, [](T g, T t) { return C(g) * (C(1) - C(t) * C(t)); }, grad, y);
      return;
    case UnaryOp::sigmoid:
      map<T, T, T>(grad_x, [](T g, T s) { return C(g) * C(s) * (C(1) - C(s)); }, grad, y);
      return;
    case UnaryOp::silu:  // sigmoid(x) (1 + x (1 - sigmoid(x)))
      if (eigen_dense(op, x, grad_x, &grad)) return;
      map<T, T, T>(grad_x, [](T g, T v_) {
        const C v = C(v_), s = C(1) / (C(1) + std::exp(-v));
        return C(g) * s * (C(1) + v * (C(1) - s));
      }, grad, x);
      return;
    case UnaryOp::leaky_relu:
      map<T, T, T>(grad_x, [a](T g, T v) { return C(v) > C(0) ? C(g) : C(g) * a; }, grad, x);
      return;
    case UnaryOp::elu:  // a exp(x) at and below 0, g above; NaN at NaN, as PyTorch's vectorised kernel
      map<T, T, T>(grad_x, [a](T g, T v) { return C(v) > C(0) ? C(g) : C(g) * a * std::exp(C(v)); },
                   grad, x);
      return;
    case UnaryOp::softplus:  // sigmoid(a x), 1 past the threshold
      map<T, T, T>(grad_x, [a](T g, T v_) {
        const C v = C(v_) * a;
        return v > C(kernels::kSoftplusThreshold) ? C(g) : C(g) / (C(1) + std::exp(-v));
      }, grad, x);
      return;
    default:
      NN_ERROR("unary_backward: no fused backward for this op");
  }
}
}  // namespace

void CpuBackend::unary_backward(UnaryOp op, const Tensor& grad, const Tensor& x,
                                const Tensor& y, double a, Tensor& grad_x) {
  auto typed16 = [&]<typename T>() { unary_backward_typed<T, float>(op, grad, x, y, float(a), grad_x); };
  if (dispatch16(x.dtype(), typed16)) return;
  dispatch_float(x.dtype(), "unary_backward", [&]<typename T>() {
    unary_backward_typed<T>(op, grad, x, y, T(a), grad_x);
  });
}

namespace {
// T, C as for unary_typed.
template <typename T, typename C = T>
void binary_typed(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  if constexpr (std::is_integral_v<T>) {
    // integer tensors (indices, counts, masks): one loop, the op chosen per element
    map<T, T, T>(out, [op](T x, T y) { return T(kernels::int_binary(op, x, y)); }, a, b);
  } else if (const unsigned mask = comparison_mask(op)) {
    map<T, T, T>(out, [mask](T x_, T y_) {
      const C x = C(x_), y = C(y_);
      const unsigned order = unsigned(x < y) + 2u * unsigned(x == y) + 3u * unsigned(x > y);
      return C((mask >> order) & 1u);
    }, a, b);
  } else {
#define NN_BINARY_CASE(OP)                                                                 \
  case BinaryOp::OP:                                                                       \
    map<T, T, T>(out, [](T x, T y) { return binary_value<C>(BinaryOp::OP, C(x), C(y)); },    \
                 a, b);                                                                    \
    return;
    switch (op) {
      NN_BINARY_CASE(add) NN_BINARY_CASE(sub) NN_BINARY_CASE(mul) NN_BINARY_CASE(div)
      NN_BINARY_CASE(pow) NN_BINARY_CASE(maximum) NN_BINARY_CASE(minimum)
      default: NN_ERROR("binary: op ", int(op), " not computed here");
    }
#undef NN_BINARY_CASE
  }
}
}  // namespace

void CpuBackend::binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  if (dispatch16(a.dtype(), [&]<typename T>() { binary_typed<T, float>(op, a, b, out); })) return;
  dispatch_numeric(a.dtype(), "binary", [&]<typename T>() { binary_typed<T>(op, a, b, out); });
}

void CpuBackend::where(const Tensor& cond, const Tensor& a, const Tensor& b, Tensor& out) {
  check_where_condition(cond, a);
  dispatch_numeric(a.dtype(), "where", [&]<typename T>() {
    auto run = [&]<typename C>() {
      map<T, C, T, T>(out, [](C c, T x, T y) { return c != C(0) ? x : y; }, cond, a, b);
    };
    if (cond.dtype() == DType::u8) run.template operator()<uint8_t>();
    else run.template operator()<T>();
  });
}

}  // namespace nn::backend
