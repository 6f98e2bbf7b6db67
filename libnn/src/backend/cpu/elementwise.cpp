// CPU elementwise family: copy/cast, fill, random fill, unary and binary maps, where.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include <unsupported/Eigen/SpecialFunctions>

#include "kernels/int_math.h"
#include "kernels/philox.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/parallel.h"

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

// GELU (or with pg its gradient) of n contiguous f32 values, on Eigen's vectorised erf (a
// rational approximation accurate to a few ulp; libm's erf is a scalar call per element) and
// exp.
void gelu_block(const float* px, const float* pg, float* po, int64_t n) {
  using Arr = Eigen::Array<float, Eigen::Dynamic, 1>;
  Eigen::Map<const Arr> v(px, n);
  Eigen::Map<Arr> o(po, n);
  // one expression each, so Eigen evaluates it in a single pass without temporaries
  if (!pg) {
    o = 0.5f * v * (1.f + (v * float(kInvSqrt2)).erf());
  } else {
    o = Eigen::Map<const Arr>(pg, n) *
        (0.5f * (1.f + (v * float(kInvSqrt2)).erf()) +
         float(kInvSqrt2Pi) * v * (-0.5f * v * v).exp());
  }
}
template <typename T>
void gelu_typed(const T* px, const T* pg, T* po, int64_t n) {
  parallel_for(0, n, kGrain, [&](int64_t b, int64_t e) {
    if constexpr (std::is_same_v<T, float>) {
      gelu_block(px + b, pg ? pg + b : nullptr, po + b, e - b);
    } else {
      // Blocks start at multiples of kBlock and sit at the same place in the buffer as in a
      // block-aligned tensor, so Eigen splits them into packets as it would the f32 tensor.
      constexpr int64_t kBlock = 2048;
      alignas(64) float xs[kBlock], gs[kBlock];
      for (int64_t i0 = b; i0 < e;) {
        const int64_t at = i0 % kBlock, i1 = std::min(e, i0 - at + kBlock), m = i1 - i0;
#pragma omp simd
        for (int64_t i = 0; i < m; ++i) xs[at + i] = float(px[i0 + i]);
        if (pg)
#pragma omp simd
          for (int64_t i = 0; i < m; ++i) gs[at + i] = float(pg[i0 + i]);
        gelu_block(xs + at, pg ? gs + at : nullptr, xs + at, m);
#pragma omp simd
        for (int64_t i = 0; i < m; ++i) put(po[i0 + i], xs[at + i]);
        i0 = i1;
      }
    }
  });
}
// GELU and its gradient over contiguous tensors of one float type: f32 in place; f16 and bf16
// widened a block at a time into a buffer, computed in f32 and rounded once (the values of
// the widened path, one pass over memory). Returns false, doing nothing, for any other dtype
// or layout.
bool gelu_dense(const Tensor& x, Tensor& out, const Tensor* grad = nullptr) {
  if (!x.is_contiguous() || !out.is_contiguous() || (grad && !grad->is_contiguous()) ||
      out.dtype() != x.dtype() || (grad && grad->dtype() != x.dtype()))
    return false;
  bool done = true;
  auto run = [&]<typename T>() {
    gelu_typed<T>(x.data<T>(), grad ? grad->data<T>() : nullptr, out.data<T>(), x.numel());
  };
  switch (x.dtype()) {
    case DType::f32: run.template operator()<float>(); break;
    case DType::f16: run.template operator()<Half>(); break;
    case DType::bf16: run.template operator()<BFloat16>(); break;
    default: done = false;
  }
  return done;
}

// T is the tensors' element type, C the type computed in: T itself, or float for f16 and
// bf16 (each element widened, computed, rounded once: the values of the widened path, one
// pass).
template <typename T, typename C = T>
void unary_typed(UnaryOp op, const Tensor& x, Tensor& out, C a, C b) {
  if (op == UnaryOp::gelu && gelu_dense(x, out)) return;
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

template <typename T>
inline T binary_value(BinaryOp op, T x, T y) {
  switch (op) {
    case BinaryOp::add: return x + y;
    case BinaryOp::sub: return x - y;
    case BinaryOp::mul: return x * y;
    case BinaryOp::div:
      // the lowest value / -1 overflows, which the CPU traps (SIGFPE): it wraps instead (a
      // division by zero, the other trap, is refused by the op before it gets here)
      if constexpr (std::is_integral_v<T> && std::is_signed_v<T>)
        if (y == T(-1)) return T(std::make_unsigned_t<T>(0) - std::make_unsigned_t<T>(x));
      return x / y;
    case BinaryOp::pow: return T(std::pow(x, y));
    // a NaN in either operand is the result (as amax/amin and argmax have it)
    case BinaryOp::maximum: return x != x || x > y ? x : y;
    case BinaryOp::minimum: return x != x || x < y ? x : y;
    case BinaryOp::eq: return T(x == y);
    case BinaryOp::ne: return T(x != y);
    case BinaryOp::lt: return T(x < y);
    case BinaryOp::le: return T(x <= y);
    case BinaryOp::gt: return T(x > y);
    case BinaryOp::ge: return T(x >= y);
  }
  return x;
}
}  // namespace

void CpuBackend::copy(const Tensor& src, Tensor& dst) {
  dispatch_all(dst.dtype(), [&]<typename TD>() {
    dispatch_all(src.dtype(), [&]<typename TS>() {
      map<TD, TS>(dst, [](TS v) { return convert<TD>(v); }, src);
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
      if (gelu_dense(x, grad_x, &grad)) return;
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
      map<T, T, T>(grad_x, [](T g, T v_) {
        const C v = C(v_), s = C(1) / (C(1) + std::exp(-v));
        return C(g) * s * (C(1) + v * (C(1) - s));
      }, grad, x);
      return;
    case UnaryOp::leaky_relu:
      map<T, T, T>(grad_x, [a](T g, T v) { return C(v) > C(0) ? C(g) : C(g) * a; }, grad, x);
      return;
    case UnaryOp::elu:  // a exp(x) at and below 0
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
#define NN_BINARY_CASE(OP)                                                                 \
  case BinaryOp::OP:                                                                       \
    map<T, T, T>(out, [](T x, T y) { return binary_value<C>(BinaryOp::OP, C(x), C(y)); },    \
                 a, b);                                                                    \
    return;
  switch (op) {
    NN_BINARY_CASE(add) NN_BINARY_CASE(sub) NN_BINARY_CASE(mul) NN_BINARY_CASE(div)
    NN_BINARY_CASE(pow) NN_BINARY_CASE(maximum) NN_BINARY_CASE(minimum) NN_BINARY_CASE(eq)
    NN_BINARY_CASE(ne) NN_BINARY_CASE(lt) NN_BINARY_CASE(le) NN_BINARY_CASE(gt)
    NN_BINARY_CASE(ge)
  }
#undef NN_BINARY_CASE
}
}  // namespace

void CpuBackend::binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  if (dispatch16(a.dtype(), [&]<typename T>() { binary_typed<T, float>(op, a, b, out); })) return;
  dispatch_numeric(a.dtype(), "binary", [&]<typename T>() { binary_typed<T>(op, a, b, out); });
}

void CpuBackend::where(const Tensor& cond, const Tensor& a, const Tensor& b, Tensor& out) {
  dispatch_numeric(a.dtype(), "where", [&]<typename T>() {
    dispatch_numeric(cond.dtype(), "where", [&]<typename C>() {
      map<T, C, T, T>(out, [](C c, T x, T y) { return c != C(0) ? x : y; }, cond, a, b);
    });
  });
}

}  // namespace nn::backend
