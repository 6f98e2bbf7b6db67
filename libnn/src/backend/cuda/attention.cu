// CUDA attention family: wrappers over kernels/attention.cu.
#include "backend/cuda/cuda_backend.h"
#include "kernels/attention.cuh"

namespace nn::backend {
using namespace cuda;

void CudaBackend::attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& key_mask, double scale, const rng::DropoutDraw& drop,
                                    Tensor& out, Tensor& lse) {
  activate();
  const kernels::AttnLayout L = attention_layout(key_mask, q, k, v, out);
  kernels::launch_attention_forward(
      q.dtype(), q.data_ptr(), k.data_ptr(), v.data_ptr(),
      ptr_or_null<uint8_t>(key_mask), L, q.shape()[0] * q.shape()[1],
      q.shape()[2], k.shape()[2], q.shape()[3], v.shape()[3], scale, drop, out.data_ptr(),
      lse.data_ptr(), stream_);
}

void CudaBackend::attention_backward(const Tensor& grad_out, const Tensor& q, const Tensor& k,
                                     const Tensor& v, const Tensor& key_mask, const Tensor& out,
                                     const Tensor& lse, double scale, const rng::DropoutDraw& drop,
                                     Tensor& grad_q, Tensor& grad_k, Tensor& grad_v) {
  activate();
  const kernels::AttnLayout L = attention_layout(key_mask, q, k, v, out, grad_out, grad_q, grad_k, grad_v);
  Tensor delta = empty(lse.shape(), lse.options());
  const int64_t B = q.shape()[0] * q.shape()[1];
  const size_t dq_bytes =  // (the one-pass backward's f32 dQ sums)
      kernels::attention_backward_workspace_bytes(q.dtype(), B, q.shape()[2], q.shape()[3]);
  Tensor dq_work = dq_bytes ? scratch(dq_bytes) : Tensor();
  kernels::launch_attention_backward(
      q.dtype(), grad_out.data_ptr(), q.data_ptr(), k.data_ptr(), v.data_ptr(),
      ptr_or_null<uint8_t>(key_mask), out.data_ptr(), lse.data_ptr(), L,
      B, q.shape()[2], k.shape()[2], q.shape()[3], v.shape()[3], scale,
      drop, grad_q.data_ptr(), grad_k.data_ptr(), grad_v.data_ptr(), delta.data_ptr(),
      ptr_or_null<float>(dq_work), stream_);
}

}  // namespace nn::backend
