// Elementwise kernels: copy/cast, fill, random fill, unary, binary, where. Launchers take raw
// pointers and a Geom (shape + per-operand strides, output first); `contiguous` selects the
// vectorised path (16-byte loads and stores when every pointer is aligned).
#pragma once
#include <cuda_runtime.h>
#include <nn/dtype.h>

#include "kernels/common.cuh"
#include "kernels/ops.h"

namespace nn::kernels {

void launch_copy(DType dst_t, void* dst, DType src_t, const void* src, const Geom<2>& g,
                 int64_t n, bool contiguous, cudaStream_t s);
void launch_fill(DType t, void* dst, double value, const Geom<1>& g, int64_t n, bool contiguous,
                 cudaStream_t s);
// Uniform a + (b - a) * U[0,1) or normal a + b * N(0,1), Philox at (seed, offset + i / 4).
void launch_random(DType t, void* dst, int64_t n, bool normal, double a, double b,
                   uint64_t seed, uint64_t offset, cudaStream_t s);
void launch_unary(UnaryOp op, DType t, void* out, const void* x, double a, double b,
                  const Geom<2>& g, int64_t n, bool contiguous, cudaStream_t s);
// grad_x = grad * op'(x) for relu, gelu, silu, softplus, leaky_relu, elu (v = x; a: the op's
// scalar) and tanh, sigmoid (v = y = op(x)).
void launch_unary_backward(UnaryOp op, DType t, void* grad_x, const void* grad, const void* v,
                           double a, const Geom<3>& g, int64_t n, bool contiguous,
                           cudaStream_t s);
void launch_binary(BinaryOp op, DType t, void* out, const void* a, const void* b,
                   const Geom<3>& g, int64_t n, bool contiguous, cudaStream_t s);
// cond is of dtype t or u8.
void launch_where(DType t, bool cond_u8, void* out, const void* cond, const void* a,
                  const void* b, const Geom<4>& g, int64_t n, bool contiguous, cudaStream_t s);

}  // namespace nn::kernels
