// A per-primitive profiler: while enabled, every backend call is timed (on CUDA, followed by
// a device sync, so times are device times) and totals are kept per primitive and family.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace nn::profiler {

void enable(bool on = true);
bool enabled();
void reset();

struct Entry {
  std::string name;    // the backend primitive, e.g. "conv2d_backward_weight"
  std::string family;  // conv, matmul, elementwise, ...
  int64_t calls = 0;
  double seconds = 0;
};
std::vector<Entry> entries();  // slowest first

// A table by family then primitive. With wall_seconds > 0 it also shows each share of that
// wall time and the remainder ("outside primitives": autograd, allocation, data loading).
std::string report(double wall_seconds = 0);

}  // namespace nn::profiler
