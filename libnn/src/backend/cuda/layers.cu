// CUDA softmax, loss, dropout, embedding, recurrence and optim families: wrappers over kernels/.
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "kernels/dropout.cuh"
#include "kernels/embedding.cuh"
#include "kernels/optim.cuh"
#include "kernels/rnn.cuh"
#include "kernels/softmax.cuh"

namespace nn::backend {
using namespace cuda;

namespace {
struct Lanes {
  int64_t outer = 1, D = 1, inner = 1;
};
Lanes lanes(const Shape& s, int64_t dim) {
  Lanes l;
  for (int64_t i = 0; i < dim; ++i) l.outer *= s[i];
  l.D = s[dim];
  for (size_t i = dim + 1; i < s.size(); ++i) l.inner *= s[i];
  return l;
}
}  // namespace

// ---- softmax --------------------------------------------------------------------------------
void CudaBackend::softmax_forward(const Tensor& x, int64_t dim, bool log, Tensor& out) {
  activate();
  Lanes l = lanes(x.shape(), dim);
  kernels::launch_softmax(x.dtype(), x.data_ptr(), out.data_ptr(), l.outer, l.D, l.inner, log,
                          stream_);
}
void CudaBackend::softmax_backward(const Tensor& grad, const Tensor& y, int64_t dim, bool log,
                                   Tensor& grad_x) {
  activate();
  Lanes l = lanes(y.shape(), dim);
  kernels::launch_softmax_backward(y.dtype(), grad.data_ptr(), y.data_ptr(), grad_x.data_ptr(),
                                   l.outer, l.D, l.inner, log, stream_);
}

// ---- loss: a bad target raises a device flag, reported at the next synchronisation ----------
void CudaBackend::cross_entropy_forward(const Tensor& logits, const Tensor& target,
                                        double smoothing, int64_t ignore_index, Tensor& loss,
                                        Tensor& lse) {
  activate();
  Tensor t = as_i64(*this, target);
  kernels::launch_cross_entropy(logits.dtype(), logits.data_ptr(), ptr<int64_t>(t),
                                logits.shape()[0], logits.shape()[1], smoothing, ignore_index,
                                loss.data_ptr(), lse.data_ptr(), flag(kBadTarget), stream_);
}
void CudaBackend::cross_entropy_backward(const Tensor& grad_loss, const Tensor& logits,
                                         const Tensor& target, const Tensor& lse, double smoothing,
                                         int64_t ignore_index, Tensor& grad_logits) {
  activate();
  Tensor t = as_i64(*this, target);
  kernels::launch_cross_entropy_backward(logits.dtype(), grad_loss.data_ptr(), logits.data_ptr(),
                                         ptr<int64_t>(t), lse.data_ptr(), logits.shape()[0],
                                         logits.shape()[1], smoothing, ignore_index,
                                         grad_logits.data_ptr(), stream_);
}

// ---- dropout --------------------------------------------------------------------------------
void CudaBackend::dropout_forward(const Tensor& x, double p, uint64_t seed, uint64_t offset,
                                  Tensor& out, Tensor& mask) {
  activate();
  kernels::launch_dropout(x.dtype(), x.data_ptr(), out.data_ptr(), ptr<uint8_t>(mask), x.numel(),
                          p, seed, offset, stream_);
}
void CudaBackend::dropout_backward(const Tensor& grad, const Tensor& mask, double p,
                                   Tensor& grad_x) {
  activate();
  kernels::launch_dropout_backward(grad.dtype(), grad.data_ptr(), ptr<uint8_t>(mask),
                                   grad_x.data_ptr(), grad.numel(), p, stream_);
}

// ---- embedding ------------------------------------------------------------------------------
void CudaBackend::gather_rows(const Tensor& src, const Tensor& index, Tensor& out) {
  activate();
  const int64_t V = src.shape()[0];
  Tensor idx = as_i64(*this, index);
  const size_t row = V ? src.nbytes() / size_t(V) : 0;
  kernels::launch_gather_rows(src.data_ptr(), V, row, ptr<int64_t>(idx), idx.numel(),
                              out.data_ptr(), flag(kBadIndex), stream_);
}
// Gradients of 16-bit tables are summed in f32 copies and rounded once, as on the CPU
// (16-bit atomics would round after every addition).
namespace {
DType sum_dtype(DType t) { return (t == kF16 || t == kBF16) ? kF32 : t; }
}  // namespace

void CudaBackend::scatter_add_rows(const Tensor& grad, const Tensor& index, int64_t skip_index,
                                   Tensor& out) {
  activate();
  const int64_t V = out.shape()[0], D = V ? out.numel() / V : 0;
  Tensor idx = as_i64(*this, index);
  const DType st = sum_dtype(out.dtype());
  Tensor g = as_dtype(*this, grad, st), acc = as_dtype(*this, out, st);
  kernels::launch_scatter_add_rows(st, g.data_ptr(), ptr<int64_t>(idx), idx.numel(), D, V,
                                   skip_index, acc.data_ptr(), flag(kBadIndex), stream_);
  write_back(*this, acc, out);
}
void CudaBackend::embedding_bag_forward(const Tensor& table, const Tensor& index,
                                        const Tensor& weights, Tensor& out) {
  activate();
  Tensor idx = as_i64(*this, index);
  kernels::launch_embedding_bag(table.dtype(), table.data_ptr(), table.shape()[0],
                                table.shape()[1], ptr<int64_t>(idx), weights.data_ptr(),
                                index.shape()[0], index.shape()[1], out.data_ptr(),
                                flag(kBadIndex), stream_);
}
void CudaBackend::embedding_bag_backward(const Tensor& grad, const Tensor& index,
                                         const Tensor& weights, Tensor& grad_table) {
  activate();
  Tensor idx = as_i64(*this, index);
  const DType st = sum_dtype(grad_table.dtype());
  Tensor g = as_dtype(*this, grad, st), acc = as_dtype(*this, grad_table, st);
  kernels::launch_embedding_bag_backward(st, g.data_ptr(), ptr<int64_t>(idx), weights.data_ptr(),
                                         index.shape()[0], index.shape()[1],
                                         grad_table.shape()[1], grad_table.shape()[0],
                                         acc.data_ptr(), flag(kBadIndex), stream_);
  write_back(*this, acc, grad_table);
}

// ---- recurrence: one kernel a step past its product with W_hh ------------------------------

void CudaBackend::recurrent_step_forward(const RecurrentStep& s) {
  activate();
  const kernels::RecurrentStepPtrs p{
      ptr_or_null(s.x),    ptr_or_null(s.hg),  ptr_or_null(s.b_hh), ptr_or_null(s.h),
      ptr_or_null(s.c),    ptr_or_null(s.mask), ptr_or_null(s.acts), ptr_or_null(s.aux),
      ptr_or_null(s.y),    ptr_or_null(s.h_next), ptr_or_null(s.c_next)};
  kernels::launch_recurrent_forward(s.h.dtype(), s.cell, p, s.h.shape()[0], s.h.shape()[1],
                                    stream_);
}
void CudaBackend::recurrent_step_backward(const RecurrentStepGrad& s) {
  activate();
  const kernels::RecurrentGradPtrs p{
      ptr_or_null(s.gy),   ptr_or_null(s.dh),  ptr_or_null(s.dc),      ptr_or_null(s.acts),
      ptr_or_null(s.aux),  ptr_or_null(s.h),   ptr_or_null(s.c),       ptr_or_null(s.mask),
      ptr_or_null(s.dx),   ptr_or_null(s.dhg), ptr_or_null(s.dh_prev), ptr_or_null(s.dc_prev)};
  kernels::launch_recurrent_backward(s.dh.dtype(), s.cell, p, s.dh.shape()[0], s.dh.shape()[1],
                                     stream_);
}

// ---- optim: one multi-tensor launch per call ------------------------------------------------
void CudaBackend::sgd_step(std::vector<SgdSlot>& slots, double momentum, double dampening,
                           bool nesterov) {
  if (slots.empty()) return;
  activate();
  std::vector<kernels::SgdTensor> ts;
  for (auto& s : slots)
    ts.push_back({s.param.data_ptr(), s.grad.data_ptr(),
                  momentum != 0 ? s.momentum.data_ptr() : nullptr, s.param.numel(), s.lr,
                  s.weight_decay, s.first_step});
  kernels::launch_sgd(slots[0].param.dtype(), ts.data(), int(ts.size()), momentum, dampening,
                      nesterov, stream_);
}
void CudaBackend::adamw_step(std::vector<AdamWSlot>& slots, double beta1, double beta2,
                             double eps) {
  if (slots.empty()) return;
  activate();
  std::vector<kernels::AdamWTensor> ts;
  for (auto& s : slots) {
    const double bc1 = 1 - std::pow(beta1, double(s.step)), bc2 = 1 - std::pow(beta2, double(s.step));
    ts.push_back({s.param.data_ptr(), s.grad.data_ptr(), s.exp_avg.data_ptr(),
                  s.exp_avg_sq.data_ptr(), s.param.numel(), 1 - s.lr * s.weight_decay, s.l2,
                  s.lr / bc1, 1 / std::sqrt(bc2)});
  }
  kernels::launch_adamw(slots[0].param.dtype(), ts.data(), int(ts.size()), beta1, beta2, eps,
                        stream_);
}
namespace {
std::vector<kernels::FlatTensor> flat(const std::vector<Tensor>& ts) {
  std::vector<kernels::FlatTensor> out;
  for (auto& t : ts) out.push_back({t.data_ptr(), t.numel()});
  return out;
}
}  // namespace

void CudaBackend::scale_grads(std::vector<Tensor>& grads, double factor, Tensor& found_inf) {
  if (grads.empty()) return;
  activate();
  const auto ts = flat(grads);
  kernels::launch_scale(grads[0].dtype(), ts.data(), int(ts.size()), factor,
                        ptr<float>(found_inf), stream_);
}
void CudaBackend::clip_grads(std::vector<Tensor>& grads, const Tensor& sum_squares, double max_norm) {
  if (grads.empty()) return;
  activate();
  NN_CHECK(sum_squares.dtype() == kF64 && sum_squares.numel() == 1 && sum_squares.device() == device(),
           "clip_grads: sum_squares must be one f64 value on ", device().str());
  const auto ts = flat(grads);
  kernels::launch_clip(grads[0].dtype(), ts.data(), int(ts.size()), ptr<double>(sum_squares),
                       max_norm, stream_);
}
void CudaBackend::sum_squares(const std::vector<Tensor>& tensors, Tensor& out) {
  activate();
  NN_CHECK(out.dtype() == kF64 && out.numel() == 1, "sum_squares: out must be one f64 value");
  if (tensors.empty()) return fill(out, 0);
  const auto ts = flat(tensors);
  const int64_t n = kernels::sum_squares_partials(ts.data(), int(ts.size()));
  Tensor partials = empty({std::max<int64_t>(n, 1)}, out.options());
  kernels::launch_sum_squares(tensors[0].dtype(), ts.data(), int(ts.size()), partials.data_ptr(),
                              out.data_ptr(), stream_);
}

}  // namespace nn::backend
