// Integer tensors' elementwise ops, shared by the backends: with a scalar (x + a, x * a, a - x,
// clamp), neg, abs, square, and the binary ops of two integer tensors. Exact in int64 with
// two's-complement wrap-around (as libtorch computes), where going through double rounds
// values past 2^53 and an out-of-range result has no defined conversion back, and where plain
// signed arithmetic that overflows is undefined behaviour.
#pragma once
#include <cstdint>
#include <type_traits>

#include "kernels/hd.h"
#include "kernels/ops.h"

namespace nn::kernels {

// Whether int_unary computes op (the other unary ops take floating tensors only).
NN_HD bool int_exact(UnaryOp op) {
  switch (op) {
    case UnaryOp::neg: case UnaryOp::abs: case UnaryOp::square: case UnaryOp::relu:
    case UnaryOp::add_scalar: case UnaryOp::mul_scalar: case UnaryOp::rsub_scalar:
    case UnaryOp::clamp:
      return true;
    default:
      return false;
  }
}

// A scalar for int_unary: truncated toward zero, saturated to int64's range (an infinite
// clamp bound is no bound), NaN as 0.
NN_HD int64_t saturate_i64(double d) {
  if (d != d) return 0;
  if (d <= -9223372036854775808.0) return INT64_MIN;
  if (d >= 9223372036854775808.0) return INT64_MAX;
  return int64_t(d);
}

// The scalars int_unary takes for op on a tensor of integer type T: saturated to int64, and
// a clamp's bounds to T's range (clamping a u8 to [-5, -1] gives 0, not -1 wrapped to 255).
template <typename T>
NN_HD void int_scalars(UnaryOp op, double a, double b, int64_t& ia, int64_t& ib) {
  ia = saturate_i64(a);
  ib = saturate_i64(b);
  if (op != UnaryOp::clamp) return;
  int64_t lo = INT64_MIN, hi = INT64_MAX;
  if constexpr (std::is_same_v<T, uint8_t>) lo = 0, hi = 255;
  if constexpr (std::is_same_v<T, int32_t>) lo = INT32_MIN, hi = INT32_MAX;
  ia = ia < lo ? lo : (ia > hi ? hi : ia);
  ib = ib < lo ? lo : (ib > hi ? hi : ib);
}

// op on x with scalars a (and b, clamp's upper bound); the caller narrows the result to the
// tensor's type, which wraps as the int64 arithmetic does.
NN_HD int64_t int_unary(UnaryOp op, int64_t x, int64_t a, int64_t b) {
  const uint64_t ux = uint64_t(x), ua = uint64_t(a);  // unsigned: wrap-around is defined
  switch (op) {
    case UnaryOp::neg: return int64_t(0 - ux);
    case UnaryOp::abs: return x < 0 ? int64_t(0 - ux) : x;
    case UnaryOp::square: return int64_t(ux * ux);
    case UnaryOp::relu: return x < 0 ? 0 : x;
    case UnaryOp::add_scalar: return int64_t(ux + ua);
    case UnaryOp::mul_scalar: return int64_t(ux * ua);
    case UnaryOp::rsub_scalar: return int64_t(ua - ux);
    case UnaryOp::clamp: return x < a ? a : (x > b ? b : x);
    default: return x;  // not reached: int_exact(op) is false
  }
}

// A binary op of two integer tensors' elements (widened to int64); the caller narrows the
// result to the tensors' type, which wraps as the int64 arithmetic does. Division by zero is
// refused by the op before it gets here (the CPU would trap; here it gives 0, never a trap);
// the lowest value divided by -1, the other trap, wraps. pow (which the op takes for floating tensors only) is exact and wraps
// too; a negative power is 1 / x^-y truncated toward zero (0 for a zero base).
NN_HD int64_t int_binary(BinaryOp op, int64_t x, int64_t y) {
  const uint64_t ux = uint64_t(x), uy = uint64_t(y);
  switch (op) {
    case BinaryOp::add: return int64_t(ux + uy);
    case BinaryOp::sub: return int64_t(ux - uy);
    case BinaryOp::mul: return int64_t(ux * uy);
    case BinaryOp::div: return y == -1 ? int64_t(0 - ux) : (y == 0 ? 0 : x / y);
    case BinaryOp::maximum: return x > y ? x : y;
    case BinaryOp::minimum: return x < y ? x : y;
    case BinaryOp::eq: return x == y;
    case BinaryOp::ne: return x != y;
    case BinaryOp::lt: return x < y;
    case BinaryOp::le: return x <= y;
    case BinaryOp::gt: return x > y;
    case BinaryOp::ge: return x >= y;
    case BinaryOp::pow: {
      if (y < 0) return x == 1 ? 1 : (x == -1 ? ((y & 1) ? -1 : 1) : 0);  // (0 too: no trap)
      uint64_t r = 1, base = ux;
      for (uint64_t e = uint64_t(y); e; e >>= 1, base *= base)
        if (e & 1) r *= base;
      return int64_t(r);
    }
  }
  return 0;
}

}  // namespace nn::kernels
