// safetensors: bit-exact round trips, the on-disk layout, files from other writers, and
// every kind of broken file rejected with a message naming the file and the problem.
#include <nn/io.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "test_util.h"

#include <zlib.h>

using namespace nn;
namespace fs = std::filesystem;
using test::TempDir;

namespace {

std::string read_file(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}
void write_file(const std::string& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary);
  f.write(bytes.data(), std::streamsize(bytes.size()));
}

// A safetensors file by hand: header text (unpadded) and raw data bytes.
std::string st_bytes(const std::string& header, const std::string& data) {
  uint64_t n = header.size();
  std::string out(reinterpret_cast<const char*>(&n), 8);
  return out + header + data;
}

std::string load_error(const std::string& path) {
  return test::error_of([&] { io::load_safetensors(path); });
}

void require_contains(const std::string& text, const std::string& part) {
  INFO("message: " << text);
  INFO("expected to contain: " << part);
  REQUIRE(text.find(part) != std::string::npos);
}

std::string raw_bytes(const Tensor& t) {
  Tensor c = t.contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), c.nbytes());
}

Tensor from_bits16(const std::vector<uint16_t>& bits, DType dt) {
  return from_blob(bits.data(), {int64_t(bits.size())}, dt);
}

}  // namespace

TEST_CASE("safetensors round trip is bit-exact for every dtype and layout", "[io][safetensors]") {
  TempDir d;
  std::vector<uint32_t> f32_bits{0x3fc00000, 0x80000000, 0x7f800000, 0x7fc12345, 0x00000001, 0xff7fffff};
  // f16/bf16 from raw bits: +-0, inf, a NaN payload, subnormals, the largest finite value
  std::vector<uint16_t> f16_bits{0x0000, 0x8000, 0x7c00, 0x7e01, 0x0001, 0x03ff, 0x7bff, 0x3c00};
  std::vector<uint16_t> bf16_bits{0x0000, 0x8000, 0x7f80, 0x7fc1, 0x0001, 0x7f7f, 0x3f80, 0xc0a0};
  Tensor f32 = from_blob(f32_bits.data(), {2, 3}, kF32);
  Tensor wide = randn({5, 7}, kF64);
  NamedTensors in{
      {"f32", f32},
      {"f64", tensor({1.0 / 3, -1e300, 4.9e-324}, kF64)},
      {"f16", from_bits16(f16_bits, kF16)},
      {"bf16", from_bits16(bf16_bits, kBF16)},
      {"i32", from_vector<int32_t>({INT32_MIN, -1, 70000, INT32_MAX}, {2, 2})},
      {"i64", from_vector<int64_t>({INT64_MIN, 1ll << 40, INT64_MAX}, {3})},
      {"u8", from_vector<uint8_t>({0, 7, 128, 255}, {1, 4})},
      {"transposed", f32.t()},                      // (3, 2), strides (1, 3)
      {"strided", wide.slice(1, 1, 7, 2)},          // every other column
      {"expanded", tensor({1, 2, 3}, kF32).unsqueeze(0).expand({4, 3})},  // stride 0
      {"scalar", full({}, 42, kI64)},
      {"empty", zeros({0, 3}, kF16)},
      {"unicode name \xc3\xbc \"quoted\"", ones({1}, kU8)},
  };
  REQUIRE_FALSE(in[7].second.is_contiguous());
  REQUIRE_FALSE(in[8].second.is_contiguous());
  std::map<std::string, std::string> meta{
      {"note", "line\nbreak \"quotes\" back\\slash \x01 tab\t"},
      {"empty", ""},
      {"caf\xc3\xa9", "\xe2\x82\xac \xf0\x9f\x98\x80"}};
  io::save_safetensors(d.file("all.safetensors"), in, meta);
  auto out = io::load_safetensors(d.file("all.safetensors"));

  REQUIRE(out.metadata == meta);  // the checksum key is libnn's, not returned
  REQUIRE(out.tensors.size() == in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    INFO("tensor " << in[i].first);
    const Tensor& got = out.tensors[i].second;
    REQUIRE(out.tensors[i].first == in[i].first);  // save order is data-offset order
    REQUIRE(got.dtype() == in[i].second.dtype());
    REQUIRE(got.shape() == in[i].second.shape());
    REQUIRE(got.device() == kCPU);
    REQUIRE(got.is_contiguous());
    REQUIRE(raw_bytes(got) == raw_bytes(in[i].second));
  }
  // saving what was loaded gives the same bytes
  io::save_safetensors(d.file("again.safetensors"), out.tensors, out.metadata);
  REQUIRE(read_file(d.file("again.safetensors")) == read_file(d.file("all.safetensors")));
}

TEST_CASE("safetensors files have the documented layout", "[io][safetensors]") {
  TempDir d;
  std::string p = d.file("x.safetensors");
  io::save_safetensors(p, {{"a", tensor({1, 2, 3}, kF32)}, {"b", full({2}, 7, kI64)}});
  std::string bytes = read_file(p);
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  REQUIRE((8 + n) % 8 == 0);  // data starts aligned
  REQUIRE(bytes.size() == 8 + n + 12 + 16);
  std::string header = bytes.substr(8, n);
  REQUIRE(header.front() == '{');
  REQUIRE(header.find("\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12]}") !=
          std::string::npos);
  REQUIRE(header.find("\"b\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[12,28]}") !=
          std::string::npos);
  REQUIRE(header.find("\"__metadata__\":{\"libnn.crc32\":\"") != std::string::npos);
  float a1;
  std::memcpy(&a1, bytes.data() + 8 + n + 4, 4);
  REQUIRE(a1 == 2.0f);
}

TEST_CASE("safetensors loader reads files from other writers", "[io][safetensors]") {
  TempDir d;
  std::string p = d.file("other.safetensors");
  // No checksum, no padding, spaces in the JSON, header order unlike data order, escapes.
  float vals[2] = {1.5f, -2.0f};
  int32_t iv = -7;
  std::string data(reinterpret_cast<const char*>(&iv), 4);
  data += std::string(reinterpret_cast<const char*>(vals), 8);
  write_file(p, st_bytes(
      "{ \"w\\u00e9ight\" : {\"dtype\":\"F32\", \"shape\":[1, 2], \"data_offsets\":[4, 12]},\n"
      "  \"__metadata__\": {\"format\": \"pt\"},\n"
      "  \"idx\": {\"data_offsets\": [0, 4], \"shape\": [], \"dtype\": \"I32\"} }",
      data));
  auto f = io::load_safetensors(p);
  REQUIRE(f.metadata == std::map<std::string, std::string>{{"format", "pt"}});
  REQUIRE(f.tensors.size() == 2);
  REQUIRE(f.tensors[0].first == "idx");  // ordered by data offset
  REQUIRE(f.tensors[0].second.shape().empty());
  REQUIRE(f.tensors[0].second.item<int>() == -7);
  REQUIRE(f.tensors[1].first == "w\xc3\xa9ight");
  REQUIRE(f.tensors[1].second.to_vector<float>() == std::vector<float>{1.5f, -2.0f});

  // no __metadata__ and no tensors at all
  write_file(p, st_bytes("{}", ""));
  f = io::load_safetensors(p);
  REQUIRE(f.tensors.empty());
  REQUIRE(f.metadata.empty());
}

TEST_CASE("a libnn file laid out again by another writer keeps its checksums", "[io][safetensors]") {
  // Python's safetensors saves tensors in its own order (by alignment, then name); a file
  // loaded there and saved again unchanged, libnn's metadata passed through, still loads.
  // Files written before the checksums took names in order (data order) load too.
  TempDir d;
  const std::string p = d.file("x.safetensors");
  Tensor b = tensor({1.5, -2.0}, kF32), a = full({1}, 7, kI64);
  io::save_safetensors(p, {{"b", b}, {"a", a}}, {{"step", "3"}});
  const std::string bytes = read_file(p);
  auto key = [&](const std::string& k) {
    const std::string marker = "\"" + k + "\":\"";
    const size_t at = bytes.find(marker);
    REQUIRE(at != std::string::npos);
    return bytes.substr(at + marker.size(), 8);
  };
  auto layout = [&](const std::string& crc, const std::string& header_crc, bool a_first) {
    const std::string meta = "{\"__metadata__\":{\"libnn.crc32\":\"" + crc +
                             "\",\"libnn.header_crc32\":\"" + header_crc + "\",\"step\":\"3\"},";
    const std::string ta = "\"a\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":";
    const std::string tb = "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":";
    return a_first ? st_bytes(meta + ta + "[0,8]}," + tb + "[8,16]}}", raw_bytes(a) + raw_bytes(b))
                   : st_bytes(meta + tb + "[0,8]}," + ta + "[8,16]}}", raw_bytes(b) + raw_bytes(a));
  };
  auto loads = [&](const std::string& file_bytes) {
    write_file(p, file_bytes);
    auto f = io::load_safetensors(p);
    REQUIRE(f.metadata == std::map<std::string, std::string>{{"step", "3"}});
    REQUIRE(f.tensors.size() == 2);
    for (auto& [name, t] : f.tensors)
      REQUIRE(raw_bytes(t) == raw_bytes(name == "a" ? a : b));
  };
  const std::string crc = key("libnn.crc32"), header_crc = key("libnn.header_crc32");
  loads(layout(crc, header_crc, true));   // the other order
  loads(layout(crc, header_crc, false));  // libnn's own
  // a tensor changed there, the checksums passed through: refused, saying how to take it
  std::string changed = layout(crc, header_crc, true);
  changed[changed.size() - 1] ^= 0x01;
  write_file(p, changed);
  require_contains(load_error(p), "checksum mismatch: the file is corrupt or was modified");
  require_contains(load_error(p), "unless the libnn.* metadata keys are dropped");

  // the checksums of earlier libnn files: over the tensors in data order (b, then a)
  auto zcrc = [](const std::string& text) {
    char hex[16];
    std::snprintf(hex, sizeof hex, "%08x", unsigned(crc32(crc32(0, nullptr, 0),
        reinterpret_cast<const Bytef*>(text.data()), uInt(text.size()))));
    return std::string(hex);
  };
  const std::string h1 = zcrc(raw_bytes(b) + raw_bytes(a));
  // header_crc's text: the metadata but its own key, then each name, dtype and shape
  using namespace std::string_literals;
  const std::string h2 = zcrc("libnn.crc32\0"s + h1 + "\0step\0" "3\0\1" "b\0F32\0" "2,\0" "a\0I64\0" "1,\0"s);
  REQUIRE(h1 != crc);  // (the data orders differ, so the two checksums do)
  loads(layout(h1, h2, false));
}

TEST_CASE("safetensors loader rejects broken files with clear messages", "[io][safetensors][errors]") {
  TempDir d;
  std::string p = d.file("bad.safetensors");
  const std::string head = "safetensors file '" + p + "': ";
  auto rejects = [&](const std::string& bytes, const std::string& part) {
    write_file(p, bytes);
    std::string e = load_error(p);
    require_contains(e, head);
    require_contains(e, part);
  };
  const std::string f32x2 = "{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
  const std::string eight(8, 'x');

  require_contains(load_error(d.file("missing")),
                   "cannot open safetensors file '" + d.file("missing") + "'");
  rejects("", "the file is 0 bytes, shorter than the 8-byte header length");
  rejects("abc", "the file is 3 bytes");
  rejects(st_bytes(f32x2, eight).substr(0, 20), "header length 54 is larger than the rest of the file (12 bytes)");
  std::string absurd(8, '\xff');
  rejects(absurd + "{}", "is absurd");

  SECTION("malformed JSON") {
    for (const char* bad : {"{\"t\":1,}", "{\"t\": 1.5}", "{\"t\": \"open", "[1, 2", "{\"a\":1 \"b\":2}",
                            "{\"a\":1,\"a\":2}", "{\"a\": true}", "{\"a\": \"\xff\"}", "{\"a\": 01}",
                            "{} x", "{\"a\": 99999999999999999999}", "{\"a\": \"\\q\"}"}) {
      INFO("header: " << bad);
      rejects(st_bytes(bad, ""), "malformed JSON header: at byte ");
    }
    rejects(st_bytes(std::string(100, '[') + std::string(100, ']'), ""), "nesting deeper than 64");
    std::string long_array = "{\"a\":[0";
    for (int i = 0; i < 5000; ++i) long_array += ",0";
    rejects(st_bytes(long_array + "]}", ""), "at byte 8198: array of more than 4096 items");
    rejects(st_bytes("{\"a\":1,}", ""), "at byte 7: expected a key string, found '}'");
    rejects(st_bytes("[]", ""), "the JSON header must be an object, found array");
  }
  SECTION("bad tensor entries") {
    rejects(st_bytes("{\"t\":{\"dtype\":\"BOOL\",\"shape\":[1],\"data_offsets\":[0,1]}}", "x"),
            "tensor 't': unknown dtype 'BOOL' (libnn reads F32, F64, F16, BF16, I32, I64, U8)");
    rejects(st_bytes("{\"t\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,20]}}", std::string(20, 0)),
            "tensor 't': shape [2, 3] of F32 needs 24 bytes, but data_offsets [0, 20] span 20");
    rejects(st_bytes("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", "1234"),
            "tensor 't': data_offsets [0, 8] lie outside the data section (4 bytes)");
    rejects(st_bytes("{\"t\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", eight),
            "shape entries must be non-negative integers, found -2");
    rejects(st_bytes("{\"t\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296,0],\"data_offsets\":[0,0]}}", ""),
            "is too large");
    rejects(st_bytes("{\"t\":{\"dtype\":\"F32\",\"shape\":[2]}}", eight), "tensor 't': missing data_offsets");
    rejects(st_bytes("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":1}}", eight),
            "unexpected key 'x'");
    rejects(st_bytes("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", eight),
            "data_offsets [8, 0] end before they begin");
    rejects(st_bytes("{\"t\":[1]}", ""), "tensor 't': expected an object");
    rejects(st_bytes("{\"__metadata__\":{\"k\":1}}", ""), "__metadata__ entry 'k' must be a string, found integer");
  }
  SECTION("offsets must tile the data section") {
    rejects(st_bytes("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                     "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[2,6]}}", "123456"),
            "tensors 'a' [0, 4] and 'b' [2, 6] overlap");
    rejects(st_bytes("{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[2,4]}}", "1234"),
            "a gap of 2 bytes before tensor 'a' [2, 4]");
    rejects(st_bytes(f32x2, eight + "junk"),
            "trailing garbage: 4 bytes after the last tensor's data");
  }
  SECTION("damaged libnn files") {
    std::string good = d.file("good.safetensors");
    io::save_safetensors(good, {{"w", randn({4, 4})}});
    std::string bytes = read_file(good);
    std::string flipped = bytes;
    flipped[bytes.size() - 5] ^= 0x10;  // one bit of the data
    rejects(flipped, "checksum mismatch: the file is corrupt or was modified");
    rejects(bytes.substr(0, bytes.size() - 1), "lie outside the data section (63 bytes); is the file truncated?");
    rejects(bytes.substr(0, 30), "is larger than the rest of the file");
    std::string crc_pos_marker = "\"libnn.crc32\":\"";
    std::string bad_crc = bytes;
    bad_crc.replace(bad_crc.find(crc_pos_marker) + crc_pos_marker.size(), 8, "zzzzzzzz");
    rejects(bad_crc, "malformed libnn.crc32 'zzzzzzzz' (expected 8 hex digits)");
  }
  SECTION("damaged headers of libnn files: metadata, a dtype, a shape") {
    std::string good = d.file("meta.safetensors");
    io::save_safetensors(good, {{"w", randn({2, 8})}}, {{"libnn.step", "1200"}});
    const std::string bytes = read_file(good);
    auto changed = [&](const std::string& from, const std::string& to) {
      std::string b = bytes;
      const size_t at = b.find(from);
      REQUIRE(at != std::string::npos);
      b.replace(at, from.size(), to);  // same length: the file stays well-formed
      return b;
    };
    const std::string why = "header checksum mismatch: the metadata or a tensor's name, dtype "
                            "or shape was corrupted or modified";
    rejects(changed("\"1200\"", "\"1900\""), why);                 // a checkpoint's step
    rejects(changed("\"dtype\":\"F32\"", "\"dtype\":\"I32\""), why);  // same size, other type
    rejects(changed("\"shape\":[2,8]", "\"shape\":[8,2]"), why);
    const std::string key = "\"libnn.header_crc32\":\"";
    std::string bad = bytes;
    bad.replace(bad.find(key) + key.size(), 8, "zzzzzzzz");
    rejects(bad, "malformed libnn.header_crc32 'zzzzzzzz' (expected 8 hex digits)");
    // the key is libnn's: not returned, and a caller's value for it is replaced
    io::save_safetensors(good, {{"w", randn({2, 8})}}, {{"libnn.header_crc32", "00000000"}});
    REQUIRE(io::load_safetensors(good).metadata.empty());
  }
}

TEST_CASE("save_safetensors refuses bad input and never leaves partial files", "[io][safetensors][errors]") {
  TempDir d;
  std::string p = d.file("out.safetensors");
  auto save_error = [&](const NamedTensors& t, const std::string& path) {
    return test::error_of([&] { io::save_safetensors(path, t); });
  };
  Tensor x = ones({2});
  require_contains(save_error({{"a", x}, {"b", x}, {"a", x}}, p),
                   "safetensors file '" + p + "': duplicate tensor name 'a'");
  require_contains(save_error({{"__metadata__", x}}, p), "the tensor name '__metadata__' is reserved");
  require_contains(save_error({{"u", Tensor()}}, p), "tensor 'u' is undefined");
  require_contains(save_error({{"bad\xff", x}}, p), "is not valid UTF-8");
  std::string nodir = d.file("no/such/dir/x.safetensors");
  require_contains(save_error({{"a", x}}, nodir), "safetensors file '" + nodir + "': cannot create '" +
                                                      nodir + ".tmp-" + std::to_string(getpid()) +
                                                      "': No such file or directory");
  REQUIRE(d.names().empty());

  // Overwriting replaces the file whole and leaves no temporary behind.
  io::save_safetensors(p, {{"v", full({3}, 1.0)}});
  io::save_safetensors(p, {{"v", full({3}, 2.0)}});
  REQUIRE(d.names() == std::vector<std::string>{"out.safetensors"});
  REQUIRE(io::load_safetensors(p).tensors[0].second.to_vector<float>() == std::vector<float>{2, 2, 2});

  // A write that fails midway (here: the file size limit, as a full disk would) keeps the
  // old file intact and removes the temporary.
  std::string e;
  test::with_file_size_limit(4096, [&] { e = save_error({{"big", zeros({100000})}}, p); });
  require_contains(e, "safetensors file '" + p + "': cannot write");
  require_contains(e, "File too large");
  REQUIRE(d.names() == std::vector<std::string>{"out.safetensors"});
  REQUIRE(io::load_safetensors(p).tensors[0].second.to_vector<float>() == std::vector<float>{2, 2, 2});
}
