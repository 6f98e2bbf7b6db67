// Eigen views of raw tensor memory (internal to the CPU backend; never in public headers).
#pragma once
#include <Eigen/Core>

namespace nn::cpu {

template <typename T>
using RowMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using ColMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;
template <typename T>
using RowMap = Eigen::Map<RowMat<T>, 0, Eigen::OuterStride<>>;
template <typename T>
using CRowMap = Eigen::Map<const RowMat<T>, 0, Eigen::OuterStride<>>;
template <typename T>
using CColMap = Eigen::Map<const ColMat<T>, 0, Eigen::OuterStride<>>;

// rows x cols row-major block with leading dimension ld (elements between rows).
template <typename T>
RowMap<T> rmap(T* p, int64_t rows, int64_t cols, int64_t ld) {
  return RowMap<T>(p, rows, cols, Eigen::OuterStride<>(ld));
}
template <typename T>
CRowMap<T> crmap(const T* p, int64_t rows, int64_t cols, int64_t ld) {
  return CRowMap<T>(p, rows, cols, Eigen::OuterStride<>(ld));
}

}  // namespace nn::cpu
