// 2-D pooling (NCHW or channels-last): max, average and adaptive average, with gradients.
#include "ops/common.h"

namespace nn {
using namespace ops;

namespace {
// Resolves stride 0 to the kernel size, checks the geometry, and returns the output shape.
Shape pool_shape(const Tensor& x, Pool2dParams& p, const char* op, bool dilated) {
  check_defined(x, op);
  check_floating(x, op);
  check_dim(x, 4, op, "input (N, C, H, W)");
  Shape s = x.shape();
  for (int i = 0; i < 2; ++i) {
    if (p.stride[i] == 0) p.stride[i] = p.kernel[i];
    NN_CHECK(dilated || p.dilation[i] == 1, op, ": no dilation (as PyTorch's), got ",
             p.dilation[0], "x", p.dilation[1]);
    NN_CHECK(p.kernel[i] >= 1 && p.stride[i] >= 1 && p.dilation[i] >= 1, op,
             ": kernel, stride and dilation must be >= 1");
    NN_CHECK(p.padding[i] >= 0 && 2 * p.padding[i] <= p.kernel[i], op, ": padding ", p.padding[i],
             " must be at most half the kernel size ", p.kernel[i]);
    int64_t in = x.shape()[2 + i];
    const int64_t o = window_positions(in, p.padding[i], p.dilation[i], p.kernel[i], p.stride[i],
                                       p.ceil_mode);
    NN_CHECK(o > 0, op, ": input ", shape_str(x.shape()), " is smaller than the ", p.kernel[0],
             "x", p.kernel[1], " window");
    NN_CHECK(in >= 1, op, ": input ", shape_str(x.shape()), " has no ", i ? "columns" : "rows",
             " (windows over padding alone)");
    s[2 + i] = o;
  }
  return s;
}
}  // namespace

Tensor max_pool2d(const Tensor& x, const Pool2dParams& params) {
  Pool2dParams p = params;
  Shape s = pool_shape(x, p, "max_pool2d", true);
  const MemoryFormat f = format_of(x), cf = compute_format(x);
  Tensor xc = raw_format(x, cf);
  Tensor out = empty(s, x.options(), cf);
  Tensor idx = empty(s, TensorOptions(kI64).device(x.device()), cf);
  backend::of(x).max_pool2d_forward(xc, out, idx, p);
  out = raw_format(out, f);
  record("max_pool2d", {x}, out, [idx, p, f, cf, xs = x.shape(), opts = x.options()](const Tensor& g, auto&) {
    Tensor gx = empty(xs, opts, cf);
    backend::of(g).max_pool2d_backward(raw_format(g, cf), idx, gx, p);
    return std::vector<Tensor>{raw_format(gx, f)};
  });
  return out;
}

Tensor avg_pool2d(const Tensor& x, const Pool2dParams& params) {
  Pool2dParams p = params;
  Shape s = pool_shape(x, p, "avg_pool2d", false);
  const MemoryFormat f = format_of(x), cf = compute_format(x);
  Tensor out = empty(s, x.options(), cf);
  backend::of(x).avg_pool2d_forward(raw_format(x, cf), out, p);
  out = raw_format(out, f);
  record("avg_pool2d", {x}, out, [p, f, cf, xs = x.shape(), opts = x.options()](const Tensor& g, auto&) {
    Tensor gx = empty(xs, opts, cf);
    backend::of(g).avg_pool2d_backward(raw_format(g, cf), gx, p);
    return std::vector<Tensor>{raw_format(gx, f)};
  });
  return out;
}

Tensor adaptive_avg_pool2d(const Tensor& x, std::array<int64_t, 2> size) {
  check_defined(x, "adaptive_avg_pool2d");
  check_floating(x, "adaptive_avg_pool2d");
  check_dim(x, 4, "adaptive_avg_pool2d", "input (N, C, H, W)");
  NN_CHECK(size[0] >= 1 && size[1] >= 1, "adaptive_avg_pool2d: output size must be positive");
  NN_CHECK(x.shape()[2] >= 1 && x.shape()[3] >= 1, "adaptive_avg_pool2d: empty input ",
           shape_str(x.shape()));
  const MemoryFormat f = format_of(x), cf = compute_format(x);
  Tensor out = empty({x.shape()[0], x.shape()[1], size[0], size[1]}, x.options(), cf);
  backend::of(x).adaptive_avg_pool2d_forward(raw_format(x, cf), out);
  out = raw_format(out, f);
  record("adaptive_avg_pool2d", {x}, out, [f, cf, xs = x.shape(), opts = x.options()](const Tensor& g, auto&) {
    Tensor gx = empty(xs, opts, cf);
    backend::of(g).adaptive_avg_pool2d_backward(raw_format(g, cf), gx);
    return std::vector<Tensor>{raw_format(gx, f)};
  });
  return out;
}

}  // namespace nn
