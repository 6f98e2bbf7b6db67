// CPU matmul family: batched GEMM on Eigen. Transposed operands are read in place.
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/eigen_util.h"
#include "backend/cpu/parallel.h"

namespace nn::backend {
using namespace nn::cpu;

namespace {
// How a (B, R, C) operand lies in memory: row-major (unit column stride) or column-major.
struct Operand {
  bool row_major;
  int64_t ld;        // leading dimension
  int64_t batch_stride;
};

bool describe(const Tensor& t, Operand& o) {
  const auto& sh = t.shape();
  const auto& st = t.strides();
  int64_t r = sh[1], c = sh[2];
  int64_t sr = r == 1 ? c : st[1], sc = c == 1 ? 1 : st[2];
  o.batch_stride = sh[0] == 1 ? 0 : st[0];
  if (sc == 1 && sr >= c) { o.row_major = true; o.ld = std::max<int64_t>(sr, 1); return true; }
  if (r == 1 && c == 1) { o.row_major = true; o.ld = 1; return true; }
  sr = r == 1 ? 1 : st[1];
  sc = c == 1 ? r : st[2];
  if (sr == 1 && sc >= r) { o.row_major = false; o.ld = std::max<int64_t>(sc, 1); return true; }
  return false;
}

template <typename T>
void gemm_one(const T* a, const Operand& oa, const T* b, const Operand& ob, T* c, int64_t M,
              int64_t N, int64_t K, T alpha, T beta) {
  auto C = rmap(c, M, N, N);
  auto run = [&](const auto& A, const auto& B) {
    if (beta == T(0)) {
      C.noalias() = alpha * A * B;
    } else {
      if (beta != T(1)) C *= beta;
      C.noalias() += alpha * A * B;
    }
  };
  auto bmat = [&](const auto& A) {
    if (ob.row_major) run(A, crmap(b, K, N, ob.ld));
    else run(A, CColMap<T>(b, K, N, Eigen::OuterStride<>(ob.ld)));
  };
  if (oa.row_major) bmat(crmap(a, M, K, oa.ld));
  else bmat(CColMap<T>(a, M, K, Eigen::OuterStride<>(oa.ld)));
}
}  // namespace

void CpuBackend::gemm(const Tensor& a_in, const Tensor& b_in, Tensor& out, double alpha,
                      double beta) {
  dispatch_float(out.dtype(), "matmul", [&]<typename T>() {
    Tensor a = a_in, b = b_in;
    Operand oa, ob;
    if (!describe(a, oa)) { a = a.contiguous(); describe(a, oa); }
    if (!describe(b, ob)) { b = b.contiguous(); describe(b, ob); }
    const int64_t B = out.shape()[0], M = out.shape()[1], N = out.shape()[2];
    const int64_t K = a.shape()[2];
    const T* pa = static_cast<const T*>(a.data_ptr());
    const T* pb = static_cast<const T*>(b.data_ptr());
    T* pc = out.data<T>();
    if (K == 0) {  // empty inner dim: out = beta * out
      for (int64_t i = 0; i < out.numel(); ++i) pc[i] = beta == 0 ? T(0) : T(beta) * pc[i];
      return;
    }
    auto one = [&](int64_t i) {
      gemm_one<T>(pa + i * oa.batch_stride, oa, pb + i * ob.batch_stride, ob, pc + i * M * N, M,
                  N, K, T(alpha), T(beta));
    };
    // Many small products: one thread per product. Few large ones: Eigen's own threads.
    double flops = 2.0 * double(M) * double(N) * double(K);
    if (B > 1 && flops < 4e6) {
      parallel_for(0, B, 1, [&](int64_t s, int64_t e) { for (int64_t i = s; i < e; ++i) one(i); });
    } else {
      for (int64_t i = 0; i < B; ++i) one(i);
    }
  });
}

}  // namespace nn::backend
