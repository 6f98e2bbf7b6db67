// Reductions: x contiguous seen as (A, K, B), reduced over A and B into K outputs; argmax
// over contiguous rows. Deterministic (no atomics): partial results go through a workspace,
// except where a warp per output writes it directly (0 bytes of workspace).
#pragma once
#include <cuda_runtime.h>
#include <nn/dtype.h>

#include "kernels/common.cuh"
#include "kernels/ops.h"

namespace nn::kernels {

// Bytes of workspace launch_reduce needs for these sizes.
size_t reduce_workspace_bytes(DType t, int64_t A, int64_t K, int64_t B);
void launch_reduce(ReduceOp op, DType t, const void* x, int64_t A, int64_t K, int64_t B,
                   void* out, void* workspace, cudaStream_t s);
// out[r] (i64) = index of the first maximum of row r of x (rows, D).
void launch_argmax(DType t, const void* x, int64_t rows, int64_t D, int64_t* out, cudaStream_t s);

}  // namespace nn::kernels
