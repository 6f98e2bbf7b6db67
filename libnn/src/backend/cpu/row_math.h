// Vectorised work on one contiguous row, shared by the softmax and cross-entropy families
// (internal). Eigen does the exponentials; sums are kept in double in plain loops, since an
// Eigen expression that casts to double runs Eigen's scalar path.
#pragma once
#include <Eigen/Core>

#include <cstdint>

#include "backend/cpu/exp0.h"

namespace nn::cpu {

template <typename T>
using RowMap = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
template <typename T>
using ConstRowMap = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;

// The sum of term(d) for d in [0, D), in double, in an order fixed by D alone (eight partial
// sums by index), whatever the row's address or element type: a resumed run must repeat an
// uninterrupted one bit for bit, and a 16-bit row must give what its f32 widening gives.
template <typename F>
double fixed_order_sum(int64_t D, F&& term) {
  constexpr int64_t L = 8;
  double part[L] = {};
  int64_t d = 0;
  for (; d + L <= D; d += L)
#pragma omp simd
    for (int64_t j = 0; j < L; ++j) part[j] += term(d + j);
  double s = 0;
  for (int64_t j = 0; j < L; ++j) s += part[j];
  for (; d < D; ++d) s += term(d);
  return s;
}

// The sum of x[0, D) in double (fixed_order_sum's order).
template <typename T>
double row_sum(const T* x, int64_t D) {
  return fixed_order_sum(D, [x](int64_t d) { return double(x[d]); });
}

// e[d] = exp(x[d] - m) for d in [0, D), and their sum in double. Eigen computes the elements
// before e's first aligned packet with the scalar exp, which rounds differently, so e must sit
// at an address that is the same from run to run modulo 64 bytes: a tensor's row or an
// Eigen::Array, not a std::vector (whose data is only 16-byte aligned).
template <typename T>
double exp_sum(const T* x, int64_t D, T m, T* e) {
  exp0(x, m, e, D);
  return row_sum(e, D);
}

}  // namespace nn::cpu
