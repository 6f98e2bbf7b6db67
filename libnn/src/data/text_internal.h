// Helpers shared by the text_*.cpp files: UTF-8 decoding and platform-independent random
// draws (std::uniform_int_distribution differs between standard libraries; these do not).
#pragma once
#include <cstdint>
#include <random>
#include <string>
#include <string_view>

namespace nn::text::detail {

// The code point starting at s[i], advancing i past it. An invalid sequence (bad lead or
// continuation byte, overlong form, surrogate, beyond U+10FFFF, cut short) gives -1 and
// advances one byte, so decoding always makes progress.
int32_t decode_utf8(std::string_view s, size_t& i);
// The byte offset of the first invalid sequence, or npos when s is valid UTF-8.
size_t find_invalid_utf8(std::string_view s);
void append_utf8(std::string& out, uint32_t cp);

// Uniform in [0, n) (Lemire's multiply-shift; the bias is below 2^-64 * n, irrelevant here).
inline uint64_t below(std::mt19937_64& g, uint64_t n) {
  return uint64_t((static_cast<unsigned __int128>(g()) * n) >> 64);
}
// Uniform in [0, 1).
inline double uniform01(std::mt19937_64& g) { return double(g() >> 11) * 0x1.0p-53; }

}  // namespace nn::text::detail
