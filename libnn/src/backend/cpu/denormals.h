// FlushDenormals (internal): denormal (subnormal) operands and results read and written as
// zero while it lives, on this thread. On Intel CPUs an FMA that meets a denormal takes a
// microcode assist, and a product with denormals in an operand (tiny attention probabilities
// or gradients, which training produces) ran 100x slower; the values lost are below 1.2e-38.
// The vector kernels (gemm.cpp, conv_nhwc.cpp) hold one while they run. Elsewhere (non-x86)
// it does nothing.
#pragma once

#if defined(__x86_64__) || defined(_M_X64)
#include <xmmintrin.h>
#endif

namespace nn::cpu {

class FlushDenormals {
 public:
#if defined(__x86_64__) || defined(_M_X64)
  FlushDenormals() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | kFtz | kDaz); }
  ~FlushDenormals() { _mm_setcsr(saved_); }
#else
  FlushDenormals() {}
#endif
  FlushDenormals(const FlushDenormals&) = delete;
  FlushDenormals& operator=(const FlushDenormals&) = delete;

 private:
#if defined(__x86_64__) || defined(_M_X64)
  static constexpr unsigned kFtz = 0x8000, kDaz = 0x0040;  // MXCSR bits
  unsigned saved_;
#endif
};

}  // namespace nn::cpu
