// CPU matmul family: batched GEMM (backend/cpu/gemm.h). Transposed operands are read in place.
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/gemm.h"
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
MatRef<T> ref(const T* p, const Operand& o) {
  return o.row_major ? MatRef<T>{p, o.ld, 1} : MatRef<T>{p, 1, o.ld};
}

// out = alpha * a @ b + beta * out over the batch, T the operands' element type
// (cpu::gemm_of: bf16 bits into an f32 result, else T into T).
template <typename T>
void batched(const Tensor& a_in, const Tensor& b_in, Tensor& out, double alpha, double beta) {
  using R = gemm_result_t<T>;
  Tensor a = a_in, b = b_in;
  Operand oa, ob;
  if (!describe(a, oa)) { a = a.contiguous(); describe(a, oa); }
  if (!describe(b, ob)) { b = b.contiguous(); describe(b, ob); }
  const int64_t B = out.shape()[0], M = out.shape()[1], N = out.shape()[2];
  const int64_t K = a.shape()[2];
  const T* pa = static_cast<const T*>(a.data_ptr());
  const T* pb = static_cast<const T*>(b.data_ptr());
  R* pc = out.data<R>();
  auto one = [&](int64_t i) {
    gemm_of<T>(M, N, K, R(alpha), ref(pa + i * oa.batch_stride, oa),
               ref(pb + i * ob.batch_stride, ob), R(beta), pc + i * M * N, N);
  };
  // Many small products: one thread per product. Few large ones: threads inside each.
  double flops = 2.0 * double(M) * double(N) * double(K);
  if (B > 1 && flops < 4e6) {
    // enough products a thread to be worth a parallel region
    parallel_for(0, B, grain_for(flops / 2), [&](int64_t s, int64_t e) { for (int64_t i = s; i < e; ++i) one(i); });
  } else {
    for (int64_t i = 0; i < B; ++i) one(i);
  }
}
}  // namespace

namespace {
struct CpuPackedOperand final : Backend::PackedOperand {
  std::shared_ptr<const PackedB> b;
  const void* data = nullptr;  // which b it packed (another operand is multiplied as it is)
  Shape shape, strides;
};
}  // namespace

// f32 operands of one product (batch 1) only: the recurrence's weights.
std::shared_ptr<const Backend::PackedOperand> CpuBackend::pack_operand(const Tensor& b) {
  Operand ob;
  if (b.dtype() != DType::f32 || b.dim() != 3 || b.shape()[0] != 1 || !describe(b, ob))
    return nullptr;
  auto p = std::make_shared<CpuPackedOperand>();
  p->b = pack_b_once(b.shape()[1], b.shape()[2], ref(b.data<float>(), ob));
  p->data = b.data_ptr();
  p->shape = b.shape();
  p->strides = b.strides();
  return p;
}

void CpuBackend::gemm_packed(const Tensor& a, const Tensor& b, const PackedOperand* packed,
                             Tensor& out, double alpha, double beta) {
  const auto* p = dynamic_cast<const CpuPackedOperand*>(packed);
  Operand oa;
  if (!p || p->data != b.data_ptr() || p->shape != b.shape() || p->strides != b.strides() ||
      a.dtype() != DType::f32 || out.dtype() != DType::f32 || a.shape()[0] != 1 ||
      out.shape()[0] != 1 || !describe(a, oa))
    return gemm(a, b, out, alpha, beta);
  gemm_prepacked(out.shape()[1], out.shape()[2], a.shape()[2], float(alpha), ref(a.data<float>(), oa),
                 *p->b, float(beta), out.data<float>(), out.shape()[2]);
}

void CpuBackend::gemm(const Tensor& a, const Tensor& b, Tensor& out, double alpha,
                      double beta) {
  dispatch_product(a, b, out, "matmul",
                   [&]<typename T>() { batched<T>(a, b, out, alpha, beta); });
}

}  // namespace nn::backend
