// Kernels for layer norm and dropout + residual add + layer norm (kernels/norm.cu).
#pragma once
#include <cuda_runtime.h>
#include <nn/dtype.h>

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace nn::kernels {

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

}  // namespace nn::kernels

namespace nn::kernels {
// ---- batch norm in training over channels-last data: R = N * H * W rows of C channels ----
// t: f32, f16 or bf16 (x, y and the gradients of x); every per-channel array is f32 (w and b
// always given: ones and zeros where the module has none; running statistics both or
// neither). Each call needs `workspace` of batch_norm_nhwc_workspace_bytes(R, C) bytes.
size_t batch_norm_nhwc_workspace_bytes(int64_t R, int64_t C);
void launch_batch_norm_nhwc_forward(DType t, const void* x, const float* w, const float* b,
                                    int64_t R, int64_t C, double eps, double momentum,
                                    float* running_mean, float* running_var, void* y,
                                    float* mean, float* invstd, void* workspace, cudaStream_t s);
// grad_x, grad_w and grad_b may each be null.
void launch_batch_norm_nhwc_backward(DType t, const void* grad, const void* x, const float* w,
                                     const float* mean, const float* invstd, int64_t R,
                                     int64_t C, void* grad_x, float* grad_w, float* grad_b,
                                     void* workspace, cudaStream_t s);
}  // namespace nn::kernels
