// Embedding lookup: rows of the weight table by index; the gradient scatters back.
#include "ops/common.h"

namespace nn {
using namespace ops;

Tensor embedding(const Tensor& weight, const Tensor& indices, std::optional<int64_t> padding_idx) {
  check_defined(weight, "embedding", "weight");
  check_dim(weight, 2, "embedding", "weight (num_embeddings, dim)");
  Tensor flat = indices.reshape({-1});
  Tensor rows = index_select(weight.detach(), flat);
  Shape os = indices.shape();
  os.push_back(weight.shape()[1]);
  Tensor out = rows.detach().reshape(os);
  // A negative padding_idx counts from the end, as in libtorch; -1 below means none.
  const int64_t V = weight.shape()[0];
  if (padding_idx)
    NN_CHECK(*padding_idx >= -V && *padding_idx < V, "embedding: padding_idx ", *padding_idx,
             " out of range for ", V, " embeddings");
  const int64_t skip = !padding_idx ? -1 : *padding_idx < 0 ? *padding_idx + V : *padding_idx;
  const Tensor idx = raw_contiguous(flat);
  record("embedding", {weight}, out, {idx},
         [idx, ws = weight.shape(), opts = weight.options(), skip](
             const Tensor& g, auto&) {
    Tensor gw = zeros(ws, opts);
    Tensor gc = raw_contiguous(g);
    backend::of(g).scatter_add_rows(make_view(gc, {idx.numel(), ws[1]}, {ws[1], 1}, gc.offset()),
                                    idx, skip, gw);
    return std::vector<Tensor>{gw};
  });
  return out;
}

Tensor embedding_bag(const Tensor& weight, const Tensor& ids, const Tensor& keep) {
  check_defined(weight, "embedding_bag", "weight");
  check_dim(weight, 2, "embedding_bag", "weight (num_embeddings, dim)");
  check_defined(ids, "embedding_bag", "ids");
  NN_CHECK(ids.dim() == 2, "embedding_bag: ids must be (N, L), got ", shape_str(ids.shape()));
  NN_CHECK(ids.dtype() == kI64 || ids.dtype() == kI32, "embedding_bag: ids must be i64 or i32, got ",
           dtype_name(ids.dtype()));
  NN_CHECK(ids.device() == weight.device(), "embedding_bag: ids on ", ids.device().str(),
           ", weight on ", weight.device().str());
  const int64_t N = ids.shape()[0], L = ids.shape()[1];
  // Each token's share of its row's mean: 1/L, or 1/(kept tokens) for kept ones and 0 for
  // the rest (a row without tokens is all zeros). f64 for an f64 table, else f32.
  const TensorOptions wopts = TensorOptions(acc_dtype(weight.dtype())).device(weight.device());
  Tensor shares;
  {
    NoGradGuard ng;
    if (!keep.defined()) {
      shares = full({N, L}, L ? 1.0 / double(L) : 0.0, wopts);
    } else {
      NN_CHECK(keep.shape() == ids.shape(), "embedding_bag: keep mask ", shape_str(keep.shape()),
               " does not match ids ", shape_str(ids.shape()));
      NN_CHECK(keep.device() == weight.device(), "embedding_bag: keep on ", keep.device().str(),
               ", weight on ", weight.device().str());
      Tensor m = ne(keep, zeros({}, keep.options())).to(wopts.dtype_);
      shares = raw_contiguous(m / clamp(sum(m, {1}, true), 1.0, 1e30));
    }
  }
  // One fused pass over the table's rows: the (N, L, D) gathered rows never exist.
  Tensor table = raw_contiguous(weight), idx = raw_contiguous(ids);
  Tensor out = empty({N, weight.shape()[1]}, weight.options());
  backend::of(weight).embedding_bag_forward(table, idx, shares, out);
  record("embedding_bag", {weight}, out, {idx},
         [idx, shares, ws = weight.shape(), opts = weight.options()](const Tensor& g, auto&) {
    Tensor gw = zeros(ws, opts);
    backend::of(g).embedding_bag_backward(raw_contiguous(g), idx, shares, gw);
    return std::vector<Tensor>{gw};
  });
  return out;
}

}  // namespace nn
