#include "core/allocator.h"

#include "core/env.h"

#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

namespace nn {

CachingAllocator::CachingAllocator(std::string device_name, std::function<void*(size_t)> raw_alloc,
                                   std::function<void(void*)> raw_free,
                                   std::function<std::string()> describe_free)
    : device_name_(std::move(device_name)), raw_alloc_(std::move(raw_alloc)),
      raw_free_(std::move(raw_free)), describe_free_(std::move(describe_free)) {
  caching_ = !env_switch("LIBNN_NO_MEMORY_CACHING", false);
}

CachingAllocator::~CachingAllocator() { empty_cache(); }

size_t CachingAllocator::round_size(size_t n) {
  constexpr size_t kSmall = 512, kLarge = size_t(1) << 20;
  if (n <= kLarge) return (n + kSmall - 1) / kSmall * kSmall;
  size_t p = std::bit_floor(n);
  size_t step = p / 4;
  return (n + step - 1) / step * step;
}

std::string format_mib(size_t bytes) {
  const double m = double(bytes) / (1 << 20);
  char buf[48];
  // whole numbers as they are, then one decimal below 1 GiB, none above
  std::snprintf(buf, sizeof buf, m == double(int64_t(m)) || m >= 1024 ? "%.0f MiB" : "%.1f MiB", m);
  return buf;
}

void* CachingAllocator::allocate(size_t nbytes) {
  size_t size = caching_ ? round_size(nbytes) : nbytes;
  std::lock_guard<std::mutex> lock(mu_);
  stats_.num_allocs++;
  void* p = nullptr;
  auto it = free_.find(size);
  if (it != free_.end() && !it->second.empty()) {
    p = it->second.back();
    it->second.pop_back();
  } else {
    p = raw_alloc_(size);
    if (!p) {  // out of memory: return the cache to the system and try once more
      release_cached_locked();
      p = raw_alloc_(size);
    }
    if (!p) {
      const std::string free_note = describe_free_ ? describe_free_() : "";
      NN_ERROR("out of memory on ", device_name_, ": tried to allocate ", format_mib(size), " (",
               size, " bytes); ", format_mib(stats_.allocated), " already in use by tensors (peak ",
               format_mib(stats_.peak_allocated), ")", free_note.empty() ? "" : "; ", free_note);
    }
    stats_.reserved += size;
    stats_.num_system_allocs++;
  }
  stats_.allocated += size;
  if (stats_.allocated > stats_.peak_allocated) stats_.peak_allocated = stats_.allocated;
  return p;
}

void CachingAllocator::deallocate(void* p, size_t nbytes) {
  size_t size = caching_ ? round_size(nbytes) : nbytes;
  std::lock_guard<std::mutex> lock(mu_);
  stats_.allocated -= size;
  if (caching_) {
    // (runs in Storage's destructor, often while an exception unwinds: the cache's own
    // allocation failing must not throw; the block is freed instead of kept)
    try {
      free_[size].push_back(p);
      return;
    } catch (const std::bad_alloc&) {
    }
  }
  raw_free_(p);
  stats_.reserved -= size;
}

backend::MemoryStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void CachingAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.peak_allocated = stats_.allocated;
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  release_cached_locked();
}

void CachingAllocator::release_cached_locked() {
  for (auto& [size, blocks] : free_) {
    for (void* p : blocks) raw_free_(p);
    stats_.reserved -= size * blocks.size();
    blocks.clear();
  }
}

}  // namespace nn
