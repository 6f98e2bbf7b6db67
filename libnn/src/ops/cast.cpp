// Moving tensors between dtypes and devices, differentiably.
#include <vector>

#include "ops/common.h"

namespace nn {
using namespace ops;

Tensor Tensor::to(DType t) const {
  if (dtype() == t) return *this;
  const MemoryFormat f = format_of(*this);
  Tensor out = empty(shape(), options().dtype(t), f);
  Tensor ov = layout_view(out, f);
  backend::of(*this).copy(layout_view(*this, f), ov);
  if (is_floating(t) && is_floating(dtype()))
    record("to_dtype", {*this}, out, [from = dtype()](const Tensor& g, auto&) {
      return std::vector<Tensor>{g.to(from)};
    });
  return out;
}

Tensor Tensor::to(Device d) const {
  if (device() == d) return *this;
  check_device(d);
  const MemoryFormat f = format_of(*this);  // channels-last bytes travel as they are
  Tensor src = raw_format(*this, f);
  Tensor out = empty(shape(), options().device(d), f);
  if (numel() > 0) {
    if (src.device().is_cpu()) {
      backend::get(d).upload(src.data_ptr(), out);
    } else if (d.is_cpu()) {
      backend::of(src).download(src, out.data_ptr());
    } else {  // between two GPUs: through the host
      std::vector<char> host(src.nbytes());
      backend::of(src).download(src, host.data());
      backend::get(d).upload(host.data(), out);
    }
  }
  record("to_device", {*this}, out, [from = device()](const Tensor& g, auto&) {
    return std::vector<Tensor>{g.to(from)};
  });
  return out;
}

}  // namespace nn
