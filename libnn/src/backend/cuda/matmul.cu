// CUDA matmul family: batched GEMM on cuBLAS, and Linear's GEMM with the bias added in
// cuBLASLt's epilogue. Row-major C = A B is computed as the column-major C^T = B^T A^T, so
// transposed operands are read in place.
#include <cstdio>
#include <map>
#include <array>
#include <memory>
#include <mutex>

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

// (cuBLAS takes a leading dimension as an int: a view of rows 2^31 or more elements apart is
// read through a copy, whose leading dimension is its row length, which gemm checks.)
bool describe(const Tensor& t, Layout& o) {
  const auto& sh = t.shape();
  const auto& st = t.strides();
  const int64_t r = sh[1], c = sh[2];
  o.batch_stride = sh[0] == 1 ? 0 : st[0];
  int64_t sr = r == 1 ? c : st[1], sc = c == 1 ? 1 : st[2];
  if (sc == 1 && sr >= std::max<int64_t>(c, 1) && sr < INT32_MAX) {
    o.row_major = true;
    o.ld = sr;
    return true;
  }
  sr = r == 1 ? 1 : st[1];
  sc = c == 1 ? r : st[2];
  if (sr == 1 && sc >= std::max<int64_t>(r, 1) && sc < INT32_MAX) {
    o.row_major = false;
    o.ld = sc;
    return true;
  }
  return false;
}

// t itself when cuBLAS can read it in place (its layout in `o`), else a contiguous copy.
Tensor readable(const Tensor& t, Layout& o) {
  if (describe(t, o)) return t;
  Tensor c = t.contiguous();
  describe(c, o);
  return c;
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
  Layout la, lb;
  const Tensor a = readable(a_in, la), b = readable(b_in, lb);
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
  // the operands' type, and the output's: the same, or f32 from 16-bit operands (a weight
  // gradient straight into an f32 master weight's dtype)
  NN_CHECK(a.dtype() == b.dtype() &&
               (out.dtype() == a.dtype() ||
                (out.dtype() == kF32 && (a.dtype() == kF16 || a.dtype() == kBF16))),
           "matmul: dtypes ", dtype_name(a.dtype()), ", ", dtype_name(b.dtype()), " into ",
           dtype_name(out.dtype()), " are not computed on CUDA");
  const cudaDataType_t type = cuda_type(a.dtype()), out_type = cuda_type(out.dtype());
  const bool f64 = out.dtype() == kF64;
  const float alpha_f = float(alpha), beta_f = float(beta);
  const void* pa = f64 ? static_cast<const void*>(&alpha) : &alpha_f;
  const void* pb = f64 ? static_cast<const void*>(&beta) : &beta_f;
  // FP32 accumulation everywhere, split-K reductions included (the handle's math mode:
  // device.cu); f32 inputs stay exact FP32 (no TF32).
  const cublasComputeType_t compute = f64 ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F;
  NN_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      cublas_, opb, opa, int(N), int(M), int(K), pa, b.data_ptr(), type, int(lb.ld),
      lb.batch_stride, a.data_ptr(), type, int(la.ld), la.batch_stride, pb, out.data_ptr(),
      out_type, int(N), M * N, int(Bn), compute, CUBLAS_GEMM_DEFAULT));
}

namespace {
// (device, operand and output dtypes, M, N, K, ops, leading dims, A/B/C alignments,
// epilogue): what a plan depends on.
using LtKey = std::array<int64_t, 12>;

// One problem's cuBLASLt descriptors and the algorithm its heuristic chose, kept for the
// next call of the same shape; the bias pointer is set per call.
struct LtPlan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulHeuristicResult_t heur{};
  bool ok = false;
  LtPlan() = default;
  LtPlan(const LtPlan&) = delete;
  LtPlan& operator=(const LtPlan&) = delete;
  ~LtPlan() {
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};
std::mutex g_lt_mu;
// leaked on purpose, as the backends are: no cuBLASLt call from static destructors at exit
std::map<LtKey, std::unique_ptr<LtPlan>>& g_lt_plans = *new std::map<LtKey, std::unique_ptr<LtPlan>>;
constexpr size_t kLtWorkspace = size_t(32) << 20;

bool lt_enabled() {
  static const bool on = env_switch_on("LIBNN_CUBLASLT");
  return on;
}

// Whether cuBLASLt takes out (1, M, N) = a (1, M, K) @ b: not for f64, batches, empty
// products, sizes past int range, or with LIBNN_CUBLASLT=0.
bool lt_applies(const Tensor& a, const Tensor& out) {
  const int64_t M = out.shape()[1], N = out.shape()[2], K = a.shape()[2];
  return lt_enabled() && out.dtype() != kF64 && out.shape()[0] == 1 && M * N > 0 && K > 0 &&
         M < INT32_MAX && N < INT32_MAX && K < INT32_MAX;
}

// Builds the plan: C (N x M, col-major) = op(b) (N x K) op(a) (K x M), with `epi`: BIAS
// adds a bias (N per column), BGRADB sums op(a) over K into the bias pointer (M values).
void make_plan(LtPlan& p, cublasLtHandle_t lt, cublasLtEpilogue_t epi, cudaDataType_t type,
               cudaDataType_t out_type, cublasOperation_t opb, cublasOperation_t opa, int64_t M,
               int64_t N, int64_t K, int64_t ldb, int64_t lda, uint32_t align_b, uint32_t align_a,
               uint32_t align_c) {
  auto ok = [](cublasStatus_t st) { return st == CUBLAS_STATUS_SUCCESS; };
  cublasLtMatmulPreference_t pref = nullptr;
  const uint64_t ws = kLtWorkspace;
  // split-K partial sums added in the compute type (FP32), never in a 16-bit output's (as the
  // cuBLAS handle's CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION: device.cu)
  const uint32_t reduction = out_type == CUDA_R_32F ? uint32_t(CUBLASLT_REDUCTION_SCHEME_MASK)
                                                : uint32_t(CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE);
  int returned = 0;
  p.ok = ok(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F)) &&
         ok(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &opb, sizeof(opb))) &&
         ok(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &opa, sizeof(opa))) &&
         ok(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi))) &&
         ok(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &out_type,
                                           sizeof(out_type))) &&
         ok(cublasLtMatrixLayoutCreate(&p.a, type, uint64_t(opb == CUBLAS_OP_N ? N : K),
                                       uint64_t(opb == CUBLAS_OP_N ? K : N), ldb)) &&
         ok(cublasLtMatrixLayoutCreate(&p.b, type, uint64_t(opa == CUBLAS_OP_N ? K : M),
                                       uint64_t(opa == CUBLAS_OP_N ? M : K), lda)) &&
         ok(cublasLtMatrixLayoutCreate(&p.c, out_type, uint64_t(N), uint64_t(M), N)) &&
         ok(cublasLtMatmulPreferenceCreate(&pref)) &&
         ok(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                 &ws, sizeof(ws))) &&
         ok(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                 &align_b, sizeof(align_b))) &&
         ok(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                 &align_a, sizeof(align_a))) &&
         ok(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                 &align_c, sizeof(align_c))) &&
         ok(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                 &align_c, sizeof(align_c))) &&
         ok(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                                 &reduction, sizeof(reduction))) &&
         ok(cublasLtMatmulAlgoGetHeuristic(lt, p.op, p.a, p.b, p.c, p.c, pref, 1, &p.heur,
                                           &returned)) &&
         returned > 0;
  if (pref) cublasLtMatmulPreferenceDestroy(pref);
}

void warn_lt_once(cublasLtEpilogue_t epi, const char* why) {
  static std::once_flag bias, grad;
  std::call_once(epi == CUBLASLT_EPILOGUE_BIAS ? bias : grad, [&] {
    if (epi == CUBLASLT_EPILOGUE_BIAS)
      std::fprintf(stderr, "libnn: cuBLASLt bias epilogue unavailable (%s); Linear adds its bias "
                   "by a copy before the GEMM where that happens\n", why);
    else
      std::fprintf(stderr, "libnn: cuBLASLt bias-gradient epilogue unavailable (%s); Linear sums "
                   "its bias gradient in a reduction where that happens\n", why);
  });
}
}  // namespace

// out (1, M, N) = a @ b through cuBLASLt with epilogue `epi` (BIAS: + bias (N); BGRADB: the
// sums of a's rows into bias (M)); false, with nothing computed, where it does not apply
// (lt_applies, an unaligned bias vector, no algorithm, a refusal).
bool CudaBackend::lt_matmul(const Tensor& a_in, const Tensor& b_in, Tensor& out,
                            cublasLtEpilogue_t epi, void* bias) {
  if (!lt_applies(a_in, out)) return false;
  const int64_t M = out.shape()[1], N = out.shape()[2], K = a_in.shape()[2];
  const DType dt = out.dtype();
  // The plan's heuristic ran with no bias pointer set, and cuBLASLt reads the expected bias
  // alignment from that pointer ("Routines that don't dereference this pointer, like
  // cublasLtMatmulAlgoGetHeuristic() depend on its value", cublasLt.h): a null one is aligned
  // to anything, so a vector less than 256-byte aligned could meet a kernel that faults on it.
  if (address_alignment(bias) < 256) return false;
  Layout la, lb;
  const Tensor a = readable(a_in, la), b = readable(b_in, lb);
  const cublasOperation_t opb = lb.row_major ? CUBLAS_OP_N : CUBLAS_OP_T;
  const cublasOperation_t opa = la.row_major ? CUBLAS_OP_N : CUBLAS_OP_T;
  const uint32_t align_b = address_alignment(b.data_ptr()), align_a = address_alignment(a.data_ptr()),
                 align_c = address_alignment(out.data_ptr());
  const LtKey key{index_, int64_t(a.dtype()) << 8 | int64_t(dt), M, N, K, opb, opa, lb.ld, la.ld,
                  align_b, int64_t(align_a) << 16 | align_c, int64_t(epi)};
  std::lock_guard<std::mutex> lock(g_lt_mu);
  std::unique_ptr<LtPlan>& plan = g_lt_plans[key];
  if (!plan) {
    plan = std::make_unique<LtPlan>();
    make_plan(*plan, cublas_lt_, epi, cuda_type(a.dtype()), cuda_type(dt), opb, opa, M, N, K,
              lb.ld, la.ld, align_b, align_a, align_c);
  }
  if (!plan->ok) {
    warn_lt_once(epi, "no algorithm for a shape");
    return false;
  }
  Tensor ws = scratch(plan->heur.workspaceSize);
  const float one = 1, zero = 0;
  cublasStatus_t st = cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                     &bias, sizeof(bias));
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmul(cublas_lt_, plan->op, &one, b.data_ptr(), plan->a, a.data_ptr(), plan->b,
                        &zero, out.data_ptr(), plan->c, out.data_ptr(), plan->c, &plan->heur.algo,
                        ws.data_ptr(), plan->heur.workspaceSize, stream_);
  if (st == CUBLAS_STATUS_SUCCESS) return true;
  warn_lt_once(epi, cublasGetStatusString(st));
  plan->ok = false;
  return false;
}

void CudaBackend::gemm_bias(const Tensor& a_in, const Tensor& b_in, const Tensor& bias_in,
                            Tensor& out) {
  activate();
  if (lt_applies(a_in, out)) {
    // the bias in the output's dtype, contiguous; one of its own is 256-byte aligned where a
    // view into a packed bias might not be
    Tensor bias = as_dtype(*this, bias_in.is_contiguous() ? bias_in : bias_in.contiguous(), out.dtype());
    if (address_alignment(bias.data_ptr()) < 256) {
      Tensor aligned = empty(bias.shape(), bias.options());
      copy(bias, aligned);
      bias = aligned;
    }
    if (lt_matmul(a_in, b_in, out, CUBLASLT_EPILOGUE_BIAS, bias.data_ptr())) return;
  }
  Backend::gemm_bias(a_in, b_in, bias_in, out);
}

void CudaBackend::gemm_bias_grad(const Tensor& a_in, const Tensor& b_in, Tensor& out,
                                 Tensor& grad_bias) {
  activate();
  if (!lt_matmul(a_in, b_in, out, CUBLASLT_EPILOGUE_BGRADB, grad_bias.data_ptr()))
    Backend::gemm_bias_grad(a_in, b_in, out, grad_bias);
}

}  // namespace nn::backend
