// UTF-8 decoding, one implementation for the JSON reader and writer (safetensors headers,
// metrics lines), TensorBoard tags and the tokenizers (internal).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace nn::utf8 {

// The code point starting at s[i], advancing i past it. An invalid sequence (bad lead or
// continuation byte, overlong form, surrogate, beyond U+10FFFF, cut short) gives -1 and
// advances one byte, so decoding always makes progress.
inline int32_t decode_utf8(std::string_view s, size_t& i) {
  const auto b0 = uint8_t(s[i]);
  if (b0 < 0x80) {
    ++i;
    return b0;
  }
  int len;
  uint32_t cp, min;
  if ((b0 & 0xE0) == 0xC0) {
    len = 2, cp = b0 & 0x1F, min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3, cp = b0 & 0x0F, min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    len = 4, cp = b0 & 0x07, min = 0x10000;
  } else {
    ++i;
    return -1;
  }
  if (i + len > s.size()) {
    ++i;
    return -1;
  }
  for (int k = 1; k < len; ++k) {
    const auto b = uint8_t(s[i + k]);
    if ((b & 0xC0) != 0x80) {
      ++i;
      return -1;
    }
    cp = (cp << 6) | (b & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
    ++i;
    return -1;
  }
  i += len;
  return int32_t(cp);
}

// The byte offset of the first invalid sequence, or npos when s is valid UTF-8.
inline size_t find_invalid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    size_t at = i;
    if (decode_utf8(s, i) < 0) return at;
  }
  return std::string_view::npos;
}

}  // namespace nn::utf8
