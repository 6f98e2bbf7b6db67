// CUDA matmul family: batched GEMM on cuBLAS. Row-major C = A B is computed as the
// column-major C^T = B^T A^T, so transposed operands are read in place.
#include "backend/cuda/cuda_backend.h"

namespace nn::backend {
using namespace cuda;

namespace {
// How a (B, R, C) operand lies in memory: row-major (unit column stride) or column-major.
struct Layout {
  bool row_major;
  int64_t ld;
  int64_t batch_stride;
};

bool describe(const Tensor& t, Layout& o) {
  const auto& sh = t.shape();
  const auto& st = t.strides();
  const int64_t r = sh[1], c = sh[2];
  o.batch_stride = sh[0] == 1 ? 0 : st[0];
  int64_t sr = r == 1 ? c : st[1], sc = c == 1 ? 1 : st[2];
  if (sc == 1 && sr >= std::max<int64_t>(c, 1)) { o.row_major = true; o.ld = sr; return true; }
  sr = r == 1 ? 1 : st[1];
  sc = c == 1 ? r : st[2];
  if (sr == 1 && sc >= std::max<int64_t>(r, 1)) { o.row_major = false; o.ld = sc; return true; }
  return false;
}

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::f32: return CUDA_R_32F;
    case DType::f64: return CUDA_R_64F;
    case DType::f16: return CUDA_R_16F;
    case DType::bf16: return CUDA_R_16BF;
    default: NN_ERROR("matmul: not implemented for dtype ", dtype_name(t), " on CUDA");
  }
}
}  // namespace

void CudaBackend::gemm(const Tensor& a_in, const Tensor& b_in, Tensor& out, double alpha,
                       double beta) {
  activate();
  Tensor a = a_in, b = b_in;
  Layout la, lb;
  if (!describe(a, la)) { a = a.contiguous(); describe(a, la); }
  if (!describe(b, lb)) { b = b.contiguous(); describe(b, lb); }
  const int64_t Bn = out.shape()[0], M = out.shape()[1], N = out.shape()[2], K = a.shape()[2];
  if (Bn * M * N == 0) return;
  if (K == 0) {  // empty inner dim: out = beta * out
    if (beta == 0) fill(out, 0.0);
    else unary(UnaryOp::mul_scalar, out, out, beta, 0);
    return;
  }
  NN_CHECK(M < INT32_MAX && N < INT32_MAX && K < INT32_MAX && Bn < INT32_MAX,
           "matmul: dimensions beyond 2^31 are not supported by cuBLAS");
  // cuBLAS sees: C (N x M, col-major) = op(b) (N x K) * op(a) (K x M).
  const cublasOperation_t opb = lb.row_major ? CUBLAS_OP_N : CUBLAS_OP_T;
  const cublasOperation_t opa = la.row_major ? CUBLAS_OP_N : CUBLAS_OP_T;
  const cudaDataType_t type = cuda_type(out.dtype());
  const bool f64 = out.dtype() == kF64;
  const float alpha_f = float(alpha), beta_f = float(beta);
  const void* pa = f64 ? static_cast<const void*>(&alpha) : &alpha_f;
  const void* pb = f64 ? static_cast<const void*>(&beta) : &beta_f;
  // FP32 accumulation everywhere; f32 inputs stay exact FP32 (no TF32) by default.
  const cublasComputeType_t compute = f64 ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F;
  NN_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      cublas_, opb, opa, int(N), int(M), int(K), pa, b.data_ptr(), type, int(lb.ld),
      lb.batch_stride, a.data_ptr(), type, int(la.ld), la.batch_stride, pb, out.data_ptr(), type,
      int(N), M * N, int(Bn), compute, CUBLAS_GEMM_DEFAULT));
}

}  // namespace nn::backend
