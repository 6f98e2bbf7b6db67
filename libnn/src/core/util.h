// Small helpers shared by the core, ops and backends (internal).
#pragma once
#include <nn/error.h>
#include <nn/tensor.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>

namespace nn {

Shape contiguous_strides(const Shape& shape);
// Strides of a 4-d (N, C, H, W) shape stored NHWC.
Shape channels_last_strides(const Shape& shape);
// A 4-d tensor stored NHWC that is not also plain row-major (they coincide when C == 1 or
// H == W == 1): the tensors that take the channels-last paths of conv, norm and pool.
bool is_channels_last(const Tensor& t);
inline MemoryFormat format_of(const Tensor& t) {
  return is_channels_last(t) ? MemoryFormat::channels_last : MemoryFormat::contiguous;
}
// The (N, H, W, C) view of a 4-d (N, C, H, W) tensor: contiguous when t is channels-last, so
// elementwise work on channels-last tensors runs on the backends' contiguous paths.
Tensor nhwc_view(const Tensor& t);
int64_t numel_of(const Shape& shape);
// numel_of, throwing nn::Error for a negative dim or more than 2^56 elements (where the
// product would overflow): for a shape made from the user's numbers.
int64_t checked_numel(const Shape& shape);
// Wraps a possibly negative dim into [0, ndim); throws nn::Error when out of range.
int64_t wrap_dim(int64_t d, int64_t ndim);
// A tensor over `base`'s storage with the given geometry; no autograd history.
Tensor make_view(const Tensor& base, Shape shape, Shape strides, int64_t offset);
// A count read back from saved state (a step, a tracker): a whole number >= 0 that an int64_t
// holds exactly (NaN, negative and fractional values are not).
inline bool is_count(double v) { return v >= 0 && v < 9.0e15 && v == double(int64_t(v)); }
// An integer tensor computes with a scalar in its own dtype: a fractional scalar (a + 0.5,
// clamp(a, 1.5, 4.5)) would be truncated silently, so it is refused (libtorch would promote
// to a floating result; here the caller converts explicitly). So is one outside int64's
// range, in which integer tensors compute (kernels/int_math.h).
inline void check_scalar_fits(const Tensor& a, double b, const char* op) {
  if (is_floating(a.dtype())) return;
  NN_CHECK(std::isfinite(b) && b == std::trunc(b), op, ": a ", dtype_name(a.dtype()),
           " tensor with the fractional scalar ", b, " would truncate it; convert the tensor "
           "first (.to(kF32))");
  NN_CHECK(b >= -0x1p63 && b < 0x1p63, op, ": the scalar ", b, " is outside int64's range, in "
           "which a ", dtype_name(a.dtype()), " tensor computes; convert the tensor first "
           "(.to(kF64))");
}

// The integers an integer dtype holds, [first, second] (i64: all of them, as for the floating
// dtypes, whose exact integers the caller bounds).
inline std::pair<int64_t, int64_t> integer_range(DType dt) {
  switch (dt) {
    case kU8: return {0, 255};
    case kI32: return {INT32_MIN, INT32_MAX};
    default: return {INT64_MIN, INT64_MAX};
  }
}

// The largest finite value of a floating dtype narrower than f64.
inline double float_max(DType dt) {
  switch (dt) {
    case kF16: return 65504.0;
    case kBF16: return 0x1.fep127;
    default: return double(std::numeric_limits<float>::max());
  }
}

// A 0-d tensor of v in o's dtype and device for comparing with tensors of that dtype: a finite v
// past a floating dtype's range is the infinity of its sign, which every value of the dtype
// compares with as with v (a clamp's bound of 1e5 in f16, which full refuses).
inline Tensor comparison_scalar(double v, const TensorOptions& o) {
  const bool past = is_floating(o.dtype_) && o.dtype_ != kF64 && std::isfinite(v) &&
                    std::fabs(v) > float_max(o.dtype_);
  return full({}, past ? std::copysign(INFINITY, v) : v, o);
}

// A value stored into a tensor (full, tensor, fill_, pad's fill): for an integer dtype whole and
// within its range, as libtorch checks (300 as u8 wrapped to 44, 1e20 as i64 saturated); for a
// floating dtype narrower than f64 within its finite range unless infinite or NaN, as libtorch's
// `overflows` (1e300 as f32 and 70000 as f16 became inf).
inline void check_value_fits(DType dt, double v, const char* op) {
  if (is_floating(dt)) {
    NN_CHECK(dt == kF64 || !std::isfinite(v) || std::fabs(v) <= float_max(dt), op, ": the value ",
             v, " cannot be stored in a ", dtype_name(dt), " tensor: it exceeds the largest finite ",
             dtype_name(dt), ", ", float_max(dt));
    return;
  }
  const auto [lo, hi] = integer_range(dt);
  NN_CHECK(std::isfinite(v) && v == std::trunc(v) && v >= double(lo) && v < double(hi) + 1, op,
           ": the value ", v, " cannot be stored in a ", dtype_name(dt),
           " tensor without changing it");  // (double(hi) + 1: 256, 2^31, 2^63, all exact)
}

}  // namespace nn
