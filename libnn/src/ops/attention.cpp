// Scaled dot-product attention through the fused backend primitive.
#include <nn/amp.h>
#include <nn/random.h>

#include <cmath>

#include "ops/common.h"

namespace nn {
using namespace ops;

Tensor scaled_dot_product_attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                                    const Tensor& key_padding_mask, std::optional<double> scale,
                                    double dropout_p, Generator* gen) {
  const char* op = "scaled_dot_product_attention";
  const Tensor q = amp::autocast_lower(q_in), k = amp::autocast_lower(k_in),
               v = amp::autocast_lower(v_in);
  check_pair(q, k, op);
  check_pair(q, v, op);
  check_floating(q, op);
  NN_CHECK(q.dim() >= 2 && k.dim() == q.dim() && v.dim() == q.dim(), op,
           ": q, k, v need the same number of dims (>= 2), got ", shape_str(q.shape()), ", ",
           shape_str(k.shape()), ", ", shape_str(v.shape()));
  const int64_t nd = q.dim();
  const Shape lead(q.shape().begin(), q.shape().end() - 2);
  NN_CHECK(Shape(k.shape().begin(), k.shape().end() - 2) == lead &&
               Shape(v.shape().begin(), v.shape().end() - 2) == lead,
           op, ": leading dims differ: q ", shape_str(q.shape()), ", k ", shape_str(k.shape()),
           ", v ", shape_str(v.shape()));
  const int64_t T = q.shape()[nd - 2], D = q.shape()[nd - 1], S = k.shape()[nd - 2];
  const int64_t E = v.shape()[nd - 1];
  NN_CHECK(k.shape()[nd - 1] == D, op, ": q has ", D, " features per position, k has ",
           k.shape()[nd - 1]);
  NN_CHECK(v.shape()[nd - 2] == S, op, ": k has ", S, " positions, v has ", v.shape()[nd - 2]);
  const int64_t B = numel_of(lead);
  const double sc = scale ? *scale : 1.0 / std::sqrt(double(std::max<int64_t>(D, 1)));
  NN_CHECK(dropout_p >= 0 && dropout_p <= 1, op, ": dropout probability must be in [0, 1], got ",
           dropout_p);

  Tensor mask;
  if (key_padding_mask.defined()) {
    NN_CHECK(key_padding_mask.dim() == 2 && key_padding_mask.shape()[1] == S && nd >= 3 &&
                 key_padding_mask.shape()[0] == q.shape()[0],
             op, ": key_padding_mask must be (", nd >= 3 ? q.shape()[0] : 1, ", ", S, "), got ",
             shape_str(key_padding_mask.shape()));
    NN_CHECK(key_padding_mask.device() == q.device(), op, ": mask on ",
             key_padding_mask.device().str(), ", q on ", q.device().str());
    NoGradGuard ng;
    Tensor keep = ne(key_padding_mask, zeros({}, key_padding_mask.options())).to(kU8);
    // (N, S) -> (N, heads..., S) -> (B, S)
    const int64_t per = q.shape()[0] ? B / q.shape()[0] : 0;  // heads... (no batch: no rows)
    mask = raw_contiguous(raw_expand(make_view(keep, {q.shape()[0], 1, S}, {S, S, 1}, keep.offset()),
                                     {q.shape()[0], per, S}));
    mask = make_view(mask, {B, S}, {S, 1}, mask.offset());
  }
  // The stream nn::dropout would draw for a (B, T, S) tensor, taken once the inputs are
  // checked; as nn::dropout, p = 1 drops everything without drawing.
  rng::DropoutDraw drop;
  if (dropout_p > 0) {
    drop.p = float(dropout_p);
    drop.scale = 0.0;
    if (dropout_p < 1) {
      Generator& g = gen ? *gen : default_generator();
      drop.seed = g.seed();
      drop.offset = g.advance(uint64_t(B) * uint64_t(T) * uint64_t(S));
      drop.scale = 1.0 / (1.0 - dropout_p);
    }
  }
  auto flat = [&](const Tensor& t, int64_t rows, int64_t cols) {
    Tensor c = raw_contiguous(t);
    return make_view(c, {B, rows, cols}, {rows * cols, cols, 1}, c.offset());
  };
  Tensor q3 = flat(q, T, D), k3 = flat(k, S, D), v3 = flat(v, S, E);
  Shape os = lead;
  os.push_back(T);
  os.push_back(E);
  Tensor out = empty(os, q.options());
  Tensor o3 = make_view(out, {B, T, E}, {T * E, E, 1}, 0);
  // log-sum-exp in the accumulation type: f64 for f64 inputs, else f32
  Tensor lse = empty({B, T}, TensorOptions(q.dtype() == kF64 ? kF64 : kF32).device(q.device()));
  if (B * T * E > 0) backend::of(q).attention_forward(q3, k3, v3, mask, sc, drop, o3, lse);
  record(op, {q, k, v}, out, {q3, k3, v3, o3},
         [q3 = q3.detach(), k3 = k3.detach(), v3 = v3.detach(), o3 = o3.detach(), mask, lse, sc, drop,
          qs = q.shape(), ks = k.shape(), vs = v.shape()](const Tensor& g, auto&) {
    const int64_t B = q3.shape()[0], T = q3.shape()[1], E = v3.shape()[2];
    Tensor gc = raw_contiguous(g);
    Tensor g3 = make_view(gc, {B, T, E}, {T * E, E, 1}, gc.offset());
    if (B * T * E == 0)  // no output element depends on q, k or v (and lse was never written)
      return std::vector<Tensor>{zeros(qs, q3.options()), zeros(ks, k3.options()),
                                 zeros(vs, v3.options())};
    Tensor gq = empty(qs, q3.options()), gk = empty(ks, k3.options()), gv = empty(vs, v3.options());
    Tensor gq3 = make_view(gq, q3.shape(), q3.strides(), 0);
    Tensor gk3 = make_view(gk, k3.shape(), k3.strides(), 0);
    Tensor gv3 = make_view(gv, v3.shape(), v3.strides(), 0);
    if (gq.numel() + gk.numel() + gv.numel() > 0)
      backend::of(g).attention_backward(g3, q3, k3, v3, mask, o3, lse, sc, drop, gq3, gk3, gv3);
    return std::vector<Tensor>{gq, gk, gv};
  });
  return out;
}

}  // namespace nn
