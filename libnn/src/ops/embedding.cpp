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
  const int64_t skip = padding_idx ? *padding_idx : -1;
  record("embedding", {weight}, out,
         [idx = raw_contiguous(flat), ws = weight.shape(), opts = weight.options(), skip](
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
  check_defined(ids, "embedding_bag", "ids");
  NN_CHECK(ids.dim() == 2, "embedding_bag: ids must be (N, L), got ", shape_str(ids.shape()));
  Tensor e = embedding(weight, ids);  // (N, L, D)
  if (!keep.defined()) return mean(e, {1});
  NN_CHECK(keep.shape() == ids.shape(), "embedding_bag: keep mask ", shape_str(keep.shape()),
           " does not match ids ", shape_str(ids.shape()));
  // The masked mean as one batched product, (N, 1, L) weights x (N, L, D) rows: a single
  // pass over the gathered rows instead of a masked copy and a reduction.
  Tensor m = ne(keep, zeros({}, keep.options())).to(e.dtype());  // (N, L)
  Tensor w = m / clamp(sum(m, {1}, true), 1.0, 1e30);  // (N, L), rows sum to 1 or 0
  return matmul(w.unsqueeze(1), e).squeeze(1);
}

}  // namespace nn
