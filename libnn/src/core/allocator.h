// A caching allocator shared by every device: freed blocks are kept in size-class bins and
// reused, so a training step allocates from the system only during its first iteration.
// LIBNN_NO_MEMORY_CACHING=1 turns the cache off for debugging: every tensor gets exactly its
// size from the system and gives it back when freed, so memory checkers (compute-sanitizer,
// the CUDA emulator's guards, AddressSanitizer) see each buffer's real bounds.
#pragma once
#include "backend/backend.h"

#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace nn {

// "6 MiB", "0.5 MiB", "20902 MiB": sizes in the allocator's messages.
std::string format_mib(size_t bytes);

class CachingAllocator {
 public:
  // raw_alloc returns nullptr when the system is out of memory. describe_free, when given,
  // says how much the device has left; the out-of-memory error ends with it.
  CachingAllocator(std::string device_name, std::function<void*(size_t)> raw_alloc,
                   std::function<void(void*)> raw_free,
                   std::function<std::string()> describe_free = {});
  ~CachingAllocator();

  void* allocate(size_t nbytes);               // nbytes > 0
  void deallocate(void* p, size_t nbytes);     // the same nbytes as asked for
  backend::MemoryStats stats() const;
  void empty_cache();                           // give cached blocks back to the system
  void reset_peak();

  // Size classes: multiples of 512 B up to 1 MiB, then quarter steps between powers of two.
  static size_t round_size(size_t nbytes);

 private:
  void release_cached_locked();
  std::string device_name_;
  std::function<void*(size_t)> raw_alloc_;
  std::function<void(void*)> raw_free_;
  std::function<std::string()> describe_free_;
  bool caching_ = true;  // off with LIBNN_NO_MEMORY_CACHING=1
  mutable std::mutex mu_;
  std::unordered_map<size_t, std::vector<void*>> free_;
  backend::MemoryStats stats_;
};

}  // namespace nn
