// Device math with one name per function for float and double (and the 16-bit types,
// computed in float), plus the scalar definitions of every unary and binary op code.
#pragma once
#include "kernels/common.cuh"
#include "kernels/ops.h"

namespace nn::kernels {

__device__ __forceinline__ float m_exp(float x) { return expf(x); }
__device__ __forceinline__ double m_exp(double x) { return exp(x); }
__device__ __forceinline__ float m_log(float x) { return logf(x); }
__device__ __forceinline__ double m_log(double x) { return log(x); }
__device__ __forceinline__ float m_sqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ double m_sqrt(double x) { return sqrt(x); }
__device__ __forceinline__ float m_rsqrt(float x) { return rsqrtf(x); }
__device__ __forceinline__ double m_rsqrt(double x) { return rsqrt(x); }
__device__ __forceinline__ float m_tanh(float x) { return tanhf(x); }
__device__ __forceinline__ double m_tanh(double x) { return tanh(x); }
__device__ __forceinline__ float m_erf(float x) { return erff(x); }
__device__ __forceinline__ double m_erf(double x) { return erf(x); }
__device__ __forceinline__ float m_pow(float x, float y) { return powf(x, y); }
__device__ __forceinline__ double m_pow(double x, double y) { return pow(x, y); }
__device__ __forceinline__ float m_log1p(float x) { return log1pf(x); }
__device__ __forceinline__ double m_log1p(double x) { return log1p(x); }
__device__ __forceinline__ float m_expm1(float x) { return expm1f(x); }
__device__ __forceinline__ double m_expm1(double x) { return expm1(x); }
__device__ __forceinline__ float m_abs(float x) { return fabsf(x); }
__device__ __forceinline__ double m_abs(double x) { return fabs(x); }

// The type an op computes in: float for 16-bit floats, else the type itself; integers compute
// binary ops in int64 (int_binary, exact and wrapping), the unary ones they take in int64 too
// (kernels/int_math.h; unary_t's double is the path of no op the library sends them).
template <typename T>
using unary_t = std::conditional_t<std::is_integral_v<T>, double, acc_t<T>>;
template <typename T>
using binary_t = std::conditional_t<std::is_integral_v<T>, int64_t, acc_t<T>>;

template <typename C>
__device__ __forceinline__ C unary_value(UnaryOp op, C x, C a, C b) {
  constexpr C kInvSqrt2 = C(0.70710678118654752440);
  switch (op) {
    case UnaryOp::neg: return -x;
    case UnaryOp::exp: return m_exp(x);
    case UnaryOp::log: return m_log(x);
    case UnaryOp::sqrt: return m_sqrt(x);
    case UnaryOp::rsqrt: return m_rsqrt(x);
    case UnaryOp::abs: return m_abs(x);
    case UnaryOp::square: return x * x;
    case UnaryOp::relu: return x <= C(0) ? C(0) : x;  // NaN stays NaN
    case UnaryOp::gelu: return C(0.5) * x * (C(1) + m_erf(x * kInvSqrt2));
    case UnaryOp::tanh: return m_tanh(x);
    case UnaryOp::sigmoid: return C(1) / (C(1) + m_exp(-x));
    case UnaryOp::add_scalar: return x + a;
    case UnaryOp::mul_scalar: return x * a;
    case UnaryOp::pow_scalar: return m_pow(x, a);
    case UnaryOp::rsub_scalar: return a - x;
    case UnaryOp::rdiv_scalar: return a / x;
    case UnaryOp::clamp: return x < a ? a : (x > b ? b : x);
    case UnaryOp::div_scalar: return x / a;
    case UnaryOp::log1p: return m_log1p(x);
    case UnaryOp::silu: return x / (C(1) + m_exp(-x));
    case UnaryOp::softplus: return x * a > C(kSoftplusThreshold) ? x : m_log1p(m_exp(x * a)) / a;
    case UnaryOp::leaky_relu: return x > C(0) ? x : x * a;
    case UnaryOp::elu: return x > C(0) ? x : a * m_expm1(x);
  }
  return x;
}

template <typename C>
__device__ __forceinline__ C binary_value(BinaryOp op, C x, C y) {
  if constexpr (std::is_integral_v<C>) {
    return int_binary(op, x, y);  // (C is int64_t)
  } else {
    switch (op) {
      case BinaryOp::add: return x + y;
      case BinaryOp::sub: return x - y;
      case BinaryOp::mul: return x * y;
      case BinaryOp::div: return x / y;
      case BinaryOp::pow: return m_pow(x, y);
      // a NaN in either operand is the result (as amax/amin and argmax have it)
      case BinaryOp::maximum: return x != x || x > y ? x : y;
      case BinaryOp::minimum: return x != x || x < y ? x : y;
      case BinaryOp::eq: return C(x == y);
      case BinaryOp::ne: return C(x != y);
      case BinaryOp::lt: return C(x < y);
      case BinaryOp::le: return C(x <= y);
      case BinaryOp::gt: return C(x > y);
      case BinaryOp::ge: return C(x >= y);
    }
    return x;
  }
}

}  // namespace nn::kernels
