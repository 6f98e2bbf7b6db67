// conv2d (NCHW or channels-last) and its gradients through the backend's conv primitives;
// conv1d as conv2d over a (N, C, 1, L) view.
#include <nn/amp.h>

#include <span>
#include <string>

#include "ops/common.h"

namespace nn {
using namespace ops;

namespace {
// Under autocast a weight of another floating dtype (f32 above all) is lowered outside the graph, straight into the format x's op
// computes in: one copy, where a cast node and then a relayout made two (and two more for the
// gradient on the way back). Other weights are returned as they are.
Tensor lower_weight(const Tensor& x, const Tensor& w) {
  if (!amp::autocast_lowers(w) || !x.defined()) return w;
  const MemoryFormat f =
      x.dim() == 4 && w.dim() == 4 ? compute_format(x) : MemoryFormat::contiguous;
  return raw_format(w, f, amp::autocast_dtype());
}

// Checks a convolution's arguments over x's spatial dims (x (N, C, *in), weight
// (O, C/groups, *kernel), bias (O) or undefined; stride, padding and dilation one per spatial
// dim) and returns the output's shape. Errors name `op` and show the shapes as given.
Shape conv_shape(const char* op, const char* layout, const Tensor& x, const Tensor& weight,
                 const Tensor& bias, std::span<const int64_t> stride,
                 std::span<const int64_t> padding, std::span<const int64_t> dilation,
                 int64_t groups) {
  const int64_t nd = int64_t(stride.size());
  check_pair(x, weight, op);
  check_floating(x, op);
  check_dim(x, nd + 2, op, detail::cat("input ", layout).c_str());
  check_dim(weight, nd + 2, op, nd == 1 ? "weight (O, C/groups, K)" : "weight (O, C/groups, KH, KW)");
  const int64_t C = x.shape()[1], O = weight.shape()[0];
  const Shape& ws = weight.shape();
  const std::string kernel = nd == 1 ? std::to_string(ws[2]) : detail::cat(ws[2], "x", ws[3]);
  for (int64_t i = 0; i < nd; ++i)
    NN_CHECK(weight.shape()[2 + i] >= 1, op, ": weight ", shape_str(weight.shape()),
             " has an empty kernel (", nd == 1 ? "K" : "KH and KW", " must be >= 1)");
  NN_CHECK(groups >= 1 && C % groups == 0 && O % groups == 0, op, ": groups=", groups,
           " must divide input channels ", C, " and output channels ", O);
  NN_CHECK(weight.shape()[1] * groups == C, op, ": weight ", shape_str(weight.shape()),
           " expects ", weight.shape()[1] * groups, " input channels, input ",
           shape_str(x.shape()), " has ", C);
  Shape out{x.shape()[0], O};
  for (int64_t i = 0; i < nd; ++i) {
    NN_CHECK(stride[i] >= 1 && dilation[i] >= 1 && padding[i] >= 0, op,
             ": stride and dilation must be >= 1 and padding >= 0");
    out.push_back(window_positions(x.shape()[2 + i], padding[i], dilation[i], weight.shape()[2 + i],
                                   stride[i]));
  }
  for (int64_t i = 0; i < nd; ++i)
    NN_CHECK(out[2 + i] > 0, op, ": input ", shape_str(x.shape()), " is smaller than the ",
             kernel, " kernel (with padding and dilation)");
  for (int64_t i = 0; i < nd; ++i)
    NN_CHECK(x.shape()[2 + i] >= 1, op, ": input ", shape_str(x.shape()),
             nd == 1 ? " has length 0" : " has no rows or no columns",
             " (windows over padding alone)");
  if (bias.defined()) {
    check_pair(x, bias, op);
    NN_CHECK(bias.dim() == 1 && bias.shape()[0] == O, op, ": bias of shape ",
             shape_str(bias.shape()), ", expected [", O, "]");
  }
  return out;
}
}  // namespace

Tensor conv2d(const Tensor& x_in, const Tensor& w_in, const Tensor& b_in, const Conv2dParams& p) {
  const Tensor x = amp::autocast_lower(x_in), weight = lower_weight(x, w_in),
               bias = amp::autocast_lower(b_in);
  const Shape os = conv_shape("conv2d", "(N, C, H, W)", x, weight, bias, p.stride, p.padding,
                              p.dilation, p.groups);
  // A channels-last input runs the NHWC path: output, gradients and the weight's working copy
  // in that format too (cf: the format computed in, see compute_format). Parameters themselves
  // stay row-major (optimizers and checkpoints never see a layout).
  const MemoryFormat f = format_of(x), cf = compute_format(x);
  Tensor xc = raw_format(x, cf), wc = raw_format(weight, cf);
  Tensor bc = bias.defined() ? raw_contiguous(bias) : Tensor();
  Tensor out = empty(os, x.options(), cf);
  if (out.numel() > 0) backend::of(x).conv2d_forward(xc, wc, bc, out, p);
  out = raw_format(out, f);
  record("conv2d", {x, w_in, bias}, out, {xc, wc},
         [xs = xc.detach(), ws = wc.detach(), wd = w_in.dtype(), p, f, cf](const Tensor& g,
                                                                           auto& need) {
    Tensor gc = raw_format(g, cf);
    if (gc.numel() == 0)  // an empty output depends on nothing: zero gradients, no backend call
      return std::vector<Tensor>{
          need[0] ? raw_format(zeros(xs.shape(), xs.options()), f) : Tensor(),
          need[1] ? zeros(ws.shape(), ws.options().dtype(wd)) : Tensor(),
          need[2] ? zeros({ws.shape()[0]}, ws.options()) : Tensor()};
    Tensor gx, gw, gb;
    if (need[0]) {
      gx = empty(xs.shape(), xs.options(), cf);
      backend::of(g).conv2d_backward_input(gc, ws, gx, p);
      gx = raw_format(gx, f);
    }
    if (need[1]) {
      gw = empty(ws.shape(), ws.options(), cf);
      backend::of(g).conv2d_backward_weight(gc, xs, gw, p);
      // row-major in the weight's dtype (a lowered weight's: to f32 in the same copy)
      gw = raw_format(gw, MemoryFormat::contiguous, wd);
    }
    if (need[2])  // over N, H, W; channels-last reduces its (N, H, W, C) view: no reordering copy
      gb = cf == MemoryFormat::channels_last ? sum(nhwc_view(gc), {0, 1, 2}) : sum(gc, {0, 2, 3});
    return std::vector<Tensor>{gx, gw, gb};
  });
  return out;
}

Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv1dParams& p) {
  // Checked in 1-D terms first, so no error speaks of the 2-D view; lowered under autocast
  // here, so the check sees the dtypes the op computes in (a 1-D weight is small: its cast
  // node costs what conv2d's folded lowering would save).
  const Tensor xl = amp::autocast_lower(x), wl = amp::autocast_lower(weight),
               bl = amp::autocast_lower(bias);
  conv_shape("conv1d", "(N, C, L)", xl, wl, bl, {&p.stride, 1}, {&p.padding, 1},
             {&p.dilation, 1}, p.groups);
  Conv2dParams p2;
  p2.stride = {1, p.stride};
  p2.padding = {0, p.padding};
  p2.dilation = {1, p.dilation};
  p2.groups = p.groups;
  return conv2d(xl.unsqueeze(2), wl.unsqueeze(2), bl, p2).squeeze(2);
}

}  // namespace nn
