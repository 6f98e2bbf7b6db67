// Kernels for 2-D pooling (kernels/pool.cu).
#pragma once
#include <cuda_runtime.h>
#include <nn/dtype.h>

#include <cstdint>

namespace nn::kernels {

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

}  // namespace nn::kernels
