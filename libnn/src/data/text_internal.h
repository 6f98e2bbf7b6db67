// Helpers shared by the text_*.cpp files: UTF-8 decoding and platform-independent random
// draws (std::uniform_int_distribution differs between standard libraries; these do not).
#pragma once
#include <cstdint>
#include <random>
#include <string>
#include <string_view>

#include "core/utf8.h"

namespace nn::text::detail {

using utf8::decode_utf8;  // (core/utf8.h)
using utf8::find_invalid_utf8;
void append_utf8(std::string& out, uint32_t cp);

// Uniform in [0, n) (Lemire's multiply-shift; the bias is below 2^-64 * n, irrelevant here).
inline uint64_t below(std::mt19937_64& g, uint64_t n) {
  return uint64_t((static_cast<unsigned __int128>(g()) * n) >> 64);
}
// Uniform in [0, 1).
inline double uniform01(std::mt19937_64& g) { return double(g() >> 11) * 0x1.0p-53; }

}  // namespace nn::text::detail
