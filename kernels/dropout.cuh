// Kernels for dropout (kernels/dropout.cu).
#pragma once
#include <cuda_runtime.h>
#include <nn/dtype.h>

#include <cstdint>

namespace nn::kernels {

// ---- dropout: keep when U >= p, Philox at (seed, offset + i / 4, lane i % 4) ------------------
void launch_dropout(DType t, const void* x, void* y, uint8_t* mask, int64_t n, double p,
                    uint64_t seed, uint64_t offset, cudaStream_t s);
void launch_dropout_backward(DType t, const void* grad, const uint8_t* mask, void* grad_x,
                             int64_t n, double p, cudaStream_t s);

}  // namespace nn::kernels
