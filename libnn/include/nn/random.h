// Seeded, counter-based random numbers (Philox4x32-10): a value depends only on
// (seed, offset, index), so results do not depend on thread count or launch layout, and
// the whole state is two integers that a checkpoint can save.
#pragma once
#include <cstdint>

namespace nn {

class Generator {
 public:
  explicit Generator(uint64_t seed = 0x5eed) : seed_(seed) {}
  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }
  void set_state(uint64_t seed, uint64_t offset) { seed_ = seed; offset_ = offset; }
  void manual_seed(uint64_t seed) { seed_ = seed; offset_ = 0; }
  // Reserves `n` counters: returns the offset the caller starts at.
  uint64_t advance(uint64_t n) { uint64_t o = offset_; offset_ += (n + 3) / 4; return o; }

 private:
  uint64_t seed_;
  uint64_t offset_ = 0;
};

// The process-wide generator used when none is passed.
Generator& default_generator();
void manual_seed(uint64_t seed);

}  // namespace nn
