// Elementwise ops with broadcasting, and their gradients.
#include <cmath>

#include <nn/amp.h>

#include "ops/common.h"

namespace nn {
using backend::BinaryOp;
using backend::UnaryOp;

namespace ops {
Tensor raw_expand(const Tensor& t, const Shape& shape) {
  if (t.shape() == shape) return t;
  const int64_t nd = int64_t(shape.size()), td = t.dim();
  NN_CHECK(nd >= td, "expand: cannot expand shape ", shape_str(t.shape()), " to ",
           shape_str(shape));
  Shape st(nd, 0);
  for (int64_t i = 0; i < nd; ++i) {
    int64_t j = i - (nd - td);
    if (j < 0) continue;
    if (t.shape()[j] == shape[i]) st[i] = t.strides()[j];
    else NN_CHECK(t.shape()[j] == 1, "expand: cannot expand shape ", shape_str(t.shape()),
                  " to ", shape_str(shape));
  }
  return make_view(t, shape, st, t.offset());
}

Tensor raw_contiguous(const Tensor& t) { return raw_format(t, MemoryFormat::contiguous); }

Tensor raw_format(const Tensor& t, MemoryFormat f) { return raw_format(t, f, t.dtype()); }

Tensor raw_format(const Tensor& t, MemoryFormat f, DType dt) {
  if (t.dtype() == dt && t.is_contiguous(f)) return t;
  Tensor c = empty(t.shape(), t.options().dtype(dt), f);
  backend::of(t).copy(t, c);
  return c;
}

MemoryFormat format_for(const Shape& s, std::initializer_list<const Tensor*> ins) {
  for (const Tensor* t : ins)
    if (t->shape() == s && is_channels_last(*t)) return MemoryFormat::channels_last;
  return MemoryFormat::contiguous;
}
}  // namespace ops

using namespace ops;

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t x = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t y = i < n - b.size() ? 1 : b[i - (n - b.size())];
    NN_CHECK(x == y || x == 1 || y == 1, "shapes ", shape_str(a), " and ", shape_str(b),
             " do not broadcast");
    out[i] = x == 1 ? y : x;
  }
  return out;
}

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  auto rank = [](DType t) {  // wider types rank higher; 16-bit floats meet at f32
    switch (t) {
      case DType::u8: return 0;
      case DType::i32: return 1;
      case DType::i64: return 2;
      case DType::f16: case DType::bf16: return 3;
      case DType::f32: return 4;
      case DType::f64: return 5;
    }
    return 0;
  };
  if ((a == kF16 && b == kBF16) || (a == kBF16 && b == kF16)) return kF32;
  return rank(a) >= rank(b) ? a : b;
}

namespace {
// Both operands in their common dtype, through differentiable casts.
std::pair<Tensor, Tensor> promoted(const Tensor& a, const Tensor& b, const char* name) {
  check_defined(a, name);
  check_defined(b, name);
  if (a.dtype() == b.dtype()) return {a, b};
  const DType t = promote_types(a.dtype(), b.dtype());
  return {a.to(t), b.to(t)};
}

Tensor binary_raw(BinaryOp op, const Tensor& a, const Tensor& b, const char* name) {
  check_pair(a, b, name);
  Shape s = broadcast_shapes(a.shape(), b.shape());
  const MemoryFormat f = format_for(s, {&a, &b});
  Tensor out = empty(s, a.options(), f);
  Tensor ov = layout_view(out, f);
  backend::of(a).binary(op, layout_view(raw_expand(a, s), f), layout_view(raw_expand(b, s), f), ov);
  return out;
}

Tensor unary_raw(UnaryOp op, const Tensor& x, double a = 0, double b = 0) {
  const MemoryFormat f = format_of(x);
  Tensor out = empty(x.shape(), x.options(), f);
  Tensor ov = layout_view(out, f);
  backend::of(x).unary(op, layout_view(x, f), ov, a, b);
  return out;
}

// Unary op that must see floating input (exp, log, ...).
Tensor unary_float(UnaryOp op, const Tensor& x, const char* name, double a = 0, double b = 0) {
  check_defined(x, name);
  check_floating(x, name);
  return unary_raw(op, x, a, b);
}

// Gradient of an activation with a fused backward primitive; a is the op's scalar.
Tensor activation(UnaryOp op, const Tensor& x, const char* name, double a = 0) {
  Tensor y = unary_float(op, x, name, a);
  record(name, {x}, y, {x, y}, [op, a, xs = x.detach(), ys = y.detach()](const Tensor& g, auto&) {
    const MemoryFormat f = format_of(xs);
    Tensor gx = empty(xs.shape(), xs.options(), f);
    Tensor gv = layout_view(gx, f);
    backend::of(g).unary_backward(op, layout_view(raw_expand(g, xs.shape()), f),
                                  layout_view(xs, f), layout_view(ys, f), a, gv);
    return std::vector<Tensor>{gx};
  });
  return y;
}

Tensor reduce_grad(const Tensor& g, const Shape& shape, bool need) {
  return need ? sum_to(g, shape) : Tensor();
}
}  // namespace

// ---- binary -------------------------------------------------------------------------------
Tensor add(const Tensor& a_in, const Tensor& b_in) {
  auto [a, b] = promoted(a_in, b_in, "add");
  Tensor out = binary_raw(BinaryOp::add, a, b, "add");
  record("add", {a, b}, out, [sa = a.shape(), sb = b.shape()](const Tensor& g, auto& need) {
    return std::vector<Tensor>{reduce_grad(g, sa, need[0]), reduce_grad(g, sb, need[1])};
  });
  return out;
}

Tensor sub(const Tensor& a_in, const Tensor& b_in) {
  auto [a, b] = promoted(a_in, b_in, "sub");
  Tensor out = binary_raw(BinaryOp::sub, a, b, "sub");
  record("sub", {a, b}, out, [sa = a.shape(), sb = b.shape()](const Tensor& g, auto& need) {
    return std::vector<Tensor>{reduce_grad(g, sa, need[0]),
                               need[1] ? sum_to(neg(g), sb) : Tensor()};
  });
  return out;
}

Tensor mul(const Tensor& a_in, const Tensor& b_in) {
  auto [a, b] = promoted(a_in, b_in, "mul");
  Tensor out = binary_raw(BinaryOp::mul, a, b, "mul");
  record("mul", {a, b}, out, {a, b},
         [as = a.detach(), bs = b.detach()](const Tensor& g, auto& need) {
    return std::vector<Tensor>{need[0] ? sum_to(mul(g, bs), as.shape()) : Tensor(),
                               need[1] ? sum_to(mul(g, as), bs.shape()) : Tensor()};
  });
  return out;
}

Tensor div(const Tensor& a_in, const Tensor& b_in) {
  auto [a, b] = promoted(a_in, b_in, "div");
  if (!is_floating(b.dtype())) {  // the CPU traps an integer division by zero; GPUs give junk
    NoGradGuard ng;
    NN_CHECK(sum(eq(b, zeros({}, b.options()))).item() == 0, "div: integer division by zero");
  }
  Tensor out = binary_raw(BinaryOp::div, a, b, "div");
  record("div", {a, b}, out, {a, b},
         [as = a.detach(), bs = b.detach()](const Tensor& g, auto& need) {
    Tensor ga = div(g, bs);
    return std::vector<Tensor>{need[0] ? sum_to(ga, as.shape()) : Tensor(),
                               need[1] ? sum_to(neg(mul(ga, div(as, bs))), bs.shape()) : Tensor()};
  });
  return out;
}

// pow, rdiv (b / x), exp, log, log1p, rsqrt and softplus take a 16-bit input to f32 under
// autocast and return f32, as PyTorch's autocast lists them (exp(12) is 162,755: inf in f16).
Tensor pow(const Tensor& a_in, const Tensor& b_in) {
  auto [a, b] = promoted(amp::autocast_f32(a_in), amp::autocast_f32(b_in), "pow");
  check_floating(a, "pow");
  Tensor out = binary_raw(BinaryOp::pow, a, b, "pow");
  record("pow", {a, b}, out, {a, b, out},
         [as = a.detach(), bs = b.detach(), os = out.detach()](const Tensor& g, auto& need) {
    // The limits at a = 0, as libtorch takes them: d/da is 0 where b = 0 (not 0 * 0^-1), and
    // d/db is 0 where a = 0 and b >= 0 (0^b is flat there; not 0 * log 0).
    Tensor ga, gb;
    const Tensor zero = zeros({}, as.options());
    if (need[0])
      ga = sum_to(mul(g, where(eq(bs, zero), zero, mul(bs, pow(as, sub(bs, ones_like(bs)))))),
                  as.shape());
    if (need[1])
      gb = sum_to(mul(g, where(mul(eq(as, zero), ge(bs, zero)), zero, mul(os, log(as)))),
                  bs.shape());
    return std::vector<Tensor>{ga, gb};
  });
  return out;
}

namespace {
// maximum/minimum: the gradient goes to the chosen input, split evenly on ties; a NaN output
// was chosen from a when a is NaN, else from b.
Tensor extremum(BinaryOp op, BinaryOp strict, const Tensor& a_in, const Tensor& b_in,
                const char* name) {
  auto [a, b] = promoted(a_in, b_in, name);
  Tensor out = binary_raw(op, a, b, name);
  record(name, {a, b}, out, {a, b},
         [strict, as = a.detach(), bs = b.detach()](const Tensor& g, auto& need) {
    Tensor wa = add(add(binary_raw(strict, as, bs, "mask"),
                        mul(binary_raw(BinaryOp::eq, as, bs, "mask"), 0.5)),
                    binary_raw(BinaryOp::ne, as, as, "mask"));
    return std::vector<Tensor>{need[0] ? sum_to(mul(g, wa), as.shape()) : Tensor(),
                               need[1] ? sum_to(mul(g, rsub(wa, 1.0)), bs.shape()) : Tensor()};
  });
  return out;
}
}  // namespace
Tensor maximum(const Tensor& a, const Tensor& b) {
  return extremum(BinaryOp::maximum, BinaryOp::gt, a, b, "maximum");
}
Tensor minimum(const Tensor& a, const Tensor& b) {
  return extremum(BinaryOp::minimum, BinaryOp::lt, a, b, "minimum");
}

Tensor eq(const Tensor& a, const Tensor& b) {
  auto [x, y] = promoted(a.detach(), b.detach(), "eq");
  return binary_raw(BinaryOp::eq, x, y, "eq");
}
Tensor ne(const Tensor& a, const Tensor& b) {
  auto [x, y] = promoted(a.detach(), b.detach(), "ne");
  return binary_raw(BinaryOp::ne, x, y, "ne");
}
Tensor lt(const Tensor& a, const Tensor& b) {
  auto [x, y] = promoted(a.detach(), b.detach(), "lt");
  return binary_raw(BinaryOp::lt, x, y, "lt");
}
Tensor le(const Tensor& a, const Tensor& b) {
  auto [x, y] = promoted(a.detach(), b.detach(), "le");
  return binary_raw(BinaryOp::le, x, y, "le");
}
Tensor gt(const Tensor& a, const Tensor& b) {
  auto [x, y] = promoted(a.detach(), b.detach(), "gt");
  return binary_raw(BinaryOp::gt, x, y, "gt");
}
Tensor ge(const Tensor& a, const Tensor& b) {
  auto [x, y] = promoted(a.detach(), b.detach(), "ge");
  return binary_raw(BinaryOp::ge, x, y, "ge");
}

Tensor where(const Tensor& cond, const Tensor& a_in, const Tensor& b_in) {
  auto [a, b] = promoted(a_in, b_in, "where");
  check_pair(a, b, "where");
  check_defined(cond, "where", "condition");
  NN_CHECK(cond.device() == a.device(), "where: condition on ", cond.device().str(),
           ", values on ", a.device().str());
  Shape s = broadcast_shapes(broadcast_shapes(cond.shape(), a.shape()), b.shape());
  // The backends read a condition of the values' dtype or u8: another becomes (cond != 0) as
  // u8 (a plain conversion would truncate 0.5 to 0 and wrap an i64 256 to a u8 0).
  Tensor cd = cond.detach();
  if (cd.dtype() != a.dtype() && cd.dtype() != kU8) cd = ne(cd, zeros({}, cd.options())).to(kU8);
  const MemoryFormat f = format_for(s, {&a, &b});
  Tensor out = empty(s, a.options(), f);
  Tensor ov = layout_view(out, f);
  backend::of(a).where(layout_view(raw_expand(cd, s), f), layout_view(raw_expand(a, s), f),
                       layout_view(raw_expand(b, s), f), ov);
  record("where", {a, b}, out, {cd},
         [c = cd, sa = a.shape(), sb = b.shape()](const Tensor& g, auto& need) {
    Tensor z = zeros({}, g.options());
    return std::vector<Tensor>{need[0] ? sum_to(where(c, g, z), sa) : Tensor(),
                               need[1] ? sum_to(where(c, z, g), sb) : Tensor()};
  });
  return out;
}

// ---- scalar right-hand sides ------------------------------------------------------------------
Tensor add(const Tensor& a, double b) {
  check_defined(a, "add");
  check_scalar_fits(a, b, "add");
  Tensor out = unary_raw(UnaryOp::add_scalar, a, b);
  record("add_scalar", {a}, out, [](const Tensor& g, auto&) { return std::vector<Tensor>{g}; });
  return out;
}
Tensor mul(const Tensor& a, double b) {
  check_defined(a, "mul");
  check_scalar_fits(a, b, "mul");
  Tensor out = unary_raw(UnaryOp::mul_scalar, a, b);
  record("mul_scalar", {a}, out, [b](const Tensor& g, auto&) {
    return std::vector<Tensor>{mul(g, b)};
  });
  return out;
}
Tensor rsub(const Tensor& a, double b) {
  check_defined(a, "rsub");
  check_scalar_fits(a, b, "rsub");
  Tensor out = unary_raw(UnaryOp::rsub_scalar, a, b);
  record("rsub", {a}, out, [](const Tensor& g, auto&) { return std::vector<Tensor>{neg(g)}; });
  return out;
}
Tensor rdiv(const Tensor& a_in, double b) {
  const Tensor a = amp::autocast_f32(a_in);
  Tensor out = unary_float(UnaryOp::rdiv_scalar, a, "rdiv", b);
  record("rdiv", {a}, out, {a}, [as = a.detach(), b](const Tensor& g, auto&) {
    return std::vector<Tensor>{mul(div(g, square(as)), -b)};
  });
  return out;
}
Tensor pow(const Tensor& a_in, double e) {
  const Tensor a = amp::autocast_f32(a_in);
  // PyTorch computes x^0.5 and x^-0.5 as sqrt and rsqrt: NaN at -inf, where std::pow gives inf
  // and 0 (the backward's x^(e - 1) too, so for e = 1.5 as well)
  const UnaryOp op = e == 0.5 ? UnaryOp::sqrt : e == -0.5 ? UnaryOp::rsqrt : UnaryOp::pow_scalar;
  Tensor out = unary_float(op, a, "pow", e);
  record("pow_scalar", {a}, out, {a}, [as = a.detach(), e](const Tensor& g, auto&) {
    if (e == 0) return std::vector<Tensor>{zeros_like(g)};  // not 0 * 0^-1 at a = 0
    return std::vector<Tensor>{mul(g, mul(pow(as, e - 1), e))};
  });
  return out;
}

// ---- unary ------------------------------------------------------------------------------------
Tensor neg(const Tensor& x) {
  check_defined(x, "neg");
  Tensor out = unary_raw(UnaryOp::neg, x);
  record("neg", {x}, out, [](const Tensor& g, auto&) { return std::vector<Tensor>{neg(g)}; });
  return out;
}
Tensor exp(const Tensor& x_in) {
  const Tensor x = amp::autocast_f32(x_in);
  Tensor y = unary_float(UnaryOp::exp, x, "exp");
  record("exp", {x}, y, {y}, [ys = y.detach()](const Tensor& g, auto&) {
    return std::vector<Tensor>{mul(g, ys)};
  });
  return y;
}
Tensor log(const Tensor& x_in) {
  const Tensor x = amp::autocast_f32(x_in);
  Tensor y = unary_float(UnaryOp::log, x, "log");
  record("log", {x}, y, {x}, [xs = x.detach()](const Tensor& g, auto&) {
    return std::vector<Tensor>{div(g, xs)};
  });
  return y;
}
Tensor sqrt(const Tensor& x) {
  Tensor y = unary_float(UnaryOp::sqrt, x, "sqrt");
  record("sqrt", {x}, y, {y}, [ys = y.detach()](const Tensor& g, auto&) {
    return std::vector<Tensor>{div(mul(g, 0.5), ys)};
  });
  return y;
}
Tensor rsqrt(const Tensor& x_in) {
  const Tensor x = amp::autocast_f32(x_in);
  Tensor y = unary_float(UnaryOp::rsqrt, x, "rsqrt");
  record("rsqrt", {x}, y, {y}, [ys = y.detach()](const Tensor& g, auto&) {
    return std::vector<Tensor>{mul(mul(g, pow(ys, 3.0)), -0.5)};
  });
  return y;
}
Tensor abs(const Tensor& x) {
  check_defined(x, "abs");
  Tensor y = unary_raw(UnaryOp::abs, x);
  record("abs", {x}, y, {x}, [xs = x.detach()](const Tensor& g, auto&) {
    Tensor z = zeros({}, xs.options());
    return std::vector<Tensor>{mul(g, sub(gt(xs, z), lt(xs, z)))};
  });
  return y;
}
Tensor square(const Tensor& x) {
  check_defined(x, "square");
  Tensor y = unary_raw(UnaryOp::square, x);
  record("square", {x}, y, {x}, [xs = x.detach()](const Tensor& g, auto&) {
    return std::vector<Tensor>{mul(mul(g, xs), 2.0)};
  });
  return y;
}
Tensor clamp(const Tensor& x, double lo, double hi) {
  check_defined(x, "clamp");
  NN_CHECK(lo <= hi, "clamp: lower bound ", lo, " above upper bound ", hi);
  for (double bound : {lo, hi})  // an infinite bound, or one past int64's range, is no bound
    if (std::abs(bound) < 0x1p63) check_scalar_fits(x, bound, "clamp");
  Tensor y = unary_raw(UnaryOp::clamp, x, lo, hi);
  record("clamp", {x}, y, {x}, [xs = x.detach(), lo, hi](const Tensor& g, auto&) {
    // as PyTorch (2.x): strictly inside the bounds, so an input on a bound gets no gradient;
    // an infinite bound is no bound
    Tensor out = g;
    if (std::isfinite(lo)) out = mul(out, gt(xs, comparison_scalar(lo, xs.options())));
    if (std::isfinite(hi)) out = mul(out, lt(xs, comparison_scalar(hi, xs.options())));
    return std::vector<Tensor>{out};
  });
  return y;
}
Tensor log1p(const Tensor& x_in) {
  const Tensor x = amp::autocast_f32(x_in);
  Tensor y = unary_float(UnaryOp::log1p, x, "log1p");
  record("log1p", {x}, y, {x}, [xs = x.detach()](const Tensor& g, auto&) {
    return std::vector<Tensor>{div(g, add(xs, 1.0))};
  });
  return y;
}
Tensor silu(const Tensor& x) { return activation(UnaryOp::silu, x, "silu"); }
Tensor leaky_relu(const Tensor& x, double negative_slope) {
  NN_CHECK(std::isfinite(negative_slope), "leaky_relu: negative_slope must be finite, got ", negative_slope);
  return activation(UnaryOp::leaky_relu, x, "leaky_relu", negative_slope);
}
Tensor elu(const Tensor& x, double alpha) {
  NN_CHECK(std::isfinite(alpha), "elu: alpha must be finite, got ", alpha);
  return activation(UnaryOp::elu, x, "elu", alpha);
}
Tensor softplus(const Tensor& x, double beta) {
  NN_CHECK(beta > 0 && std::isfinite(beta), "softplus: beta must be positive and finite, got ", beta);
  return activation(UnaryOp::softplus, amp::autocast_f32(x), "softplus", beta);
}
Tensor relu(const Tensor& x) { return activation(UnaryOp::relu, x, "relu"); }
Tensor gelu(const Tensor& x) { return activation(UnaryOp::gelu, x, "gelu"); }
Tensor tanh(const Tensor& x) { return activation(UnaryOp::tanh, x, "tanh"); }
Tensor sigmoid(const Tensor& x) { return activation(UnaryOp::sigmoid, x, "sigmoid"); }

// ---- operators ----------------------------------------------------------------------------------
Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator-(const Tensor& x) { return neg(x); }
Tensor operator+(const Tensor& a, double b) { return add(a, b); }
Tensor operator+(double a, const Tensor& b) { return add(b, a); }
Tensor operator-(const Tensor& a, double b) { return add(a, -b); }
Tensor operator-(double a, const Tensor& b) { return rsub(b, a); }
Tensor operator*(const Tensor& a, double b) { return mul(a, b); }
Tensor operator*(double a, const Tensor& b) { return mul(b, a); }
Tensor operator/(const Tensor& a, double b) {
  check_defined(a, "div");
  if (is_floating(a.dtype())) {
    // divided, as PyTorch does, not multiplied by 1 / b: that was an ulp off for a third of
    // values (x / 3), and inf where 1 / b overflows the dtype (1e-30 / 1e-39 in f32)
    Tensor out = unary_float(UnaryOp::div_scalar, a, "div", b);
    record("div_scalar", {a}, out, [b](const Tensor& g, auto&) {
      return std::vector<Tensor>{g / b};
    });
    return out;
  }
  // integer division, as div() of two integer tensors (a * (1 / b) would round 49 / 49 to 0);
  // a divisor past the tensor's type divides in i64 (a quotient is never larger than a)
  check_scalar_fits(a, b, "div");
  const bool fits = a.dtype() == kI64 || (a.dtype() == kI32 && std::abs(b) <= 0x7fffffff) ||
                    (a.dtype() == kU8 && b >= 0 && b <= 255);
  if (!fits) return div(a.to(kI64), full({}, b, a.options().dtype(kI64))).to(a.dtype());
  return div(a, full({}, b, a.options()));
}
Tensor operator/(double a, const Tensor& b) { return rdiv(b, a); }

// ---- Tensor method shorthands ---------------------------------------------------------------------
Tensor Tensor::exp() const { return nn::exp(*this); }
Tensor Tensor::log() const { return nn::log(*this); }
Tensor Tensor::sqrt() const { return nn::sqrt(*this); }
Tensor Tensor::abs() const { return nn::abs(*this); }
Tensor Tensor::relu() const { return nn::relu(*this); }
Tensor Tensor::tanh() const { return nn::tanh(*this); }
Tensor Tensor::sigmoid() const { return nn::sigmoid(*this); }
Tensor Tensor::pow(double e) const { return nn::pow(*this, e); }

}  // namespace nn
