// Views (share storage, cost no copy) and the shape ops that copy: contiguous, clone,
// concat, stack, index_select. Each is differentiable.
#include <algorithm>
#include <optional>

#include "ops/common.h"

namespace nn {
using namespace ops;

namespace {
Shape infer_shape(const Shape& shape, int64_t numel, const char* op) {
  Shape s = shape;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      NN_CHECK(infer < 0, op, ": only one dimension can be -1 in ", shape_str(shape));
      infer = int64_t(i);
    } else {
      NN_CHECK(s[i] >= 0, op, ": invalid dimension in ", shape_str(shape));
      known *= s[i];
    }
  }
  if (infer >= 0) {
    NN_CHECK(known > 0 && numel % known == 0, op, ": shape ", shape_str(shape),
             " is invalid for ", numel, " elements");
    s[infer] = numel / known;
  }
  NN_CHECK(numel_of(s) == numel, op, ": shape ", shape_str(shape), " is invalid for ", numel,
           " elements");
  return s;
}

// Strides that let `newshape` view memory laid out as (oldshape, oldstride), if any exist.
std::optional<Shape> view_strides(const Shape& oldshape, const Shape& oldstride,
                                  const Shape& newshape) {
  Shape ns(newshape.size(), 1);
  if (oldshape.empty()) return ns;
  int64_t numel = numel_of(oldshape);
  if (numel == 0) return contiguous_strides(newshape);
  int64_t view_d = int64_t(newshape.size()) - 1;
  int64_t chunk = oldstride.back(), tensor_numel = 1, view_numel = 1;
  for (int64_t d = int64_t(oldshape.size()) - 1; d >= 0; --d) {
    tensor_numel *= oldshape[d];
    if (d == 0 || (oldshape[d - 1] != 1 && oldstride[d - 1] != tensor_numel * chunk)) {
      while (view_d >= 0 && (view_numel < tensor_numel || newshape[view_d] == 1)) {
        ns[view_d] = view_numel * chunk;
        view_numel *= newshape[view_d];
        view_d--;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk = oldstride[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return ns;
}

// Records a view's backward: the gradient reshaped back to the input's shape.
Tensor reshaped_view(const Tensor& x, const Shape& s, const Shape& st, const char* name) {
  Tensor out = make_view(x, s, st, x.offset());
  record(name, {x}, out, [xs = x.shape()](const Tensor& g, auto&) {
    return std::vector<Tensor>{g.reshape(xs)};
  });
  return out;
}
}  // namespace

Tensor Tensor::view(const Shape& shape) const {
  Shape s = infer_shape(shape, numel(), "view");
  auto st = view_strides(this->shape(), strides(), s);
  NN_CHECK(st.has_value(), "view: shape ", shape_str(s), " is not compatible with the strides of "
           "this ", shape_str(this->shape()), " tensor; use reshape() (which copies)");
  return reshaped_view(*this, s, *st, "view");
}

Tensor Tensor::reshape(const Shape& shape) const {
  Shape s = infer_shape(shape, numel(), "reshape");
  if (auto st = view_strides(this->shape(), strides(), s)) return reshaped_view(*this, s, *st, "reshape");
  return contiguous().view(s);
}

Tensor Tensor::flatten(int64_t start, int64_t end) const {
  if (dim() == 0) return reshape({1});
  int64_t a = wrap_dim(start, dim()), b = wrap_dim(end, dim());
  NN_CHECK(a <= b, "flatten: start dim ", start, " after end dim ", end);
  Shape s(shape().begin(), shape().begin() + a);
  int64_t m = 1;
  for (int64_t i = a; i <= b; ++i) m *= shape()[i];
  s.push_back(m);
  s.insert(s.end(), shape().begin() + b + 1, shape().end());
  return reshape(s);
}

Tensor Tensor::permute(const Shape& dims) const {
  NN_CHECK(int64_t(dims.size()) == dim(), "permute: ", dims.size(), " dims given for a ", dim(),
           "-d tensor");
  Shape s(dims.size()), st(dims.size()), inv(dims.size(), -1);
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t d = wrap_dim(dims[i], dim());
    NN_CHECK(inv[d] < 0, "permute: dim ", d, " repeated in ", shape_str(dims));
    inv[d] = int64_t(i);
    s[i] = shape()[d];
    st[i] = strides()[d];
  }
  Tensor out = make_view(*this, s, st, offset());
  record("permute", {*this}, out, [inv](const Tensor& g, auto&) {
    return std::vector<Tensor>{g.permute(inv)};
  });
  return out;
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  Shape p(dim());
  for (int64_t i = 0; i < dim(); ++i) p[i] = i;
  std::swap(p[wrap_dim(d0, dim())], p[wrap_dim(d1, dim())]);
  return permute(p);
}

Tensor Tensor::slice(int64_t dim_, int64_t start, int64_t end, int64_t step) const {
  int64_t d = wrap_dim(dim_, dim());
  NN_CHECK(step > 0, "slice: step must be positive, got ", step);
  const int64_t n = shape()[d];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape s = shape(), st = strides();
  s[d] = (end - start + step - 1) / step;
  st[d] *= step;
  Tensor out = make_view(*this, s, st, offset() + start * strides()[d]);
  record("slice", {*this}, out, [xs = shape(), opts = options(), d, start, end, step](
                                     const Tensor& g, auto&) {
    Tensor gx = zeros(xs, opts);
    Tensor part = gx.slice(d, start, end, step);
    backend::of(gx).copy(g, part);
    return std::vector<Tensor>{gx};
  });
  return out;
}

Tensor Tensor::t() const {
  NN_CHECK(dim() <= 2, "t: expects a tensor of at most 2 dims, got ", dim(), " (transpose(d0, d1) names the dims)");
  return dim() < 2 ? *this : transpose(0, 1);
}

Tensor Tensor::narrow(int64_t dim_, int64_t start, int64_t length) const {
  int64_t d = wrap_dim(dim_, dim());
  if (start < 0 && start >= -shape()[d]) start += shape()[d];  // counted from the end
  NN_CHECK(start >= 0 && length >= 0 && start + length <= shape()[d], "narrow: [", start, ", ",
           start + length, ") is outside dim ", d, " of size ", shape()[d]);
  return slice(d, start, start + length);
}

Tensor Tensor::select(int64_t dim_, int64_t index) const {
  int64_t d = wrap_dim(dim_, dim());
  const int64_t n = shape()[d];
  NN_CHECK(index >= -n && index < n, "select: index ", index, " out of range for dim ", d,
           " of size ", n);
  if (index < 0) index += n;
  return slice(d, index, index + 1).squeeze(d);
}

Tensor Tensor::squeeze() const {
  Shape s, st;
  for (int64_t i = 0; i < dim(); ++i)
    if (shape()[i] != 1) { s.push_back(shape()[i]); st.push_back(strides()[i]); }
  return reshaped_view(*this, s, st, "squeeze");
}

Tensor Tensor::squeeze(int64_t dim_) const {
  int64_t d = wrap_dim(dim_, std::max<int64_t>(dim(), 1));  // a 0-d tensor: itself
  if (dim() == 0 || shape()[d] != 1) return *this;
  Shape s = shape(), st = strides();
  s.erase(s.begin() + d);
  st.erase(st.begin() + d);
  return reshaped_view(*this, s, st, "squeeze");
}

Tensor Tensor::unsqueeze(int64_t dim_) const {
  int64_t d = wrap_dim(dim_, dim() + 1);
  Shape s = shape(), st = strides();
  int64_t stride = d < dim() ? strides()[d] * shape()[d] : 1;
  s.insert(s.begin() + d, 1);
  st.insert(st.begin() + d, stride);
  return reshaped_view(*this, s, st, "unsqueeze");
}

Tensor Tensor::expand(const Shape& shape_in) const {
  Shape s = shape_in;
  const int64_t lead = int64_t(s.size()) - dim();
  NN_CHECK(lead >= 0, "expand: cannot expand ", shape_str(shape()), " to ", shape_str(shape_in));
  for (int64_t i = lead; i < int64_t(s.size()); ++i)
    if (s[i] == -1) s[i] = shape()[i - lead];
  for (int64_t n : s)
    NN_CHECK(n >= 0, "expand: cannot expand ", shape_str(shape()), " to ", shape_str(shape_in),
             " (-1 keeps an existing dim; new leading dims need a size >= 0)");
  if (s == shape()) return *this;
  checked_numel(s);  // (a view: nothing allocated that would say so)
  Tensor out = raw_expand(*this, s);
  record("expand", {*this}, out, [xs = shape()](const Tensor& g, auto&) {
    return std::vector<Tensor>{sum_to(g, xs)};
  });
  return out;
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::contiguous(MemoryFormat f) const {
  if (f == MemoryFormat::contiguous) return contiguous();
  check_dim(*this, 4, "contiguous(channels_last)", "input (N, C, H, W)");
  if (is_contiguous(f)) return *this;
  Tensor out = empty(shape(), options(), f);
  backend::of(*this).copy(*this, out);
  record("contiguous", {*this}, out, [](const Tensor& g, auto&) { return std::vector<Tensor>{g}; });
  return out;
}

Tensor Tensor::clone() const {
  Tensor out = empty(shape(), options());
  backend::of(*this).copy(*this, out);
  record("clone", {*this}, out, [](const Tensor& g, auto&) { return std::vector<Tensor>{g}; });
  return out;
}

Tensor concat(const std::vector<Tensor>& ts_in, int64_t dim) {
  NN_CHECK(!ts_in.empty(), "concat: no tensors given");
  // mixed dtypes meet in their common one (promote_types, as PyTorch's cat), through
  // differentiable casts
  for (const Tensor& t : ts_in) check_defined(t, "concat");
  DType common = ts_in[0].dtype();
  for (const Tensor& t : ts_in) common = promote_types(common, t.dtype());
  std::vector<Tensor> cast;
  if (std::any_of(ts_in.begin(), ts_in.end(), [&](const Tensor& t) { return t.dtype() != common; }))
    for (const Tensor& t : ts_in) cast.push_back(t.to(common));
  const std::vector<Tensor>& ts = cast.empty() ? ts_in : cast;
  const Tensor& first = ts[0];
  check_defined(first, "concat");
  int64_t d = wrap_dim(dim, first.dim());
  Shape s = first.shape();
  s[d] = 0;
  std::vector<int64_t> sizes;
  for (size_t i = 0; i < ts.size(); ++i) {
    check_pair(first, ts[i], "concat");
    NN_CHECK(ts[i].dim() == first.dim(), "concat: tensor ", i, " has shape ",
             shape_str(ts[i].shape()), ", tensor 0 has ", shape_str(first.shape()));
    for (int64_t k = 0; k < first.dim(); ++k)
      NN_CHECK(k == d || ts[i].shape()[k] == first.shape()[k], "concat: tensor ", i,
               " has shape ", shape_str(ts[i].shape()), ", expected ", shape_str(first.shape()),
               " except in dim ", d);
    sizes.push_back(ts[i].shape()[d]);
    s[d] += ts[i].shape()[d];
  }
  Tensor out = empty(s, first.options());
  std::vector<Tensor> parts;
  int64_t off = 0;
  for (size_t i = 0; i < ts.size(); ++i) {
    Shape ps = s;
    ps[d] = sizes[i];
    parts.push_back(make_view(out, ps, out.strides(), off * out.strides()[d]));
    off += sizes[i];
  }
  backend::of(out).copy_many(ts, parts);
  // Leaves (parameters concatenated for one product, as BERT's q, k and v weights) get their
  // gradients as fresh tensors, made in one call, which they adopt; a slice of g, which
  // shares its storage with the others, would be copied for each. Other inputs get slices.
  std::vector<bool> leaf;
  for (const Tensor& t : ts) leaf.push_back(t.is_leaf() && t.requires_grad());
  record("concat", ts, out, [d, sizes, leaf](const Tensor& g, auto& need) {
    std::vector<Tensor> gs, slices, fresh;
    int64_t o = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      Tensor gi = need[i] ? g.slice(d, o, o + sizes[i]) : Tensor();
      if (gi.defined() && leaf[i]) {
        slices.push_back(gi);
        gi = empty(gi.shape(), gi.options());
        fresh.push_back(gi);
      }
      gs.push_back(gi);
      o += sizes[i];
    }
    if (!fresh.empty()) backend::of(g).copy_many(slices, fresh);
    return gs;
  });
  return out;
}

Tensor stack(const std::vector<Tensor>& ts, int64_t dim) {
  NN_CHECK(!ts.empty(), "stack: no tensors given");
  int64_t d = wrap_dim(dim, ts[0].dim() + 1);
  std::vector<Tensor> us;
  for (size_t i = 0; i < ts.size(); ++i) {
    NN_CHECK(ts[i].shape() == ts[0].shape(), "stack: tensor ", i, " has shape ",
             shape_str(ts[i].shape()), ", tensor 0 has ", shape_str(ts[0].shape()));
    us.push_back(ts[i].unsqueeze(d));
  }
  return concat(us, d);
}

Tensor index_select(const Tensor& x, const Tensor& index) {
  check_defined(x, "index_select");
  check_defined(index, "index_select", "index");
  NN_CHECK(index.dtype() == kI64 || index.dtype() == kI32, "index_select: index must be i64 or "
           "i32, got ", dtype_name(index.dtype()));
  NN_CHECK(index.dim() == 1, "index_select: index must be 1-d, got shape ",
           shape_str(index.shape()));
  NN_CHECK(x.dim() >= 1, "index_select: input must have at least one dim");
  NN_CHECK(index.device() == x.device(), "index_select: index on ", index.device().str(),
           ", input on ", x.device().str());
  Tensor xc = raw_contiguous(x);
  const int64_t V = x.shape()[0], D = V ? x.numel() / V : 0;
  Shape os = x.shape();
  os[0] = index.numel();
  Tensor out = empty(os, x.options());
  Tensor src2 = make_view(xc, {V, D}, {D, 1}, xc.offset());
  Tensor out2 = make_view(out, {os[0], D}, {D, 1}, 0);
  Tensor idx = raw_contiguous(index);
  backend::of(x).gather_rows(src2, idx, out2);
  record("index_select", {x}, out, {idx}, [idx, xs = x.shape(), opts = x.options(), V, D](
                                       const Tensor& g, auto&) {
    Tensor gx = zeros(xs, opts);
    Tensor gx2 = make_view(gx, {V, D}, {D, 1}, 0);
    Tensor gc = raw_contiguous(g);
    backend::of(g).scatter_add_rows(make_view(gc, {gc.shape()[0], D}, {D, 1}, gc.offset()), idx,
                                    -1, gx2);
    return std::vector<Tensor>{gx};
  });
  return out;
}

namespace {
// The dim split and chunk cut, checked.
int64_t piece_dim(const Tensor& x, int64_t dim, const char* op) {
  check_defined(x, op);
  NN_CHECK(x.dim() > 0, op, ": needs a tensor of at least one dim, got a 0-d tensor");
  return wrap_dim(dim, x.dim());
}
}  // namespace

std::vector<Tensor> split(const Tensor& x, int64_t size, int64_t dim) {
  const int64_t d = piece_dim(x, dim, "split"), n = x.shape()[d];
  NN_CHECK(size > 0, "split: the piece size must be positive, got ", size);
  std::vector<Tensor> pieces;
  for (int64_t start = 0; start < n; start += size) pieces.push_back(x.narrow(d, start, std::min(size, n - start)));
  if (pieces.empty()) pieces.push_back(x);  // an empty dim: one empty piece, as torch.split
  return pieces;
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  const int64_t d = piece_dim(x, dim, "chunk"), n = x.shape()[d];
  NN_CHECK(chunks > 0, "chunk: the number of chunks must be positive, got ", chunks);
  if (n == 0) return std::vector<Tensor>(size_t(chunks), x);  // torch.chunk: `chunks` empty pieces
  return split(x, (n + chunks - 1) / chunks, d);
}

namespace {
void check_pads(const Tensor& x, const std::vector<int64_t>& pads) {
  check_defined(x, "pad");
  const int64_t nd = x.dim();
  NN_CHECK(pads.size() % 2 == 0 && int64_t(pads.size()) <= 2 * nd, "pad: needs two amounts per "
           "padded dim, at most ", 2 * nd, " for a ", nd, "-d tensor, got ", pads.size());
}
}  // namespace

Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, double value) {
  check_pads(x, pads);
  check_value_fits(x.dtype(), value, "pad");  // (300 into u8: an error, as PyTorch's)
  const int64_t nd = x.dim();
  // crops first (negative amounts: differentiable narrows), then the padding around the rest
  Tensor c = x;
  Shape out_shape = x.shape(), lo(size_t(nd), 0);
  for (size_t k = 0; k < pads.size(); k += 2) {
    const int64_t d = nd - 1 - int64_t(k / 2), before = pads[k], after = pads[k + 1];
    const int64_t cut = std::max<int64_t>(0, -before) + std::max<int64_t>(0, -after);
    NN_CHECK(cut <= c.shape()[d], "pad: cropping ", cut, " from dim ", d, " of size ",
             c.shape()[d], " leaves less than nothing (input ", shape_str(x.shape()), ")");
    c = c.narrow(d, std::max<int64_t>(0, -before), c.shape()[d] - cut);
    lo[size_t(d)] = std::max<int64_t>(0, before);
    out_shape[size_t(d)] = c.shape()[d] + lo[size_t(d)] + std::max<int64_t>(0, after);
  }
  if (out_shape == c.shape()) return c.clone();  // new memory, as F.pad's, crops or not
  Tensor out = full(out_shape, value, x.options());
  int64_t off = 0;
  for (int64_t d = 0; d < nd; ++d) off += lo[size_t(d)] * out.strides()[d];
  Tensor inner = make_view(out, c.shape(), out.strides(), off);
  if (c.numel() > 0) backend::of(out).copy(c, inner);
  record("pad", {c}, out, [lo, cs = c.shape()](const Tensor& g, auto&) {
    Tensor gi = g;
    for (size_t d = 0; d < cs.size(); ++d) gi = gi.narrow(int64_t(d), lo[d], cs[d]);
    return std::vector<Tensor>{gi};
  });
  return out;
}

Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, PadMode mode, double value) {
  if (mode == PadMode::constant) return pad(x, pads, value);
  check_pads(x, pads);
  const char* name = mode == PadMode::reflect ? "reflect" : mode == PadMode::replicate ? "replicate" : "circular";
  // one dim at a time: the source position of every output position along it, then a gather
  // of those slices (index_select over the dim brought first), whose gradient sums back
  Tensor out = x;
  for (size_t k = 0; k < pads.size(); k += 2) {
    const int64_t d = x.dim() - 1 - int64_t(k / 2), before = pads[k], after = pads[k + 1];
    const int64_t n = x.shape()[d];
    NN_CHECK(before >= 0 && after >= 0, "pad: ", name, " padding takes amounts >= 0 (crops are the "
             "constant mode's), got ", before, " and ", after, " for dim ", d);
    if (before == 0 && after == 0) continue;
    switch (mode) {
      case PadMode::reflect:
        NN_CHECK(before < n && after < n, "pad: reflect padding of ", before, " and ", after,
                 " needs each less than the size of dim ", d, " (", n, ")");
        break;
      case PadMode::replicate:
        NN_CHECK(n > 0, "pad: replicate padding of the empty dim ", d);
        break;
      default:
        NN_CHECK(before <= n && after <= n, "pad: circular padding of ", before, " and ", after,
                 " needs each at most the size of dim ", d, " (", n, ")");
    }
    std::vector<int64_t> src(size_t(n + before + after));
    for (int64_t i = 0; i < int64_t(src.size()); ++i) {
      const int64_t p = i - before;  // the position in x, before folding it in
      src[size_t(i)] = mode == PadMode::reflect     ? (p < 0 ? -p : p >= n ? 2 * (n - 1) - p : p)
                       : mode == PadMode::replicate ? std::clamp<int64_t>(p, 0, n - 1)
                                                    : ((p % n) + n) % n;
    }
    const Tensor index = from_vector<int64_t>(src, {int64_t(src.size())}).to(x.device());
    out = index_select(out.transpose(0, d), index).transpose(0, d);
  }
  return out.is_same(x) ? x.clone() : out.contiguous();
}

}  // namespace nn
