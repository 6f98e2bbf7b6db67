// Runs a primitive written for row-major buffers on channels-last (or otherwise strided)
// arguments: inputs pass through row-major copies, outputs are computed into row-major
// buffers and copied back. The CPU backend computes convolution, pooling and batch norm this
// way (its im2col GEMM is NCHW; the NHWC fast path is the GPU's, where tensor cores want it);
// the CUDA backend does for f64, which cuDNN's NHWC kernels do not take.
#pragma once
#include <deque>

#include "backend/backend.h"

namespace nn::backend {

class RowMajorScope {
 public:
  explicit RowMajorScope(Backend& be) : be_(be) {}
  // Whether any defined argument is not row-major, so the scope is needed at all.
  static bool needed(std::initializer_list<const Tensor*> ts) {
    for (const Tensor* t : ts)
      if (t->defined() && !t->is_contiguous()) return true;
    return false;
  }
  // An input: t, or a row-major copy of it.
  Tensor in(const Tensor& t) {
    if (!t.defined() || t.is_contiguous()) return t;
    Tensor c = empty(t.shape(), t.options());
    be_.copy(t, c);
    return c;
  }
  // An output: t, or a row-major buffer that finish() copies into t.
  Tensor& out(Tensor& t) {
    if (!t.defined() || t.is_contiguous()) return t;
    outs_.push_back({empty(t.shape(), t.options()), &t});
    return outs_.back().first;
  }
  void finish() {
    for (auto& [tmp, dst] : outs_) be_.copy(tmp, *dst);
    outs_.clear();
  }

 private:
  Backend& be_;
  std::deque<std::pair<Tensor, Tensor*>> outs_;  // stable references for out()
};

}  // namespace nn::backend
