// The IDX format: 2 zero bytes, a type code, the number of dims, dims as big-endian u32,
// then the data, big-endian. Read through zlib, which also reads uncompressed files.
#include <nn/data.h>

#include <zlib.h>

#include <algorithm>
#include <cstdio>

#include <cerrno>
#include <cstring>
#include <vector>

#include "io/atomic_save.h"

namespace nn::data {

namespace {
struct IdxType {
  uint8_t code;
  const char* name;
  size_t size;
};
constexpr IdxType kTypes[] = {{0x08, "u8", 1},  {0x09, "i8", 1},  {0x0B, "i16", 2},
                              {0x0C, "i32", 4}, {0x0D, "f32", 4}, {0x0E, "f64", 8}};

struct GzFile {
  gzFile f = nullptr;
  ~GzFile() { if (f) gzclose(f); }
};

std::string hex(uint8_t b) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%02x", b);
  return buf;
}

// Reads up to n bytes; returns how many were read, throws on a zlib error.
size_t read_some(GzFile& g, void* dst, size_t n, const std::string& path) {
  size_t got = 0;
  while (got < n) {
    unsigned chunk = unsigned(std::min<size_t>(n - got, 1u << 30));
    int r = gzread(g.f, static_cast<char*>(dst) + got, chunk);
    if (r < 0) {
      int err = 0;
      const char* msg = gzerror(g.f, &err);
      NN_ERROR("IDX file '", path, "': corrupt compressed data (", msg, ")");
    }
    if (r == 0) {  // end of data, or a stream zlib gave up on
      int err = Z_OK;
      const char* msg = gzerror(g.f, &err);
      if (err != Z_OK && err != Z_BUF_ERROR)
        NN_ERROR("IDX file '", path, "': corrupt compressed data (", msg, ")");
      break;
    }
    got += size_t(r);
  }
  return got;
}
}  // namespace

Tensor read_idx(const std::string& path) {
  GzFile g;
  g.f = gzopen(path.c_str(), "rb");
  NN_CHECK(g.f, "cannot open IDX file '", path, "': ", std::strerror(errno));
  uint8_t head[4];
  size_t got = read_some(g, head, 4, path);
  NN_CHECK(got == 4, "IDX file '", path, "': truncated header (", got,
           " bytes, need at least 4)");
  const IdxType* type = nullptr;
  for (auto& t : kTypes) if (t.code == head[2]) type = &t;
  NN_CHECK(head[0] == 0 && head[1] == 0 && type && head[3] >= 1 && head[3] <= 8,
           "IDX file '", path, "': wrong magic number (", hex(head[0]), " ", hex(head[1]), " ",
           hex(head[2]), " ", hex(head[3]), "); expected 0x00 0x00, a type code (0x08 u8, "
           "0x09 i8, 0x0b i16, 0x0c i32, 0x0d f32, 0x0e f64) and 1 to 8 dims");
  const int nd = head[3];
  std::vector<uint8_t> dimbytes(4 * nd);
  got = read_some(g, dimbytes.data(), dimbytes.size(), path);
  NN_CHECK(got == dimbytes.size(), "IDX file '", path, "': truncated header (", nd,
           " dims announced, only ", got / 4, " present)");
  Shape shape(nd);
  uint64_t count = 1, bound = 1;  // bound: the product of max(d, 1), so a 0 dim hides nothing
  std::string dims_text;
  for (int i = 0; i < nd; ++i) {
    uint32_t d = uint32_t(dimbytes[4 * i]) << 24 | uint32_t(dimbytes[4 * i + 1]) << 16 |
                 uint32_t(dimbytes[4 * i + 2]) << 8 | uint32_t(dimbytes[4 * i + 3]);
    shape[i] = d;
    if (i) dims_text += 'x';
    dims_text += std::to_string(d);
    // Checked before multiplying: a product that wrapped around could look small.
    constexpr uint64_t kLimit = uint64_t(1) << 36;
    NN_CHECK(std::max<uint64_t>(d, 1) <= kLimit / bound, "IDX file '", path, "': dims ",
             dims_text, " are implausibly large");
    count *= d;
    bound *= std::max<uint64_t>(d, 1);
  }
  const uint64_t expected = count * type->size;
  // Read in chunks, never trusting the header for one huge allocation, and look one byte
  // past the expected end to catch trailing data.
  std::vector<uint8_t> bytes;
  for (;;) {
    size_t want = size_t(std::min<uint64_t>(expected + 1 - bytes.size(), 1 << 24));
    size_t old = bytes.size();
    bytes.resize(old + want);
    size_t n = read_some(g, bytes.data() + old, want, path);
    bytes.resize(old + n);
    if (n < want || bytes.size() > expected) break;
  }
  NN_CHECK(bytes.size() >= expected, "IDX file '", path, "': truncated: the header promises ",
           expected, " bytes of data (", dims_text, " ", type->name, "), the file has only ",
           bytes.size());
  NN_CHECK(bytes.size() == expected, "IDX file '", path, "': size mismatch: more data than the ",
           expected, " bytes the header promises (", dims_text, " ", type->name, ")");

  auto be = [&](size_t i, size_t w) {  // big-endian unsigned value of width w at element i
    uint64_t v = 0;
    for (size_t k = 0; k < w; ++k) v = v << 8 | bytes[i * w + k];
    return v;
  };
  switch (type->code) {
    case 0x08: return from_blob(bytes.data(), shape, kU8);
    case 0x09: case 0x0B: case 0x0C: {
      std::vector<int32_t> v(count);
      for (size_t i = 0; i < count; ++i) {
        uint64_t u = be(i, type->size);
        if (type->size == 1) v[i] = int8_t(u);
        else if (type->size == 2) v[i] = int16_t(u);
        else v[i] = int32_t(uint32_t(u));
      }
      return from_vector(v, shape);
    }
    case 0x0D: {
      std::vector<float> v(count);
      for (size_t i = 0; i < count; ++i) { uint32_t u = uint32_t(be(i, 4)); std::memcpy(&v[i], &u, 4); }
      return from_vector(v, shape);
    }
    default: {
      std::vector<double> v(count);
      for (size_t i = 0; i < count; ++i) { uint64_t u = be(i, 8); std::memcpy(&v[i], &u, 8); }
      return from_vector(v, shape);
    }
  }
}

void write_idx(const std::string& path, const Tensor& t_in) {
  Tensor t = t_in.detach().cpu().contiguous();
  uint8_t code;
  switch (t.dtype()) {
    case DType::u8: code = 0x08; break;
    case DType::i32: code = 0x0C; break;
    case DType::f32: code = 0x0D; break;
    case DType::f64: code = 0x0E; break;
    default: NN_ERROR("write_idx: dtype ", dtype_name(t.dtype()), " has no IDX type");
  }
  NN_CHECK(t.dim() >= 1 && t.dim() <= 8, "write_idx: IDX holds 1 to 8 dims, got ", t.dim());
  std::vector<uint8_t> out{0, 0, code, uint8_t(t.dim())};
  for (int64_t d : t.shape()) {
    NN_CHECK(uint64_t(d) <= UINT32_MAX, "write_idx: a dim of ", d,
             " (IDX stores each dim in 32 bits: at most 4294967295)");
    for (int k = 3; k >= 0; --k) out.push_back(uint8_t(uint64_t(d) >> (8 * k)));
  }
  const size_t w = element_size(t.dtype());
  const auto* p = static_cast<const uint8_t*>(t.data_ptr());
  for (int64_t i = 0; i < t.numel(); ++i)
    for (size_t k = 0; k < w; ++k) out.push_back(p[i * w + (w - 1 - k)]);  // to big-endian
  const bool gz = path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
  io::atomic_save::write(path, [&](const std::string& name) {
    gzFile f = gzopen(name.c_str(), gz ? "wb" : "wbT");
    NN_CHECK(f, "write_idx: cannot create '", name, "': ", std::strerror(errno));
    errno = 0;
    bool ok = true;
    for (size_t at = 0; ok && at < out.size();) {  // gzwrite takes an unsigned count: 1 GiB at a time
      const unsigned n = unsigned(std::min<size_t>(out.size() - at, size_t(1) << 30));
      ok = gzwrite(f, out.data() + at, n) == int(n);
      at += n;
    }
    ok = gzclose(f) == Z_OK && ok;
    const int err = errno;
    NN_CHECK(ok, "write_idx: writing '", path, "' failed", err ? std::string(": ") + std::strerror(err) : "");
  }, "write_idx: ");
}

}  // namespace nn::data
