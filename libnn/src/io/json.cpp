#include "io/json.h"

#include <nn/error.h>

#include <cstdio>
#include <set>

#include "core/utf8.h"

namespace nn::io::json {

const Value* Value::find(std::string_view key) const {
  for (size_t i = 0; i < keys.size(); ++i)
    if (keys[i] == key) return &items[i];
  return nullptr;
}

const char* kind_name(Value::Kind k) {
  switch (k) {
    case Value::Kind::object: return "object";
    case Value::Kind::array: return "array";
    case Value::Kind::string: return "string";
    case Value::Kind::integer: return "integer";
  }
  return "?";
}

namespace {

constexpr int kMaxDepth = 64;
// Each parsed value costs ~100 bytes, 50 times its text "0,": without a cap a 100 MB header
// of one long array would take 5 GB. Safetensors arrays (shapes, offsets) are short.
constexpr size_t kMaxArrayItems = 4096;

std::string describe(char c) {
  unsigned char u = static_cast<unsigned char>(c);
  char buf[16];
  if (u >= 0x20 && u < 0x7f) std::snprintf(buf, sizeof buf, "'%c'", c);
  else std::snprintf(buf, sizeof buf, "byte 0x%02x", u);
  return buf;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xc0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += char(0xe0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3f));
    out += char(0x80 | (cp & 0x3f));
  } else {
    out += char(0xf0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3f));
    out += char(0x80 | ((cp >> 6) & 0x3f));
    out += char(0x80 | (cp & 0x3f));
  }
}

// Length of the UTF-8 character at s[pos], or 0 when it is malformed: overlong forms,
// surrogates and values past U+10FFFF are rejected, so keys and metadata are valid text for
// every other reader too.
size_t utf8_char_length(std::string_view s, size_t pos) {
  size_t next = pos;
  return utf8::decode_utf8(s, next) < 0 ? 0 : next - pos;  // (core/utf8.h)
}

class Parser {
 public:
  explicit Parser(std::string_view s) : s_(s) {}

  Value parse_document() {
    skip_ws();
    Value v = parse_value(0);
    skip_ws();
    if (pos_ != s_.size()) fail("unexpected " + describe(s_[pos_]) + " after the top-level value");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    NN_ERROR("at byte ", pos_, ": ", what);
  }
  bool at_end() const { return pos_ >= s_.size(); }
  char peek() const { return s_[pos_]; }
  void skip_ws() {
    while (!at_end() && (peek() == ' ' || peek() == '\t' || peek() == '\n' || peek() == '\r'))
      ++pos_;
  }
  void expect(char c) {
    if (at_end()) fail(std::string("expected '") + c + "', found the end of the text");
    if (peek() != c) fail(std::string("expected '") + c + "', found " + describe(peek()));
    ++pos_;
  }

  Value parse_value(int depth) {
    if (at_end()) fail("expected a value, found the end of the text");
    char c = peek();
    if (c == '{' || c == '[') {
      if (depth >= kMaxDepth) fail("nesting deeper than 64 levels");
      return c == '{' ? parse_object(depth + 1) : parse_array(depth + 1);
    }
    if (c == '"') {
      Value v;
      v.kind = Value::Kind::string;
      v.str = parse_string();
      return v;
    }
    if (c == '-' || (c >= '0' && c <= '9')) return parse_integer();
    fail("expected a value (object, array, string or integer), found " + describe(c));
  }

  Value parse_object(int depth) {
    Value v;
    v.kind = Value::Kind::object;
    std::set<std::string, std::less<>> seen;
    ++pos_;  // '{'
    skip_ws();
    if (!at_end() && peek() == '}') { ++pos_; return v; }
    for (;;) {
      skip_ws();
      if (at_end() || peek() != '"')
        fail(at_end() ? "expected a key string, found the end of the text"
                      : "expected a key string, found " + describe(peek()));
      size_t key_pos = pos_;
      std::string key = parse_string();
      if (!seen.insert(key).second) {
        pos_ = key_pos;
        fail("duplicate key " + quote(key));
      }
      skip_ws();
      expect(':');
      skip_ws();
      v.items.push_back(parse_value(depth));
      v.keys.push_back(std::move(key));
      skip_ws();
      if (at_end()) fail("expected ',' or '}', found the end of the text");
      if (peek() == '}') { ++pos_; return v; }
      if (peek() != ',') fail("expected ',' or '}', found " + describe(peek()));
      ++pos_;
    }
  }

  Value parse_array(int depth) {
    Value v;
    v.kind = Value::Kind::array;
    ++pos_;  // '['
    skip_ws();
    if (!at_end() && peek() == ']') { ++pos_; return v; }
    for (;;) {
      skip_ws();
      if (v.items.size() == kMaxArrayItems) fail("array of more than 4096 items");
      v.items.push_back(parse_value(depth));
      skip_ws();
      if (at_end()) fail("expected ',' or ']', found the end of the text");
      if (peek() == ']') { ++pos_; return v; }
      if (peek() != ',') fail("expected ',' or ']', found " + describe(peek()));
      ++pos_;
    }
  }

  Value parse_integer() {
    size_t start = pos_;
    bool neg = peek() == '-';
    if (neg) ++pos_;
    if (at_end() || peek() < '0' || peek() > '9') fail("expected a digit after '-'");
    if (peek() == '0' && pos_ + 1 < s_.size() && s_[pos_ + 1] >= '0' && s_[pos_ + 1] <= '9')
      fail("numbers must not have leading zeros");
    // Accumulate as a negative number so INT64_MIN fits.
    int64_t v = 0;
    while (!at_end() && peek() >= '0' && peek() <= '9') {
      int digit = peek() - '0';
      if (v < (INT64_MIN + digit) / 10) {
        pos_ = start;
        fail("integer out of the 64-bit range");
      }
      v = v * 10 - digit;
      ++pos_;
    }
    if (!at_end() && (peek() == '.' || peek() == 'e' || peek() == 'E'))
      fail("only integers are accepted here, found a fraction or exponent");
    if (!neg) {
      if (v == INT64_MIN) {
        pos_ = start;
        fail("integer out of the 64-bit range");
      }
      v = -v;
    }
    Value out;
    out.kind = Value::Kind::integer;
    out.integer = v;
    return out;
  }

  uint32_t parse_hex4() {
    if (s_.size() - pos_ < 4) fail("truncated \\u escape");
    uint32_t cp = 0;
    for (int i = 0; i < 4; ++i) {
      char c = s_[pos_++];
      cp <<= 4;
      if (c >= '0' && c <= '9') cp |= uint32_t(c - '0');
      else if (c >= 'a' && c <= 'f') cp |= uint32_t(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') cp |= uint32_t(c - 'A' + 10);
      else { --pos_; fail("bad hex digit " + describe(c) + " in a \\u escape"); }
    }
    return cp;
  }

  void copy_utf8(std::string& out) {
    size_t n = utf8_char_length(s_, pos_);
    if (n == 0) fail("invalid UTF-8 at " + describe(s_[pos_]));
    out.append(s_.substr(pos_, n));
    pos_ += n;
  }

  std::string parse_string() {
    ++pos_;  // '"'
    std::string out;
    for (;;) {
      if (at_end()) fail("unterminated string");
      char c = peek();
      if (c == '"') { ++pos_; return out; }
      if (static_cast<unsigned char>(c) < 0x20) fail("unescaped control character in a string");
      if (static_cast<unsigned char>(c) >= 0x80) { copy_utf8(out); continue; }
      ++pos_;
      if (c != '\\') { out += c; continue; }
      if (at_end()) fail("unterminated escape");
      char e = s_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          uint32_t cp = parse_hex4();
          if (cp >= 0xdc00 && cp <= 0xdfff) fail("lone low surrogate in a \\u escape");
          if (cp >= 0xd800 && cp <= 0xdbff) {
            if (s_.size() - pos_ < 2 || s_[pos_] != '\\' || s_[pos_ + 1] != 'u')
              fail("high surrogate not followed by a low one");
            pos_ += 2;
            uint32_t lo = parse_hex4();
            if (lo < 0xdc00 || lo > 0xdfff) fail("high surrogate not followed by a low one");
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
          }
          append_utf8(out, cp);
          break;
        }
        default:
          --pos_;
          fail("unknown escape \\" + std::string(1, e));
      }
    }
  }

  std::string_view s_;
  size_t pos_ = 0;
};

}  // namespace

Value parse(std::string_view text) { return Parser(text).parse_document(); }

bool is_valid_utf8(std::string_view s) { return utf8::find_invalid_utf8(s) == std::string_view::npos; }

std::string quote(std::string_view s) {
  // (each byte that is not part of valid UTF-8 as U+FFFD, as to_valid_utf8 below)
  std::string o = "\"";
  for (size_t i = 0; i < s.size();) {
    const char c = s[i];
    if (static_cast<unsigned char>(c) >= 0x80) {  // a UTF-8 sequence as it is, else U+FFFD
      const size_t n = utf8_char_length(s, i);
      if (n == 0) o += "\\ufffd";
      else o.append(s.substr(i, n));
      i += n ? n : 1;
      continue;
    }
    ++i;
    switch (c) {
      case '"': o += "\\\""; break;
      case '\\': o += "\\\\"; break;
      case '\n': o += "\\n"; break;
      case '\r': o += "\\r"; break;
      case '\t': o += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", unsigned(static_cast<unsigned char>(c)));
          o += buf;
        } else {
          o += c;
        }
    }
  }
  return o + "\"";
}

}  // namespace nn::io::json

namespace nn::io {

std::string to_valid_utf8(std::string_view s) {
  std::string o;
  o.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const size_t n = json::utf8_char_length(s, i);
    if (n == 0) o += "\xef\xbf\xbd";  // U+FFFD
    else o.append(s.substr(i, n));
    i += n ? n : 1;
  }
  return o;
}

}  // namespace nn::io
