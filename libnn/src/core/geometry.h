// Merging the dims of an elementwise operation (shared by the CPU and CUDA backends).
#pragma once
#include <nn/tensor.h>

#include <algorithm>
#include <array>
#include <numeric>
#include <vector>

namespace nn {

// Out (contiguous or not) and inputs share a shape (inputs broadcast with stride 0). The dims
// are visited in out's memory order (largest stride outermost; logical order among equals), so
// a channels-last or transposed out is walked like a row-major one; dims of size 1 are dropped
// and adjacent dims that are contiguous for every operand are merged, so a loop runs over as
// few, as long, dims as possible. Each element's value depends on its operands only, so the
// order is free to choose.
template <size_t N>
struct Geometry {
  std::vector<int64_t> shape;                   // merged dims, outermost first
  std::array<std::vector<int64_t>, N> strides;  // per operand, in elements
};

template <size_t N>
Geometry<N> coalesce(const Shape& shape, const std::array<const Shape*, N>& strides) {
  Geometry<N> g;
  std::vector<int64_t> order(shape.size());
  std::iota(order.begin(), order.end(), int64_t(0));
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return (*strides[0])[a] > (*strides[0])[b]; });
  for (int64_t d : order) {
    if (shape[d] == 1) continue;
    bool merge = !g.shape.empty();
    for (size_t k = 0; k < N && merge; ++k)
      merge = g.strides[k].back() == (*strides[k])[d] * shape[d];
    if (merge) {
      g.shape.back() *= shape[d];
      for (size_t k = 0; k < N; ++k) g.strides[k].back() = (*strides[k])[d];
    } else {
      g.shape.push_back(shape[d]);
      for (size_t k = 0; k < N; ++k) g.strides[k].push_back((*strides[k])[d]);
    }
  }
  if (g.shape.empty()) {
    g.shape.push_back(1);
    for (size_t k = 0; k < N; ++k) g.strides[k].push_back(1);
  }
  return g;
}

}  // namespace nn
