// CPU elementwise family: copy/cast, fill, random fill, unary and binary maps, where.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include <unsupported/Eigen/SpecialFunctions>

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
    double d = double(v);
    if (d != d) return To(0);
    d = std::clamp(d, -9.2e18, 9.2e18);
    return static_cast<To>(static_cast<int64_t>(d));
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
    case UnaryOp::relu: return x > T(0) ? x : T(0);
    case UnaryOp::gelu: return T(0.5) * x * (T(1) + std::erf(x * T(kInvSqrt2)));
    case UnaryOp::tanh: return std::tanh(x);
    case UnaryOp::sigmoid: return T(1) / (T(1) + std::exp(-x));
    case UnaryOp::add_scalar: return x + a;
    case UnaryOp::mul_scalar: return x * a;
    case UnaryOp::pow_scalar: return std::pow(x, a);
    case UnaryOp::rsub_scalar: return a - x;
    case UnaryOp::rdiv_scalar: return a / x;
    case UnaryOp::clamp: return x < a ? a : (x > b ? b : x);
  }
  return x;
}

// f32 GELU and its gradient over contiguous tensors, on Eigen's vectorised erf (a rational
// approximation accurate to a few ulp; libm's erf is a scalar call per element) and exp.
// Returns false, doing nothing, for any other dtype or layout.
bool gelu_f32(const Tensor& x, Tensor& out, const Tensor* grad = nullptr) {
  if (x.dtype() != kF32 || !x.is_contiguous() || !out.is_contiguous() ||
      (grad && !grad->is_contiguous()))
    return false;
  using Arr = Eigen::Array<float, Eigen::Dynamic, 1>;
  const float* px = x.data<float>();
  const float* pg = grad ? grad->data<float>() : nullptr;
  float* po = out.data<float>();
  parallel_for(0, x.numel(), kGrain, [&](int64_t b, int64_t e) {
    // one expression each, so Eigen evaluates it in a single pass without temporaries
    Eigen::Map<const Arr> v(px + b, e - b);
    Eigen::Map<Arr> o(po + b, e - b);
    if (!grad) {
      o = 0.5f * v * (1.f + (v * float(kInvSqrt2)).erf());
    } else {
      o = Eigen::Map<const Arr>(pg + b, e - b) *
          (0.5f * (1.f + (v * float(kInvSqrt2)).erf()) +
           float(kInvSqrt2Pi) * v * (-0.5f * v * v).exp());
    }
  });
  return true;
}

// T is the tensors' element type, C the type computed in: T itself, or float for bf16
// (each element widened, computed, rounded once: the values of the widened path, one pass).
template <typename T, typename C = T>
void unary_typed(UnaryOp op, const Tensor& x, Tensor& out, C a, C b) {
  if (op == UnaryOp::gelu && gelu_f32(x, out)) return;
  // One instantiation per op keeps the switch out of the inner loop.
#define NN_UNARY_CASE(OP)                                                                   \
  case UnaryOp::OP:                                                                         \
    map<T, T>(out, [a, b](T v) { return T(unary_value<C>(UnaryOp::OP, C(v), a, b)); }, x); \
    return;
  switch (op) {
    NN_UNARY_CASE(neg) NN_UNARY_CASE(exp) NN_UNARY_CASE(log) NN_UNARY_CASE(sqrt)
    NN_UNARY_CASE(rsqrt) NN_UNARY_CASE(abs) NN_UNARY_CASE(square) NN_UNARY_CASE(relu)
    NN_UNARY_CASE(gelu) NN_UNARY_CASE(tanh) NN_UNARY_CASE(sigmoid) NN_UNARY_CASE(add_scalar)
    NN_UNARY_CASE(mul_scalar) NN_UNARY_CASE(pow_scalar) NN_UNARY_CASE(rsub_scalar)
    NN_UNARY_CASE(rdiv_scalar) NN_UNARY_CASE(clamp)
  }
#undef NN_UNARY_CASE
}

template <typename T>
inline T binary_value(BinaryOp op, T x, T y) {
  switch (op) {
    case BinaryOp::add: return x + y;
    case BinaryOp::sub: return x - y;
    case BinaryOp::mul: return x * y;
    case BinaryOp::div: return x / y;
    case BinaryOp::pow: return T(std::pow(x, y));
    case BinaryOp::maximum: return x > y ? x : y;
    case BinaryOp::minimum: return x < y ? x : y;
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
  dispatch_float(dst.dtype(), "fill_random", [&]<typename T>() {
    T* p = dst.data<T>();
    const int64_t n = dst.numel(), blocks = (n + 3) / 4;
    parallel_for(0, blocks, kGrain / 4, [&](int64_t bb, int64_t be) {
      for (int64_t blk = bb; blk < be; ++blk) {
        float r[4];
        if (kind == RandomKind::uniform) rng::uniform4(seed, offset + uint64_t(blk), r);
        else rng::normal4(seed, offset + uint64_t(blk), r);
        for (int k = 0; k < 4 && blk * 4 + k < n; ++k)
          p[blk * 4 + k] = kind == RandomKind::uniform ? T(a + (b - a) * r[k]) : T(a + b * r[k]);
      }
    });
  });
}

bool CpuBackend::bf16_native(UnaryOp op) { return op != UnaryOp::gelu; }
bool CpuBackend::bf16_native(BinaryOp) { return true; }
bool CpuBackend::bf16_native_backward(UnaryOp op) { return op != UnaryOp::gelu; }

void CpuBackend::unary(UnaryOp op, const Tensor& x, Tensor& out, double a, double b) {
  if (x.dtype() == DType::bf16 && bf16_native(op))
    return unary_typed<BFloat16, float>(op, x, out, float(a), float(b));
  dispatch_numeric(x.dtype(), "unary", [&]<typename T>() {
    if constexpr (std::is_floating_point_v<T>) {
      unary_typed<T>(op, x, out, T(a), T(b));
    } else {
      // Integer tensors: compute in double and convert back.
      map<T, T>(out, [=](T v) { return T(unary_value<double>(op, double(v), a, b)); }, x);
    }
  });
}

namespace {
// T, C as for unary_typed.
template <typename T, typename C = T>
void unary_backward_typed(UnaryOp op, const Tensor& grad, const Tensor& x, const Tensor& y,
                          Tensor& grad_x) {
  switch (op) {
    case UnaryOp::relu:
      map<T, T, T>(grad_x, [](T g, T v) { return C(v) > C(0) ? g : T(0); }, grad, x);
      return;
    case UnaryOp::gelu:
      if (gelu_f32(x, grad_x, &grad)) return;
      map<T, T, T>(grad_x, [](T g, T v_) {
        const C v = C(v_);
        C cdf = C(0.5) * (C(1) + std::erf(v * C(kInvSqrt2)));
        C pdf = C(kInvSqrt2Pi) * std::exp(C(-0.5) * v * v);
        return T(C(g) * (cdf + v * pdf));
      }, grad, x);
      return;
    case UnaryOp::tanh:
      map<T, T, T>(grad_x, [](T g, T t) { return T(C(g) * (C(1) - C(t) * C(t))); }, grad, y);
      return;
    case UnaryOp::sigmoid:
      map<T, T, T>(grad_x, [](T g, T s) { return T(C(g) * C(s) * (C(1) - C(s))); }, grad, y);
      return;
    default:
      NN_ERROR("unary_backward: no fused backward for this op");
  }
}
}  // namespace

void CpuBackend::unary_backward(UnaryOp op, const Tensor& grad, const Tensor& x,
                                const Tensor& y, Tensor& grad_x) {
  if (x.dtype() == DType::bf16 && bf16_native_backward(op))
    return unary_backward_typed<BFloat16, float>(op, grad, x, y, grad_x);
  dispatch_float(x.dtype(), "unary_backward", [&]<typename T>() {
    unary_backward_typed<T>(op, grad, x, y, grad_x);
  });
}

namespace {
// T, C as for unary_typed.
template <typename T, typename C = T>
void binary_typed(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
#define NN_BINARY_CASE(OP)                                                                 \
  case BinaryOp::OP:                                                                       \
    map<T, T, T>(out, [](T x, T y) { return T(binary_value<C>(BinaryOp::OP, C(x), C(y))); }, \
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
  if (a.dtype() == DType::bf16 && bf16_native(op)) return binary_typed<BFloat16, float>(op, a, b, out);
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
