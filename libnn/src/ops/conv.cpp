// conv2d (NCHW or channels-last) and its gradients through the backend's conv primitives.
#include <nn/amp.h>

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
}  // namespace

Tensor conv2d(const Tensor& x_in, const Tensor& w_in, const Tensor& b_in, const Conv2dParams& p) {
  const Tensor x = amp::autocast_lower(x_in), weight = lower_weight(x, w_in),
               bias = amp::autocast_lower(b_in);
  check_pair(x, weight, "conv2d");
  check_floating(x, "conv2d");
  check_dim(x, 4, "conv2d", "input (N, C, H, W)");
  check_dim(weight, 4, "conv2d", "weight (O, C/groups, KH, KW)");
  const int64_t N = x.shape()[0], C = x.shape()[1], H = x.shape()[2], W = x.shape()[3];
  const int64_t O = weight.shape()[0], KH = weight.shape()[2], KW = weight.shape()[3];
  NN_CHECK(KH >= 1 && KW >= 1, "conv2d: weight ", shape_str(weight.shape()),
           " has an empty kernel (KH and KW must be >= 1)");
  NN_CHECK(p.groups >= 1 && C % p.groups == 0 && O % p.groups == 0, "conv2d: groups=", p.groups,
           " must divide input channels ", C, " and output channels ", O);
  NN_CHECK(weight.shape()[1] * p.groups == C, "conv2d: weight ", shape_str(weight.shape()),
           " expects ", weight.shape()[1] * p.groups, " input channels, input ",
           shape_str(x.shape()), " has ", C);
  for (int i = 0; i < 2; ++i)
    NN_CHECK(p.stride[i] >= 1 && p.dilation[i] >= 1 && p.padding[i] >= 0,
             "conv2d: stride and dilation must be >= 1 and padding >= 0");
  const int64_t OH = window_positions(H, p.padding[0], p.dilation[0], KH, p.stride[0]);
  const int64_t OW = window_positions(W, p.padding[1], p.dilation[1], KW, p.stride[1]);
  NN_CHECK(OH > 0 && OW > 0, "conv2d: input ", shape_str(x.shape()), " is smaller than the ",
           KH, "x", KW, " kernel (with padding and dilation)");
  NN_CHECK(H >= 1 && W >= 1, "conv2d: input ", shape_str(x.shape()),
           " has no rows or no columns (windows over padding alone)");
  if (bias.defined()) {
    check_pair(x, bias, "conv2d");
    NN_CHECK(bias.dim() == 1 && bias.shape()[0] == O, "conv2d: bias of shape ",
             shape_str(bias.shape()), ", expected [", O, "]");
  }
  // A channels-last input runs the NHWC path: output, gradients and the weight's working copy
  // in that format too (cf: the format computed in, see compute_format). Parameters themselves
  // stay row-major (optimizers and checkpoints never see a layout).
  const MemoryFormat f = format_of(x), cf = compute_format(x);
  Tensor xc = raw_format(x, cf), wc = raw_format(weight, cf);
  Tensor bc = bias.defined() ? raw_contiguous(bias) : Tensor();
  Tensor out = empty({N, O, OH, OW}, x.options(), cf);
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

}  // namespace nn
