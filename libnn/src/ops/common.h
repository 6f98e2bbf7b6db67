// Helpers shared by the differentiable ops (internal).
#pragma once
#include <nn/autograd.h>
#include <nn/ops.h>
#include <nn/random.h>

#include <utility>

#include "backend/backend.h"
#include "core/util.h"

namespace nn::ops {

inline void check_defined(const Tensor& t, const char* op, const char* what = "input") {
  NN_CHECK(t.defined(), op, ": ", what, " is an undefined tensor");
}
// Same device and dtype, as every binary primitive needs.
inline void check_pair(const Tensor& a, const Tensor& b, const char* op) {
  check_defined(a, op);
  check_defined(b, op);
  NN_CHECK(a.device() == b.device(), op, ": tensors on different devices (", a.device().str(),
           " and ", b.device().str(), ")");
  NN_CHECK(a.dtype() == b.dtype(), op, ": dtype mismatch (", dtype_name(a.dtype()), " and ",
           dtype_name(b.dtype()), "); convert one with .to(dtype)");
}
// The dtype a floating tensor's sums and saved statistics are kept in: f64 for f64, else f32
// (16-bit values are summed, and what a backward reads of them is saved, in f32).
inline DType acc_dtype(DType t) { return t == kF64 ? kF64 : kF32; }
inline void check_floating(const Tensor& t, const char* op) {
  NN_CHECK(is_floating(t.dtype()), op, ": needs a floating tensor, got ", dtype_name(t.dtype()));
}
inline void check_dim(const Tensor& t, int64_t d, const char* op, const char* what) {
  NN_CHECK(t.dim() == d, op, ": ", what, " must be ", d, "-d, got shape ", shape_str(t.shape()));
}

// Output positions of a sliding window (convolution, pooling) along one dim: floor((in + 2 pad -
// dil (k - 1) - 1) / stride) + 1, so 0 or less when the padded input is shorter than the
// window (C++'s division truncates toward zero: an empty input would give 1). With `ceil`
// (pooling's ceil_mode) the division rounds up, so a last window may hang past the padded
// end (even the only one, of an input shorter than the window), but none starts past the
// input (PyTorch's rule: such a last position is dropped).
inline int64_t window_positions(int64_t in, int64_t pad, int64_t dil, int64_t k, int64_t stride,
                                bool ceil = false) {
  const int64_t span = in + 2 * pad - dil * (k - 1) - 1, top = span + (ceil ? stride - 1 : 0);
  if (top < 0) return 0;
  int64_t o = top / stride + 1;
  if (ceil && (o - 1) * stride >= in + pad) --o;
  return o;
}
// The Philox stream nn::dropout draws for n elements: gen's (else the default generator's)
// seed, and the offset of n counters reserved from it. {seed, offset}.
inline std::pair<uint64_t, uint64_t> draw_stream(Generator* gen, uint64_t n) {
  Generator& g = gen ? *gen : default_generator();
  const uint64_t offset = g.advance(n);
  return {g.seed(), offset};
}
// A 2-D operand seen as (1, R, C) for the backend's batched GEMM, without a copy (a 3-d one
// as it is).
inline Tensor lift3(const Tensor& t) {
  if (t.dim() == 3) return t;
  return make_view(t, {1, t.shape()[0], t.shape()[1]}, {0, t.strides()[0], t.strides()[1]},
                   t.offset());
}
// A broadcast view of t with stride 0 on expanded dims; no autograd.
Tensor raw_expand(const Tensor& t, const Shape& shape);
// t itself when contiguous, else a contiguous copy; no autograd.
Tensor raw_contiguous(const Tensor& t);
// The memory format of an elementwise result of shape `s`: channels-last when an input of that
// shape is, so layouts flow through activations and residual adds.
MemoryFormat format_for(const Shape& s, std::initializer_list<const Tensor*> ins);
// What a backend computes an elementwise op on: t, or its (N, H, W, C) view when the result is
// channels-last (then output and same-format inputs are contiguous in that view).
inline Tensor layout_view(const Tensor& t, MemoryFormat f) {
  return f == MemoryFormat::channels_last ? nhwc_view(t) : t;
}
// t itself when already in format f, else a copy in f; no autograd.
Tensor raw_format(const Tensor& t, MemoryFormat f);
// The same in dtype dt: one copy converts and lays out.
Tensor raw_format(const Tensor& t, MemoryFormat f, DType dt);
// The format conv, pool and batch norm compute x's op in: x's own, or row-major where x's
// backend computes that dtype only row-major (the op then converts its results back to x's).
inline MemoryFormat compute_format(const Tensor& x) {
  const MemoryFormat f = format_of(x);
  return f == MemoryFormat::channels_last && !backend::of(x).channels_last_native(x.dtype())
             ? MemoryFormat::contiguous
             : f;
}
// Dims wrapped, sorted and de-duplicated; empty means every dim.
Shape normalize_dims(const Shape& dims, int64_t ndim);

}  // namespace nn::ops
