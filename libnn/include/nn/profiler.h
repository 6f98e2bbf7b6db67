// A per-primitive profiler: while enabled, every backend call is timed and totals are kept per
// primitive and family. On CUDA a call's time is the device's, between events recorded in the
// stream before and after it, with no wait for the device in between: where the device keeps
// ahead of the host (a GPU-bound run) these are the kernels' times, and where it waits for the
// host the wait counts too. The times are read when entries() or report() asks (and every
// 4096 calls), which waits for the device then; reset() drops the totals and the times not
// read yet. A primitive that calls another through the backend counts both.
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
