// Losses: cross entropy (fused with log_softmax, label smoothing, ignore_index), nll_loss, MSE, L1,
// smooth L1 and Huber, and binary cross entropy on logits.
#include <nn/amp.h>

#include <cmath>

#include "ops/common.h"

namespace nn {
using namespace ops;

namespace {
// Per-sample loss for logits (M, C) and targets (M); differentiable in the logits.
Tensor cross_entropy_rows(const Tensor& logits, const Tensor& target, double smoothing,
                          int64_t ignore_index) {
  const int64_t M = logits.shape()[0];
  Tensor loss = empty({M}, logits.options());
  // saved in f32 for 16-bit logits: its rounding would scale every probability of the
  // backward (a bf16 log-sum-exp near 100 is a multiple of 0.5: p off by up to e^0.25)
  Tensor lse = empty({M}, TensorOptions(acc_dtype(logits.dtype())).device(logits.device()));
  Tensor lc = raw_contiguous(logits), tc = raw_contiguous(target);
  backend::of(logits).cross_entropy_forward(lc, tc, smoothing, ignore_index, loss, lse);
  record("cross_entropy", {logits}, loss, {lc, tc},
         [ls = lc.detach(), tc, lse, smoothing, ignore_index](const Tensor& g, auto&) {
    Tensor gl = empty(ls.shape(), ls.options());
    backend::of(g).cross_entropy_backward(raw_contiguous(g), ls, tc, lse, smoothing,
                                          ignore_index, gl);
    return std::vector<Tensor>{gl};
  });
  return loss;
}
}  // namespace

namespace {
// The checks cross_entropy and nll_loss share: scores (N, C) or (N, C, d...) of a floating
// dtype (in f32 under autocast), class-index targets (N) or (N, d...) on the same device.
// Returns the scores as (M, C) rows (a permuted view for extra dims).
Tensor class_rows(const Tensor& scores, const Tensor& target, const char* op, const char* what) {
  check_defined(target, op, "target");
  check_floating(scores, op);
  NN_CHECK(target.dtype() == kI64 || target.dtype() == kI32, op, ": target must hold "
           "class indices (i64 or i32), got ", dtype_name(target.dtype()));
  NN_CHECK(target.device() == scores.device(), op, ": target on ", target.device().str(), ", ",
           what, " on ", scores.device().str());
  NN_CHECK(scores.dim() >= 2, op, ": ", what, " must be (N, C) or (N, C, d...), got ",
           shape_str(scores.shape()));
  Shape expect = scores.shape();
  expect.erase(expect.begin() + 1);
  NN_CHECK(target.shape() == expect, op, ": target of shape ", shape_str(target.shape()), " for ",
           what, " of shape ", shape_str(scores.shape()), " (expected ", shape_str(expect), ")");
  const int64_t C = scores.shape()[1];
  NN_CHECK(C > 0, op, ": ", what, " of shape ", shape_str(scores.shape()), " have no classes");
  Tensor rows = scores;
  if (scores.dim() > 2) {  // (N, C, d...) -> (N*d..., C)
    Shape perm{0};
    for (int64_t i = 2; i < scores.dim(); ++i) perm.push_back(i);
    perm.push_back(1);
    rows = scores.permute(perm);
  }
  return rows.reshape({-1, C});
}
}  // namespace

Tensor cross_entropy(const Tensor& logits_in, const Tensor& target, const CrossEntropyOptions& o) {
  check_defined(logits_in, "cross_entropy", "logits");
  const Tensor logits = amp::autocast_f32(logits_in);
  NN_CHECK(o.label_smoothing >= 0 && o.label_smoothing <= 1,
           "cross_entropy: label_smoothing must be in [0, 1], got ", o.label_smoothing);
  const Tensor rows = class_rows(logits, target, "cross_entropy", "logits");
  Tensor flat_t = target.reshape({-1});
  Tensor loss = cross_entropy_rows(rows, flat_t, o.label_smoothing, o.ignore_index);
  switch (o.reduction) {
    case Reduction::none: return loss.reshape(target.shape());
    case Reduction::sum: return sum(loss);
    case Reduction::mean: {
      // the total and the count in f32 at least (in 16 bits both pass 65,504 by 70,000 rows:
      // inf / inf), the mean rounded to the logits' dtype once
      const DType acc = acc_dtype(logits.dtype());
      Tensor counted = ne(flat_t, full({}, double(o.ignore_index), flat_t.options()));
      return div(sum(loss.to(acc)), sum(counted.to(acc))).to(logits.dtype());
    }
  }
  return loss;
}

Tensor nll_loss(const Tensor& input_in, const Tensor& target, const NllLossOptions& o) {
  check_defined(input_in, "nll_loss");
  const Tensor input = amp::autocast_f32(input_in);
  const Tensor rows = class_rows(input, target, "nll_loss", "input");
  const int64_t M = rows.shape()[0], C = rows.shape()[1];
  // (in the input's dtype: f32 under autocast, as the input)
  const Tensor weight = !o.weight.defined()              ? Tensor()
                       : is_floating(o.weight.dtype()) ? o.weight.detach().to(input.dtype())
                                                       : o.weight.detach();
  if (weight.defined()) {
    check_pair(input, weight, "nll_loss");
    NN_CHECK(weight.shape() == Shape{C}, "nll_loss: weight of shape ", shape_str(weight.shape()),
             " for ", C, " classes");
  }
  const Tensor t = target.reshape({M}).to(kI64);
  if (t.device() == kCPU) {  // (on CUDA, index_select's device-side check below reports it)
    const Tensor th = t.contiguous();
    for (int64_t i = 0; i < M; ++i) {
      const int64_t v = th.data<int64_t>()[i];
      NN_CHECK((v >= 0 && v < C) || v == o.ignore_index, "nll_loss: target ", v, " at position ",
               i, " is outside [0, ", C, ") and not ignore_index (", o.ignore_index, ")");
    }
  }
  // Each row's target element in the flattened rows: an ignored row reads its first class
  // (replaced by 0 below, so that an inf or NaN there stays out), a target out of range the
  // index -1 (an error).
  const TensorOptions io = t.options();
  const Tensor counted = ne(t, full({}, double(o.ignore_index), io));
  const Tensor in_range = mul(ge(t, zeros({}, io)), lt(t, full({}, double(C), io)));
  const Tensor row0 = mul(arange(M, io), full({}, double(C), io));
  const Tensor at = where(in_range, add(row0, t), where(counted, full({}, -1.0, io), row0));
  const Tensor picked = where(counted, index_select(rows.reshape({M * C, 1}), at).reshape({M}),
                              zeros({}, input.options()));
  // the counted elements' weights: 0 for ignored ones
  Tensor w = counted.to(input.dtype());
  if (weight.defined())
    w = mul(w, index_select(weight.reshape({C, 1}), where(in_range, t, zeros({}, io))).reshape({M}));
  const Tensor loss = neg(mul(picked, w));
  switch (o.reduction) {
    case Reduction::none: return loss.reshape(target.shape());
    case Reduction::sum: return sum(loss);
    case Reduction::mean: {  // (in f32 at least, as cross_entropy's)
      const DType acc = acc_dtype(input.dtype());
      return div(sum(loss.to(acc)), sum(w.to(acc))).to(input.dtype());
    }
  }
  return loss;
}

namespace {
Tensor reduce_loss(const Tensor& loss, Reduction reduction) {
  switch (reduction) {
    case Reduction::none: return loss;
    case Reduction::sum: return sum(loss);
    case Reduction::mean: return mean(loss);
  }
  return loss;
}
// input - target for the elementwise regression losses: same shape, dtype and device, in f32
// under autocast.
Tensor difference(const Tensor& input_in, const Tensor& target_in, const char* op) {
  const Tensor input = amp::autocast_f32(input_in), target = amp::autocast_f32(target_in);
  check_pair(input, target, op);
  check_floating(input, op);
  NN_CHECK(input.shape() == target.shape(), op, ": input ", shape_str(input.shape()),
           " and target ", shape_str(target.shape()), " differ in shape");
  return sub(input, target);
}
// d clamped to [-bound, bound], for the quadratic branch of smooth L1 and Huber: the same
// values and gradient where that branch is taken (|d| < bound), and elsewhere, where where()
// sends it a zero gradient, a finite square (square(d)'s gradient there, 0 x 2d, was NaN at an
// infinite d, which made the loss's gradient NaN where PyTorch's is -1 or 1 times the bound)
Tensor inside(const Tensor& d, double bound) { return clamp(d, -bound, bound); }
}  // namespace

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  return reduce_loss(square(difference(input, target, "mse_loss")), reduction);
}

Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  return reduce_loss(abs(difference(input, target, "l1_loss")), reduction);
}

Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction reduction,
                      double beta) {
  NN_CHECK(beta >= 0 && std::isfinite(beta), "smooth_l1_loss: beta must be finite and >= 0, got ", beta);
  const Tensor d = difference(input, target, "smooth_l1_loss");
  if (beta == 0) return reduce_loss(abs(d), reduction);
  const Tensor ad = abs(d);
  return reduce_loss(where(lt(ad, comparison_scalar(beta, ad.options())), mul(square(inside(d, beta)), 0.5 / beta),
                           add(ad, -0.5 * beta)),
                     reduction);
}

Tensor huber_loss(const Tensor& input, const Tensor& target, Reduction reduction, double delta) {
  NN_CHECK(delta > 0 && std::isfinite(delta), "huber_loss: delta must be finite and > 0, got ", delta);
  const Tensor d = difference(input, target, "huber_loss"), ad = abs(d);
  return reduce_loss(where(lt(ad, comparison_scalar(delta, ad.options())), mul(square(inside(d, delta)), 0.5),
                           mul(add(ad, -0.5 * delta), delta)),
                     reduction);
}

Tensor top_k_correct(const Tensor& logits, const Tensor& target, int64_t k) {
  const char* op = "top_k_correct";
  check_defined(logits, op, "logits");
  check_defined(target, op, "target");
  check_floating(logits, op);
  NN_CHECK(logits.dim() == 2, op, ": logits must be (N, C), got ", shape_str(logits.shape()));
  NN_CHECK(target.dtype() == kI64 || target.dtype() == kI32, op,
           ": target must hold class indices (i64 or i32), got ", dtype_name(target.dtype()));
  NN_CHECK(target.device() == logits.device(), op, ": target on ", target.device().str(),
           ", logits on ", logits.device().str());
  NN_CHECK(target.shape() == Shape{logits.shape()[0]}, op, ": target of shape ",
           shape_str(target.shape()), " for logits of shape ", shape_str(logits.shape()));
  NN_CHECK(k >= 1, op, ": k must be at least 1, got ", k);
  const int64_t C = logits.shape()[1];
  NoGradGuard ng;
  Tensor t = target.to(kI64);
  {  // (a class outside [0, C) would have no logit, and silently count as correct)
    // both bounds in one read back (one device sync on CUDA, where two made two)
    const std::vector<int64_t> b = t.numel() ? stack({amin(t), amax(t)}).to_vector<int64_t>()
                                             : std::vector<int64_t>{0, 0};
    const int64_t lo = b[0], hi = b[1];
    NN_CHECK(lo >= 0 && hi < C, op, ": target classes must be in [0, ", C, "), got ",
             lo < 0 ? lo : hi);
  }
  Tensor classes = arange(C, TensorOptions(kI64).device(logits.device())).reshape({1, C});
  Tensor is_target = eq(classes, t.reshape({-1, 1}));
  // the target's logit: a select, not a product with a one-hot (-inf times 0 is NaN)
  Tensor mine = sum(where(is_target.to(logits.dtype()), logits, zeros({}, logits.options())), {1}, true);
  // above the target: larger logits and NaNs (torch.topk ranks NaN above every number); a
  // NaN target's row is never correct (a diverged model scores 0, not 100%)
  Tensor above = sum(add(gt(logits, mine), ne(logits, logits)).to(kI64), {1});
  Tensor hit = mul(lt(above, full({}, double(k), above.options())), eq(mine, mine).reshape({-1}).to(kI64));
  return sum(hit);
}

Tensor binary_cross_entropy_with_logits(const Tensor& input_in, const Tensor& target_in,
                                        const BceWithLogitsOptions& o) {
  const char* op = "binary_cross_entropy_with_logits";
  const Tensor x = amp::autocast_f32(input_in), y = amp::autocast_f32(target_in);
  check_pair(x, y, op);
  check_floating(x, op);
  NN_CHECK(x.shape() == y.shape(), op, ": input ", shape_str(x.shape()), " and target ",
           shape_str(y.shape()), " differ in shape");
  // weights: on the input's device, any floating dtype (taken in the input's)
  auto weights = [&](const Tensor& w, const char* what) {
    if (!w.defined()) return Tensor();
    NN_CHECK(w.device() == x.device(), op, ": ", what, " on ", w.device().str(), ", input on ",
             x.device().str());
    check_floating(w, op);
    return w.to(x.dtype());
  };
  const Tensor w = weights(o.weight, "weight"), pw = weights(o.pos_weight, "pos_weight");
  // each broadcasts to the input's shape (pos_weight usually one per class, the last dim),
  // never the input to theirs
  for (const auto& [t, what] : {std::pair{&w, "weight"}, std::pair{&pw, "pos_weight"}}) {
    if (!t->defined()) continue;
    bool fits = t->dim() <= x.dim();
    for (int64_t i = 1; fits && i <= t->dim(); ++i) {
      const int64_t have = t->shape()[size_t(t->dim() - i)], want = x.shape()[size_t(x.dim() - i)];
      fits = have == want || have == 1;
    }
    NN_CHECK(fits, op, ": ", what, " of shape ", shape_str(t->shape()),
             " does not broadcast to the input's ", shape_str(x.shape()));
  }
  // loss = (1 - y) x + lw softplus(-x), lw = 1 + (pos_weight - 1) y, times weight. The
  // gradients are written out rather than left to the composition: d/dx = lw sigmoid(x) -
  // pos_weight y keeps a confident prediction's small gradient (1 - sigmoid(-x) cancels) and
  // is exact at x = 0, where relu's and abs's kinks would be
  const Tensor xd = x.detach(), yd = y.detach(), wd = w.defined() ? w.detach() : w,
               pwd = pw.defined() ? pw.detach() : pw;
  // softplus(-x), lw and the unweighted loss, computed once: the backward reads them
  Tensor sp, lw, unweighted, loss;
  {
    NoGradGuard ng;
    sp = softplus(neg(xd));
    if (pwd.defined()) lw = add(mul(add(pwd, -1.0), yd), 1.0);
    unweighted = add(mul(rsub(yd, 1.0), xd), lw.defined() ? mul(lw, sp) : sp);
    loss = wd.defined() ? mul(unweighted, wd) : unweighted;
  }
  // (the unweighted loss is kept for the weight's gradient alone: without a weight it is the
  // output, which the closure must not hold)
  record(op, {x, y, w, pw}, loss, {xd, yd, wd, pwd},
         [xd, yd, wd, pwd, sp, lw, unweighted = wd.defined() ? unweighted : Tensor()](
             const Tensor& g, auto& need) {
    std::vector<Tensor> out(4);
    const Tensor gw = wd.defined() ? mul(g, wd) : g;
    if (need[0]) {
      Tensor s = sigmoid(xd);
      out[0] = mul(gw, pwd.defined() ? sub(mul(lw, s), mul(pwd, yd)) : sub(s, yd));
    }
    if (need[1])  // -x + (pos_weight - 1) softplus(-x)
      out[1] = mul(gw, pwd.defined() ? add(neg(xd), mul(add(pwd, -1.0), sp)) : neg(xd));
    if (need[2]) out[2] = sum_to(mul(g, unweighted), wd.shape());
    if (need[3]) out[3] = sum_to(mul(mul(gw, yd), sp), pwd.shape());
    return out;
  });
  return reduce_loss(loss, o.reduction);
}

}  // namespace nn
