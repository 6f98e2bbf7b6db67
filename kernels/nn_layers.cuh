// Kernels for dropout, layer norm, pooling, embedding rows and the optimizer steps.
#pragma once
#include <cuda_runtime.h>
#include <nn/dtype.h>

#include <utility>
#include <vector>

#include "kernels/common.cuh"

namespace nn::kernels {

// ---- dropout: keep when U >= p, Philox at (seed, offset + i / 4, lane i % 4) ------------------
void launch_dropout(DType t, const void* x, void* y, uint8_t* mask, int64_t n, double p,
                    uint64_t seed, uint64_t offset, cudaStream_t s);
void launch_dropout_backward(DType t, const void* grad, const uint8_t* mask, void* grad_x,
                             int64_t n, double p, cudaStream_t s);

// ---- layer norm over rows (R, D); weight/bias may be null -----------------------------------
// t: the data's dtype (x, y, grads of x); mean and rstd in its accumulation type (f32 for
// 16-bit data, else t); wt: the parameters' (weight, bias and their grads): t, or f32 with
// 16-bit data.
void launch_layer_norm(DType t, DType wt, const void* x, const void* w, const void* b,
                       int64_t R, int64_t D, double eps, void* y, void* mean, void* rstd,
                       cudaStream_t s);
// grad_x may be null; grad_w/grad_b (may be null) need `workspace` of
// layer_norm_workspace_bytes(R, D) bytes.
size_t layer_norm_workspace_bytes(int64_t R, int64_t D);
void launch_layer_norm_backward(DType t, DType wt, const void* grad, const void* x,
                                const void* w, const void* mean, const void* rstd, int64_t R,
                                int64_t D, void* grad_x, void* grad_w, void* grad_b,
                                void* workspace, cudaStream_t s);

// ---- dropout + residual add + layer norm: one warp per row, in quads ------------------------
// sum = residual + dropout(x), y = layer_norm(sum), rows (R, D); the backward writes the
// sum's gradient and x's (dropout's backward of it rounded to x's dtype; grad_x may be null).
// xt: x's dtype; t: the residual's, sum's and y's (the statistics in its accumulation
// type); wt: the parameters'.
// p == 0 draws nothing and writes no mask. Rows must be whole quads: fits() says which
// calls the kernels take (D a multiple of 4 up to 1024, every pointer aligned for its quads).
// quads: each (R, D) buffer's address and element size.
bool dropout_add_layer_norm_fits(int64_t D,
                                 const std::vector<std::pair<const void*, size_t>>& quads);
void launch_dropout_add_layer_norm(DType xt, DType t, DType wt, const void* x,
                                   const void* residual, const void* w, const void* b,
                                   int64_t R, int64_t D, double eps, double p, uint64_t seed,
                                   uint64_t offset, void* sum, uint8_t* mask, void* y,
                                   void* mean, void* rstd, cudaStream_t s);
void launch_dropout_add_layer_norm_backward(DType xt, DType t, DType wt, const void* grad,
                                            const void* sum, const void* w, const void* mean,
                                            const void* rstd, const uint8_t* mask, double p,
                                            int64_t R, int64_t D, void* grad_sum, void* grad_x,
                                            cudaStream_t s);

// ---- 2-D pooling over (planes, H, W), planes = N * C ------------------------------------------
// nhwc: input, output and indices stored (N, H, W, C) (channels-last), else (N, C, H, W).
struct PoolGeom {
  int64_t planes, C, H, W, OH, OW;
  bool nhwc;
  int kh, kw, sh, sw, ph, pw, dh, dw;
  bool count_include_pad;
};
void launch_max_pool(DType t, const void* x, void* y, int64_t* idx, const PoolGeom& g,
                     cudaStream_t s);
void launch_max_pool_backward(DType t, const void* grad, const int64_t* idx, void* grad_x,
                              const PoolGeom& g, cudaStream_t s);
void launch_avg_pool(DType t, const void* x, void* y, const PoolGeom& g, cudaStream_t s);
void launch_avg_pool_backward(DType t, const void* grad, void* grad_x, const PoolGeom& g,
                              cudaStream_t s);
void launch_adaptive_avg_pool(DType t, const void* x, void* y, const PoolGeom& g, cudaStream_t s);
void launch_adaptive_avg_pool_backward(DType t, const void* grad, void* grad_x, const PoolGeom& g,
                                       cudaStream_t s);

// ---- rows of a table: out[m] = src[idx[m]] (row_bytes each); grad rows scatter-added ---------
// An index outside [0, V) sets *bad to 1 (checked by the host) and leaves its row unwritten.
void launch_gather_rows(const void* src, int64_t V, size_t row_bytes, const int64_t* idx,
                        int64_t M, void* out, int* bad, cudaStream_t s);
// The scatter-adds (and embedding_bag_backward) sum in t = f32 or f64 with atomics: 16-bit
// data is summed in an f32 copy by the caller.
void launch_scatter_add_rows(DType t, const void* grad, const int64_t* idx, int64_t M, int64_t D,
                             int64_t V, int64_t skip, void* out, int* bad, cudaStream_t s);
// Weighted bags (embedding_bag): out (N, D) row n = sum over l of w[n, l] * table[idx[n, l]],
// and its backward grad_table[idx[n, l]] += w[n, l] * grad[n]. w is f64 for an f64 table,
// else f32; weight-0 entries are skipped; an index outside [0, V) sets *bad.
void launch_embedding_bag(DType t, const void* table, int64_t V, int64_t D, const int64_t* idx,
                          const void* w, int64_t N, int64_t L, void* out, int* bad, cudaStream_t s);
void launch_embedding_bag_backward(DType t, const void* grad, const int64_t* idx, const void* w,
                                   int64_t N, int64_t L, int64_t D, int64_t V, void* grad_table,
                                   int* bad, cudaStream_t s);

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
  double decay;         // 1 - lr * weight_decay
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
