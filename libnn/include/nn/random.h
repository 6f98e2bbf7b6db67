// Seeded, counter-based random numbers (Philox4x32-10): a value depends only on
// (seed, offset, index), so results do not depend on thread count or launch layout, and
// the whole state is two integers that a checkpoint can save.
#pragma once
#include <atomic>
#include <cstdint>

namespace nn {

// Draws from one generator on several threads at once (the default one, used by layer
// constructors and dropout) each get counters of their own, in an order that depends on
// timing; a thread that needs reproducible draws passes its own Generator.
class Generator {
 public:
  explicit Generator(uint64_t seed = 0x5eed) : seed_(seed) {}
  Generator(const Generator& o) : seed_(o.seed_), offset_(o.offset()) {}
  Generator& operator=(const Generator& o) {
    set_state(o.seed_, o.offset());
    return *this;
  }
  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_.load(std::memory_order_relaxed); }
  void set_state(uint64_t seed, uint64_t offset) {
    seed_ = seed;
    offset_.store(offset, std::memory_order_relaxed);
  }
  void manual_seed(uint64_t seed) { set_state(seed, 0); }
  // Reserves `n` counters: returns the offset the caller starts at.
  uint64_t advance(uint64_t n) { return offset_.fetch_add((n + 3) / 4, std::memory_order_relaxed); }

 private:
  uint64_t seed_;
  std::atomic<uint64_t> offset_{0};
};

// The process-wide generator used when none is passed.
Generator& default_generator();
void manual_seed(uint64_t seed);

}  // namespace nn
