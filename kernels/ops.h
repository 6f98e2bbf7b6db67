// Operation codes shared by the kernels and the backends (plain C++, no CUDA).
#pragma once

namespace nn::kernels {

enum class UnaryOp {
  neg, exp, log, sqrt, rsqrt, abs, square, relu, gelu, tanh, sigmoid,
  add_scalar,  // x + a
  mul_scalar,  // x * a
  pow_scalar,  // x ^ a
  rsub_scalar, // a - x
  rdiv_scalar, // a / x
  clamp,       // min(max(x, a), b)
  div_scalar,  // x / a (a true division, as PyTorch's, not x times 1 / a)
  log1p,       // log(1 + x), accurate for small x
  silu,        // x * sigmoid(x)
  softplus,    // log(1 + exp(a x)) / a, x itself where a x > kSoftplusThreshold (PyTorch's)
  leaky_relu,  // x > 0 ? x : a x
  elu,         // x > 0 ? x : a (exp(x) - 1)
};
constexpr double kSoftplusThreshold = 20;
enum class BinaryOp { add, sub, mul, div, pow, maximum, minimum, eq, ne, lt, le, gt, ge };
enum class ReduceOp { sum, mean, max, min };

}  // namespace nn::kernels
