// Tensor metadata, factories, in-place helpers and autograd accessors.
#include <nn/autograd.h>
#include <nn/ops.h>
#include <nn/random.h>
#include <nn/tensor.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/backend.h"
#include "core/util.h"
#include "kernels/philox.h"

namespace nn {

namespace {
TensorImpl& impl_of(const Tensor& t) {
  NN_CHECK(t.defined(), "operation on an undefined tensor");
  return *t.impl();
}
// Every in-place method calls this after its own checks, just before it writes: refuses, in
// grad mode, a target that requires grad and a source that does (in-place ops are not
// recorded, so the source's gradient would be lost without a word), and counts the write in
// the storage's version (so backward can refuse what it saved and was changed since; a call
// refused earlier leaves the version alone).
void begin_inplace(const Tensor& t, const char* op, const Tensor* src = nullptr) {
  NN_CHECK(!(grad_enabled() && t.requires_grad()), op,
           ": in-place change of a tensor that requires grad while grad mode is on (wrap it "
           "in nn::NoGradGuard)");
  NN_CHECK(!(grad_enabled() && src && src->defined() && src->requires_grad()), op,
           ": the source requires grad, and in-place ops are not recorded, so its gradient "
           "would be lost; build the tensor with a recorded op (concat, stack, where, ...), or "
           "pass src.detach() or wrap the call in nn::NoGradGuard if no gradient should flow");
  t.storage()->bump_version();
}

// The lowest and highest element (in storage units) a view reaches. Strides are never negative.
std::pair<int64_t, int64_t> element_span(const Tensor& t) {
  int64_t hi = t.offset();
  for (int64_t d = 0; d < t.dim(); ++d) hi += (t.size(d) - 1) * t.stride(d);
  return {t.offset(), hi};
}

// True when two indices of `t` may reach one element: a size>1 dim of stride 0 (an expanded
// view), or strides that interleave (refused without checking whether two indices really
// meet; views made by slicing, permuting and selecting never interleave).
bool has_internal_overlap(const Tensor& t) {
  if (t.numel() <= 1) return false;
  std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, size) of the dims that count
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.size(d) > 1) dims.emplace_back(t.stride(d), t.size(d));
  std::sort(dims.begin(), dims.end());
  int64_t reach = 0;  // furthest offset the smaller strides reach from a dim's origin
  for (auto [stride, size] : dims) {
    if (stride <= reach) return true;
    reach += (size - 1) * stride;
  }
  return false;
}

// An in-place write whose target holds one element under several indices would depend on
// the order the elements are visited in: refused, like PyTorch.
void check_no_internal_overlap(const Tensor& t, const char* op) {
  NN_CHECK(!has_internal_overlap(t), op, ": the tensor of shape ", shape_str(t.shape()),
           " and strides ", shape_str(t.strides()), " holds some elements under more than one "
           "index (an expanded view?), so an in-place write is ill-defined; write into a copy "
           "(contiguous()) instead");
}

// True when writing `dst` element by element could change `src` before it is read: both in
// one storage, their spans intersecting, and not the very same view.
bool may_read_own_writes(const Tensor& dst, const Tensor& src) {
  if (dst.storage() != src.storage() || dst.numel() == 0) return false;
  if (dst.offset() == src.offset() && dst.strides() == src.strides()) return false;
  auto [dlo, dhi] = element_span(dst);
  auto [slo, shi] = element_span(src);
  return dlo <= shi && slo <= dhi;
}
}  // namespace

const Shape& Tensor::shape() const { return impl_of(*this).shape; }
const Shape& Tensor::strides() const { return impl_of(*this).strides; }
int64_t Tensor::offset() const { return impl_of(*this).offset; }
DType Tensor::dtype() const { return impl_of(*this).dtype; }
Device Tensor::device() const { return impl_of(*this).storage->device(); }
const std::shared_ptr<Storage>& Tensor::storage() const { return impl_of(*this).storage; }
int64_t Tensor::size(int64_t d) const { return shape()[wrap_dim(d, dim())]; }
int64_t Tensor::stride(int64_t d) const { return strides()[wrap_dim(d, dim())]; }

int64_t Tensor::numel() const { return numel_of(shape()); }

bool Tensor::is_contiguous() const {
  const auto& sh = shape();
  const auto& st = strides();
  int64_t expected = 1;
  for (int64_t i = int64_t(sh.size()) - 1; i >= 0; --i) {
    if (sh[i] == 1) continue;
    if (st[i] != expected) return false;
    expected *= sh[i];
  }
  return true;
}

bool Tensor::is_contiguous(MemoryFormat f) const {
  if (f == MemoryFormat::contiguous) return is_contiguous();
  if (dim() != 4) return false;
  const auto& sh = shape();
  const auto& st = strides();
  int64_t expected = 1;
  for (int64_t i : {1, 3, 2, 0}) {  // C innermost, then W, H, N
    if (sh[i] == 1) continue;
    if (st[i] != expected) return false;
    expected *= sh[i];
  }
  return true;
}

void* Tensor::data_ptr() const {
  auto& im = impl_of(*this);
  auto* base = static_cast<char*>(im.storage->data());
  return base ? base + im.offset * int64_t(element_size(im.dtype)) : nullptr;
}

// ---- helpers (core/util.h) --------------------------------------------------------------------
int64_t wrap_dim(int64_t d, int64_t ndim) {
  NN_CHECK(d >= -ndim && d < ndim, "dimension ", d, " out of range for a ", ndim, "-d tensor");
  return d < 0 ? d + ndim : d;
}

int64_t numel_of(const Shape& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

Tensor make_view(const Tensor& base, Shape shape, Shape strides, int64_t offset) {
  auto v = std::make_shared<TensorImpl>();
  v->storage = base.storage();
  v->shape = std::move(shape);
  v->strides = std::move(strides);
  v->offset = offset;
  v->dtype = base.dtype();
  return Tensor(std::move(v));
}

Shape channels_last_strides(const Shape& s) {
  NN_CHECK(s.size() == 4, "channels_last needs a 4-d (N, C, H, W) shape, got ", shape_str(s));
  return {s[1] * s[2] * s[3], 1, s[3] * s[1], s[1]};
}

bool is_channels_last(const Tensor& t) {
  return t.dim() == 4 && t.is_contiguous(MemoryFormat::channels_last) && !t.is_contiguous();
}

Tensor nhwc_view(const Tensor& t) {
  NN_CHECK(t.dim() == 4, "nhwc_view: needs a 4-d (N, C, H, W) tensor, got ", shape_str(t.shape()));
  const Shape& s = t.shape();
  const Shape& st = t.strides();
  return make_view(t, {s[0], s[2], s[3], s[1]}, {st[0], st[2], st[3], st[1]}, t.offset());
}

Shape contiguous_strides(const Shape& shape) {
  Shape st(shape.size());
  int64_t s = 1;
  for (int64_t i = int64_t(shape.size()) - 1; i >= 0; --i) {
    st[i] = s;
    s *= shape[i];
  }
  return st;
}

int64_t checked_numel(const Shape& shape) {
  int64_t n = 1, bound = 1;  // bound: the product of max(s, 1), so a 0 dim hides no overflow
  for (int64_t s : shape) {
    NN_CHECK(s >= 0, "negative dimension in shape ", shape_str(shape));
    NN_CHECK(!__builtin_mul_overflow(bound, std::max<int64_t>(s, 1), &bound) &&
                 bound <= (int64_t(1) << 56),
             "shape ", shape_str(shape), " has too many elements");
    n *= s;
  }
  return n;
}

Tensor empty(const Shape& shape, TensorOptions opts) {
  const int64_t n = checked_numel(shape);
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(size_t(n) * element_size(opts.dtype_), opts.device_);
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = opts.dtype_;
  Tensor t(std::move(impl));
  if (opts.requires_grad_) t.requires_grad_(true);
  return t;
}

Tensor empty(const Shape& shape, TensorOptions opts, MemoryFormat f) {
  if (f == MemoryFormat::contiguous) return empty(shape, opts);
  const Shape strides = channels_last_strides(shape);
  Tensor t = empty(shape, opts);
  t.impl()->strides = strides;
  return t;
}

Tensor full(const Shape& shape, double value, TensorOptions opts) {
  check_value_fits(opts.dtype_, value, "full");
  Tensor t = empty(shape, opts.requires_grad(false));
  backend::of(t).fill(t, value);
  if (opts.requires_grad_) t.requires_grad_(true);
  return t;
}
Tensor zeros(const Shape& shape, TensorOptions opts) { return full(shape, 0.0, opts); }
Tensor ones(const Shape& shape, TensorOptions opts) { return full(shape, 1.0, opts); }
Tensor empty_like(const Tensor& t) { return empty(t.shape(), t.options()); }
Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), t.options()); }
Tensor ones_like(const Tensor& t) { return ones(t.shape(), t.options()); }

Tensor arange(int64_t end, TensorOptions opts) { return arange(0, double(end), 1, opts); }
Tensor arange(double start, double end, double step, TensorOptions opts) {
  NN_CHECK(step != 0, "arange: step must be non-zero");
  NN_CHECK(std::isfinite(start) && std::isfinite(end) && std::isfinite(step),
           "arange: start, end and step must be finite, got ", start, ", ", end, ", ", step);
  // as PyTorch: an end on the wrong side of start for the step's sign is an error, not empty
  NN_CHECK(end == start || (end > start) == (step > 0), "arange: end ", end,
           " is not reachable from start ", start, " with step ", step);
  double count = std::ceil((end - start) / step);
  NN_CHECK(count < 0x1p62, "arange: ", count, " elements are too many");
  auto n = int64_t(count);
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = start + double(i) * step;
  return tensor(v, {n}, opts);
}

static Tensor random_tensor(const Shape& shape, TensorOptions opts, Generator* gen,
                            backend::RandomKind kind, double a, double b) {
  Tensor t = empty(shape, opts.requires_grad(false));
  t.impl()->requires_grad = false;
  Generator& g = gen ? *gen : default_generator();
  uint64_t offset = g.advance(uint64_t(t.numel()));
  backend::of(t).fill_random(t, kind, a, b, g.seed(), offset);
  if (opts.requires_grad_) t.requires_grad_(true);
  return t;
}
Tensor rand(const Shape& shape, TensorOptions opts, Generator* gen) {
  NN_CHECK(is_floating(opts.dtype_), "rand: dtype must be floating, got ", dtype_name(opts.dtype_));
  return random_tensor(shape, opts, gen, backend::RandomKind::uniform, 0.0, 1.0);
}
Tensor randn(const Shape& shape, TensorOptions opts, Generator* gen) {
  NN_CHECK(is_floating(opts.dtype_), "randn: dtype must be floating, got ", dtype_name(opts.dtype_));
  return random_tensor(shape, opts, gen, backend::RandomKind::normal, 0.0, 1.0);
}
Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions opts, Generator* gen) {
  NN_CHECK(high > low, "randint: empty range [", low, ", ", high, ")");
  // both ends values of the dtype (as PyTorch checks): a draw is never wrapped into another
  // (a floating dtype: its exact integers, as PyTorch's random_ checks, so no draw rounds to
  // high or past it)
  const DType dt = opts.dtype_;
  auto [lo, hi] = integer_range(dt);
  if (is_floating(dt)) {
    const int digits = dt == kF16 ? 11 : dt == kBF16 ? 8 : dt == kF32 ? 24 : 53;
    hi = int64_t(1) << digits;
    lo = -hi;
  }
  NN_CHECK(low >= lo && high - 1 <= hi, "randint: the range [", low, ", ", high,
           ") does not fit a ", dtype_name(dt), " tensor",
           is_floating(dt) ? detail::cat(" (its integers are exact in [", lo, ", ", hi, "])")
                           : std::string());
  // element i: a 64-bit word (lanes 2(i % 2) and 2(i % 2) + 1 of counter block offset + i / 2)
  // scaled into [0, high - low) by a 128-bit product (every value reachable, bias below
  // (high - low) / 2^64), computed on the CPU then moved
  Tensor r = empty(shape, TensorOptions(kI64));
  Generator& g = gen ? *gen : default_generator();
  const int64_t n = r.numel();
  const uint64_t offset = g.advance(2 * uint64_t(n)), span = uint64_t(high) - uint64_t(low);
  int64_t* p = r.data<int64_t>();
  for (int64_t i = 0; i < n; i += 2) {
    const rng::U32x4 w = rng::philox(g.seed(), offset + uint64_t(i / 2));
    for (int k = 0; k < 2 && i + k < n; ++k) {
      const uint64_t word = uint64_t(w.v[2 * k]) << 32 | w.v[2 * k + 1];
      const auto v = uint64_t((unsigned __int128)word * span >> 64);
      p[i + k] = int64_t(uint64_t(low) + v);  // (in unsigned arithmetic: no overflow)
    }
  }
  return r.to(dt).to(opts.device_);
}

Tensor from_blob(const void* data, const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, TensorOptions(dtype).device(device));
  NN_CHECK(data || t.numel() == 0, "from_blob: a null pointer for ", t.numel(), " elements");
  if (t.numel() > 0) backend::of(t).upload(data, t);
  return t;
}

Tensor tensor(const std::vector<double>& values, const Shape& shape, TensorOptions opts) {
  for (double v : values) check_value_fits(opts.dtype_, v, "tensor");
  Tensor d = from_vector(values, shape);
  Tensor t = d.to(opts.dtype_).to(opts.device_);
  if (t.is_same(d)) t = d;
  if (opts.requires_grad_) t.requires_grad_(true);
  return t;
}
Tensor tensor(std::initializer_list<double> values, TensorOptions opts) {
  return tensor(std::vector<double>(values), {int64_t(values.size())}, opts);
}

// ---- reading values -------------------------------------------------------------------------
double Tensor::item() const {
  NN_CHECK(numel() == 1, "item(): tensor has ", numel(), " elements ", shape_str(shape()),
           ", expected exactly one");
  return to_vector<double>()[0];
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  NoGradGuard ng;
  Tensor c = detach().to(kCPU).to(dtype_of<T>()).contiguous();
  std::vector<T> v(size_t(c.numel()));
  if (!v.empty()) std::memcpy(v.data(), c.data_ptr(), v.size() * sizeof(T));
  return v;
}
template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<double> Tensor::to_vector<double>() const;
template std::vector<int32_t> Tensor::to_vector<int32_t>() const;
template std::vector<int64_t> Tensor::to_vector<int64_t>() const;
template std::vector<uint8_t> Tensor::to_vector<uint8_t>() const;

// ---- in-place ---------------------------------------------------------------------------------
Tensor& Tensor::zero_() { return fill_(0.0); }
Tensor& Tensor::fill_(double value) {
  NN_CHECK(defined(), "fill_: an undefined tensor");
  check_value_fits(dtype(), value, "fill_");  // (as full: 300 into u8 gave 44)
  begin_inplace(*this, "fill_");
  backend::of(*this).fill(*this, value);
  return *this;
}
Tensor& Tensor::copy_(const Tensor& src) {
  NN_CHECK(src.defined(), "copy_: the source is an undefined tensor");
  Shape bs = broadcast_shapes(src.shape(), shape());
  NN_CHECK(bs == shape(), "copy_: source of shape ", shape_str(src.shape()),
           " does not broadcast to ", shape_str(shape()));
  check_no_internal_overlap(*this, "copy_");
  begin_inplace(*this, "copy_", &src);
  NoGradGuard ng;
  Tensor s = src.device() == device() ? src : src.detach().to(device());
  Tensor e = s.expand(shape());
  // a source that shares memory with this view (a shifted slice, a transpose of a square
  // matrix) is read whole before anything is written: a copy of it at its own size
  if (may_read_own_writes(*this, e)) e = s.clone().expand(shape());
  backend::of(*this).copy(e, *this);
  return *this;
}
Tensor& Tensor::add_(const Tensor& other, double alpha) {
  NN_CHECK(other.defined(), "add_: the operand is an undefined tensor");
  NN_CHECK(other.device() == device(), "add_: operand on ", other.device().str(), ", tensor on ",
           device().str());
  NN_CHECK(broadcast_shapes(other.shape(), shape()) == shape(), "add_: operand of shape ",
           shape_str(other.shape()), " does not broadcast to ", shape_str(shape()));
  if (alpha != 1.0) check_scalar_fits(other, alpha, "add_");
  // as libtorch: a floating sum is not stored into an integer tensor (f32 added into i32 was
  // truncated silently); within a kind (f32 into f16, i64 into i32) it is converted
  NN_CHECK(is_floating(dtype()) || !is_floating(other.dtype()), "add_: a ",
           dtype_name(other.dtype()), " operand added into a ", dtype_name(dtype()),
           " tensor would be truncated; convert the tensor first (.to(kF32))");
  check_no_internal_overlap(*this, "add_");
  begin_inplace(*this, "add_", &other);
  NoGradGuard ng;
  // A gradient added to one of its kind (same dtype and device, into a row-major tensor) is
  // one pass writing in place; anything else (promotion, alpha, a view that overlaps the
  // target) goes through a temporary.
  if (alpha == 1.0 && other.dtype() == dtype() && is_contiguous()) {
    const Tensor e = other.expand(shape());
    if (!may_read_own_writes(*this, e)) {
      backend::of(*this).binary(backend::BinaryOp::add, *this, e, *this);
      return *this;
    }
  }
  copy_(alpha == 1.0 ? add(*this, other) : add(*this, mul(other, alpha)));
  return *this;
}
// t op= value, in one pass over t.
static Tensor& scalar_inplace_(Tensor& t, backend::UnaryOp op, double value, const char* name) {
  check_scalar_fits(t, value, name);
  check_no_internal_overlap(t, name);
  begin_inplace(t, name);
  NoGradGuard ng;
  backend::of(t).unary(op, t, t, value, 0);
  return t;
}
Tensor& Tensor::add_(double value) {
  return scalar_inplace_(*this, backend::UnaryOp::add_scalar, value, "add_");
}
Tensor& Tensor::mul_(double value) {
  return scalar_inplace_(*this, backend::UnaryOp::mul_scalar, value, "mul_");
}
// Draws straight into the tensor when it is contiguous (one pass), else through a temporary.
static Tensor& fill_random_(Tensor& t, backend::RandomKind kind, double a, double b,
                            Generator* gen, const char* op) {
  check_no_internal_overlap(t, op);
  NN_CHECK(is_floating(t.dtype()), op, ": needs a floating tensor, got ", dtype_name(t.dtype()));
  begin_inplace(t, op);
  NoGradGuard ng;
  Generator& g = gen ? *gen : default_generator();
  if (t.is_contiguous()) {
    backend::of(t).fill_random(t, kind, a, b, g.seed(), g.advance(uint64_t(t.numel())));
    return t;
  }
  Tensor tmp = empty(t.shape(), t.options());
  backend::of(t).fill_random(tmp, kind, a, b, g.seed(), g.advance(uint64_t(t.numel())));
  return t.copy_(tmp);
}
Tensor& Tensor::uniform_(double low, double high, Generator* gen) {
  NN_CHECK(std::isfinite(low) && std::isfinite(high) && low <= high, "uniform_: needs finite "
           "low <= high, got [", low, ", ", high, ")");
  return fill_random_(*this, backend::RandomKind::uniform, low, high, gen, "uniform_");
}
Tensor& Tensor::normal_(double mean, double std, Generator* gen) {
  NN_CHECK(std::isfinite(mean) && std::isfinite(std) && std >= 0, "normal_: needs a finite mean "
           "and a finite std >= 0, got mean ", mean, ", std ", std);
  return fill_random_(*this, backend::RandomKind::normal, mean, std, gen, "normal_");
}

// ---- autograd accessors ---------------------------------------------------------------------
bool Tensor::requires_grad() const { return impl_of(*this).requires_grad; }
Tensor& Tensor::requires_grad_(bool on) {
  NN_CHECK(is_leaf(), "requires_grad_(): only leaf tensors can change it (use detach())");
  NN_CHECK(!on || is_floating(dtype()), "requires_grad_(): only floating tensors can require "
           "grad, this one is ", dtype_name(dtype()));
  impl_of(*this).requires_grad = on;
  return *this;
}
const Tensor& Tensor::grad() const { return impl_of(*this).grad; }
void Tensor::set_grad(const Tensor& g) {
  NN_CHECK(!g.defined() || g.shape() == shape(), "set_grad: gradient of shape ",
           shape_str(g.shape()), " for a tensor of shape ", shape_str(shape()));
  // (backward adds into it in place, and the optimizers read it as the parameter's kind)
  NN_CHECK(!g.defined() || (g.dtype() == dtype() && g.device() == device()), "set_grad: a ",
           dtype_name(g.dtype()), " gradient on ", g.device().str(), " for a ",
           dtype_name(dtype()), " tensor on ", device().str());
  impl_of(*this).grad = g;
}
const std::shared_ptr<Node>& Tensor::grad_fn() const { return impl_of(*this).grad_fn; }
void Tensor::backward(const Tensor& grad, bool retain_graph) const {
  run_backward(*this, grad, retain_graph);
}
Tensor Tensor::detach() const {
  auto& im = impl_of(*this);
  return make_view(*this, im.shape, im.strides, im.offset);
}
void Tensor::set_data(const Tensor& other) {
  auto& im = impl_of(*this);
  auto& o = impl_of(other);
  NN_CHECK(!im.requires_grad || is_floating(o.dtype), "set_data: a tensor that requires grad "
           "cannot take ", dtype_name(o.dtype), " data (only floating tensors can require grad)");
  im.storage = o.storage;
  im.shape = o.shape;
  im.strides = o.strides;
  im.offset = o.offset;
  im.dtype = o.dtype;
}

}  // namespace nn
