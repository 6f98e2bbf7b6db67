// exp0: Eigen's element-wise exp with exp(-inf) exactly 0 (internal).
#pragma once
#include <Eigen/Core>

#include <limits>

namespace nn::cpu {

// exp(x) element-wise with exp(-inf) exactly 0, as the scalar exp and PyTorch give it.
// Eigen's vectorised exp clamps its argument (at about -88.7 in f32) and returns about 2e-39
// for -inf, so a masked (-inf) logit or score would keep a weight, and an infinity beside it
// would leak through that weight.
template <typename Derived>
auto exp0(const Eigen::ArrayBase<Derived>& x) {
  using T = typename Derived::Scalar;
  return (x == -std::numeric_limits<T>::infinity()).select(T(0), x.exp());
}

}  // namespace nn::cpu
