// Element types. f64 exists for finite-difference gradient checks on the CPU.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>

namespace nn {

enum class DType : uint8_t { f32, f64, f16, bf16, i32, i64, u8 };

inline constexpr DType kF32 = DType::f32;
inline constexpr DType kF64 = DType::f64;
inline constexpr DType kF16 = DType::f16;
inline constexpr DType kBF16 = DType::bf16;
inline constexpr DType kI32 = DType::i32;
inline constexpr DType kI64 = DType::i64;
inline constexpr DType kU8 = DType::u8;

constexpr size_t element_size(DType t) {
  switch (t) {
    case DType::f64: case DType::i64: return 8;
    case DType::f32: case DType::i32: return 4;
    case DType::f16: case DType::bf16: return 2;
    case DType::u8: return 1;
  }
  return 0;
}
constexpr bool is_floating(DType t) {
  return t == DType::f32 || t == DType::f64 || t == DType::f16 || t == DType::bf16;
}
const char* dtype_name(DType t);     // "f32"
DType dtype_from_name(const std::string& name);  // throws nn::Error on an unknown name

// IEEE binary16 and bfloat16 storage types; conversions round to nearest even.
inline float bits_to_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
inline uint32_t float_to_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }

inline float half_bits_to_float(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  if (exp == 0x1f) return bits_to_float(sign | 0x7f800000u | (man << 13));  // inf / nan
  if (exp == 0) {
    if (man == 0) return bits_to_float(sign);
    // subnormal: value = man * 2^-24
    float f = float(man) * 5.9604644775390625e-8f;
    return sign ? -f : f;
  }
  return bits_to_float(sign | ((exp + 112) << 23) | (man << 13));
}
inline uint16_t float_to_half_bits(float f) {
  uint32_t u = float_to_bits(f);
  uint32_t sign = (u >> 16) & 0x8000;
  uint32_t absu = u & 0x7fffffffu;
  uint32_t o;
  if (absu >= 0x47800000u) {  // >= 65536: inf, or nan kept quiet
    o = absu > 0x7f800000u ? 0x7e00 : 0x7c00;
  } else if (absu < 0x38800000u) {  // below 2^-14: subnormal or zero
    // Adding 0.5 aligns the 10 mantissa bits at the bottom; the FPU rounds to nearest even.
    o = float_to_bits(bits_to_float(absu) + 0.5f) - float_to_bits(0.5f);
  } else {
    uint32_t mant_odd = (absu >> 13) & 1;
    absu += 0xc8000fffu + mant_odd;  // re-bias exponent (-112 << 23), round to nearest even
    o = absu >> 13;                   // a carry into exponent 31 gives inf, as it should
  }
  return uint16_t(sign | o);
}
inline float bf16_bits_to_float(uint16_t b) { return bits_to_float(uint32_t(b) << 16); }
// Round to nearest even; a nan stays a (quiet) nan. Written as a select, not a branch, so loops
// of conversions vectorise.
inline uint16_t float_to_bf16_bits(float f) {
  const uint32_t u = float_to_bits(f);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1)) >> 16;
  const uint32_t quiet_nan = (u >> 16) | 0x40;
  return uint16_t((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

struct Half {
  uint16_t bits = 0;
  Half() = default;
  Half(float f) : bits(float_to_half_bits(f)) {}  // NOLINT: implicit like a builtin float
  operator float() const { return half_bits_to_float(bits); }
};
struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  BFloat16(float f) : bits(float_to_bf16_bits(f)) {}  // NOLINT
  operator float() const { return bf16_bits_to_float(bits); }
};

template <typename T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<double>() { return DType::f64; }
template <> constexpr DType dtype_of<Half>() { return DType::f16; }
template <> constexpr DType dtype_of<BFloat16>() { return DType::bf16; }
template <> constexpr DType dtype_of<int32_t>() { return DType::i32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::i64; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::u8; }

}  // namespace nn
