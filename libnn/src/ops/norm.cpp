// batch_norm and layer_norm, each with a fused backward primitive.
#include <nn/amp.h>
#include <nn/random.h>

#include "ops/common.h"

namespace nn {
using namespace ops;

namespace {
bool is16(DType t) { return t == kF16 || t == kBF16; }

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

namespace {
// batch_norm, and with relu set, max(batch_norm(x) + residual, 0) in one backend call.
Tensor batch_norm_impl(const char* op, const Tensor& x, const Tensor& residual, bool relu,
                       const Tensor& running_mean, const Tensor& running_var,
                       const Tensor& weight, const Tensor& bias, bool training, double momentum,
                       double eps) {
  check_defined(x, op);
  check_floating(x, op);
  NN_CHECK(x.dim() >= 2, op, ": input must be (N, C, ...), got ", shape_str(x.shape()));
  const int64_t C = x.shape()[1];
  check_param(x, weight, C, op, "weight");
  check_param(x, bias, C, op, "bias");
  check_param(x, running_mean, C, op, "running_mean");
  check_param(x, running_var, C, op, "running_var");
  check_same_dtype(weight, bias, op);
  // The backends index the per-channel tensors densely: the running statistics, which they
  // update in place, must be contiguous; weight and bias are read through contiguous copies
  // when they are views with strides.
  for (const Tensor* t : {&running_mean, &running_var})
    NN_CHECK(!t->defined() || t->is_contiguous(), op, ": running_mean and running_var are "
             "updated in place and must be contiguous (got strides ", shape_str(t->strides()), ")");
  const Tensor wc = weight.defined() ? raw_contiguous(weight) : weight;
  const Tensor bc = bias.defined() ? raw_contiguous(bias) : bias;
  NN_CHECK(training || (running_mean.defined() && running_var.defined()),
           op, ": eval mode needs running_mean and running_var");
  // (cuDNN takes both or neither; one alone would leave the other's statistics stale)
  NN_CHECK(running_mean.defined() == running_var.defined(), op, ": running_mean and running_var "
           "go together: pass both or neither");
  NN_CHECK(!training || C == 0 || x.numel() / C > 1, op, ": training needs more than one value per "
           "channel, got input ", shape_str(x.shape()));
  if (residual.defined()) {
    check_pair(x, residual, op);
    NN_CHECK(residual.shape() == x.shape(), op, ": residual of shape ",
             shape_str(residual.shape()), ", input of shape ", shape_str(x.shape()),
             "; they must match");
  }
  // channels-last stays channels-last (computed in cf, see compute_format)
  const MemoryFormat f = format_of(x), cf = compute_format(x);
  Tensor xc = raw_format(x, cf);
  Tensor zc = residual.defined() ? raw_format(residual, cf) : Tensor();
  Tensor out = empty(x.shape(), x.options(), cf);
  const TensorOptions so = x.options().dtype(acc_dtype(x.dtype()));
  Tensor save_mean = empty({C}, so), save_invstd = empty({C}, so);
  Tensor rm = running_mean, rv = running_var;
  if (training)  // the backend updates them in place
    for (const Tensor* t : {&rm, &rv})
      if (t->defined()) t->storage()->bump_version();
  backend::Backend& be = backend::of(x);
  Tensor reserve;
  if (relu)
    be.batch_norm_relu_forward(xc, zc, wc, bc, rm, rv, training, momentum, eps, out,
                               save_mean, save_invstd, reserve);
  else
    be.batch_norm_forward(xc, wc, bc, rm, rv, training, momentum, eps, out, save_mean,
                          save_invstd);
  const Tensor y = out.detach();  // in cf: the ReLU's mask for the backward
  out = raw_format(out, f);
  record(op, {x, weight, bias, residual}, out, {xc, wc, bc, relu ? y : Tensor()},
         [xs = xc.detach(), ws = wc.defined() ? wc.detach() : Tensor(),
          bs = bc.defined() ? bc.detach() : Tensor(), ys = relu ? y : Tensor(), save_mean,
          save_invstd, reserve, has_z = zc.defined(), training, eps, f,
          cf](const Tensor& g, auto& need) {
    auto grad_like = [&](bool needed, const Tensor& t) {
      return needed ? empty(t.shape(), t.options(), t.dim() == 4 ? cf : MemoryFormat::contiguous)
                    : Tensor();
    };
    Tensor gx = grad_like(need[0], xs), gw = grad_like(need[1], ws), gb = grad_like(need[2], bs);
    // z's gradient whenever the forward added one, so the backend runs the backward of the
    // forward it ran (cuDNN's fused kernels differ with and without z)
    Tensor gz = grad_like(has_z, xs);
    backend::Backend& b = backend::of(g);
    if (ys.defined())
      b.batch_norm_relu_backward(raw_format(g, cf), ys, xs, ws, bs, save_mean, save_invstd,
                                 reserve, training, eps, gx, gz, gw, gb);
    else
      b.batch_norm_backward(raw_format(g, cf), xs, ws, save_mean, save_invstd, training, gx, gw,
                            gb);
    auto back = [&](const Tensor& t) { return t.defined() ? raw_format(t, f) : t; };
    return std::vector<Tensor>{back(gx), gw, gb, need[3] ? back(gz) : Tensor()};
  });
  return out;
}
}  // namespace

Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight, const Tensor& bias, bool training, double momentum,
                  double eps) {
  return batch_norm_impl("batch_norm", x, Tensor(), false, running_mean, running_var, weight,
                         bias, training, momentum, eps);
}

Tensor batch_norm_relu(const Tensor& x, const Tensor& residual, const Tensor& running_mean,
                       const Tensor& running_var, const Tensor& weight, const Tensor& bias,
                       bool training, double momentum, double eps) {
  if (residual.defined() && x.defined() && residual.dtype() != x.dtype())  // add's promotion
    return relu(add(batch_norm(x, running_mean, running_var, weight, bias, training, momentum,
                               eps),
                    residual));
  return batch_norm_impl("batch_norm_relu", x, residual, true, running_mean, running_var, weight,
                         bias, training, momentum, eps);
}

namespace {
// layer_norm's checks, shared by the fused op: x ends in normalized_shape, weight and bias
// have its D elements and one dtype. Returns D.
int64_t check_layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                         const Tensor& bias, const char* op) {
  check_floating(x, op);
  const int64_t k = int64_t(normalized_shape.size());
  NN_CHECK(k >= 1 && x.dim() >= k &&
               Shape(x.shape().end() - k, x.shape().end()) == normalized_shape,
           op, ": input of shape ", shape_str(x.shape()), " does not end in ",
           shape_str(normalized_shape));
  const int64_t D = numel_of(normalized_shape);
  check_param(x, weight, D, op, "weight");
  check_param(x, bias, D, op, "bias");
  check_same_dtype(weight, bias, op);
  return D;
}
// t's elements as (R, D) rows of a contiguous tensor (t itself when it is contiguous).
Tensor as_rows(const Tensor& t, int64_t D) {
  Tensor c = raw_contiguous(t);
  return make_view(c, {D ? c.numel() / D : 0, D}, {D, 1}, c.offset());
}
Tensor contiguous_or_undefined(const Tensor& t) { return t.defined() ? raw_contiguous(t) : t; }
Tensor detached(const Tensor& t) { return t.defined() ? t.detach() : t; }
}  // namespace

Tensor layer_norm(const Tensor& x_in, const Shape& normalized_shape, const Tensor& weight_in,
                  const Tensor& bias_in, double eps) {
  check_defined(x_in, "layer_norm");
  // autocast: f32 throughout, 16-bit parameters (a model cast with .to()) included
  const Tensor x = amp::autocast_f32(x_in), weight = amp::autocast_f32(weight_in),
               bias = amp::autocast_f32(bias_in);
  const int64_t D = check_layer_norm(x, normalized_shape, weight, bias, "layer_norm");
  Tensor x2 = as_rows(x, D);
  const int64_t R = x2.shape()[0];
  Tensor out = empty(x.shape(), x.options());
  Tensor o2 = make_view(out, {R, D}, {D, 1}, 0);
  // the statistics in f32 for 16-bit rows, as batch norm's: the backward rebuilds the
  // normalised rows from them, and a rounded mean shifts every one (the weight gradient)
  const TensorOptions so = x.options().dtype(acc_dtype(x.dtype()));
  Tensor mu = empty({R}, so), rstd = empty({R}, so);
  Tensor w = contiguous_or_undefined(weight), b = contiguous_or_undefined(bias);
  backend::of(x).layer_norm_forward(x2, w, b, eps, o2, mu, rstd);
  record("layer_norm", {x, weight, bias}, out, {x2, w, b},
         [x2 = x2.detach(), w = detached(w), mu, rstd, b = detached(b),
          xs = x.shape()](const Tensor& g, auto& need) {
    const int64_t R = x2.shape()[0], D = x2.shape()[1];
    Tensor gx = need[0] ? empty(xs, x2.options()) : Tensor();
    Tensor gx2 = need[0] ? make_view(gx, {R, D}, {D, 1}, 0) : Tensor();
    Tensor gw = need[1] ? empty(w.shape(), w.options()) : Tensor();
    // in the bias' dtype (f32 parameters of 16-bit data get f32 gradients)
    Tensor gb = need[2] ? empty(b.shape(), b.options()) : Tensor();
    backend::of(g).layer_norm_backward(as_rows(g, D), x2, w, mu, rstd, gx2, gw, gb);
    return std::vector<Tensor>{gx, gw, gb};
  });
  return out;
}

Tensor group_norm(const Tensor& x, int64_t G, const Tensor& weight, const Tensor& bias, double eps) {
  const char* op = "group_norm";
  check_defined(x, op);
  NN_CHECK(x.dim() >= 2, op, ": input must be (N, C, ...), got ", shape_str(x.shape()));
  const int64_t N = x.shape()[0], C = x.shape()[1];
  NN_CHECK(G >= 1 && C % G == 0, op, ": ", C, " channels do not split into ", G, " groups");
  for (const Tensor* p : {&weight, &bias})
    NN_CHECK(!p->defined() || p->shape() == Shape{C}, op, ": ", p == &weight ? "weight" : "bias",
             " must have shape [", C, "], got ", shape_str(p->shape()));
  // a group's channels and positions are one row of layer_norm's (its fused kernels, its
  // f32 statistics); the per-channel affine after it
  int64_t D = C / G;  // a group's values
  for (int64_t d = 2; d < x.dim(); ++d) D *= x.shape()[size_t(d)];
  Tensor y = layer_norm(x.reshape({N, G, D}), {D}, {}, {}, eps).reshape(x.shape());
  Shape per_channel(size_t(x.dim()), 1);
  per_channel[1] = C;
  // (in y's dtype: 16-bit data with f32 parameters stays 16-bit outside autocast, f32 inside)
  if (weight.defined()) y = mul(y, weight.to(y.dtype()).reshape(per_channel));
  if (bias.defined()) y = add(y, bias.to(y.dtype()).reshape(per_channel));
  return y;
}

Tensor dropout_add_layer_norm(const Tensor& x, const Tensor& residual,
                              const Shape& normalized_shape, const Tensor& weight_in,
                              const Tensor& bias_in, double p, bool training, double eps,
                              Generator* gen) {
  const char* op = "dropout_add_layer_norm";
  check_defined(x, op);
  check_defined(residual, op);
  NN_CHECK(p >= 0 && p <= 1, op, ": probability must be in [0, 1], got ", p);
  const double pd = training ? p : 0.0;
  // One call computes the sum in the residual's dtype, which must be the pair's common dtype
  // and layer norm's own (autocast's f32 for 16-bit data); anything else, broadcasting and
  // p == 1 (no mask) included, is the two ops it stands for.
  const DType st = promote_types(x.dtype(), residual.dtype());
  const bool widened = amp::autocast_enabled() && (st == kF16 || st == kBF16);
  if (x.shape() != residual.shape() || residual.dtype() != st || widened || pd == 1 ||
      x.device() != residual.device() || !is_floating(x.dtype()))
    return layer_norm(add(residual, dropout(x, p, training, gen)), normalized_shape, weight_in,
                      bias_in, eps);
  const Tensor weight = amp::autocast_f32(weight_in), bias = amp::autocast_f32(bias_in);
  const int64_t D = check_layer_norm(residual, normalized_shape, weight, bias, op);
  Tensor x2 = as_rows(x, D), r2 = as_rows(residual, D);
  const int64_t R = x2.shape()[0];
  const TensorOptions so = residual.options();
  Tensor sum = empty({R, D}, so), out = empty(residual.shape(), so);
  Tensor o2 = make_view(out, {R, D}, {D, 1}, 0);
  Tensor mu = empty({R}, so.dtype(acc_dtype(st))), rstd = empty({R}, so.dtype(acc_dtype(st)));
  Tensor mask = pd > 0 ? empty({R, D}, TensorOptions(kU8).device(x.device())) : Tensor();
  // the draws nn::dropout would make
  const auto [seed, offset] =
      pd > 0 ? draw_stream(gen, uint64_t(x.numel())) : std::pair<uint64_t, uint64_t>{0, 0};
  Tensor w = contiguous_or_undefined(weight), b = contiguous_or_undefined(bias);
  backend::of(x).dropout_add_layer_norm_forward(x2, r2, pd, seed, offset, w, b, eps, sum, mask,
                                                o2, mu, rstd);
  record(op, {x, residual, weight, bias}, out, {w, b},
         [sum, mask, mu, rstd, w = detached(w), b = detached(b), pd, xs = x.shape(),
          xt = x.dtype()](const Tensor& g, auto& need) {
    const int64_t R = sum.shape()[0], D = sum.shape()[1];
    auto rows = [&](const Tensor& t) { return t.defined() ? make_view(t, {R, D}, {D, 1}, 0) : t; };
    Tensor gs = empty(xs, sum.options()), gs2 = rows(gs);  // the residual's gradient
    Tensor gx = need[0] ? empty(xs, sum.options().dtype(xt)) : Tensor(), gx2 = rows(gx);
    Tensor gw = need[2] ? empty(w.shape(), w.options()) : Tensor();
    Tensor gb = need[3] ? empty(b.shape(), b.options()) : Tensor();
    backend::of(g).dropout_add_layer_norm_backward(as_rows(g, D), sum, w, mu, rstd, mask, pd,
                                                   gs2, gx2, gw, gb);
    return std::vector<Tensor>{gx, need[1] ? gs : Tensor(), gw, gb};
  });
  return out;
}

}  // namespace nn
