// Small helpers shared by the core, ops and backends (internal).
#pragma once
#include <nn/tensor.h>

namespace nn {

Shape contiguous_strides(const Shape& shape);
int64_t numel_of(const Shape& shape);
// Wraps a possibly negative dim into [0, ndim); throws nn::Error when out of range.
int64_t wrap_dim(int64_t d, int64_t ndim);
// A tensor over `base`'s storage with the given geometry; no autograd history.
Tensor make_view(const Tensor& base, Shape shape, Shape strides, int64_t offset);

}  // namespace nn
