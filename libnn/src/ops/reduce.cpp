// Reductions over chosen dims, and their gradients.
#include <algorithm>
#include <cmath>
#include <limits>

#include <nn/amp.h>

#include "ops/common.h"

namespace nn {
using backend::ReduceOp;
using namespace ops;

namespace ops {
Shape normalize_dims(const Shape& dims, int64_t ndim) {
  Shape d;
  if (dims.empty()) {
    for (int64_t i = 0; i < ndim; ++i) d.push_back(i);
    return d;
  }
  for (int64_t x : dims) d.push_back(wrap_dim(x, std::max<int64_t>(ndim, 1)));
  std::sort(d.begin(), d.end());
  for (size_t i = 1; i < d.size(); ++i)  // (as PyTorch: sum over {1, -1} of a 2-d tensor is an error)
    NN_CHECK(d[i] != d[i - 1], "dim ", d[i], " appears more than once in the list of dims");
  if (ndim == 0) d.clear();  // a 0-d tensor reduces over nothing
  return d;
}
}  // namespace ops

namespace {
Shape keep_shape(const Shape& s, const Shape& dims) {
  Shape k = s;
  for (int64_t d : dims) k[d] = 1;
  return k;
}
Shape drop_shape(const Shape& s, const Shape& dims) {
  Shape k;
  for (int64_t i = 0; i < int64_t(s.size()); ++i)
    if (!std::binary_search(dims.begin(), dims.end(), i)) k.push_back(s[i]);
  return k;
}

// Reduces into the keepdim shape, then drops the reduced dims unless asked to keep them.
Tensor reduce_raw(ReduceOp op, const Tensor& x, const Shape& dims, bool keepdim) {
  Tensor out = empty(keep_shape(x.shape(), dims), x.options());
  backend::of(x).reduce(op, x, dims, out);
  if (!keepdim) out = make_view(out, drop_shape(x.shape(), dims),
                                contiguous_strides(drop_shape(x.shape(), dims)), 0);
  return out;
}

// The gradient of a reduction, broadcast back over the reduced dims (a stride-0 view).
Tensor expand_back(const Tensor& g, const Shape& xshape, const Shape& dims) {
  Tensor gk = raw_contiguous(g);
  gk = make_view(gk, keep_shape(xshape, dims), contiguous_strides(keep_shape(xshape, dims)),
                 gk.offset());
  return raw_expand(gk, xshape);
}

Tensor sum_or_mean(const Tensor& x, const Shape& dims_in, bool keepdim, bool mean_) {
  const char* name = mean_ ? "mean" : "sum";
  check_defined(x, name);
  if (mean_) check_floating(x, name);
  // an integer sum is i64, as in libtorch: a u8 or i32 one would wrap at its type's range
  if (!is_floating(x.dtype()) && x.dtype() != kI64)
    return sum_or_mean(x.to(kI64), dims_in, keepdim, false);
  Shape dims = normalize_dims(dims_in, x.dim());
  Tensor out = reduce_raw(mean_ ? ReduceOp::mean : ReduceOp::sum, x, dims, keepdim);
  int64_t count = 1;
  for (int64_t d : dims) count *= x.shape()[d];
  record(name, {x}, out, [xs = x.shape(), dims, mean_, count](const Tensor& g, auto&) {
    Tensor gx = expand_back(g, xs, dims);
    return std::vector<Tensor>{mean_ ? mul(gx, 1.0 / double(std::max<int64_t>(count, 1))) : gx};
  });
  return out;
}

Tensor extremum(const Tensor& x, const Shape& dims_in, bool keepdim, bool max_) {
  const char* name = max_ ? "amax" : "amin";
  check_defined(x, name);
  Shape dims = normalize_dims(dims_in, x.dim());
  Tensor out = reduce_raw(max_ ? ReduceOp::max : ReduceOp::min, x, dims, keepdim);
  record(name, {x}, out, {x, out},
         [xs = x.detach(), os = out.detach(), dims](const Tensor& g, auto&) {
    // Ties share the gradient evenly.
    Tensor mask = eq(xs, expand_back(os, xs.shape(), dims));
    Tensor count = reduce_raw(ReduceOp::sum, mask, dims, true);
    return std::vector<Tensor>{mul(div(expand_back(g, xs.shape(), dims), count), mask)};
  });
  return out;
}
}  // namespace

Tensor sum(const Tensor& x, const Shape& dims, bool keepdim) {
  return sum_or_mean(amp::autocast_f32(x), dims, keepdim, false);
}
Tensor mean(const Tensor& x, const Shape& dims, bool keepdim) {
  return sum_or_mean(amp::autocast_f32(x), dims, keepdim, true);
}
Tensor amax(const Tensor& x, const Shape& dims, bool keepdim) {
  return extremum(x, dims, keepdim, true);
}
Tensor amin(const Tensor& x, const Shape& dims, bool keepdim) {
  return extremum(x, dims, keepdim, false);
}

Tensor var(const Tensor& x_in, const Shape& dims_in, int64_t correction, bool keepdim) {
  check_defined(x_in, "var");
  const Tensor xa = amp::autocast_f32(x_in);
  check_floating(xa, "var");
  // 16-bit data is centred, squared and summed in f32, and only the variance rounded to the
  // data's dtype: in 16 bits the mean keeps 3 or 4 digits and a sum of squares passes f16's
  // 65,504 (10,000 values of spread 3 would give inf)
  const bool narrow = xa.dtype() == kF16 || xa.dtype() == kBF16;
  const Tensor x = narrow ? xa.to(kF32) : xa;
  Shape dims = normalize_dims(dims_in, x.dim());
  int64_t count = 1;
  for (int64_t d : dims) count *= x.shape()[d];
  Tensor centred = sub(x, mean(x, dims, true));
  Tensor s = sum(square(centred), dims, keepdim);
  Tensor v = mul(s, 1.0 / double(std::max<int64_t>(count - correction, 0)));
  return v.to(xa.dtype());
}

Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) {
  check_defined(x, "argmax");
  if (x.dim() == 0) {  // one element along dim 0 or -1: index 0
    wrap_dim(dim, 1);
    return zeros({}, TensorOptions(kI64).device(x.device()));
  }
  int64_t d = wrap_dim(dim, x.dim());
  Tensor out = empty(keep_shape(x.shape(), {d}), TensorOptions(kI64).device(x.device()));
  backend::of(x).argmax(x, d, out);
  if (!keepdim) out = make_view(out, drop_shape(x.shape(), {d}),
                                contiguous_strides(drop_shape(x.shape(), {d})), 0);
  return out;
}

Tensor sum_to(const Tensor& x, const Shape& shape) {
  if (x.shape() == shape) return x;
  const int64_t lead = x.dim() - int64_t(shape.size());
  NN_CHECK(lead >= 0, "sum_to: cannot reduce ", shape_str(x.shape()), " to ", shape_str(shape));
  Shape dims;
  for (int64_t i = 0; i < x.dim(); ++i) {
    if (i < lead) { dims.push_back(i); continue; }
    int64_t want = shape[i - lead];
    if (want == 1 && x.shape()[i] != 1) dims.push_back(i);
    else NN_CHECK(want == x.shape()[i], "sum_to: cannot reduce ", shape_str(x.shape()), " to ",
                  shape_str(shape));
  }
  Tensor s = dims.empty() ? x : sum(x, dims, true);
  return s.reshape(shape);
}

Tensor Tensor::sum(const Shape& dims, bool keepdim) const { return nn::sum(*this, dims, keepdim); }
Tensor Tensor::mean(const Shape& dims, bool keepdim) const { return nn::mean(*this, dims, keepdim); }
Tensor Tensor::amax(const Shape& dims, bool keepdim) const { return nn::amax(*this, dims, keepdim); }
Tensor Tensor::argmax(int64_t dim, bool keepdim) const { return nn::argmax(*this, dim, keepdim); }
Tensor Tensor::var(const Shape& dims, int64_t correction, bool keepdim) const {
  return nn::var(*this, dims, correction, keepdim);
}

namespace {
// 1 / max(||x||_p, eps) along dim (kept). maximum() passes no gradient to its constant: a
// norm below eps blocks the norm's gradient, and the sum of |x|^p is first held at the
// dtype's smallest normal, so a zero row's root is neither 0 (an infinite gradient) nor, for
// an eps whose p-th power underflows, a division by zero. x in its sums' dtype already.
Tensor inverse_norm(const Tensor& x, double p, int64_t dim, double eps) {
  const Tensor powered = p == 2.0 ? square(x) : p == 1.0 ? abs(x) : pow(abs(x), p);
  const Tensor s = sum(powered, {dim}, true);
  const double tiny = x.dtype() == kF64 ? std::numeric_limits<double>::min()
                                        : double(std::numeric_limits<float>::min());
  const Tensor norm = pow(maximum(s, full({}, tiny, s.options())), 1.0 / p);
  return rdiv(maximum(norm, full({}, eps, s.options())), 1.0);
}
// x in f32 for 16-bit x (and under autocast), else as it is; the dim wrapped.
Tensor norm_operand(const Tensor& x_in, int64_t& dim, const char* op) {
  const Tensor x = amp::autocast_f32(x_in);
  check_defined(x, op);
  check_floating(x, op);
  NN_CHECK(x.dim() >= 1, op, ": needs at least one dim");
  dim = wrap_dim(dim, x.dim());
  return x.to(acc_dtype(x.dtype()));
}
}  // namespace

Tensor normalize(const Tensor& x_in, double p, int64_t dim, double eps) {
  NN_CHECK(std::isfinite(p) && p >= 1, "normalize: p must be a finite p >= 1, got ", p);
  NN_CHECK(eps >= 0, "normalize: eps must be >= 0, got ", eps);
  const Tensor x = norm_operand(x_in, dim, "normalize");
  return mul(x, inverse_norm(x, p, dim, eps)).to(amp::autocast_f32(x_in).dtype());
}

Tensor cosine_similarity(const Tensor& x1_in, const Tensor& x2_in, int64_t dim, double eps) {
  NN_CHECK(eps >= 0, "cosine_similarity: eps must be >= 0, got ", eps);
  check_pair(amp::autocast_f32(x1_in), amp::autocast_f32(x2_in), "cosine_similarity");
  const int64_t nd = std::max(x1_in.dim(), x2_in.dim());
  NN_CHECK(nd >= 1, "cosine_similarity: needs at least one dim");
  dim = wrap_dim(dim, nd);
  // both broadcast to one shape first, so that dim names the same dim of each
  const Shape shape = broadcast_shapes(x1_in.shape(), x2_in.shape());
  int64_t d1 = dim, d2 = dim;
  const Tensor x1 = norm_operand(x1_in.expand(shape), d1, "cosine_similarity"),
               x2 = norm_operand(x2_in.expand(shape), d2, "cosine_similarity");
  const Tensor cos = sum(mul(mul(x1, inverse_norm(x1, 2.0, dim, eps)),
                             mul(x2, inverse_norm(x2, 2.0, dim, eps))), {dim});
  return cos.to(amp::autocast_f32(x1_in).dtype());
}

}  // namespace nn
