// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3"), usable from
// host C++ and CUDA so that the CPU and GPU backends draw identical streams.
// Element i of a draw at (seed, offset) uses counter (offset + i / 4) and lane i % 4.
#pragma once
#include <cmath>
#include <cstdint>

#include "kernels/hd.h"

namespace nn::rng {

struct U32x4 {
  uint32_t v[4];
};

NN_HD uint32_t mulhilo(uint32_t a, uint32_t b, uint32_t* hi) {
  uint64_t p = uint64_t(a) * uint64_t(b);
  *hi = uint32_t(p >> 32);
  return uint32_t(p);
}

NN_HD U32x4 philox(uint64_t seed, uint64_t counter) {
  uint32_t c0 = uint32_t(counter), c1 = uint32_t(counter >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
#ifdef __CUDACC__
#pragma unroll
#endif
  for (int r = 0; r < 10; ++r) {
    uint32_t hi0, hi1;
    uint32_t lo0 = mulhilo(0xD2511F53u, c0, &hi0);
    uint32_t lo1 = mulhilo(0xCD9E8D57u, c2, &hi1);
    uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0; c1 = lo1; c2 = n2; c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return U32x4{{c0, c1, c2, c3}};
}

// [0, 1) with 24 random bits.
NN_HD float to_uniform(uint32_t u) { return float(u >> 8) * (1.0f / 16777216.0f); }

// A uniform of [0, 1) cut to its first `bits` bits (a 16-bit float's significand: 11 for f16,
// 8 for bf16), so that it converts to that type exactly: rounded to nearest, the top of
// [0, 1) would become 1 (as PyTorch, which draws that many bits for 16-bit types).
NN_HD float keep_bits(float r, int bits) {
  const float s = float(1u << bits);
  return float(int32_t(r * s)) / s;
}
// The bits a uniform draw keeps for f16 and bf16 (f32 and f64 keep all 24).
constexpr int kF16UniformBits = 11, kBF16UniformBits = 8;

// Four uniforms for counter block `block`.
NN_HD void uniform4(uint64_t seed, uint64_t block, float out[4]) {
  U32x4 r = philox(seed, block);
  for (int k = 0; k < 4; ++k) out[k] = to_uniform(r.v[k]);
}

// Lane k of a draw, by selects rather than an indexed load (which would put r in local memory
// on a GPU).
NN_HD uint32_t lane(const U32x4& r, uint32_t k) {
  return k == 0 ? r.v[0] : k == 1 ? r.v[1] : k == 2 ? r.v[2] : r.v[3];
}

// A dropout mask drawn from the stream at (seed, offset): element i is kept when its uniform
// (counter offset + i / 4, lane i % 4) is >= p, the test nn::dropout applies, and a kept
// element is multiplied by `scale` (1 / (1 - p); 0 when p is 1; 1 when inactive). p == 0
// draws nothing.
struct DropoutDraw {
  uint64_t seed = 0, offset = 0;
  float p = 0;
  double scale = 1;
  NN_HD bool active() const { return p > 0; }
  // Whether an element whose random bits are u is kept.
  NN_HD bool keeps(uint32_t u) const { return to_uniform(u) >= p; }
  NN_HD bool keep(uint64_t i) const {
    return keeps(lane(philox(seed, offset + i / 4), uint32_t(i % 4)));
  }
};

// keep() for a walk over indices that reuses its Philox block while consecutive indices share
// it (one block per four): a thread going along a row.
struct DropoutWalk {
  DropoutDraw d;
  uint64_t blk = ~uint64_t(0);
  U32x4 r{};
  NN_HD explicit DropoutWalk(const DropoutDraw& draw) : d(draw) {}
  NN_HD bool keep(uint64_t i) {
    if (i / 4 != blk) {
      blk = i / 4;
      r = philox(d.seed, d.offset + blk);
    }
    return d.keeps(lane(r, uint32_t(i % 4)));
  }
};

// Four standard normals (two Box-Muller pairs) for counter block `block`.
NN_HD void normal4(uint64_t seed, uint64_t block, float out[4]) {
  U32x4 r = philox(seed, block);
  for (int k = 0; k < 4; k += 2) {
    float u1 = (float(r.v[k] >> 8) + 1.0f) * (1.0f / 16777216.0f);  // (0, 1]
    float u2 = to_uniform(r.v[k + 1]);
    float rad = sqrtf(-2.0f * logf(u1));
    float th = 6.2831853071795864f * u2;
    out[k] = rad * cosf(th);
    out[k + 1] = rad * sinf(th);
  }
}

}  // namespace nn::rng
