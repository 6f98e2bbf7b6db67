// The CUDA emulator's cuBLAS, cuBLASLt and cuDNN: the calls the library makes, computed by
// plain loops on the CPU with the libraries' documented semantics (column-major GEMMs with
// transposes, alpha/beta, beta = 0 never reading the output; cross-correlation with padding,
// stride, dilation and groups in NCHW or NHWC; spatial batch norm with cuDNN's saved mean and
// inverse standard deviation and unbiased running variance). Accumulation is in f32 (f64 for
// f64 data), as the libraries do.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cudnn.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "cuda_emu.h"

namespace {

// ---- elements by runtime type -------------------------------------------------------------
enum class Ty { f32, f64, f16, bf16, bad };

Ty from_cuda(cudaDataType_t t) {
  switch (t) {
    case CUDA_R_32F: return Ty::f32;
    case CUDA_R_64F: return Ty::f64;
    case CUDA_R_16F: return Ty::f16;
    case CUDA_R_16BF: return Ty::bf16;
    default: return Ty::bad;
  }
}
Ty from_cudnn(cudnnDataType_t t) {
  switch (t) {
    case CUDNN_DATA_FLOAT: return Ty::f32;
    case CUDNN_DATA_DOUBLE: return Ty::f64;
    case CUDNN_DATA_HALF: return Ty::f16;
    case CUDNN_DATA_BFLOAT16: return Ty::bf16;
    default: return Ty::bad;
  }
}
double get(Ty t, const void* p, int64_t i) {
  switch (t) {
    case Ty::f32: return static_cast<const float*>(p)[i];
    case Ty::f64: return static_cast<const double*>(p)[i];
    case Ty::f16: return double(__half2float(static_cast<const __half*>(p)[i]));
    case Ty::bf16: return double(__bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]));
    default: return 0;
  }
}
void put(Ty t, void* p, int64_t i, double v) {
  switch (t) {
    case Ty::f32: static_cast<float*>(p)[i] = float(v); break;
    case Ty::f64: static_cast<double*>(p)[i] = v; break;
    case Ty::f16: static_cast<__half*>(p)[i] = __float2half_rn(float(v)); break;
    case Ty::bf16: static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(float(v)); break;
    default: break;
  }
}
size_t bytes_of(Ty t) { return t == Ty::f64 ? 8 : t == Ty::f32 ? 4 : 2; }
// A sum in the accumulation type: f64 for f64 data, else f32.
double round_acc(bool f64, double v) { return f64 ? v : double(float(v)); }
double scalar(bool f64, const void* p) {
  return f64 ? *static_cast<const double*>(p) : double(*static_cast<const float*>(p));
}

// C (m x n, column-major, ldc) = alpha op(A) op(B) + beta C [+ bias per row]; C of type cty
// (ty, or f32 for 16-bit operands)
struct Gemm {
  bool ta, tb;
  int64_t m, n, k;
  Ty ty;
  const void *a, *b;
  int64_t lda, ldb;
  void* c;
  int64_t ldc;
  double alpha, beta;
  bool f64;
  const void* bias = nullptr;
  Ty bias_ty = Ty::f32;
  Ty cty = Ty::bad;  // bad: ty
};
void gemm(const Gemm& g) {
  const Ty cty = g.cty == Ty::bad ? g.ty : g.cty;
  ::emu::run_queued();  // the stream's earlier copies come first
  ::emu::DeviceAccess access;
  std::vector<double> col(size_t(g.m));
  for (int64_t j = 0; j < g.n; ++j) {
    for (int64_t i = 0; i < g.m; ++i) {
      double s = 0;
      for (int64_t p = 0; p < g.k; ++p) {
        const double x = get(g.ty, g.a, g.ta ? p + i * g.lda : i + p * g.lda);
        const double y = get(g.ty, g.b, g.tb ? j + p * g.ldb : p + j * g.ldb);
        s = round_acc(g.f64, s + round_acc(g.f64, x * y));
      }
      double v = g.alpha * s;
      if (g.beta != 0) v += g.beta * get(cty, g.c, i + j * g.ldc);
      if (g.bias) v += get(g.bias_ty, g.bias, i);
      col[size_t(i)] = v;
    }
    for (int64_t i = 0; i < g.m; ++i) put(cty, g.c, i + j * g.ldc, col[size_t(i)]);
  }
}

// ---- cuBLASLt descriptors ------------------------------------------------------------------
struct LtDesc {
  cublasOperation_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  cudaDataType_t bias_type = CUDA_R_32F;
  cublasComputeType_t compute;
};
struct LtLayout {
  cudaDataType_t type;
  uint64_t rows, cols;
  int64_t ld;
};

// ---- cuDNN descriptors ----------------------------------------------------------------------
struct TensorDesc {
  cudnnTensorFormat_t format = CUDNN_TENSOR_NCHW;
  Ty ty = Ty::f32;
  int n = 0, c = 0, h = 0, w = 0;
  int64_t at(int in, int ic, int ih, int iw) const {
    return format == CUDNN_TENSOR_NHWC ? ((int64_t(in) * h + ih) * w + iw) * c + ic
                                       : ((int64_t(in) * c + ic) * h + ih) * w + iw;
  }
};
struct ConvDesc {
  int pad[2] = {}, stride[2] = {1, 1}, dilation[2] = {1, 1}, groups = 1;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  bool f64 = false;
};
template <typename T>
T* as(void* d) {
  return static_cast<T*>(d);
}

// Element count of a 4-d descriptor.
int64_t count(const TensorDesc& d) { return int64_t(d.n) * d.c * d.h * d.w; }

bool bad_types(const TensorDesc& a, const TensorDesc& b) { return a.ty == Ty::bad || a.ty != b.ty; }
// Batch norm indexes x, y, dy and dx alike: they must share dtype, dims and format.
bool unlike(const TensorDesc& a, const TensorDesc& b) {
  return bad_types(a, b) || a.format != b.format || a.n != b.n || a.c != b.c || a.h != b.h ||
         a.w != b.w;
}

// A computation's status, after checking that it wrote nothing outside a device allocation.
template <typename S>
S guarded(S status, const char* what) {
  ::emu::check_guards(what);
  return status;
}

// Spatial batch norm: per channel over (N, H, W).
template <typename F>
void per_channel(const TensorDesc& x, F&& f) {
  ::emu::run_queued();
  ::emu::DeviceAccess access;
  std::vector<int64_t> idx;
  idx.reserve(size_t(x.n) * x.h * x.w);
  for (int c = 0; c < x.c; ++c) {
    idx.clear();
    for (int n = 0; n < x.n; ++n)
      for (int h = 0; h < x.h; ++h)
        for (int w = 0; w < x.w; ++w) idx.push_back(x.at(n, c, h, w));
    f(c, idx);
  }
}
Ty param_ty(const TensorDesc& x) { return x.ty == Ty::f64 ? Ty::f64 : Ty::f32; }

// One pass of a convolution: its output (y, dx or dw) = alpha * the sum over the taps
// (n, k, p, q, c, r, s) with in-bounds input of the other two operands' products + beta *
// itself. Each output element sums its own taps in the order of that loop nest (the order
// is part of the result when the sum is rounded to f32 after every tap), so the elements
// are independent and computed in parallel.
enum class Pass { forward, data, filter };
cudnnStatus_t conv_pass(Pass pass, const TensorDesc& x, const TensorDesc& wd, const TensorDesc& y,
                        const ConvDesc& cv, const void* X, const void* W, const void* Y, void* out,
                        const void* alpha, const void* beta) {
  ::emu::run_queued();
  ::emu::DeviceAccess access;
  const TensorDesc& od = pass == Pass::forward ? y : pass == Pass::data ? x : wd;
  const int kpg = y.c / cv.groups, cpg = wd.c;
  const int st0 = cv.stride[0], st1 = cv.stride[1], pad0 = cv.pad[0], pad1 = cv.pad[1];
  const int dl0 = cv.dilation[0], dl1 = cv.dilation[1];
  const double a = scalar(cv.f64, alpha), b = scalar(cv.f64, beta);
  const bool f64 = cv.f64;
  const int64_t total = count(od);
  // the two operands as doubles, converted once rather than at each of their many taps
  auto doubles = [](const TensorDesc& d, const void* p) {
    std::vector<double> v(p ? size_t(count(d)) : 0);
#pragma omp parallel for
    for (int64_t i = 0; i < int64_t(v.size()); ++i) v[size_t(i)] = get(d.ty, p, i);
    return v;
  };
  const std::vector<double> xv = doubles(x, X), wv = doubles(wd, W), yv = doubles(y, Y);
#pragma omp parallel for schedule(dynamic, 64)
  for (int64_t i = 0; i < total; ++i) {
    // (i0, i1, i2, i3): the output's logical (N, C, H, W) or, for dw, (K, C, R, S) index
    const int i3 = int(i % od.w), i2 = int(i / od.w % od.h), i1 = int(i / od.w / od.h % od.c);
    const int i0 = int(i / od.w / od.h / od.c);
    double acc = 0;
    auto tap = [&](double u, double v) { acc = round_acc(f64, acc + u * v); };
    if (pass == Pass::forward) {  // y[n, k, p, q]: taps c, r, s
      const int n = i0, k = i1, p = i2, q = i3, c0 = k / kpg * cpg;
      for (int c = 0; c < cpg; ++c)
        for (int r = 0; r < wd.h; ++r)
          for (int s = 0; s < wd.w; ++s) {
            const int ih = p * st0 - pad0 + r * dl0, iw = q * st1 - pad1 + s * dl1;
            if (ih < 0 || ih >= x.h || iw < 0 || iw >= x.w) continue;
            tap(xv[size_t(x.at(n, c0 + c, ih, iw))], wv[size_t(wd.at(k, c, r, s))]);
          }
    } else if (pass == Pass::data) {
      // dx[n, ic, ih, iw]: taps k, p, q, where each (p, q) has one (r, s); p rises as r
      // falls, so r and s run downwards
      const int n = i0, ic = i1, ih = i2, iw = i3, c = ic % cpg, k0 = ic / cpg * kpg;
      for (int k = k0; k < k0 + kpg; ++k)
        for (int r = wd.h - 1; r >= 0; --r) {
          const int th = ih + pad0 - r * dl0;
          if (th < 0 || th % st0 != 0 || th / st0 >= y.h) continue;
          for (int s = wd.w - 1; s >= 0; --s) {
            const int tw = iw + pad1 - s * dl1;
            if (tw < 0 || tw % st1 != 0 || tw / st1 >= y.w) continue;
            tap(yv[size_t(y.at(n, k, th / st0, tw / st1))], wv[size_t(wd.at(k, c, r, s))]);
          }
        }
    } else {  // dw[k, c, r, s]: taps n, p, q
      const int k = i0, c = i1, r = i2, s = i3, ic = k / kpg * cpg + c;
      for (int n = 0; n < y.n; ++n)
        for (int p = 0; p < y.h; ++p)
          for (int q = 0; q < y.w; ++q) {
            const int ih = p * st0 - pad0 + r * dl0, iw = q * st1 - pad1 + s * dl1;
            if (ih < 0 || ih >= x.h || iw < 0 || iw >= x.w) continue;
            tap(yv[size_t(y.at(n, k, p, q))], xv[size_t(x.at(n, ic, ih, iw))]);
          }
    }
    const int64_t o = od.at(i0, i1, i2, i3);
    put(od.ty, out, o, a * acc + (b != 0 ? b * get(od.ty, out, o) : 0.0));
  }
  return guarded(CUDNN_STATUS_SUCCESS, "a cuDNN convolution");
}

}  // namespace

extern "C" {

// ---- cuBLAS ---------------------------------------------------------------------------------
cublasStatus_t cublasCreate_v2(cublasHandle_t* h) {
  *h = reinterpret_cast<cublasHandle_t>(new int(0));
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy_v2(cublasHandle_t h) {
  delete reinterpret_cast<int*>(h);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream_v2(cublasHandle_t, cudaStream_t) { return CUBLAS_STATUS_SUCCESS; }
// (the reference GEMM sums in double whatever the mode)
cublasStatus_t cublasSetMathMode(cublasHandle_t, cublasMath_t) { return CUBLAS_STATUS_SUCCESS; }
const char* cublasGetStatusString(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "CUBLAS_STATUS_INTERNAL_ERROR";
  }
}
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t, cublasOperation_t transa,
                                          cublasOperation_t transb, int m, int n, int k,
                                          const void* alpha, const void* A, cudaDataType_t at,
                                          int lda, long long sa, const void* B, cudaDataType_t bt,
                                          int ldb, long long sb, const void* beta, void* C,
                                          cudaDataType_t ct, int ldc, long long sc, int batch,
                                          cublasComputeType_t compute, cublasGemmAlgo_t) {
  const Ty ty = from_cuda(at);
  const bool f64 = compute == CUBLAS_COMPUTE_64F;
  // C as A and B, or f32 from 16-bit A and B (as cuBLAS's table of GemmEx types allows)
  const bool wide_c = ct == CUDA_R_32F && (ty == Ty::f16 || ty == Ty::bf16);
  if (ty == Ty::bad || bt != at || (ct != at && !wide_c) || (f64 != (ty == Ty::f64)) ||
      (!f64 && compute != CUBLAS_COMPUTE_32F))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  const bool ta = transa != CUBLAS_OP_N, tb = transb != CUBLAS_OP_N;
  if (m < 0 || n < 0 || k < 0 || batch < 0 || ldc < std::max(1, m) ||
      lda < std::max(1, ta ? k : m) || ldb < std::max(1, tb ? n : k))
    return CUBLAS_STATUS_INVALID_VALUE;
  const size_t es = bytes_of(ty);
  for (int i = 0; i < batch; ++i)
    gemm(Gemm{ta, tb, m, n, k, ty, static_cast<const char*>(A) + i * sa * es,
              static_cast<const char*>(B) + i * sb * es, lda, ldb,
              static_cast<char*>(C) + i * sc * bytes_of(from_cuda(ct)), ldc, scalar(f64, alpha),
              scalar(f64, beta), f64, nullptr, Ty::f32, from_cuda(ct)});
  return guarded(CUBLAS_STATUS_SUCCESS, "cublasGemmStridedBatchedEx");
}

// ---- cuBLASLt -------------------------------------------------------------------------------
cublasStatus_t cublasLtCreate(cublasLtHandle_t* h) {
  *h = reinterpret_cast<cublasLtHandle_t>(new int(0));
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* d, cublasComputeType_t compute,
                                        cudaDataType_t) {
  auto* desc = new LtDesc;
  desc->compute = compute;
  *d = reinterpret_cast<cublasLtMatmulDesc_t>(desc);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
  delete reinterpret_cast<LtDesc*>(d);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d,
                                              cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t size) {
  LtDesc& desc = *reinterpret_cast<LtDesc*>(d);
  auto take = [&](auto& field) {
    if (size != sizeof(field)) return CUBLAS_STATUS_INVALID_VALUE;
    std::memcpy(&field, buf, size);
    return CUBLAS_STATUS_SUCCESS;
  };
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA: return take(desc.ta);
    case CUBLASLT_MATMUL_DESC_TRANSB: return take(desc.tb);
    case CUBLASLT_MATMUL_DESC_EPILOGUE: return take(desc.epilogue);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return take(desc.bias);
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: return take(desc.bias_type);
    default: return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* l, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  if (ld < int64_t(rows)) return CUBLAS_STATUS_INVALID_VALUE;
  *l = reinterpret_cast<cublasLtMatrixLayout_t>(new LtLayout{type, rows, cols, ld});
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
  delete reinterpret_cast<LtLayout*>(l);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* p) {
  *p = reinterpret_cast<cublasLtMatmulPreference_t>(new int(0));
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
  delete reinterpret_cast<int*>(p);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t,
                                                    cublasLtMatmulPreferenceAttributes_t,
                                                    const void*, size_t) {
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t op,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t, int requested,
                                              cublasLtMatmulHeuristicResult_t* results,
                                              int* returned) {
  const LtDesc& desc = *reinterpret_cast<const LtDesc*>(op);
  const LtLayout &la = *reinterpret_cast<const LtLayout*>(a),
                 &lb = *reinterpret_cast<const LtLayout*>(b),
                 &lc = *reinterpret_cast<const LtLayout*>(c),
                 &ld = *reinterpret_cast<const LtLayout*>(d);
  const uint64_t m = desc.ta == CUBLAS_OP_N ? la.rows : la.cols,
                 k = desc.ta == CUBLAS_OP_N ? la.cols : la.rows,
                 kb = desc.tb == CUBLAS_OP_N ? lb.rows : lb.cols,
                 n = desc.tb == CUBLAS_OP_N ? lb.cols : lb.rows;
  *returned = 0;
  if (requested < 1 || k != kb || lc.rows != m || lc.cols != n || ld.rows != m || ld.cols != n)
    return CUBLAS_STATUS_INVALID_VALUE;
  std::memset(&results[0], 0, sizeof(results[0]));
  results[0].state = CUBLAS_STATUS_SUCCESS;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t op, const void* alpha,
                              const void* A, cublasLtMatrixLayout_t a, const void* B,
                              cublasLtMatrixLayout_t b, const void* beta, const void* C,
                              cublasLtMatrixLayout_t /* c: C == D, checked below */, void* D,
                              cublasLtMatrixLayout_t d,
                              const cublasLtMatmulAlgo_t*, void*, size_t, cudaStream_t) {
  const LtDesc& desc = *reinterpret_cast<const LtDesc*>(op);
  const LtLayout &la = *reinterpret_cast<const LtLayout*>(a),
                 &lb = *reinterpret_cast<const LtLayout*>(b),
                 &ld = *reinterpret_cast<const LtLayout*>(d);
  const Ty ty = from_cuda(la.type), cty = from_cuda(ld.type);
  const bool wide_c = cty == Ty::f32 && (ty == Ty::f16 || ty == Ty::bf16);
  if (ty == Ty::bad || ty == Ty::f64 || desc.compute != CUBLAS_COMPUTE_32F || lb.type != la.type ||
      (cty != ty && !wide_c))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if (C != D) return CUBLAS_STATUS_NOT_SUPPORTED;  // in place only, as the library calls it
  if (desc.epilogue != CUBLASLT_EPILOGUE_DEFAULT && desc.epilogue != CUBLASLT_EPILOGUE_BIAS &&
      desc.epilogue != CUBLASLT_EPILOGUE_BGRADB)
    return CUBLAS_STATUS_NOT_SUPPORTED;  // the emulator computes these three epilogues only
  const bool with_bias = desc.epilogue == CUBLASLT_EPILOGUE_BIAS;
  const bool bias_grad = desc.epilogue == CUBLASLT_EPILOGUE_BGRADB;
  if ((with_bias || bias_grad) && !desc.bias) return CUBLAS_STATUS_INVALID_VALUE;
  const bool ta = desc.ta != CUBLAS_OP_N, tb = desc.tb != CUBLAS_OP_N;
  const int64_t k = int64_t(ta ? la.rows : la.cols);
  gemm(Gemm{ta, tb, int64_t(ld.rows), int64_t(ld.cols), k, ty, A, B, la.ld, lb.ld, D, ld.ld,
            scalar(false, alpha), scalar(false, beta), false, with_bias ? desc.bias : nullptr,
            from_cuda(desc.bias_type), cty});
  if (bias_grad) {  // the bias gradient: op(B)'s columns summed over k, in f32
    ::emu::DeviceAccess access;
    for (int64_t j = 0; j < int64_t(ld.cols); ++j) {
      double sum = 0;
      for (int64_t p = 0; p < k; ++p)
        sum = round_acc(false, sum + get(ty, B, tb ? j + p * lb.ld : p + j * lb.ld));
      put(from_cuda(desc.bias_type), const_cast<void*>(desc.bias), j, sum);
    }
  }
  return guarded(CUBLAS_STATUS_SUCCESS, "cublasLtMatmul");
}

// ---- cuDNN ----------------------------------------------------------------------------------
const char* cudnnGetErrorString(cudnnStatus_t s) {
  switch (s) {
    case CUDNN_STATUS_SUCCESS: return "CUDNN_STATUS_SUCCESS";
    case CUDNN_STATUS_BAD_PARAM: return "CUDNN_STATUS_BAD_PARAM";
    case CUDNN_STATUS_NOT_SUPPORTED: return "CUDNN_STATUS_NOT_SUPPORTED";
    default: return "CUDNN_STATUS_INTERNAL_ERROR";
  }
}
cudnnStatus_t cudnnCreate(cudnnHandle_t* h) {
  *h = reinterpret_cast<cudnnHandle_t>(new int(0));
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetStream(cudnnHandle_t, cudaStream_t) { return CUDNN_STATUS_SUCCESS; }
cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t* d) {
  *d = reinterpret_cast<cudnnTensorDescriptor_t>(new TensorDesc);
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t d) {
  delete reinterpret_cast<TensorDesc*>(d);
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t d, cudnnTensorFormat_t format,
                                         cudnnDataType_t type, int n, int c, int h, int w) {
  if (n <= 0 || c <= 0 || h <= 0 || w <= 0 || from_cudnn(type) == Ty::bad ||
      (format != CUDNN_TENSOR_NCHW && format != CUDNN_TENSOR_NHWC))
    return CUDNN_STATUS_BAD_PARAM;
  *reinterpret_cast<TensorDesc*>(d) = TensorDesc{format, from_cudnn(type), n, c, h, w};
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t* d) {
  *d = reinterpret_cast<cudnnFilterDescriptor_t>(new TensorDesc);
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t d) {
  delete reinterpret_cast<TensorDesc*>(d);
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t d, cudnnDataType_t type,
                                         cudnnTensorFormat_t format, int k, int c, int h, int w) {
  return cudnnSetTensor4dDescriptor(reinterpret_cast<cudnnTensorDescriptor_t>(d), format, type, k,
                                    c, h, w);
}
cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t* d) {
  *d = reinterpret_cast<cudnnConvolutionDescriptor_t>(new ConvDesc);
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t d) {
  delete reinterpret_cast<ConvDesc*>(d);
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t d, int ph, int pw,
                                              int sh, int sw, int dh, int dw,
                                              cudnnConvolutionMode_t mode,
                                              cudnnDataType_t compute) {
  if (ph < 0 || pw < 0 || sh <= 0 || sw <= 0 || dh <= 0 || dw <= 0 ||
      mode != CUDNN_CROSS_CORRELATION)
    return CUDNN_STATUS_BAD_PARAM;
  ConvDesc& c = *reinterpret_cast<ConvDesc*>(d);
  c.pad[0] = ph, c.pad[1] = pw, c.stride[0] = sh, c.stride[1] = sw;
  c.dilation[0] = dh, c.dilation[1] = dw;
  c.f64 = compute == CUDNN_DATA_DOUBLE;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetConvolutionGroupCount(cudnnConvolutionDescriptor_t d, int groups) {
  if (groups < 1) return CUDNN_STATUS_BAD_PARAM;
  reinterpret_cast<ConvDesc*>(d)->groups = groups;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t d, cudnnMathType_t m) {
  reinterpret_cast<ConvDesc*>(d)->math = m;
  return CUDNN_STATUS_SUCCESS;
}

#define EMU_CONV_ARGS(X, W, Y)                                                            \
  const TensorDesc& x = *reinterpret_cast<const TensorDesc*>(X);                          \
  const TensorDesc& wd = *reinterpret_cast<const TensorDesc*>(W);                         \
  const TensorDesc& y = *reinterpret_cast<const TensorDesc*>(Y);                          \
  const ConvDesc& cv = *reinterpret_cast<const ConvDesc*>(conv);                          \
  if (bad_types(x, wd) || bad_types(x, y) || wd.n != y.c || wd.c * cv.groups != x.c ||    \
      y.c % cv.groups != 0 || y.n != x.n ||                                               \
      y.h != (x.h + 2 * cv.pad[0] - cv.dilation[0] * (wd.h - 1) - 1) / cv.stride[0] + 1 || \
      y.w != (x.w + 2 * cv.pad[1] - cv.dilation[1] * (wd.w - 1) - 1) / cv.stride[1] + 1)   \
    return CUDNN_STATUS_BAD_PARAM;

}  // extern "C"
namespace {
// LIBNN_CUDA_EMU_CONV_REFUSE_ALGO=A: Find and the heuristics rank algorithm A first, as
// usable, and running it answers NOT_SUPPORTED, as cuDNN may for an algorithm it ranked (its
// heuristics run nothing): the caller must take the next one. Counted for the tests.
unsigned long long g_conv_refusals = 0;
int refused_algo() {
  const char* v = std::getenv("LIBNN_CUDA_EMU_CONV_REFUSE_ALGO");
  return v && *v ? std::atoi(v) : -1;
}
bool refuses(int algo) {
  if (algo != refused_algo()) return false;
  ++g_conv_refusals;
  return true;
}
int algo_count() { return refused_algo() >= 0 ? 2 : 1; }
}  // namespace
extern "C" {
unsigned long long libnn_cuda_emu_conv_refusals() { return g_conv_refusals; }
cudnnStatus_t cudnnGetConvolutionForwardAlgorithmMaxCount(cudnnHandle_t, int* n) {
  *n = algo_count();
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithmMaxCount(cudnnHandle_t, int* n) {
  *n = algo_count();
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(cudnnHandle_t, int* n) {
  *n = algo_count();
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t, const void* alpha,
                                      cudnnTensorDescriptor_t xd, const void* X,
                                      cudnnFilterDescriptor_t wdd, const void* W,
                                      cudnnConvolutionDescriptor_t conv, cudnnConvolutionFwdAlgo_t algo,
                                      void*, size_t, const void* beta, cudnnTensorDescriptor_t yd,
                                      void* Y) {
  if (refuses(int(algo))) return CUDNN_STATUS_NOT_SUPPORTED;
  EMU_CONV_ARGS(xd, wdd, yd)
  return conv_pass(Pass::forward, x, wd, y, cv, X, W, nullptr, Y, alpha, beta);
}
cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t, const void* alpha,
                                           cudnnFilterDescriptor_t wdd, const void* W,
                                           cudnnTensorDescriptor_t dyd, const void* dY,
                                           cudnnConvolutionDescriptor_t conv,
                                           cudnnConvolutionBwdDataAlgo_t algo, void*, size_t,
                                           const void* beta, cudnnTensorDescriptor_t dxd,
                                           void* dX) {
  if (refuses(int(algo))) return CUDNN_STATUS_NOT_SUPPORTED;
  EMU_CONV_ARGS(dxd, wdd, dyd)
  return conv_pass(Pass::data, x, wd, y, cv, nullptr, W, dY, dX, alpha, beta);
}
cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t, const void* alpha,
                                             cudnnTensorDescriptor_t xd, const void* X,
                                             cudnnTensorDescriptor_t dyd, const void* dY,
                                             cudnnConvolutionDescriptor_t conv,
                                             cudnnConvolutionBwdFilterAlgo_t algo, void*, size_t,
                                             const void* beta, cudnnFilterDescriptor_t dwd,
                                             void* dW) {
  if (refuses(int(algo))) return CUDNN_STATUS_NOT_SUPPORTED;
  EMU_CONV_ARGS(xd, dwd, dyd)
  return conv_pass(Pass::filter, x, wd, y, cv, X, nullptr, dY, dW, alpha, beta);
}

// Find: one algorithm, measured as taking no time, run once on the real buffers (as cuDNN's
// Find does) with alpha = 1 and beta = 0.
}  // extern "C"
namespace {
// The ranked list Find and the heuristics give: `algo`, after the refused one when asked for
template <typename Algo, typename Perf>
void rank(Algo algo, cudnnMathType_t math, int req, int* ret, Perf* perf) {
  std::vector<Algo> ranked;
  if (refused_algo() >= 0) ranked.push_back(Algo(refused_algo()));
  ranked.push_back(algo);
  *ret = std::min(req, int(ranked.size()));
  for (int i = 0; i < *ret; ++i) {
    std::memset(&perf[i], 0, sizeof(perf[i]));
    perf[i].algo = ranked[size_t(i)];
    perf[i].status = CUDNN_STATUS_SUCCESS;
    perf[i].mathType = math;
  }
}
template <typename Perf, typename Algo, typename Run>
cudnnStatus_t find_one(cudnnConvolutionDescriptor_t conv, Algo algo, int req, int* ret,
                       Perf* perf, const void* out_desc, void* out, Run&& run) {
  const ConvDesc& cv = *reinterpret_cast<const ConvDesc*>(conv);
  const float one = 1, zero = 0;
  const double one_d = 1, zero_d = 0;
  const cudnnStatus_t st = run(cv.f64 ? static_cast<const void*>(&one_d) : &one,
                               cv.f64 ? static_cast<const void*>(&zero_d) : &zero, algo);
  if (st != CUDNN_STATUS_SUCCESS) return st;
  // cuDNN leaves Find's output undefined: NaN bytes, so a caller that skips the real call fails
  const TensorDesc& od = *static_cast<const TensorDesc*>(out_desc);
  ::emu::DeviceAccess access;
  std::memset(out, 0xff, size_t(count(od)) * bytes_of(od.ty));
  rank(algo, cv.math, req, ret, perf);
  return CUDNN_STATUS_SUCCESS;
}

// Training batch norm, per channel over (N, H, W): y = alpha * f(bn(x) [+ z]) + beta * y, f
// the ReLU when `mask` is given (its bits set where the value before it was positive), else
// the identity. Updates the running statistics and saves mean and 1/std.
struct BnForward {
  const TensorDesc& x;
  const void *X, *Z;
  void* Y;
  Ty pt;
  const void *scale, *bias;
  double factor;
  void *running_mean, *running_var;
  double eps;
  void *save_mean, *save_invstd;
  double a, b;
  uint8_t* mask;
};
void bn_forward(const BnForward& p) {
  const TensorDesc& x = p.x;
  per_channel(x, [&](int c, const std::vector<int64_t>& idx) {
    const double m = double(idx.size());
    double mean = 0, var = 0;
    for (int64_t i : idx) mean += get(x.ty, p.X, i);
    mean /= m;
    for (int64_t i : idx) var += (get(x.ty, p.X, i) - mean) * (get(x.ty, p.X, i) - mean);
    var /= m;
    const double invstd = 1.0 / std::sqrt(var + p.eps);
    const double w = get(p.pt, p.scale, c), bi = get(p.pt, p.bias, c);
    for (int64_t i : idx) {
      double v = (get(x.ty, p.X, i) - mean) * invstd * w + bi + (p.Z ? get(x.ty, p.Z, i) : 0.0);
      if (p.mask) {
        const uint8_t bit = uint8_t(1u << (i % 8));
        p.mask[i / 8] = uint8_t(v > 0 ? p.mask[i / 8] | bit : p.mask[i / 8] & ~bit);
        v = v > 0 ? v : 0.0;
      }
      put(x.ty, p.Y, i, p.a * v + (p.b != 0 ? p.b * get(x.ty, p.Y, i) : 0.0));
    }
    if (p.running_mean)
      put(p.pt, p.running_mean, c, (1 - p.factor) * get(p.pt, p.running_mean, c) + p.factor * mean);
    if (p.running_var)
      put(p.pt, p.running_var, c,
          (1 - p.factor) * get(p.pt, p.running_var, c) +
              p.factor * var * m / std::max(1.0, m - 1));
    if (p.save_mean) put(p.pt, p.save_mean, c, mean);
    if (p.save_invstd) put(p.pt, p.save_invstd, c, invstd);
  });
}
// Its backward from the saved statistics; with `mask`, dy is first masked by the ReLU's bits
// (and written to dZ when given).
struct BnBackward {
  const TensorDesc& x;
  const void *X, *dY;
  void *dX, *dZ;
  Ty pt;
  const void *scale, *save_mean, *save_invstd;
  void *dscale, *dbias;
  double ad, bd, ap, bp;
  const uint8_t* mask;
};
void bn_backward(const BnBackward& p) {
  const TensorDesc& x = p.x;
  auto dy = [&](int64_t i) {
    return !p.mask || (p.mask[i / 8] >> (i % 8)) & 1u ? get(x.ty, p.dY, i) : 0.0;
  };
  per_channel(x, [&](int c, const std::vector<int64_t>& idx) {
    const double m = double(idx.size()), mean = get(p.pt, p.save_mean, c),
                 invstd = get(p.pt, p.save_invstd, c), w = get(p.pt, p.scale, c);
    double sg = 0, sgx = 0;
    for (int64_t i : idx) {
      const double g = dy(i), xh = (get(x.ty, p.X, i) - mean) * invstd;
      sg += g;
      sgx += g * xh;
      if (p.dZ) put(x.ty, p.dZ, i, g);
    }
    for (int64_t i : idx) {
      const double xh = (get(x.ty, p.X, i) - mean) * invstd;
      const double g = w * invstd * (dy(i) - sg / m - xh * sgx / m);
      put(x.ty, p.dX, i, p.ad * g + (p.bd != 0 ? p.bd * get(x.ty, p.dX, i) : 0.0));
    }
    put(p.pt, p.dscale, c, p.ap * sgx + (p.bp != 0 ? p.bp * get(p.pt, p.dscale, c) : 0.0));
    put(p.pt, p.dbias, c, p.ap * sg + (p.bp != 0 ? p.bp * get(p.pt, p.dbias, c) : 0.0));
  });
}
// The heuristics: the one algorithm each pass has here, without running it (the library's
// LIBNN_CUDNN_FIND=0); the count tells that they were asked.
unsigned long long g_heuristic_calls = 0;
template <typename Perf, typename Algo>
cudnnStatus_t guess_one(cudnnConvolutionDescriptor_t conv, Algo algo, int req, int* ret, Perf* perf) {
  ++g_heuristic_calls;
  rank(algo, reinterpret_cast<const ConvDesc*>(conv)->math, req, ret, perf);
  return CUDNN_STATUS_SUCCESS;
}
}  // namespace
extern "C" {
cudnnStatus_t cudnnFindConvolutionForwardAlgorithmEx(
    cudnnHandle_t h, cudnnTensorDescriptor_t xd, const void* x, cudnnFilterDescriptor_t wd,
    const void* w, cudnnConvolutionDescriptor_t conv, cudnnTensorDescriptor_t yd, void* y, int req,
    int* ret, cudnnConvolutionFwdAlgoPerf_t* perf, void* ws, size_t wsb) {
  return find_one(conv, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, req, ret, perf, yd, y,
                  [&](const void* one, const void* zero, auto algo) {
                    return cudnnConvolutionForward(h, one, xd, x, wd, w, conv, algo, ws, wsb,
                                                   zero, yd, y);
                  });
}
cudnnStatus_t cudnnFindConvolutionBackwardDataAlgorithmEx(
    cudnnHandle_t h, cudnnFilterDescriptor_t wd, const void* w, cudnnTensorDescriptor_t dyd,
    const void* dy, cudnnConvolutionDescriptor_t conv, cudnnTensorDescriptor_t dxd, void* dx,
    int req, int* ret, cudnnConvolutionBwdDataAlgoPerf_t* perf, void* ws, size_t wsb) {
  return find_one(conv, CUDNN_CONVOLUTION_BWD_DATA_ALGO_0, req, ret, perf, dxd, dx,
                  [&](const void* one, const void* zero, auto algo) {
                    return cudnnConvolutionBackwardData(h, one, wd, w, dyd, dy, conv, algo, ws,
                                                        wsb, zero, dxd, dx);
                  });
}
cudnnStatus_t cudnnFindConvolutionBackwardFilterAlgorithmEx(
    cudnnHandle_t h, cudnnTensorDescriptor_t xd, const void* x, cudnnTensorDescriptor_t dyd,
    const void* dy, cudnnConvolutionDescriptor_t conv, cudnnFilterDescriptor_t dwd, void* dw,
    int req, int* ret, cudnnConvolutionBwdFilterAlgoPerf_t* perf, void* ws, size_t wsb) {
  return find_one(conv, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0, req, ret, perf, dwd, dw,
                  [&](const void* one, const void* zero, auto algo) {
                    return cudnnConvolutionBackwardFilter(h, one, xd, x, dyd, dy, conv, algo, ws,
                                                          wsb, zero, dwd, dw);
                  });
}
cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(cudnnHandle_t, cudnnTensorDescriptor_t,
                                                     cudnnFilterDescriptor_t,
                                                     cudnnConvolutionDescriptor_t conv,
                                                     cudnnTensorDescriptor_t, int req, int* ret,
                                                     cudnnConvolutionFwdAlgoPerf_t* perf) {
  return guess_one(conv, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, req, ret, perf);
}
cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(cudnnHandle_t, cudnnFilterDescriptor_t,
                                                          cudnnTensorDescriptor_t,
                                                          cudnnConvolutionDescriptor_t conv,
                                                          cudnnTensorDescriptor_t, int req, int* ret,
                                                          cudnnConvolutionBwdDataAlgoPerf_t* perf) {
  return guess_one(conv, CUDNN_CONVOLUTION_BWD_DATA_ALGO_0, req, ret, perf);
}
cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(
    cudnnHandle_t, cudnnTensorDescriptor_t, cudnnTensorDescriptor_t,
    cudnnConvolutionDescriptor_t conv, cudnnFilterDescriptor_t, int req, int* ret,
    cudnnConvolutionBwdFilterAlgoPerf_t* perf) {
  return guess_one(conv, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0, req, ret, perf);
}
unsigned long long libnn_cuda_emu_cudnn_heuristic_calls() { return g_heuristic_calls; }

cudnnStatus_t cudnnDeriveBNTensorDescriptor(cudnnTensorDescriptor_t param,
                                            cudnnTensorDescriptor_t xd, cudnnBatchNormMode_t mode) {
  if (mode != CUDNN_BATCHNORM_SPATIAL) return CUDNN_STATUS_NOT_SUPPORTED;
  const TensorDesc& x = *reinterpret_cast<const TensorDesc*>(xd);
  *reinterpret_cast<TensorDesc*>(param) = TensorDesc{CUDNN_TENSOR_NCHW, param_ty(x), 1, x.c, 1, 1};
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnBatchNormalizationForwardTraining(
    cudnnHandle_t, cudnnBatchNormMode_t mode, const void* alpha, const void* beta,
    cudnnTensorDescriptor_t xd, const void* X, cudnnTensorDescriptor_t yd, void* Y,
    cudnnTensorDescriptor_t pd, const void* scale, const void* bias, double factor,
    void* running_mean, void* running_var, double eps, void* save_mean, void* save_invstd) {
  const TensorDesc& x = *reinterpret_cast<const TensorDesc*>(xd);
  const TensorDesc& y = *reinterpret_cast<const TensorDesc*>(yd);
  const Ty pt = reinterpret_cast<const TensorDesc*>(pd)->ty;
  if (mode != CUDNN_BATCHNORM_SPATIAL || unlike(x, y) || eps < CUDNN_BN_MIN_EPSILON)
    return CUDNN_STATUS_BAD_PARAM;
  const bool f64 = x.ty == Ty::f64;
  bn_forward({x, X, nullptr, Y, pt, scale, bias, factor, running_mean, running_var, eps, save_mean,
              save_invstd, scalar(f64, alpha), scalar(f64, beta), nullptr});
  return guarded(CUDNN_STATUS_SUCCESS, "a cuDNN batch norm");
}
cudnnStatus_t cudnnBatchNormalizationForwardInference(
    cudnnHandle_t, cudnnBatchNormMode_t mode, const void* alpha, const void* beta,
    cudnnTensorDescriptor_t xd, const void* X, cudnnTensorDescriptor_t yd, void* Y,
    cudnnTensorDescriptor_t pd, const void* scale, const void* bias, const void* mean,
    const void* var, double eps) {
  const TensorDesc& x = *reinterpret_cast<const TensorDesc*>(xd);
  const TensorDesc& y = *reinterpret_cast<const TensorDesc*>(yd);
  const Ty pt = reinterpret_cast<const TensorDesc*>(pd)->ty;
  if (mode != CUDNN_BATCHNORM_SPATIAL || unlike(x, y) || eps < CUDNN_BN_MIN_EPSILON)
    return CUDNN_STATUS_BAD_PARAM;
  // cuDNN's inference kernel refuses more than 65535 samples (PyTorch issue 19911; onnxruntime
  // 7095, 17406: cuDNN 7 and 8 at least)
  if (x.n > 65535) return CUDNN_STATUS_NOT_SUPPORTED;
  const bool f64 = x.ty == Ty::f64;
  const double a = scalar(f64, alpha), b = scalar(f64, beta);
  per_channel(x, [&](int c, const std::vector<int64_t>& idx) {
    const double invstd = 1.0 / std::sqrt(get(pt, var, c) + eps), mu = get(pt, mean, c);
    const double w = get(pt, scale, c), bi = get(pt, bias, c);
    for (int64_t i : idx)
      put(y.ty, Y, i, a * ((get(x.ty, X, i) - mu) * invstd * w + bi) +
                          (b != 0 ? b * get(y.ty, Y, i) : 0.0));
  });
  return guarded(CUDNN_STATUS_SUCCESS, "a cuDNN batch norm");
}
cudnnStatus_t cudnnBatchNormalizationBackward(
    cudnnHandle_t, cudnnBatchNormMode_t mode, const void* alpha_d, const void* beta_d,
    const void* alpha_p, const void* beta_p, cudnnTensorDescriptor_t xd, const void* X,
    cudnnTensorDescriptor_t dyd, const void* dY, cudnnTensorDescriptor_t dxd, void* dX,
    cudnnTensorDescriptor_t pd, const void* scale, void* dscale, void* dbias, double eps,
    const void* save_mean, const void* save_invstd) {
  const TensorDesc& x = *reinterpret_cast<const TensorDesc*>(xd);
  const TensorDesc& dy = *reinterpret_cast<const TensorDesc*>(dyd);
  const TensorDesc& dx = *reinterpret_cast<const TensorDesc*>(dxd);
  const Ty pt = reinterpret_cast<const TensorDesc*>(pd)->ty;
  if (mode != CUDNN_BATCHNORM_SPATIAL || unlike(x, dy) || unlike(x, dx) ||
      eps < CUDNN_BN_MIN_EPSILON || !save_mean || !save_invstd)
    return CUDNN_STATUS_NOT_SUPPORTED;  // the library always passes the saved statistics
  const bool f64 = x.ty == Ty::f64;
  bn_backward({x, X, dY, dX, nullptr, pt, scale, save_mean, save_invstd, dscale, dbias,
               scalar(f64, alpha_d), scalar(f64, beta_d), scalar(f64, alpha_p),
               scalar(f64, beta_p), nullptr});
  return guarded(CUDNN_STATUS_SUCCESS, "a cuDNN batch norm");
}


}  // extern "C"

namespace {
struct ActDesc {
  cudnnActivationMode_t mode = CUDNN_ACTIVATION_RELU;
};
constexpr size_t kFusedBnWorkspace = 256;  // asked for, so that callers allocate and pass one
const TensorDesc* desc(cudnnTensorDescriptor_t d) { return reinterpret_cast<const TensorDesc*>(d); }
bool fused_bn_supported(cudnnBatchNormMode_t mode, cudnnBatchNormOps_t ops,
                        cudnnActivationDescriptor_t act,
                        std::initializer_list<cudnnTensorDescriptor_t> ds) {
  if (mode != CUDNN_BATCHNORM_SPATIAL_PERSISTENT || ops == CUDNN_BATCHNORM_OPS_BN) return false;
  if (!act || reinterpret_cast<const ActDesc*>(act)->mode != CUDNN_ACTIVATION_RELU) return false;
  const TensorDesc* first = desc(*ds.begin());
  for (cudnnTensorDescriptor_t d : ds) {
    if (!d) continue;
    const TensorDesc& t = *desc(d);
    if (t.format != CUDNN_TENSOR_NHWC || t.ty != Ty::f16 || unlike(t, *first)) return false;
  }
  return first->c % 4 == 0;
}
size_t mask_bytes(const TensorDesc& x) { return size_t((count(x) + 7) / 8); }
}  // namespace

extern "C" {

// The fused NHWC kernels behind the ...Ex calls, as cuDNN documents them: training only, mode
// CUDNN_BATCHNORM_SPATIAL_PERSISTENT, x, z, y, dy, dz and dx fully packed NHWC f16, channels a
// multiple of 4 when an activation is fused, a ReLU activation, workspace and reserve space
// of at least the sizes asked for; else CUDNN_STATUS_NOT_SUPPORTED (which the documentation
// does not promise for every other configuration: the library sends only documented ones).
// Missing operands, one running statistic alone and a small eps are BAD_PARAM, as documented.
// The reserve space holds the ReLU's mask as bits, written forward and read backward, so a
// backward given another call's reserve, or none, computes wrong gradients.
// LIBNN_CUDA_EMU_FUSED_BN_FORWARD / _BACKWARD=<status>: the forward or backward call answers
// that cudnnStatus_t (a number) after its parameter checks, as a cuDNN that refuses a shape
// the emulator takes would: the library's fallback to the composition is tested with it.
cudnnStatus_t forced_status(const char* var) {
  const char* e = std::getenv(var);
  return e && *e ? cudnnStatus_t(std::atoi(e)) : CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateActivationDescriptor(cudnnActivationDescriptor_t* d) {
  *d = reinterpret_cast<cudnnActivationDescriptor_t>(new ActDesc);
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetActivationDescriptor(cudnnActivationDescriptor_t d, cudnnActivationMode_t mode,
                                           cudnnNanPropagation_t, double) {
  reinterpret_cast<ActDesc*>(d)->mode = mode;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroyActivationDescriptor(cudnnActivationDescriptor_t d) {
  delete reinterpret_cast<ActDesc*>(d);
  return CUDNN_STATUS_SUCCESS;
}


cudnnStatus_t cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
    cudnnHandle_t, cudnnBatchNormMode_t mode, cudnnBatchNormOps_t ops, cudnnTensorDescriptor_t xd,
    cudnnTensorDescriptor_t zd, cudnnTensorDescriptor_t yd, cudnnTensorDescriptor_t,
    cudnnActivationDescriptor_t act, size_t* bytes) {
  if (!fused_bn_supported(mode, ops, act, {xd, zd, yd})) return CUDNN_STATUS_NOT_SUPPORTED;
  *bytes = kFusedBnWorkspace;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetBatchNormalizationBackwardExWorkspaceSize(
    cudnnHandle_t, cudnnBatchNormMode_t mode, cudnnBatchNormOps_t ops, cudnnTensorDescriptor_t xd,
    cudnnTensorDescriptor_t yd, cudnnTensorDescriptor_t dyd, cudnnTensorDescriptor_t dzd,
    cudnnTensorDescriptor_t dxd, cudnnTensorDescriptor_t, cudnnActivationDescriptor_t act,
    size_t* bytes) {
  if (!fused_bn_supported(mode, ops, act, {xd, yd, dyd, dzd, dxd}))
    return CUDNN_STATUS_NOT_SUPPORTED;
  *bytes = kFusedBnWorkspace;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetBatchNormalizationTrainingExReserveSpaceSize(
    cudnnHandle_t, cudnnBatchNormMode_t mode, cudnnBatchNormOps_t ops,
    cudnnActivationDescriptor_t act, cudnnTensorDescriptor_t xd, size_t* bytes) {
  if (!fused_bn_supported(mode, ops, act, {xd})) return CUDNN_STATUS_NOT_SUPPORTED;
  *bytes = mask_bytes(*desc(xd));
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBatchNormalizationForwardTrainingEx(
    cudnnHandle_t, cudnnBatchNormMode_t mode, cudnnBatchNormOps_t ops, const void* alpha,
    const void* beta, cudnnTensorDescriptor_t xd, const void* X, cudnnTensorDescriptor_t zd,
    const void* Z, cudnnTensorDescriptor_t yd, void* Y, cudnnTensorDescriptor_t pd,
    const void* scale, const void* bias, double factor, void* running_mean, void* running_var,
    double eps, void* save_mean, void* save_invstd, cudnnActivationDescriptor_t act, void* ws,
    size_t ws_bytes, void* reserve, size_t reserve_bytes) {
  const bool add = ops == CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION;
  // what cuDNN documents as BAD_PARAM: a missing operand, one running statistic without the
  // other (or one saved statistic), eps below the minimum
  if (!alpha || !beta || !X || !Y || !scale || !bias || (add && !Z) ||
      !running_mean != !running_var || !save_mean != !save_invstd || eps < CUDNN_BN_MIN_EPSILON)
    return CUDNN_STATUS_BAD_PARAM;
  if (const cudnnStatus_t st = forced_status("LIBNN_CUDA_EMU_FUSED_BN_FORWARD")) return st;
  if (!fused_bn_supported(mode, ops, act, {xd, add ? zd : nullptr, yd}) || !ws ||
      ws_bytes < kFusedBnWorkspace || !reserve || reserve_bytes < mask_bytes(*desc(xd)))
    return CUDNN_STATUS_NOT_SUPPORTED;
  bn_forward({*desc(xd), X, add ? Z : nullptr, Y, desc(pd)->ty, scale, bias, factor, running_mean,
              running_var, eps, save_mean, save_invstd, scalar(false, alpha), scalar(false, beta),
              static_cast<uint8_t*>(reserve)});
  return guarded(CUDNN_STATUS_SUCCESS, "a cuDNN fused batch norm");
}

cudnnStatus_t cudnnBatchNormalizationBackwardEx(
    cudnnHandle_t, cudnnBatchNormMode_t mode, cudnnBatchNormOps_t ops, const void* alpha_d,
    const void* beta_d, const void* alpha_p, const void* beta_p, cudnnTensorDescriptor_t xd,
    const void* X, cudnnTensorDescriptor_t yd, const void* Y, cudnnTensorDescriptor_t dyd,
    const void* dY, cudnnTensorDescriptor_t dzd, void* dZ, cudnnTensorDescriptor_t dxd, void* dX,
    cudnnTensorDescriptor_t pd, const void* scale, const void* bias, void* dscale, void* dbias,
    double eps, const void* save_mean, const void* save_invstd, cudnnActivationDescriptor_t act,
    void* ws, size_t ws_bytes, void* reserve, size_t reserve_bytes) {
  const bool add = ops == CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION;
  if (!alpha_d || !beta_d || !alpha_p || !beta_p || !X || !Y || !dY || !dX || !scale || !bias ||
      (add && !dZ) || !dscale || !dbias || !save_mean != !save_invstd ||
      eps < CUDNN_BN_MIN_EPSILON)
    return CUDNN_STATUS_BAD_PARAM;
  if (const cudnnStatus_t st = forced_status("LIBNN_CUDA_EMU_FUSED_BN_BACKWARD")) return st;
  // the emulator, like the library, always passes the saved statistics
  if (!fused_bn_supported(mode, ops, act, {xd, yd, dyd, add ? dzd : nullptr, dxd}) || !ws ||
      ws_bytes < kFusedBnWorkspace || !reserve || reserve_bytes < mask_bytes(*desc(xd)) ||
      !save_mean)
    return CUDNN_STATUS_NOT_SUPPORTED;
  bn_backward({*desc(xd), X, dY, dX, add ? dZ : nullptr, desc(pd)->ty, scale, save_mean,
               save_invstd, dscale, dbias, scalar(false, alpha_d), scalar(false, beta_d),
               scalar(false, alpha_p), scalar(false, beta_p), static_cast<const uint8_t*>(reserve)});
  return guarded(CUDNN_STATUS_SUCCESS, "a cuDNN fused batch norm backward");
}

}  // extern "C"
