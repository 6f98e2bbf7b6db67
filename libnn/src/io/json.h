// A small, strict JSON reader and a string quoter: enough for safetensors headers (objects,
// arrays, strings, integers). Anything else (floats, true/false/null, duplicate keys,
// invalid UTF-8, trailing text) is rejected rather than guessed at, because the input is a
// file header that a loader must either trust fully or refuse.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace nn::io::json {

struct Value {
  enum class Kind { object, array, string, integer };
  Kind kind = Kind::object;
  std::string str;           // string
  int64_t integer = 0;       // integer
  std::vector<Value> items;  // array elements, or object values (in file order)
  std::vector<std::string> keys;  // object keys, parallel to items

  const Value* find(std::string_view key) const;  // object member, or nullptr
};

const char* kind_name(Value::Kind k);  // "object", "array", ...

// Parses one JSON value followed only by whitespace. Throws nn::Error "at byte N: ..." on
// anything malformed. Nesting (64 levels) and array length (4096 items) are limited so that
// hostile input can exhaust neither the stack nor memory.
Value parse(std::string_view text);

bool is_valid_utf8(std::string_view s);

// `s` as a JSON string literal, with quotes; control characters escaped, and each byte that
// is not part of valid UTF-8 (a Latin-1 file name) as U+FFFD: JSON is UTF-8.
std::string quote(std::string_view s);

}  // namespace nn::io::json
