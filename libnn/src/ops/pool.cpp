// 2-D pooling (NCHW or channels-last): max, average and adaptive average, with gradients;
// the 1-D pools as the 2-D ones over a (N, C, 1, L) view.
#include "ops/common.h"

namespace nn {
using namespace ops;

namespace {
// Resolves stride 0 to the kernel size, checks the geometry, and returns the output shape.
// x is (N, C, H, W); a 1-D op (nd = 1) passes its (N, C, 1, L) view, whose unit height is
// not checked, and its errors speak of the (N, C, L) input.
Shape pool_shape(const Tensor& x, Pool2dParams& p, const char* op, bool dilated, int nd = 2) {
  check_defined(x, op);
  check_floating(x, op);
  check_dim(x, 4, op, "input (N, C, H, W)");
  const Shape shown = nd == 2 ? x.shape() : Shape{x.shape()[0], x.shape()[1], x.shape()[3]};
  const std::string kernel = nd == 2 ? detail::cat(p.kernel[0], "x", p.kernel[1])
                                     : std::to_string(p.kernel[1]);
  Shape s = x.shape();
  for (int i = 2 - nd; i < 2; ++i) {
    if (p.stride[i] == 0) p.stride[i] = p.kernel[i];
    NN_CHECK(dilated || p.dilation[i] == 1, op, ": no dilation (as PyTorch's), got ",
             nd == 2 ? detail::cat(p.dilation[0], "x", p.dilation[1]) : std::to_string(p.dilation[1]));
    NN_CHECK(p.kernel[i] >= 1 && p.stride[i] >= 1 && p.dilation[i] >= 1, op,
             ": kernel, stride and dilation must be >= 1");
    NN_CHECK(p.padding[i] >= 0 && 2 * p.padding[i] <= p.kernel[i], op, ": padding ", p.padding[i],
             " must be at most half the kernel size ", p.kernel[i]);
    int64_t in = x.shape()[2 + i];
    const int64_t o = window_positions(in, p.padding[i], p.dilation[i], p.kernel[i], p.stride[i],
                                       p.ceil_mode);
    NN_CHECK(o > 0, op, ": input ", shape_str(shown), " is smaller than the ", kernel, " window");
    NN_CHECK(in >= 1, op, ": input ", shape_str(shown), " has no ",
             nd == 1 ? "length" : i ? "columns" : "rows", " (windows over padding alone)");
    s[2 + i] = o;
  }
  return s;
}
// A 1-D pool's parameters as the 2-D op's over the (N, C, 1, L) view.
Pool2dParams as_2d(const Pool1dParams& p) {
  Pool2dParams q;
  q.kernel = {1, p.kernel};
  q.stride = {1, p.stride};
  q.padding = {0, p.padding};
  q.dilation = {1, p.dilation};
  q.count_include_pad = p.count_include_pad;
  q.ceil_mode = p.ceil_mode;
  return q;
}
// x's (N, C, 1, L) view, checked as a 1-D op's input with a 1-D op's words.
Tensor view_1d(const Tensor& x, const Pool1dParams& p, const char* op, bool dilated) {
  check_defined(x, op);
  check_dim(x, 3, op, "input (N, C, L)");
  Tensor x4 = x.unsqueeze(2);
  Pool2dParams q = as_2d(p);
  pool_shape(x4, q, op, dilated, 1);
  return x4;
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

Tensor max_pool1d(const Tensor& x, const Pool1dParams& p) {
  return max_pool2d(view_1d(x, p, "max_pool1d", true), as_2d(p)).squeeze(2);
}
Tensor avg_pool1d(const Tensor& x, const Pool1dParams& p) {
  return avg_pool2d(view_1d(x, p, "avg_pool1d", false), as_2d(p)).squeeze(2);
}
Tensor adaptive_avg_pool1d(const Tensor& x, int64_t size) {
  check_defined(x, "adaptive_avg_pool1d");
  check_floating(x, "adaptive_avg_pool1d");
  check_dim(x, 3, "adaptive_avg_pool1d", "input (N, C, L)");
  NN_CHECK(size >= 1, "adaptive_avg_pool1d: output size must be positive");
  NN_CHECK(x.shape()[2] >= 1, "adaptive_avg_pool1d: empty input ", shape_str(x.shape()));
  return adaptive_avg_pool2d(x.unsqueeze(2), {1, size}).squeeze(2);
}

}  // namespace nn
