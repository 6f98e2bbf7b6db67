// Kernels for rows of a table: embedding lookups, their gradients and bags (kernels/embedding.cu).
#pragma once
#include <cuda_runtime.h>
#include <nn/dtype.h>

#include <cstddef>
#include <cstdint>

namespace nn::kernels {

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

}  // namespace nn::kernels
