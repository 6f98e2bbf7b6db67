// CUDA elementwise family: thin wrappers over kernels/elementwise.cu.
#include <map>

#include "backend/cuda/cuda_backend.h"
#include "core/util.h"
#include "kernels/elementwise.cuh"
#include "kernels/optim.cuh"

namespace nn::backend {
using namespace cuda;

void CudaBackend::copy(const Tensor& src, Tensor& dst) {
  activate();
  kernels::launch_copy(dst.dtype(), dst.data_ptr(), src.dtype(), src.data_ptr(),
                       geom<2>(dst, {&src}), dst.numel(), all_contiguous(dst, {&src}), stream_);
}

void CudaBackend::copy_many(const std::vector<Tensor>& src, std::vector<Tensor>& dst) {
  NN_CHECK(src.size() == dst.size(), "copy_many: ", src.size(), " sources, ", dst.size(),
           " destinations");
  activate();
  // contiguous pairs of equal shapes, one launch per (source, destination) dtype pair
  std::map<std::pair<DType, DType>, std::vector<kernels::CopyPair>> groups;
  for (size_t i = 0; i < src.size(); ++i) {
    if (kernels::copy_many_converts(src[i].dtype(), dst[i].dtype()) &&
        src[i].shape() == dst[i].shape() && src[i].is_contiguous() && dst[i].is_contiguous())
      groups[{src[i].dtype(), dst[i].dtype()}].push_back(
          {src[i].data_ptr(), dst[i].data_ptr(), dst[i].numel()});
    else
      copy(src[i], dst[i]);
  }
  for (const auto& [types, pairs] : groups)
    kernels::launch_copy_many(types.first, types.second, pairs.data(), int(pairs.size()),
                              stream_);
}

void CudaBackend::fill(Tensor& dst, double value) {
  activate();
  kernels::launch_fill(dst.dtype(), dst.data_ptr(), value, geom<1>(dst, {}), dst.numel(),
                       dst.is_contiguous(), stream_);
}

void CudaBackend::fill_random(Tensor& dst, RandomKind kind, double a, double b, uint64_t seed,
                              uint64_t offset) {
  activate();
  kernels::launch_random(dst.dtype(), dst.data_ptr(), dst.numel(), kind == RandomKind::normal, a,
                         b, seed, offset, stream_);
}

void CudaBackend::unary(UnaryOp op, const Tensor& x, Tensor& out, double a, double b) {
  activate();
  kernels::launch_unary(op, x.dtype(), out.data_ptr(), x.data_ptr(), a, b, geom<2>(out, {&x}),
                        out.numel(), all_contiguous(out, {&x}), stream_);
}

void CudaBackend::unary_backward(UnaryOp op, const Tensor& grad, const Tensor& x, const Tensor& y,
                                 double a, Tensor& grad_x) {
  activate();
  const Tensor& v = (op == UnaryOp::tanh || op == UnaryOp::sigmoid) ? y : x;
  NN_CHECK(op == UnaryOp::relu || op == UnaryOp::gelu || op == UnaryOp::tanh ||
               op == UnaryOp::sigmoid || op == UnaryOp::silu || op == UnaryOp::softplus ||
               op == UnaryOp::leaky_relu || op == UnaryOp::elu,
           "unary_backward: no fused backward for this op");
  kernels::launch_unary_backward(op, x.dtype(), grad_x.data_ptr(), grad.data_ptr(), v.data_ptr(), a,
                                 geom<3>(grad_x, {&grad, &v}), grad_x.numel(),
                                 all_contiguous(grad_x, {&grad, &v}), stream_);
}

void CudaBackend::binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  activate();
  kernels::launch_binary(op, a.dtype(), out.data_ptr(), a.data_ptr(), b.data_ptr(),
                         geom<3>(out, {&a, &b}), out.numel(), all_contiguous(out, {&a, &b}),
                         stream_);
}

void CudaBackend::where(const Tensor& cond, const Tensor& a, const Tensor& b, Tensor& out) {
  activate();
  check_where_condition(cond, a);
  kernels::launch_where(a.dtype(), cond.dtype() == kU8, out.data_ptr(), cond.data_ptr(),
                        a.data_ptr(), b.data_ptr(), geom<4>(out, {&cond, &a, &b}), out.numel(),
                        all_contiguous(out, {&cond, &a, &b}), stream_);
}

}  // namespace nn::backend
