// Dropout with a counter-based mask; the mask is saved (1 byte per element) for backward.
#include <nn/random.h>

#include "ops/common.h"

namespace nn {
using namespace ops;

Tensor dropout(const Tensor& x, double p, bool training, Generator* gen) {
  check_defined(x, "dropout");
  NN_CHECK(p >= 0 && p <= 1, "dropout: probability must be in [0, 1], got ", p);
  if (!training || p == 0) return x;
  check_floating(x, "dropout");
  if (p == 1) return mul(x, 0.0);
  const auto [seed, offset] = draw_stream(gen, uint64_t(x.numel()));
  Tensor out = empty(x.shape(), x.options());
  Tensor mask = empty(x.shape(), TensorOptions(kU8).device(x.device()));
  backend::of(x).dropout_forward(raw_contiguous(x), p, seed, offset, out, mask);
  record("dropout", {x}, out, [mask, p](const Tensor& gr, auto&) {
    Tensor gx = empty(mask.shape(), gr.options());
    backend::of(gr).dropout_backward(raw_contiguous(gr), mask, p, gx);
    return std::vector<Tensor>{gx};
  });
  return out;
}

}  // namespace nn
