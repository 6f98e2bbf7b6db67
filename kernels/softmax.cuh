// softmax / log_softmax over one dim of a contiguous tensor seen as (outer, D, inner), and
// the fused cross-entropy (log_softmax + NLL with label smoothing) over rows (N, C).
#pragma once
#include <cuda_runtime.h>
#include <nn/dtype.h>

#include "kernels/common.cuh"

namespace nn::kernels {

void launch_softmax(DType t, const void* x, void* y, int64_t outer, int64_t D, int64_t inner,
                    bool log, cudaStream_t s);
void launch_softmax_backward(DType t, const void* grad, const void* y, void* grad_x,
                             int64_t outer, int64_t D, int64_t inner, bool log, cudaStream_t s);

// loss[i] and lse[i] per row, lse in the accumulation type (f32 for 16-bit logits, else
// theirs); a target outside [0, C) that is not ignore_index sets *bad to 1 (the host checks
// it) and gives a NaN loss.
void launch_cross_entropy(DType t, const void* logits, const int64_t* target, int64_t N,
                          int64_t C, double smoothing, int64_t ignore_index, void* loss,
                          void* lse, int* bad, cudaStream_t s);
void launch_cross_entropy_backward(DType t, const void* grad_loss, const void* logits,
                                   const int64_t* target, const void* lse, int64_t N, int64_t C,
                                   double smoothing, int64_t ignore_index, void* grad_logits,
                                   cudaStream_t s);

}  // namespace nn::kernels
