// matmul (with NumPy batching rules) and linear, on the backend's batched GEMM.
#include <nn/amp.h>

#include <algorithm>

#include "ops/common.h"

namespace nn {
using namespace ops;

namespace {
// out (B, M, N) = a (B, M, K) @ b (B, K, N), no autograd; a/b may be strided views.
Tensor gemm3(const Tensor& a, const Tensor& b) {
  Tensor out = empty({a.shape()[0], a.shape()[1], b.shape()[2]}, a.options());
  backend::of(a).gemm(a, b, out, 1.0, 0.0);
  return out;
}
Tensor swap_last(const Tensor& t) { return t.transpose(-1, -2); }

// Differentiable (B, M, K) @ (B, K, N); a 2-D operand is shared by every batch entry.
Tensor bmm(const Tensor& a, const Tensor& b) {
  Tensor a3 = lift3(a), b3 = lift3(b);
  const int64_t B = std::max(a3.shape()[0], b3.shape()[0]);
  Tensor out = gemm3(raw_expand(a3, {B, a3.shape()[1], a3.shape()[2]}),
                     raw_expand(b3, {B, b3.shape()[1], b3.shape()[2]}));
  if (a.dim() == 2 && b.dim() == 2)
    out = make_view(out, {out.shape()[1], out.shape()[2]}, {out.shape()[2], 1}, 0);
  record("matmul", {a, b}, out, {a, b},
         [as = a.detach(), bs = b.detach()](const Tensor& g, auto& need) {
    Tensor ga, gb;
    if (need[0]) ga = sum_to(bmm(g, swap_last(bs)), as.shape());
    if (need[1]) gb = sum_to(bmm(swap_last(as), g), bs.shape());
    return std::vector<Tensor>{ga, gb};
  });
  return out;
}
}  // namespace

Tensor matmul(const Tensor& a_in, const Tensor& b_in) {
  const Tensor a = amp::autocast_lower(a_in), b = amp::autocast_lower(b_in);
  check_pair(a, b, "matmul");
  check_floating(a, "matmul");
  NN_CHECK(a.dim() >= 1 && b.dim() >= 1, "matmul: both operands need at least one dim, got ",
           shape_str(a.shape()), " and ", shape_str(b.shape()));
  Tensor a2 = a.dim() == 1 ? a.unsqueeze(0) : a;
  Tensor b2 = b.dim() == 1 ? b.unsqueeze(1) : b;
  const int64_t K = a2.shape().back();
  NN_CHECK(b2.shape()[b2.dim() - 2] == K, "matmul: shapes ", shape_str(a.shape()), " and ",
           shape_str(b.shape()), " cannot be multiplied (", K, " vs ", b2.shape()[b2.dim() - 2],
           ")");
  Tensor out;
  if (b2.dim() == 2) {
    // (..., M, K) @ (K, N): fold the batch into M for one large GEMM.
    Shape lead(a2.shape().begin(), a2.shape().end() - 1);
    out = bmm(a2.reshape({numel_of(lead), K}), b2);  // not -1: K may be 0
    lead.push_back(b2.shape()[1]);
    out = out.reshape(lead);
  } else {
    Shape ba(a2.shape().begin(), a2.shape().end() - 2), bb(b2.shape().begin(), b2.shape().end() - 2);
    Shape batch = broadcast_shapes(ba, bb);
    Shape sa = batch, sb = batch;
    sa.insert(sa.end(), a2.shape().end() - 2, a2.shape().end());
    sb.insert(sb.end(), b2.shape().end() - 2, b2.shape().end());
    const int64_t B = numel_of(batch);
    Tensor a3 = a2.expand(sa).reshape({B, a2.shape()[a2.dim() - 2], K});
    Tensor b3 = b2.expand(sb).reshape({B, K, b2.shape().back()});
    out = bmm(a3, b3);
    Shape os = batch;
    os.push_back(out.shape()[1]);
    os.push_back(out.shape()[2]);
    out = out.reshape(os);
  }
  if (a.dim() == 1) out = out.squeeze(-2);
  if (b.dim() == 1) out = out.squeeze(-1);
  return out;
}

namespace {
// amp::autocast_lower of each operand, outside the graph, the ones it changes copied in one backend
// call where they share a device (one launch on CUDA for the contiguous ones); the others as
// they are.
std::vector<Tensor> autocast_lower_operands(std::vector<Tensor> ps) {
  if (!amp::autocast_enabled()) return ps;
  std::vector<Tensor> src, dst;
  for (Tensor& p : ps) {
    if (!amp::autocast_lowers(p)) continue;
    src.push_back(p);
    p = empty(p.shape(), p.options().dtype(amp::autocast_dtype()));
    dst.push_back(p);
  }
  const bool one_device = std::all_of(src.begin(), src.end(), [&](const Tensor& t) {
    return t.device() == src[0].device();
  });
  if (one_device && !src.empty()) {
    backend::of(src[0]).copy_many(src, dst);
  } else {
    for (size_t i = 0; i < src.size(); ++i) backend::of(src[i]).copy(src[i], dst[i]);
  }
  return ps;
}
}  // namespace

Tensor linear(const Tensor& x_in, const Tensor& w_in, const Tensor& b_in) {
  // Under autocast an f32 input, weight and bias are lowered here, outside the graph, in one
  // backend call (autocast_lower_operands): their gradients come out of the backward's GEMMs
  // in f32 (the f32 sums never rounded to 16 bits) instead of 16-bit gradients and cast nodes
  // turning them back into f32.
  const std::vector<Tensor> lowered = autocast_lower_operands({x_in, w_in, b_in});
  const Tensor& x = lowered[0];
  const Tensor& weight = lowered[1];
  const Tensor& bias = lowered[2];
  check_pair(x, weight, "linear");
  check_floating(x, "linear");
  check_dim(weight, 2, "linear", "weight");
  const int64_t in = weight.shape()[1], outf = weight.shape()[0];
  NN_CHECK(x.dim() >= 1 && x.shape().back() == in, "linear: input of shape ",
           shape_str(x.shape()), " does not end in ", in, " features (weight ",
           shape_str(weight.shape()), ")");
  if (bias.defined()) {
    check_pair(x, bias, "linear");
    NN_CHECK(bias.dim() == 1 && bias.shape()[0] == outf, "linear: bias of shape ",
             shape_str(bias.shape()), ", expected [", outf, "]");
  }
  // the node below takes x_in as its input: no graph for the reshape
  Tensor x2 = x.detach().reshape({numel_of(Shape(x.shape().begin(), x.shape().end() - 1)), in});
  const int64_t R = x2.shape()[0];
  // out = x2 @ W^T + bias (broadcast over the rows)
  Tensor out = empty({1, R, outf}, x.options());
  Tensor wt = make_view(weight, {1, in, outf}, {0, weight.strides()[1], weight.strides()[0]},
                        weight.offset());
  Tensor x3 = make_view(x2, {1, R, in}, {0, x2.strides()[0], x2.strides()[1]}, x2.offset());
  if (bias.defined()) backend::of(x).gemm_bias(x3, wt, bias, out);
  else backend::of(x).gemm(x3, wt, out, 1.0, 0.0);
  out = make_view(out, {R, outf}, {outf, 1}, 0);
  // The GEMMs write each gradient in its leaf's dtype: the compute dtype, or f32 sums of
  // 16-bit operands; a 16-bit leaf of the other 16-bit type (autocast lowered it) gets f32
  // sums rounded once to its dtype (no backend writes bf16 products into f16)
  const DType cd = x.dtype();
  auto sum_dtype = [cd](DType leaf) {
    return leaf == cd || !(leaf == kF16 || leaf == kBF16) ? leaf : kF32;
  };
  record("linear", {x_in, w_in, b_in}, out, {x2, weight},
         [xs = x2.detach(), ws = weight.detach(), xshape = x_in.shape(), xd = x_in.dtype(),
          wd = w_in.dtype(), bd = b_in.defined() ? b_in.dtype() : w_in.dtype(),
          sum_dtype](const Tensor& g, auto& need) {
    Tensor gx, gw, gb;
    const int64_t O = ws.shape()[0], in = ws.shape()[1], R = g.shape()[0];
    if (need[0]) {  // (R, O) @ (O, in) in the input's dtype
      gx = empty({R, in}, g.options().dtype(sum_dtype(xd)));
      Tensor gx3 = make_view(gx, {1, R, in}, {0, in, 1}, 0);
      backend::of(g).gemm(lift3(g), lift3(ws), gx3, 1.0, 0.0);
      gx = gx.to(xd).reshape(xshape);
    }
    // (O, R) @ (R, in) in the weight's dtype, with the bias's sums from the same read of g
    Tensor gt = lift3(swap_last(g));
    if (need[1]) {
      gw = empty({O, in}, g.options().dtype(sum_dtype(wd)));
      Tensor gw3 = make_view(gw, {1, O, in}, {0, in, 1}, 0);
      if (need[2] && bd == wd) {
        gb = empty({O}, g.options().dtype(sum_dtype(bd)));
        backend::of(g).gemm_bias_grad(gt, lift3(xs), gw3, gb);
        gb = gb.to(bd);
      } else {
        backend::of(g).gemm(gt, lift3(xs), gw3, 1.0, 0.0);
      }
      gw = gw.to(wd);
    }
    if (need[2] && !gb.defined()) gb = sum(g.to(bd), {0});
    return std::vector<Tensor>{gx, gw, gb};
  });
  Shape os(x.shape().begin(), x.shape().end() - 1);
  os.push_back(outf);
  return out.reshape(os);
}

Tensor Tensor::matmul(const Tensor& other) const { return nn::matmul(*this, other); }

}  // namespace nn
