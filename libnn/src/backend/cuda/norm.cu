// CUDA norm family: batch norm on cuDNN (spatial mode over (N, C, S, 1), or NHWC for
// channels-last data), layer norm on our kernels.
#include "backend/cuda/cuda_backend.h"
#include "core/util.h"
#include "kernels/nn_layers.cuh"

namespace nn::backend {
using namespace cuda;

namespace {
struct BnDescs {
  cudnnTensorDescriptor_t x = nullptr, param = nullptr;
  BnDescs(const Tensor& t) {
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
  Tensor w = weight.defined() ? weight : ones({C}, po);
  Tensor b = bias.defined() ? bias : zeros({C}, po);
  BnDescs d(x);
  const bool f64 = x.dtype() == kF64;
  const float one_f = 1, zero_f = 0;
  const double one_d = 1, zero_d = 0;
  const void* one = f64 ? static_cast<const void*>(&one_d) : &one_f;
  const void* zero = f64 ? static_cast<const void*>(&zero_d) : &zero_f;
  if (training) {
    NN_CUDNN_CHECK(cudnnBatchNormalizationForwardTraining(
        cudnn_, CUDNN_BATCHNORM_SPATIAL, one, zero, d.x, x.data_ptr(), d.x, out.data_ptr(), d.param,
        w.data_ptr(), b.data_ptr(), momentum,
        running_mean.defined() ? running_mean.data_ptr() : nullptr,
        running_var.defined() ? running_var.data_ptr() : nullptr, eps, save_mean.data_ptr(),
        save_invstd.data_ptr()));
  } else {
    NN_CUDNN_CHECK(cudnnBatchNormalizationForwardInference(
        cudnn_, CUDNN_BATCHNORM_SPATIAL, one, zero, d.x, x.data_ptr(), d.x, out.data_ptr(), d.param,
        w.data_ptr(), b.data_ptr(), running_mean.data_ptr(), running_var.data_ptr(), eps));
    // what eval-mode backward needs: the running mean and 1 / sqrt(running_var + eps)
    copy(running_mean, save_mean);
    unary(UnaryOp::add_scalar, running_var, save_invstd, eps, 0);
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
  Tensor w = weight.defined() ? weight : ones({C}, po);
  if (training) {
    BnDescs d(x);
    Tensor gx = grad_x.defined()
                    ? grad_x
                    : empty(x.shape(), x.options(),
                            is_channels_last(x) ? MemoryFormat::channels_last
                                                : MemoryFormat::contiguous);
    Tensor gw = grad_weight.defined() ? grad_weight : empty({C}, po);
    Tensor gb = grad_bias.defined() ? grad_bias : empty({C}, po);
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
    return;
  }
  // Eval: y = (x - mean) * invstd * w + b is affine in x, composed from our own primitives.
  const Shape cs{1, C, 1};
  auto per_channel = [&](const Tensor& t) {  // (C) viewed as (N, C, S) with stride 0
    return make_view(t, {N, C, S}, {0, t.strides()[0], 0}, t.offset());
  };
  // (N, C, S) views in the data's layout: channels-last stores (N, S, C).
  const Shape st3 = is_channels_last(x) ? Shape{C * S, 1, C} : Shape{C * S, S, 1};
  Tensor x3 = make_view(x, {N, C, S}, st3, x.offset());
  Tensor g3 = make_view(grad, {N, C, S}, st3, grad.offset());
  if (grad_x.defined()) {
    Tensor scale = empty({C}, po);
    binary(BinaryOp::mul, w, save_invstd, scale);
    Tensor scale_x = scale.dtype() == x.dtype() ? scale : empty({C}, x.options());
    if (!scale_x.is_same(scale)) copy(scale, scale_x);
    Tensor gx3 = make_view(grad_x, {N, C, S}, st3, grad_x.offset());
    binary(BinaryOp::mul, g3, per_channel(scale_x), gx3);
  }
  if (grad_bias.defined()) {
    Tensor gb = make_view(grad_bias, cs, {C, 1, 1}, grad_bias.offset());
    reduce(ReduceOp::sum, g3, {0, 2}, gb);
  }
  if (grad_weight.defined()) {
    Tensor xhat = empty({N, C, S}, x.options());
    Tensor mean_x = empty({C}, x.options()), inv_x = empty({C}, x.options());
    copy(save_mean, mean_x);
    copy(save_invstd, inv_x);
    binary(BinaryOp::sub, x3, per_channel(mean_x), xhat);
    binary(BinaryOp::mul, xhat, per_channel(inv_x), xhat);
    binary(BinaryOp::mul, xhat, g3, xhat);
    Tensor gw = make_view(grad_weight, cs, {C, 1, 1}, grad_weight.offset());
    reduce(ReduceOp::sum, xhat, {0, 2}, gw);
  }
}

void CudaBackend::layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                     double eps, Tensor& out, Tensor& mean, Tensor& rstd) {
  activate();
  const int64_t D = x.shape().back(), R = D ? x.numel() / D : 0;
  kernels::launch_layer_norm(x.dtype(), x.data_ptr(), weight.defined() ? weight.data_ptr() : nullptr,
                             bias.defined() ? bias.data_ptr() : nullptr, R, D, eps, out.data_ptr(),
                             mean.data_ptr(), rstd.data_ptr(), stream_);
}

void CudaBackend::layer_norm_backward(const Tensor& grad, const Tensor& x, const Tensor& weight,
                                      const Tensor& mean, const Tensor& rstd, Tensor& grad_x,
                                      Tensor& grad_weight, Tensor& grad_bias) {
  activate();
  const int64_t D = x.shape().back(), R = D ? x.numel() / D : 0;
  Tensor ws = scratch(kernels::layer_norm_workspace_bytes(R, D));
  kernels::launch_layer_norm_backward(
      x.dtype(), grad.data_ptr(), x.data_ptr(), weight.defined() ? weight.data_ptr() : nullptr,
      mean.data_ptr(), rstd.data_ptr(), R, D, grad_x.defined() ? grad_x.data_ptr() : nullptr,
      grad_weight.defined() ? grad_weight.data_ptr() : nullptr,
      grad_bias.defined() ? grad_bias.data_ptr() : nullptr, ws.data_ptr(), stream_);
}

}  // namespace nn::backend
