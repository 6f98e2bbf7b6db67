// Gradient clipping's factor, shared by the backends: clip_grad_norm scales every gradient by
// clip_factor(sum of their squares, max_norm), computed where the sum is (on the GPU, in
// the scaling kernel itself, so the host never reads the norm).
#pragma once
#include <cmath>

#include "kernels/hd.h"

namespace nn::kernels {

// max_norm / (norm + 1e-6) where the norm exceeds max_norm, else 1; also 1 where the norm is
// inf or NaN (the gradients are then left as they are: a step the loss scaler skips, where
// scaling would turn every gradient to NaN or 0).
NN_HD double clip_factor(double sum_squares, double max_norm) {
  const double norm = std::sqrt(sum_squares);
  return norm > max_norm && std::isfinite(norm) ? max_norm / (norm + 1e-6) : 1.0;
}

}  // namespace nn::kernels
