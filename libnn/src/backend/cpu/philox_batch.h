// Philox4x32-10 for a run of consecutive counters, written so the compiler vectorises the
// rounds across counters (kernels/philox.h computes one counter at a time; both give the
// same numbers, which test_dropout checks).
#pragma once
#include <cstdint>

#include "kernels/philox.h"

namespace nn::cpu {

inline constexpr int kPhiloxBatch = 64;

// out[lane][k] = lane `lane` of counter block0 + k, for k < kPhiloxBatch.
inline void philox_batch(uint64_t seed, uint64_t block0, uint32_t out[4][kPhiloxBatch]) {
  uint32_t c0[kPhiloxBatch], c1[kPhiloxBatch], c2[kPhiloxBatch], c3[kPhiloxBatch];
  for (int k = 0; k < kPhiloxBatch; ++k) {
    uint64_t c = block0 + uint64_t(k);
    c0[k] = uint32_t(c);
    c1[k] = uint32_t(c >> 32);
    c2[k] = 0;
    c3[k] = 0;
  }
  uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
  for (int r = 0; r < 10; ++r) {
#pragma omp simd
    for (int k = 0; k < kPhiloxBatch; ++k) {
      uint64_t p0 = uint64_t(0xD2511F53u) * c0[k];
      uint64_t p1 = uint64_t(0xCD9E8D57u) * c2[k];
      uint32_t n0 = uint32_t(p1 >> 32) ^ c1[k] ^ k0;
      uint32_t n2 = uint32_t(p0 >> 32) ^ c3[k] ^ k1;
      c1[k] = uint32_t(p1);
      c3[k] = uint32_t(p0);
      c0[k] = n0;
      c2[k] = n2;
    }
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  for (int k = 0; k < kPhiloxBatch; ++k) {
    out[0][k] = c0[k];
    out[1][k] = c1[k];
    out[2][k] = c2[k];
    out[3][k] = c3[k];
  }
}

}  // namespace nn::cpu
