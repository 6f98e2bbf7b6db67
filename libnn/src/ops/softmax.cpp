// softmax / log_softmax over one dim, with the fused backward.
#include <nn/amp.h>

#include "ops/common.h"

namespace nn {
using namespace ops;

namespace {
Tensor softmax_impl(const Tensor& x, int64_t dim, bool log, const char* name) {
  check_defined(x, name);
  check_floating(x, name);
  if (x.dim() == 0) {  // a 0-d tensor as one element along dim 0 or -1 (1, or 0 for log)
    wrap_dim(dim, 1);
    return softmax_impl(x.reshape({1}), 0, log, name).reshape({});
  }
  int64_t d = wrap_dim(dim, x.dim());
  Tensor out = empty(x.shape(), x.options());
  if (x.numel() > 0) backend::of(x).softmax_forward(raw_contiguous(x), d, log, out);
  record(name, {x}, out, {out}, [ys = out.detach(), d, log](const Tensor& g, auto&) {
    Tensor gx = empty(ys.shape(), ys.options());
    if (ys.numel() > 0) backend::of(g).softmax_backward(raw_contiguous(g), ys, d, log, gx);
    return std::vector<Tensor>{gx};
  });
  return out;
}
}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) {
  return softmax_impl(amp::autocast_f32(x), dim, false, "softmax");
}
Tensor log_softmax(const Tensor& x, int64_t dim) {
  return softmax_impl(amp::autocast_f32(x), dim, true, "log_softmax");
}

}  // namespace nn
