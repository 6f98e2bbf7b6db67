// Multi-tensor kernels: optimizer steps, scaling, clipping, sums of squares, copies
// (kernels/optim.cu).
#pragma once
#include <cuda_runtime.h>
#include <nn/dtype.h>

#include <cstdint>

namespace nn::kernels {

// ---- fused multi-tensor optimizer steps -------------------------------------------------------
struct SgdTensor {
  void* param;
  const void* grad;
  void* momentum;  // null when momentum == 0
  int64_t n;
  double lr, weight_decay;  // (the hyperparameters in double: an f64 parameter's step is f64 math)
  bool first_step;
};
struct AdamWTensor {
  void* param;
  const void* grad;
  void* exp_avg;
  void* exp_avg_sq;
  int64_t n;
  double decay;         // 1 - lr * weight_decay (decoupled, AdamW's)
  double l2;            // coupled weight decay: the gradient is g + l2 * p (Adam's)
  double step_size;     // lr / (1 - beta1^t)
  double inv_sqrt_bc2;  // 1 / sqrt(1 - beta2^t)
};
void launch_sgd(DType t, const SgdTensor* tensors, int count, double momentum, double dampening,
                bool nesterov, cudaStream_t s);
void launch_adamw(DType t, const AdamWTensor* tensors, int count, double beta1, double beta2,
                  double eps, cudaStream_t s);

// ---- several contiguous copies in one launch (concat's parts) ---------------------------------
struct CopyPair {
  const void* src;
  void* dst;
  int64_t n;  // elements
};
// Every pair from dtype st to dtype dt: any one dtype, or f32 to f16 or bf16 (autocast's
// lowering of a layer's parameters); copy_many_converts says which.
bool copy_many_converts(DType st, DType dt);
void launch_copy_many(DType st, DType dt, const CopyPair* pairs, int count, cudaStream_t s);

// Over lists of tensors of one dtype (mixed precision's unscaling, gradient clipping).
struct FlatTensor {
  void* data;
  int64_t n;
};
// Each tensor times `factor` in place; *found_inf = 1 when a rounded result is inf or NaN.
void launch_scale(DType t, const FlatTensor* tensors, int count, double factor,
                  float* found_inf, cudaStream_t s);
// Each tensor times kernels::clip_factor(*sum_squares, max_norm) (kernels/clip.h) in place;
// sum_squares is a double on the device.
void launch_clip(DType t, const FlatTensor* tensors, int count, const double* sum_squares,
                 double max_norm, cudaStream_t s);
// *out (a double) = the sum of x^2 over all elements, summed in double for every dtype;
// `partials` is scratch of sum_squares_partials() doubles.
int64_t sum_squares_partials(const FlatTensor* tensors, int count);
void launch_sum_squares(DType t, const FlatTensor* tensors, int count, void* partials, void* out,
                        cudaStream_t s);

}  // namespace nn::kernels
