// exp0: Eigen's vectorised exp with exp(-inf) exactly 0 (internal).
#pragma once
#include <Eigen/Core>

#include <cmath>
#include <cstdint>
#include <limits>

namespace nn::cpu {

// Calls f(i) for every i < n where x[i] is -inf.
template <typename T, typename F>
void at_neg_inf(const T* x, int64_t n, F&& f) {
  for (int64_t i = 0; i < n; ++i)
    if (x[i] == -std::numeric_limits<T>::infinity()) f(i);
}

// dst[i] = exp(x[i] - shift) for i < n, with exp(-inf) exactly 0, as the scalar exp and
// PyTorch give it. Eigen's vectorised exp clamps its argument (at about -88.7 in f32) and
// returns about 2e-39 for -inf and for anything below the clamp, so a masked (-inf) logit or
// score would keep a weight, and an infinity beside it would leak through that weight, and a
// probability of e^-200 would read 2e-39: a second pass over x zeroes every argument below
// the normal range (where the exact result is subnormal, which the packed products flush to
// zero anyway) and -inf (a select on the condition would make Eigen 3.4 evaluate every exp
// with the scalar exp, about 6x slower). Where a formula uses exp(x) other than as a value,
// at_neg_inf mends its result the same way. dst must not alias x.
template <typename T>
void exp0(const T* x, T shift, T* dst, int64_t n) {
  using Row = Eigen::Array<T, Eigen::Dynamic, 1>;
  Eigen::Map<Row>(dst, n) = (Eigen::Map<const Row>(x, n) - shift).exp();
  static const T low = std::log(std::numeric_limits<T>::min());  // -87.3 in f32
  for (int64_t i = 0; i < n; ++i)  // (a NaN compares false and stays NaN)
    if (x[i] == -std::numeric_limits<T>::infinity() || x[i] - shift < low) dst[i] = T(0);
}

}  // namespace nn::cpu
