// Gradients grouped for the fused list primitives of the backends (scale_grads,
// sum_squares): one batch per (device, dtype), every member contiguous. A non-contiguous
// gradient is replaced in its batch by a contiguous copy; write_back() copies those back
// after an in-place change and counts the change.
#pragma once
#include <nn/tensor.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace nn::optim {

struct GradBatches {
  std::map<std::pair<std::string, DType>, std::vector<Tensor>> batches;
  std::vector<std::pair<Tensor, Tensor>> copies;  // (gradient, its contiguous copy)

  void add(const Tensor& g) {
    Tensor c = g;
    if (!g.is_contiguous()) {
      c = g.contiguous();
      copies.emplace_back(g, c);
    }
    batches[{g.device().str(), g.dtype()}].push_back(c);
  }
  void write_back() {
    for (auto& [key, grads] : batches)  // counts the in-place change (see Storage::version)
      for (auto& g : grads) g.storage()->bump_version();
    for (auto& [g, c] : copies) {
      Tensor dst = g;
      dst.copy_(c);
    }
  }
};

}  // namespace nn::optim
