// batch_norm and layer_norm, each with a fused backward primitive.
#include <nn/amp.h>

#include "ops/common.h"

namespace nn {
using namespace ops;

namespace {
bool is16(DType t) { return t == kF16 || t == kBF16; }
// Statistics and affine parameters: f32 for 16-bit data (mixed precision), else x's dtype.
DType stat_dtype(const Tensor& x) { return is16(x.dtype()) ? kF32 : x.dtype(); }

void check_param(const Tensor& x, const Tensor& t, int64_t n, const char* op, const char* what) {
  if (!t.defined()) return;
  if (is16(x.dtype()) && t.dtype() == kF32) {  // 16-bit data, f32 parameters: allowed
    NN_CHECK(x.device() == t.device(), op, ": ", what, " on ", t.device().str(), ", input on ",
             x.device().str());
  } else {
    check_pair(x, t, op);
  }
  NN_CHECK(t.numel() == n, op, ": ", what, " has ", t.numel(), " elements, expected ", n);
}
// The fused backwards write both parameter gradients in one dtype.
void check_same_dtype(const Tensor& weight, const Tensor& bias, const char* op) {
  NN_CHECK(!weight.defined() || !bias.defined() || weight.dtype() == bias.dtype(), op,
           ": weight is ", dtype_name(weight.dtype()), ", bias is ", dtype_name(bias.dtype()),
           "; they must have one dtype");
}
}  // namespace

Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight, const Tensor& bias, bool training, double momentum,
                  double eps) {
  check_defined(x, "batch_norm");
  check_floating(x, "batch_norm");
  NN_CHECK(x.dim() >= 2, "batch_norm: input must be (N, C, ...), got ", shape_str(x.shape()));
  const int64_t C = x.shape()[1];
  check_param(x, weight, C, "batch_norm", "weight");
  check_param(x, bias, C, "batch_norm", "bias");
  check_param(x, running_mean, C, "batch_norm", "running_mean");
  check_param(x, running_var, C, "batch_norm", "running_var");
  check_same_dtype(weight, bias, "batch_norm");
  NN_CHECK(training || (running_mean.defined() && running_var.defined()),
           "batch_norm: eval mode needs running_mean and running_var");
  NN_CHECK(!training || C == 0 || x.numel() / C > 1, "batch_norm: training needs more than one value per "
           "channel, got input ", shape_str(x.shape()));
  // channels-last stays channels-last (computed in cf, see compute_format)
  const MemoryFormat f = format_of(x), cf = compute_format(x);
  Tensor xc = raw_format(x, cf);
  Tensor out = empty(x.shape(), x.options(), cf);
  const TensorOptions so = x.options().dtype(stat_dtype(x));
  Tensor save_mean = empty({C}, so), save_invstd = empty({C}, so);
  Tensor rm = running_mean, rv = running_var;
  backend::of(x).batch_norm_forward(xc, weight, bias, rm, rv, training, momentum, eps, out,
                                    save_mean, save_invstd);
  out = raw_format(out, f);
  record("batch_norm", {x, weight, bias}, out,
         [xs = xc.detach(), ws = weight.defined() ? weight.detach() : Tensor(),
          bs = bias.defined() ? bias.detach() : Tensor(), save_mean, save_invstd, training, f,
          cf](const Tensor& g, auto& need) {
    Tensor gx = need[0] ? empty(xs.shape(), xs.options(), cf) : Tensor();
    Tensor gw = need[1] ? empty(ws.shape(), ws.options()) : Tensor();
    Tensor gb = need[2] ? empty(bs.shape(), bs.options()) : Tensor();
    backend::of(g).batch_norm_backward(raw_format(g, cf), xs, ws, save_mean, save_invstd,
                                       training, gx, gw, gb);
    return std::vector<Tensor>{gx.defined() ? raw_format(gx, f) : gx, gw, gb};
  });
  return out;
}

Tensor layer_norm(const Tensor& x_in, const Shape& normalized_shape, const Tensor& weight,
                  const Tensor& bias, double eps) {
  check_defined(x_in, "layer_norm");
  const Tensor x = amp::autocast_f32(x_in);
  check_floating(x, "layer_norm");
  const int64_t k = int64_t(normalized_shape.size());
  NN_CHECK(k >= 1 && x.dim() >= k &&
               Shape(x.shape().end() - k, x.shape().end()) == normalized_shape,
           "layer_norm: input of shape ", shape_str(x.shape()), " does not end in ",
           shape_str(normalized_shape));
  const int64_t D = numel_of(normalized_shape);
  check_param(x, weight, D, "layer_norm", "weight");
  check_param(x, bias, D, "layer_norm", "bias");
  check_same_dtype(weight, bias, "layer_norm");
  const int64_t R = D ? x.numel() / D : 0;
  Tensor xc = raw_contiguous(x);
  Tensor x2 = make_view(xc, {R, D}, {D, 1}, xc.offset());
  Tensor out = empty(x.shape(), x.options());
  Tensor o2 = make_view(out, {R, D}, {D, 1}, 0);
  Tensor mu = empty({R}, x.options()), rstd = empty({R}, x.options());
  Tensor w = weight.defined() ? raw_contiguous(weight) : Tensor();
  Tensor b = bias.defined() ? raw_contiguous(bias) : Tensor();
  backend::of(x).layer_norm_forward(x2, w, b, eps, o2, mu, rstd);
  record("layer_norm", {x, weight, bias}, out,
         [x2 = x2.detach(), w = w.defined() ? w.detach() : Tensor(), mu, rstd,
          b = b.defined() ? b.detach() : Tensor(), xs = x.shape()](const Tensor& g, auto& need) {
    const int64_t R = x2.shape()[0], D = x2.shape()[1];
    Tensor gx = need[0] ? empty(xs, x2.options()) : Tensor();
    Tensor gx2 = need[0] ? make_view(gx, {R, D}, {D, 1}, 0) : Tensor();
    Tensor gw = need[1] ? empty(w.shape(), w.options()) : Tensor();
    // in the bias' dtype (f32 parameters of 16-bit data get f32 gradients)
    Tensor gb = need[2] ? empty(b.shape(), b.options()) : Tensor();
    Tensor gc = raw_contiguous(g);
    backend::of(g).layer_norm_backward(make_view(gc, {R, D}, {D, 1}, gc.offset()), x2, w, mu,
                                       rstd, gx2, gw, gb);
    return std::vector<Tensor>{gx, gw, gb};
  });
  return out;
}

}  // namespace nn
