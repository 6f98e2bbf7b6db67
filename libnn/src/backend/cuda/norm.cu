// CUDA norm family: batch norm on cuDNN (spatial mode over (N, C, S, 1), NHWC for f64
// channels-last data and eval; fused with ReLU for f16 channels-last training) or, in
// training on channels-last f32/f16/bf16 data, on our kernels; layer norm on our kernels.
#include <algorithm>
#include <cstdio>
#include <initializer_list>
#include <mutex>

#include "backend/cuda/cuda_backend.h"
#include "core/util.h"
#include "kernels/norm.cuh"

namespace nn::backend {
using namespace cuda;

namespace {
struct BnDescs {
  cudnnTensorDescriptor_t x = nullptr, param = nullptr;
  BnDescs(const Tensor& t) {
    check_cudnn_numel(t.shape(), "batch_norm");
    const int64_t N = t.shape()[0], C = t.shape()[1], S = t.numel() / std::max<int64_t>(1, N * C);
    cudnnDataType_t dt = t.dtype() == kF64   ? CUDNN_DATA_DOUBLE
                         : t.dtype() == kF16 ? CUDNN_DATA_HALF
                         : t.dtype() == kBF16 ? CUDNN_DATA_BFLOAT16
                                              : CUDNN_DATA_FLOAT;
    NN_CUDNN_CHECK(cudnnCreateTensorDescriptor(&x));
    NN_CUDNN_CHECK(cudnnCreateTensorDescriptor(&param));
    if (is_channels_last(t))  // (N, C, H, W) stored NHWC
      NN_CUDNN_CHECK(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NHWC, dt, int(N), int(C),
                                                int(t.shape()[2]), int(t.shape()[3])));
    else
      NN_CUDNN_CHECK(
          cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, dt, int(N), int(C), int(S), 1));
    NN_CUDNN_CHECK(cudnnDeriveBNTensorDescriptor(param, x, CUDNN_BATCHNORM_SPATIAL));
  }
  ~BnDescs() {
    cudnnDestroyTensorDescriptor(x);
    cudnnDestroyTensorDescriptor(param);
  }
};

// cuDNN's per-channel tensors are f32 for 16-bit data, else the data type.
DType param_dtype(DType x) { return (x == kF16 || x == kBF16) ? kF32 : x; }
// A per-channel parameter as cuDNN reads it: t in po's dtype, or where t is undefined C
// copies of `fill` (1 for a weight, 0 for a bias).
Tensor channel_param(Backend& be, const Tensor& t, double fill, int64_t C,
                     const TensorOptions& po) {
  return t.defined() ? as_dtype(be, t, po.dtype_) : full({C}, fill, po);
}

// Training on channels-last data in f32, f16 and bf16 runs our kernels (kernels/norm.cu):
// cuDNN's spatial mode on NHWC data ran at 72 GB/s on an H200 and its persistent mode at 117
// (2-3% of a copy; `kernels_bench --device cuda`, 2026-11-30), most of a ResNet-50 step.
// f64, NCHW data and eval take cuDNN's spatial mode, which is fast on NCHW.
bool own_bn(const Tensor& x, bool training) {
  return training && is_channels_last(x) && x.numel() > 0 &&
         (x.dtype() == kF32 || x.dtype() == kF16 || x.dtype() == kBF16);
}

}  // namespace

void CudaBackend::batch_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                     Tensor& running_mean, Tensor& running_var, bool training,
                                     double momentum, double eps, Tensor& out, Tensor& save_mean,
                                     Tensor& save_invstd) {
  activate();
  NN_CHECK(eps >= CUDNN_BN_MIN_EPSILON, "batch_norm on CUDA needs eps >= ", CUDNN_BN_MIN_EPSILON,
           ", got ", eps);
  const int64_t C = x.shape()[1];
  const TensorOptions po = TensorOptions(param_dtype(x.dtype())).device(device());
  NN_CHECK(save_mean.dtype() == po.dtype_, "batch_norm on CUDA keeps statistics in ",
           dtype_name(po.dtype_), " for ", dtype_name(x.dtype()), " data");
  Tensor w = channel_param(*this, weight, 1, C, po);
  Tensor b = channel_param(*this, bias, 0, C, po);
  Tensor rm = as_dtype(*this, running_mean, po.dtype_), rv = as_dtype(*this, running_var, po.dtype_);
  const bool f64 = x.dtype() == kF64;
  const float one_f = 1, zero_f = 0;
  const double one_d = 1, zero_d = 0;
  const void* one = f64 ? static_cast<const void*>(&one_d) : &one_f;
  const void* zero = f64 ? static_cast<const void*>(&zero_d) : &zero_f;
  if (own_bn(x, training)) {
    const int64_t R = x.numel() / C;
    Tensor ws = scratch(kernels::batch_norm_nhwc_workspace_bytes(R, C));
    kernels::launch_batch_norm_nhwc_forward(
        x.dtype(), x.data_ptr(), ptr_or_null<float>(w), ptr_or_null<float>(b), R, C, eps,
        momentum, ptr_or_null<float>(rm), ptr_or_null<float>(rv), out.data_ptr(),
        ptr_or_null<float>(save_mean), ptr_or_null<float>(save_invstd), ws.data_ptr(), stream_);
    write_back(*this, rm, running_mean);
    write_back(*this, rv, running_var);
  } else if (training) {
    BnDescs d(x);
    NN_CUDNN_CHECK(cudnnBatchNormalizationForwardTraining(
        cudnn_, CUDNN_BATCHNORM_SPATIAL, one, zero, d.x, x.data_ptr(), d.x, out.data_ptr(), d.param,
        w.data_ptr(), b.data_ptr(), momentum, ptr_or_null(rm),
        ptr_or_null(rv), eps, save_mean.data_ptr(),
        save_invstd.data_ptr()));
    write_back(*this, rm, running_mean);
    write_back(*this, rv, running_var);
  } else {
    // cuDNN's inference kernel refuses batches over 65535 samples (NOT_SUPPORTED); eval is per
    // sample, so a larger batch goes in chunks (N is the outer dimension in both layouts).
    constexpr int64_t kMaxEvalBatch = 65535;
    const int64_t N = x.shape()[0];
    auto rows = [&](const Tensor& t, int64_t n0, int64_t n1) {
      Shape s = t.shape();
      s[0] = n1 - n0;
      return make_view(t, s, t.strides(), t.offset() + n0 * t.strides()[0]);
    };
    for (int64_t n0 = 0; n0 < N; n0 += kMaxEvalBatch) {
      const int64_t n1 = std::min(N, n0 + kMaxEvalBatch);
      const bool whole = n0 == 0 && n1 == N;
      const Tensor xc = whole ? x : rows(x, n0, n1);
      Tensor oc = whole ? out : rows(out, n0, n1);
      BnDescs dc(xc);
      NN_CUDNN_CHECK(cudnnBatchNormalizationForwardInference(
          cudnn_, CUDNN_BATCHNORM_SPATIAL, one, zero, dc.x, xc.data_ptr(), dc.x, oc.data_ptr(),
          dc.param, w.data_ptr(), b.data_ptr(), rm.data_ptr(), rv.data_ptr(), eps));
    }
    // what eval-mode backward needs: the running mean and 1 / sqrt(running_var + eps)
    copy(rm, save_mean);
    unary(UnaryOp::add_scalar, rv, save_invstd, eps, 0);
    unary(UnaryOp::rsqrt, save_invstd, save_invstd, 0, 0);
  }
}

void CudaBackend::batch_norm_backward(const Tensor& grad, const Tensor& x, const Tensor& weight,
                                      const Tensor& save_mean, const Tensor& save_invstd,
                                      bool training, Tensor& grad_x, Tensor& grad_weight,
                                      Tensor& grad_bias) {
  activate();
  const int64_t N = x.shape()[0], C = x.shape()[1], S = x.numel() / std::max<int64_t>(1, N * C);
  const TensorOptions po = save_mean.options();
  Tensor w = channel_param(*this, weight, 1, C, po);
  // weight and bias gradients in the statistics' dtype, written back to 16-bit parameters
  Tensor gw = as_dtype(*this, grad_weight, po.dtype_), gb = as_dtype(*this, grad_bias, po.dtype_);
  if (own_bn(x, training)) {
    const int64_t R = x.numel() / C;
    Tensor ws = scratch(kernels::batch_norm_nhwc_workspace_bytes(R, C));
    kernels::launch_batch_norm_nhwc_backward(
        x.dtype(), grad.data_ptr(), x.data_ptr(), ptr_or_null<float>(w),
        ptr_or_null<float>(save_mean), ptr_or_null<float>(save_invstd), R, C, ptr_or_null(grad_x),
        ptr_or_null<float>(gw), ptr_or_null<float>(gb), ws.data_ptr(), stream_);
    write_back(*this, gw, grad_weight);
    write_back(*this, gb, grad_bias);
    return;
  }
  if (training) {
    BnDescs d(x);
    Tensor gx = grad_x.defined()
                    ? grad_x
                    : empty(x.shape(), x.options(), format_of(x));
    if (!gw.defined()) gw = empty({C}, po);
    if (!gb.defined()) gb = empty({C}, po);
    const bool f64 = x.dtype() == kF64;
    const float one_f = 1, zero_f = 0;
    const double one_d = 1, zero_d = 0;
    const void* one = f64 ? static_cast<const void*>(&one_d) : &one_f;
    const void* zero = f64 ? static_cast<const void*>(&zero_d) : &zero_f;
    // eps only matters when saved statistics are absent; ours are always passed.
    NN_CUDNN_CHECK(cudnnBatchNormalizationBackward(
        cudnn_, CUDNN_BATCHNORM_SPATIAL, one, zero, one, zero, d.x, x.data_ptr(), d.x,
        grad.data_ptr(), d.x, gx.data_ptr(), d.param, w.data_ptr(), gw.data_ptr(), gb.data_ptr(),
        CUDNN_BN_MIN_EPSILON, save_mean.data_ptr(), save_invstd.data_ptr()));
    write_back(*this, gw, grad_weight);
    write_back(*this, gb, grad_bias);
    return;
  }
  // Eval: y = (x - mean) * invstd * w + b is affine in x, composed from our own primitives.
  // The column sums run in the statistics' dtype (f32 for 16-bit data: they accumulate and
  // land in f32), so for them 16-bit x and grad are read through f32 copies.
  const Shape cs{1, C, 1};
  auto per_channel = [&](const Tensor& t) {  // (C) viewed as (N, C, S) with stride 0
    return make_view(t, {N, C, S}, {0, t.strides()[0], 0}, t.offset());
  };
  // (N, C, S) views in the data's layout: channels-last stores (N, S, C).
  const Shape st3 = is_channels_last(x) ? Shape{C * S, 1, C} : Shape{C * S, S, 1};
  auto view3 = [&](const Tensor& t) { return make_view(t, {N, C, S}, st3, t.offset()); };
  if (grad_x.defined()) {  // grad * (w * invstd), in the data's dtype
    Tensor scale = empty({C}, po);
    binary(BinaryOp::mul, w, save_invstd, scale);
    const Tensor scale_x = as_dtype(*this, scale, x.dtype());
    Tensor gx3 = view3(grad_x);
    binary(BinaryOp::mul, view3(grad), per_channel(scale_x), gx3);
  }
  if (!gb.defined() && !gw.defined()) return;
  const Tensor g3 = view3(as_dtype(*this, grad, po.dtype_));
  if (gb.defined()) {
    Tensor gb3 = make_view(gb, cs, {C, 1, 1}, gb.offset());
    reduce(ReduceOp::sum, g3, {0, 2}, gb3);
    write_back(*this, gb, grad_bias);
  }
  if (gw.defined()) {
    Tensor xhat = empty({N, C, S}, po);
    binary(BinaryOp::sub, view3(as_dtype(*this, x, po.dtype_)), per_channel(save_mean), xhat);
    binary(BinaryOp::mul, xhat, per_channel(save_invstd), xhat);
    binary(BinaryOp::mul, xhat, g3, xhat);
    Tensor gw3 = make_view(gw, cs, {C, 1, 1}, gw.offset());
    reduce(ReduceOp::sum, xhat, {0, 2}, gw3);
    write_back(*this, gw, grad_weight);
  }
}

// ---- batch norm + residual + ReLU --------------------------------------------------------
// cuDNN's NHWC kernels for f16 training (CUDNN_BATCHNORM_SPATIAL_PERSISTENT, the ...Ex API)
// fuse the residual add and the ReLU into batch norm's passes and keep the ReLU's mask in a
// reserve space for the backward. They are documented for fully packed NHWC f16 data with
// channels a multiple of 4 (for the residual add; required here for both), so only that is
// sent: bf16 is not documented, and an answer other than a refusal (BAD_PARAM) would throw
// rather than fall back. Running statistics go both or neither (one alone is BAD_PARAM).
// Other calls, and refusals (NOT_SUPPORTED or one of its cuDNN 9 sub-codes, a misaligned
// pointer: limits cuDNN does not document; see fused_ran), run the composition.
// LIBNN_CUDNN_BN_FUSED=0 turns the fused kernels off, to compare.
namespace {
bool fused_bn_enabled() {
  static const bool on = env_switch_on("LIBNN_CUDNN_BN_FUSED");
  return on;
}
constexpr cudnnBatchNormMode_t kFusedMode = CUDNN_BATCHNORM_SPATIAL_PERSISTENT;
struct ReluDesc {
  cudnnActivationDescriptor_t d = nullptr;
  ReluDesc() {
    NN_CUDNN_CHECK(cudnnCreateActivationDescriptor(&d));
    const cudnnStatus_t st =
        cudnnSetActivationDescriptor(d, CUDNN_ACTIVATION_RELU, CUDNN_PROPAGATE_NAN, 0.0);
    if (st != CUDNN_STATUS_SUCCESS) cudnnDestroyActivationDescriptor(d);
    NN_CUDNN_CHECK(st);
  }
  ~ReluDesc() { cudnnDestroyActivationDescriptor(d); }
};
cudnnBatchNormOps_t fused_ops(bool has_z) {
  return has_z ? CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION : CUDNN_BATCHNORM_OPS_BN_ACTIVATION;
}
// cuDNN's answer, a refusal (false: take the composition) included; other errors throw.
// cuDNN 9 refuses with sub-codes of NOT_SUPPORTED (..._SHAPE, ..._SHARED_MEMORY_INSUFFICIENT,
// ...) and with BAD_PARAM_MISALIGNED_POINTER for a view the fused kernels cannot read.
// The first refusal is said once on stderr (as cuBLASLt's in matmul.cu): the composition
// is slower, and a benchmark should not hide that it ran.
bool fused_ran(cudnnStatus_t st) {
  if (cudnn_refused(st)) {
    static std::once_flag once;
    std::call_once(once, [st] {
      std::fprintf(stderr, "libnn: cuDNN refused its fused batch norm + ReLU (%s, %d); batch "
                   "norm, add and ReLU run as separate kernels where that happens\n",
                   cudnnGetErrorString(st), int(st));
    });
    return false;
  }
  NN_CUDNN_CHECK(st);
  return true;
}
}  // namespace

void CudaBackend::batch_norm_relu_forward(const Tensor& x, const Tensor& z, const Tensor& weight,
                                          const Tensor& bias, Tensor& running_mean,
                                          Tensor& running_var, bool training, double momentum,
                                          double eps, Tensor& out, Tensor& save_mean,
                                          Tensor& save_invstd, Tensor& reserve) {
  const bool try_fused = fused_bn_enabled() && training && is_channels_last(x) &&
                         x.dtype() == kF16 && x.shape()[1] % 4 == 0 && x.numel() > 0 &&
                         eps >= CUDNN_BN_MIN_EPSILON &&
                         running_mean.defined() == running_var.defined();
  if (try_fused) {
    activate();
    const int64_t C = x.shape()[1];
    const TensorOptions po = TensorOptions(kF32).device(device());
    Tensor w = channel_param(*this, weight, 1, C, po);
    Tensor b = channel_param(*this, bias, 0, C, po);
    Tensor rm = as_dtype(*this, running_mean, kF32), rv = as_dtype(*this, running_var, kF32);
    BnDescs d(x);
    ReluDesc act;
    const cudnnBatchNormOps_t ops = fused_ops(z.defined());
    cudnnTensorDescriptor_t zd = z.defined() ? d.x : nullptr;
    size_t ws_bytes = 0, rs_bytes = 0;
    bool ok = fused_ran(cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
                            cudnn_, kFusedMode, ops, d.x, zd, d.x, d.param, act.d, &ws_bytes)) &&
              fused_ran(cudnnGetBatchNormalizationTrainingExReserveSpaceSize(
                            cudnn_, kFusedMode, ops, act.d, d.x, &rs_bytes));
    if (ok) {
      Tensor ws = scratch(ws_bytes);
      // at least a byte: an empty tensor could hand cuDNN a null reserve space
      Tensor rs =
          empty({int64_t(std::max<size_t>(rs_bytes, 1))}, TensorOptions(kU8).device(device()));
      const float one = 1, zero = 0;
      ok = fused_ran(cudnnBatchNormalizationForwardTrainingEx(
                         cudnn_, kFusedMode, ops, &one, &zero, d.x, x.data_ptr(), zd,
                         ptr_or_null(z), d.x, out.data_ptr(), d.param,
                         w.data_ptr(), b.data_ptr(), momentum,
                         ptr_or_null(rm),
                         ptr_or_null(rv), eps, save_mean.data_ptr(),
                         save_invstd.data_ptr(), act.d, ws.data_ptr(), ws_bytes, rs.data_ptr(),
                         rs_bytes));
      if (ok) {
        write_back(*this, rm, running_mean);
        write_back(*this, rv, running_var);
        reserve = rs;  // defined: the backward runs cuDNN's too
        return;
      }
    }
  }
  Backend::batch_norm_relu_forward(x, z, weight, bias, running_mean, running_var, training,
                                   momentum, eps, out, save_mean, save_invstd, reserve);
}

void CudaBackend::batch_norm_relu_backward(const Tensor& grad, const Tensor& out, const Tensor& x,
                                           const Tensor& weight, const Tensor& bias,
                                           const Tensor& save_mean, const Tensor& save_invstd,
                                           const Tensor& reserve, bool training, double eps,
                                           Tensor& grad_x, Tensor& grad_z, Tensor& grad_weight,
                                           Tensor& grad_bias) {
  if (reserve.defined()) {  // the forward ran cuDNN's fused kernels
    activate();
    const int64_t C = x.shape()[1];
    const TensorOptions po = save_mean.options();
    Tensor w = channel_param(*this, weight, 1, C, po);
    Tensor b = channel_param(*this, bias, 0, C, po);
    Tensor gw = grad_weight.defined() ? as_dtype(*this, grad_weight, po.dtype_) : empty({C}, po);
    Tensor gb = grad_bias.defined() ? as_dtype(*this, grad_bias, po.dtype_) : empty({C}, po);
    Tensor gx = grad_x.defined() ? grad_x : empty(x.shape(), x.options(), format_of(x));
    BnDescs d(x);
    ReluDesc act;
    const cudnnBatchNormOps_t ops = fused_ops(grad_z.defined());
    cudnnTensorDescriptor_t zd = grad_z.defined() ? d.x : nullptr;
    size_t ws_bytes = 0;
    if (fused_ran(cudnnGetBatchNormalizationBackwardExWorkspaceSize(
                      cudnn_, kFusedMode, ops, d.x, d.x, d.x, zd, d.x, d.param, act.d, &ws_bytes))) {
      Tensor ws = scratch(ws_bytes);
      const float one = 1, zero = 0;
      if (fused_ran(cudnnBatchNormalizationBackwardEx(
                        cudnn_, kFusedMode, ops, &one, &zero, &one, &zero, d.x, x.data_ptr(), d.x,
                        out.data_ptr(), d.x, grad.data_ptr(), zd,
                        ptr_or_null(grad_z), d.x, gx.data_ptr(),
                        d.param, w.data_ptr(), b.data_ptr(), gw.data_ptr(), gb.data_ptr(), eps,
                        save_mean.data_ptr(), save_invstd.data_ptr(), act.d, ws.data_ptr(),
                        ws_bytes, reserve.data_ptr(), size_t(reserve.numel())))) {
        write_back(*this, gw, grad_weight);
        write_back(*this, gb, grad_bias);
        return;
      }
    }
  }
  // the composition: its ReLU mask from out, which the fused forward wrote alike
  Backend::batch_norm_relu_backward(grad, out, x, weight, bias, save_mean, save_invstd, reserve,
                                    training, eps, grad_x, grad_z, grad_weight, grad_bias);
}

namespace {
// Layer norm's parameter dtype: that of the first defined tensor, else the data's.
DType first_dtype(std::initializer_list<const Tensor*> ts, DType otherwise) {
  for (const Tensor* t : ts)
    if (t->defined()) return t->dtype();
  return otherwise;
}
}  // namespace

void CudaBackend::layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                     double eps, Tensor& out, Tensor& mean, Tensor& rstd) {
  activate();
  const int64_t D = x.shape().back(), R = D ? x.numel() / D : 0;
  kernels::launch_layer_norm(x.dtype(), first_dtype({&weight, &bias}, x.dtype()), x.data_ptr(),
                             ptr_or_null(weight),
                             ptr_or_null(bias), R, D, eps, out.data_ptr(),
                             mean.data_ptr(), rstd.data_ptr(), stream_);
}

void CudaBackend::layer_norm_backward(const Tensor& grad, const Tensor& x, const Tensor& weight,
                                      const Tensor& mean, const Tensor& rstd, Tensor& grad_x,
                                      Tensor& grad_weight, Tensor& grad_bias) {
  activate();
  const int64_t D = x.shape().back(), R = D ? x.numel() / D : 0;
  Tensor ws = scratch(kernels::layer_norm_workspace_bytes(R, D));
  const DType wt = first_dtype({&weight, &grad_weight, &grad_bias}, x.dtype());
  kernels::launch_layer_norm_backward(
      x.dtype(), wt, grad.data_ptr(), x.data_ptr(), ptr_or_null(weight),
      mean.data_ptr(), rstd.data_ptr(), R, D, ptr_or_null(grad_x),
      ptr_or_null(grad_weight),
      ptr_or_null(grad_bias), ws.data_ptr(), stream_);
}

// A post-LN block's dropout + residual add + layer norm: one kernel each way (a warp per row
// of whole quads, kernels/norm.cu) for f32 and 16-bit data in rows of up to 1024 that
// are whole, aligned quads; the composition for anything else, and with
// LIBNN_CUDA_LN_FUSED=0 (to compare, or while the kernels are being fixed).
namespace {
bool fused_ln_enabled() {
  static const bool on = env_switch_on("LIBNN_CUDA_LN_FUSED");
  return on;
}
bool is_f32_or_16(DType t) { return t == DType::f32 || t == DType::f16 || t == DType::bf16; }
// Whether the fused kernels take a call: x of dtype xt and the sum of dtype t in rows of D,
// the (R, D) tensors `rows` (undefined ones skipped) and, with p > 0, the mask whole, aligned
// quads.
bool fused_ln_takes(DType xt, DType t, int64_t D, std::initializer_list<const Tensor*> rows,
                    const Tensor& mask, double p) {
  if (!fused_ln_enabled() || !is_f32_or_16(xt) || !is_f32_or_16(t)) return false;
  std::vector<std::pair<const void*, size_t>> quads;
  for (const Tensor* r : rows)
    if (r->defined()) quads.push_back({r->data_ptr(), element_size(r->dtype())});
  if (p > 0) quads.push_back({mask.data_ptr(), 1});
  return kernels::dropout_add_layer_norm_fits(D, quads);
}
}  // namespace

void CudaBackend::dropout_add_layer_norm_forward(const Tensor& x, const Tensor& residual,
                                                 double p, uint64_t seed, uint64_t offset,
                                                 const Tensor& weight, const Tensor& bias,
                                                 double eps, Tensor& sum, Tensor& mask,
                                                 Tensor& out, Tensor& mean, Tensor& rstd) {
  const int64_t D = x.shape().back(), R = D ? x.numel() / D : 0;
  if (!fused_ln_takes(x.dtype(), sum.dtype(), D, {&x, &residual, &sum, &out}, mask, p))
    return Backend::dropout_add_layer_norm_forward(x, residual, p, seed, offset, weight, bias,
                                                   eps, sum, mask, out, mean, rstd);
  activate();
  kernels::launch_dropout_add_layer_norm(
      x.dtype(), sum.dtype(), first_dtype({&weight, &bias}, sum.dtype()), x.data_ptr(),
      residual.data_ptr(), ptr_or_null(weight),
      ptr_or_null(bias), R, D, eps, p, seed, offset, sum.data_ptr(),
      p > 0 ? ptr<uint8_t>(mask) : nullptr, out.data_ptr(), mean.data_ptr(), rstd.data_ptr(),
      stream_);
}

void CudaBackend::dropout_add_layer_norm_backward(const Tensor& grad, const Tensor& sum,
                                                  const Tensor& weight, const Tensor& mean,
                                                  const Tensor& rstd, const Tensor& mask,
                                                  double p, Tensor& grad_sum, Tensor& grad_x,
                                                  Tensor& grad_weight, Tensor& grad_bias) {
  const int64_t D = sum.shape().back(), R = D ? sum.numel() / D : 0;
  const DType xt = grad_x.defined() ? grad_x.dtype() : sum.dtype();
  if (!fused_ln_takes(xt, sum.dtype(), D, {&grad, &sum, &grad_sum, &grad_x}, mask, p))
    return Backend::dropout_add_layer_norm_backward(grad, sum, weight, mean, rstd, mask, p,
                                                    grad_sum, grad_x, grad_weight, grad_bias);
  activate();
  kernels::launch_dropout_add_layer_norm_backward(
      xt, sum.dtype(), first_dtype({&weight, &grad_weight, &grad_bias}, sum.dtype()),
      grad.data_ptr(), sum.data_ptr(), ptr_or_null(weight),
      mean.data_ptr(), rstd.data_ptr(), p > 0 ? ptr<const uint8_t>(mask) : nullptr, p, R, D,
      grad_sum.data_ptr(), ptr_or_null(grad_x), stream_);
  if (grad_weight.defined() || grad_bias.defined()) {  // the column sums, as layer norm's
    Tensor none;
    layer_norm_backward(grad, sum, weight, mean, rstd, none, grad_weight, grad_bias);
  }
}

}  // namespace nn::backend
