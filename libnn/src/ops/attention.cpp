// Scaled dot-product attention through the fused backend primitive, on separate q, k, v or on
// one packed projection. The backend reads and writes each head where it lies (any strides
// but a contiguous last dim), so heads split from a projection's (N, T, heads, D) output go
// in without a copy, and the output and gradients come back in their inputs' layout.
#include <nn/amp.h>
#include <nn/random.h>

#include <cmath>
#include <tuple>

#include "ops/common.h"

namespace nn {
using namespace ops;

namespace {
// t (lead..., rows, cols) as the (N, H, rows, cols) view the backend reads (H the last lead
// dim, N the others merged; 1 where there are none): t itself when its last dim is contiguous
// and the lead dims but the last merge, else a row-major copy. A size-1 dim's stride is
// normalised (rows: cols; N, H: 0), as no element depends on it.
Tensor rows4(const Tensor& t) {
  const Shape& sh = t.shape();
  const int64_t nd = t.dim(), lead = nd - 2, rows = sh[nd - 2], cols = sh[nd - 1];
  const int64_t H = lead >= 1 ? sh[lead - 1] : 1;
  int64_t N = 1;
  for (int64_t i = 0; i + 1 < lead; ++i) N *= sh[i];
  auto view = [&](const Tensor& x, Tensor& out) {
    const Shape& st = x.strides();
    if (cols > 1 && st[nd - 1] != 1) return false;
    int64_t sn = 0, inner = -1;  // the merged N dims' stride: their innermost non-1 dim's
    for (int64_t i = lead - 2; i >= 0; --i) {
      if (sh[i] == 1) continue;
      if (inner < 0) sn = st[i];
      else if (st[i] != st[inner] * sh[inner]) return false;
      inner = i;
    }
    out = make_view(x, {N, H, rows, cols},
                    {N > 1 ? sn : 0, H > 1 ? st[lead - 1] : 0, rows > 1 ? st[nd - 2] : cols, 1},
                    x.offset());
    return true;
  };
  Tensor out;
  if (!view(t, out)) view(raw_contiguous(t), out);
  return out;
}

// Heads within each row: an (N, H, rows, cols) operand laid out as (N, rows, H, cols), as
// heads split from a projection's output are.
bool interleaved(const Tensor& t4) {
  return t4.shape()[1] > 1 && t4.shape()[2] > 1 && t4.strides()[1] < t4.strides()[2];
}

// A new (N, H, rows, cols) operand, laid out (N, rows, H, cols) when `inter`, else row-major.
Tensor fresh4(const Shape& s, bool inter, const TensorOptions& o) {
  const int64_t N = s[0], H = s[1], R = s[2], C = s[3];
  if (!inter) return empty(s, o);
  Tensor m = empty({N, R, H, C}, o);
  return make_view(m, s, {R * H * C, C, H * C, 1}, 0);
}

// What both forms share: the key mask as (N, S) bytes (nonzero = attend), the dropout draw
// and the scale.
struct Setup {
  Tensor mask;
  rng::DropoutDraw drop;
  double scale = 1;
};
Setup setup(const char* op, const Tensor& q4, int64_t S, const Tensor& key_padding_mask,
            std::optional<double> scale, double dropout_p, Generator* gen) {
  const int64_t B = q4.shape()[0] * q4.shape()[1], T = q4.shape()[2], D = q4.shape()[3];
  Setup st;
  st.scale = scale ? *scale : 1.0 / std::sqrt(double(std::max<int64_t>(D, 1)));
  NN_CHECK(dropout_p >= 0 && dropout_p <= 1, op, ": dropout probability must be in [0, 1], got ",
           dropout_p);
  if (key_padding_mask.defined()) {
    NN_CHECK(key_padding_mask.device() == q4.device(), op, ": mask on ",
             key_padding_mask.device().str(), ", q on ", q4.device().str());
    // the backend reads a sample's row for each of its heads; bytes as they are (the kernels
    // test them for nonzero: saved for backward, so changing them in place before it is an
    // error), anything else compared with 0
    NoGradGuard ng;
    const Tensor& m = key_padding_mask;
    st.mask = m.dtype() == kU8 ? raw_contiguous(m) : ne(m, zeros({}, m.options())).to(kU8);
  }
  // The stream nn::dropout would draw for a (B, T, S) tensor, taken once the inputs are
  // checked; as nn::dropout, p = 1 drops everything without drawing.
  if (dropout_p > 0) {
    st.drop.p = float(dropout_p);
    st.drop.scale = 0.0;
    if (dropout_p < 1) {
      std::tie(st.drop.seed, st.drop.offset) =
          draw_stream(gen, uint64_t(B) * uint64_t(T) * uint64_t(S));
      st.drop.scale = 1.0 / (1.0 - dropout_p);
    }
  }
  return st;
}

// out4 = attention of q4, k4, v4; returns the log-sum-exp saved for backward (in the
// accumulation type: f64 for f64 inputs, else f32).
Tensor forward4(const Tensor& q4, const Tensor& k4, const Tensor& v4, const Setup& st, Tensor& out4) {
  const int64_t B = q4.shape()[0] * q4.shape()[1], T = q4.shape()[2];
  Tensor lse = empty({B, T}, TensorOptions(acc_dtype(q4.dtype())).device(q4.device()));
  if (out4.numel() > 0)
    backend::of(q4).attention_forward(q4, k4, v4, st.mask, st.scale, st.drop, out4, lse);
  return lse;
}

// The gradients into gq4, gk4, gv4 (zeros where no output element depends on them).
void backward4(const Tensor& g4, const Tensor& q4, const Tensor& k4, const Tensor& v4,
               const Tensor& o4, const Tensor& lse, const Setup& st, Tensor& gq4, Tensor& gk4,
               Tensor& gv4) {
  if (o4.numel() == 0) {  // (and lse was never written)
    for (Tensor* t : {&gq4, &gk4, &gv4}) backend::of(*t).fill(*t, 0.0);
    return;
  }
  if (gq4.numel() + gk4.numel() + gv4.numel() > 0)
    backend::of(g4).attention_backward(g4, q4, k4, v4, st.mask, o4, lse, st.scale, st.drop, gq4,
                                       gk4, gv4);
}
}  // namespace

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
  if (key_padding_mask.defined())
    NN_CHECK(key_padding_mask.dim() == 2 && key_padding_mask.shape()[1] == S && nd >= 3 &&
                 key_padding_mask.shape()[0] == q.shape()[0],
             op, ": key_padding_mask must be (", nd >= 3 ? q.shape()[0] : 1, ", ", S, "), got ",
             shape_str(key_padding_mask.shape()));
  const Tensor q4 = rows4(q), k4 = rows4(k), v4 = rows4(v);
  const Setup st = setup(op, q4, S, key_padding_mask, scale, dropout_p, gen);
  // With (N, heads) leading dims the output (and each gradient) is laid out as its input:
  // heads within rows for heads split from a projection's output, so merging them back is
  // free; otherwise row-major.
  const bool four = lead.size() == 2;
  auto alike = [four](const Tensor& x4, const Shape& shape, const Shape& shape4) {
    return four ? fresh4(shape4, interleaved(x4), x4.options()) : empty(shape, x4.options());
  };
  Shape os = lead, os4 = q4.shape();
  os.push_back(T);
  os.push_back(E);
  os4[3] = E;
  Tensor out = alike(q4, os, os4);
  Tensor o4 = rows4(out);
  Tensor lse = forward4(q4, k4, v4, st, o4);
  record(op, {q, k, v}, out, {q4, k4, v4, o4, st.mask},
         [q4 = q4.detach(), k4 = k4.detach(), v4 = v4.detach(), o4 = o4.detach(), lse, st, alike,
          qs = q.shape(), ks = k.shape(), vs = v.shape()](const Tensor& g, auto&) {
    Tensor gq = alike(q4, qs, q4.shape()), gk = alike(k4, ks, k4.shape()),
           gv = alike(v4, vs, v4.shape());
    Tensor gq4 = rows4(gq), gk4 = rows4(gk), gv4 = rows4(gv);
    backward4(rows4(g), q4, k4, v4, o4, lse, st, gq4, gk4, gv4);
    return std::vector<Tensor>{gq, gk, gv};
  });
  return out;
}

Tensor scaled_dot_product_attention_packed(const Tensor& qkv_in, const Tensor& key_padding_mask,
                                           std::optional<double> scale, double dropout_p,
                                           Generator* gen) {
  const char* op = "scaled_dot_product_attention_packed";
  const Tensor qkv = amp::autocast_lower(qkv_in);
  check_defined(qkv, op);
  check_floating(qkv, op);
  NN_CHECK(qkv.dim() == 5 && qkv.shape()[2] == 3, op,
           ": qkv must be (N, T, 3, heads, D), got ", shape_str(qkv.shape()));
  const int64_t N = qkv.shape()[0], T = qkv.shape()[1], H = qkv.shape()[3], D = qkv.shape()[4];
  if (key_padding_mask.defined())
    NN_CHECK(key_padding_mask.dim() == 2 && key_padding_mask.shape()[0] == N &&
                 key_padding_mask.shape()[1] == T,
             op, ": key_padding_mask must be (", N, ", ", T, "), got ",
             shape_str(key_padding_mask.shape()));
  // q, k, v: (N, heads, T, D) views of the packed tensor (its last dim made contiguous)
  auto heads = [N, T, H, D](const Tensor& p, int which) {
    const Shape& s = p.strides();
    return make_view(p, {N, H, T, D}, {s[0], s[3], s[1], 1}, p.offset() + which * s[2]);
  };
  const Tensor packed = D > 1 && qkv.strides()[4] != 1 ? raw_contiguous(qkv) : qkv;
  const Tensor q4 = rows4(heads(packed, 0)), k4 = rows4(heads(packed, 1)),
               v4 = rows4(heads(packed, 2));
  const Setup st = setup(op, q4, T, key_padding_mask, scale, dropout_p, gen);
  Tensor out = empty({N, T, H, D}, qkv.options());  // heads within rows, as qkv holds them
  Tensor o4 = make_view(out, {N, H, T, D}, {T * H * D, D, H * D, 1}, 0);
  Tensor lse = forward4(q4, k4, v4, st, o4);
  record(op, {qkv}, out, {packed, o4, st.mask},
         [q4 = q4.detach(), k4 = k4.detach(), v4 = v4.detach(), o4 = o4.detach(), lse, st, heads,
          ps = qkv.shape()](const Tensor& g, auto&) {
    Tensor gqkv = empty(ps, g.options());  // one buffer: the three gradients side by side
    Tensor gq4 = heads(gqkv, 0), gk4 = heads(gqkv, 1), gv4 = heads(gqkv, 2);
    const Shape& s = g.strides();  // g (N, T, heads, D) seen as (N, heads, T, D)
    Tensor g4 = rows4(make_view(g, {ps[0], ps[3], ps[1], ps[4]}, {s[0], s[2], s[1], s[3]}, g.offset()));
    backward4(g4, q4, k4, v4, o4, lse, st, gq4, gk4, gv4);
    return std::vector<Tensor>{gqkv};
  });
  return out;
}

}  // namespace nn
