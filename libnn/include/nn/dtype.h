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

// IEEE binary16 and bfloat16 storage types; conversions from f32 round to nearest even (from
// f64 through f32, as PyTorch's: twice, so a value just past a halfway point can land a 16-bit
// step off).
inline float bits_to_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
inline uint32_t float_to_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }

// Both directions are written as selects, not branches, so loops of conversions vectorise.
inline float half_bits_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  const uint32_t em = uint32_t(h & 0x7fff) << 13;  // exponent and mantissa in f32's places
  const uint32_t exp = em & 0x0f800000u;
  const uint32_t normal = em + (112u << 23);        // re-bias the exponent: 15 -> 127
  const uint32_t special = em | 0x7f800000u;        // inf / nan
  // zero or subnormal: man * 2^-24, exactly (2^-14 + man * 2^-24) - 2^-14
  const uint32_t sub = float_to_bits(bits_to_float(em + (113u << 23)) - bits_to_float(113u << 23));
  return bits_to_float(sign | (exp == 0x0f800000u ? special : exp == 0 ? sub : normal));
}
inline uint16_t float_to_half_bits(float f) {
  const uint32_t u = float_to_bits(f);
  const uint32_t sign = (u >> 16) & 0x8000;
  const uint32_t absu = u & 0x7fffffffu;
  // >= 65536: inf, or nan kept quiet
  const uint32_t big = absu > 0x7f800000u ? 0x7e00u : 0x7c00u;
  // below 2^-14, subnormal or zero: adding 0.5 aligns the 10 mantissa bits at the bottom and
  // the FPU rounds to nearest even
  const uint32_t small = float_to_bits(bits_to_float(absu) + 0.5f) - float_to_bits(0.5f);
  // re-bias the exponent (-112 << 23) and round to nearest even; a carry into exponent 31
  // gives inf, as it should
  const uint32_t normal = (absu + 0xc8000fffu + ((absu >> 13) & 1)) >> 13;
  return uint16_t(sign | (absu >= 0x47800000u ? big : absu < 0x38800000u ? small : normal));
}
inline float bf16_bits_to_float(uint16_t b) { return bits_to_float(uint32_t(b) << 16); }
// Round to nearest even; a nan stays a (quiet) nan.
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
