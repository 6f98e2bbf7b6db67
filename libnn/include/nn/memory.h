// Allocator statistics per device (the caching allocator behind every tensor).
#pragma once
#include <nn/device.h>

#include <cstddef>

namespace nn {

struct MemoryStats {
  size_t allocated = 0;          // bytes held by live tensors
  size_t peak_allocated = 0;     // high-water mark of `allocated`
  size_t reserved = 0;           // bytes obtained from the system (allocated + cached)
  size_t num_allocs = 0;         // allocation requests served
  size_t num_system_allocs = 0;  // requests that had to go to the system
};

MemoryStats memory_stats(Device device = kCPU);
// Starts the peak (high-water mark) over from the bytes in use now.
void reset_peak_memory_stats(Device device = kCPU);
// Returns cached, unused blocks to the system.
void empty_cache(Device device = kCPU);
// Waits for all work queued on the device (a no-op on the CPU).
void synchronize(Device device = kCPU);

}  // namespace nn
