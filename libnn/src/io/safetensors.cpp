// safetensors reader and writer. The loader trusts nothing in the file: every size is
// checked against the real file size before anything is allocated, so a hostile or
// truncated file gives an nn::Error, never a crash or a huge allocation.
#include <nn/io.h>

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <set>

#include "io/json.h"
#include "io/atomic_save.h"

namespace nn::io {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; libnn writes host memory as is");

namespace {

constexpr uint64_t kMaxHeader = 100'000'000;  // the reference implementation's limit

struct DTypeName {
  DType dtype;
  const char* name;
};
constexpr DTypeName kDTypes[] = {{kF32, "F32"}, {kF64, "F64"},  {kF16, "F16"}, {kBF16, "BF16"},
                                 {kI32, "I32"}, {kI64, "I64"}, {kU8, "U8"}};

const char* st_name(DType t) {
  for (auto& d : kDTypes)
    if (d.dtype == t) return d.name;
  return "?";
}

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

// zlib's crc32 takes 32-bit lengths, and returns 0 (the seed) for a null buffer.
uLong crc_update(uLong crc, const void* data, size_t n) {
  auto p = static_cast<const Bytef*>(data);
  while (n > 0) {
    uInt chunk = uInt(std::min<size_t>(n, size_t(1) << 30));
    crc = crc32(crc, p, chunk);
    p += chunk;
    n -= chunk;
  }
  return crc;
}

// Both checksums take the tensors in the order of their names (files libnn wrote before
// 2026-11-29 took them in data order, still accepted on load): another safetensors writer
// lays tensors out in its own order (Python's by alignment, then name), so a file loaded and
// saved again unchanged, metadata passed through, keeps its checksums.
struct HeaderTensor {
  const std::string& name;
  DType dtype;
  const Shape& shape;
  const Tensor* data = nullptr;  // (for the data checksum, once read)
};
std::vector<const HeaderTensor*> in_order(const std::vector<HeaderTensor>& tensors, bool by_name) {
  std::vector<const HeaderTensor*> order;
  for (auto& t : tensors) order.push_back(&t);
  if (by_name)
    std::sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->name < b->name; });
  return order;
}

// The header as kHeaderChecksumKey covers it: the metadata (sorted, as std::map keeps it)
// but for that key, then each tensor's name, dtype and shape; NUL-separated.
uint32_t header_crc(const std::map<std::string, std::string>& meta,
                    const std::vector<HeaderTensor>& tensors, bool by_name = true) {
  std::string text;
  for (auto& [k, v] : meta)
    if (k != kHeaderChecksumKey) text += detail::cat(k, '\0', v, '\0');
  text += '\1';
  for (const HeaderTensor* t : in_order(tensors, by_name)) {
    text += detail::cat(t->name, '\0', st_name(t->dtype), '\0');
    for (int64_t d : t->shape) text += detail::cat(d, ',');
    text += '\0';
  }
  return uint32_t(crc_update(crc32(0, nullptr, 0), text.data(), text.size()));
}

// kChecksumKey's CRC: the tensors' bytes, one after another.
uint32_t data_crc(const std::vector<HeaderTensor>& tensors, bool by_name = true) {
  uLong crc = crc32(0, nullptr, 0);
  for (const HeaderTensor* t : in_order(tensors, by_name))
    crc = crc_update(crc, t->data->data_ptr(), t->data->nbytes());
  return uint32_t(crc);
}

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08x", v);
  return buf;
}

std::string errno_text() { return std::strerror(errno); }

struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin, end;
};

std::string offsets_str(const Entry& e) {
  // (appended to a string, not "[" + ...: GCC 12 warns of a memcpy overlap in the latter's
  // insert at the front, a false positive, -Wrestrict)
  return std::string("[").append(std::to_string(e.begin)).append(", ").append(std::to_string(e.end)).append("]");
}

// One tensor's header entry: {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}.
Entry parse_entry(const std::string& name, const json::Value& v, uint64_t data_size,
                  const std::string& where) {
  using K = json::Value::Kind;
  const std::string what = where + "tensor '" + name + "': ";
  NN_CHECK(v.kind == K::object, what, "expected an object with dtype, shape and data_offsets, "
           "found ", json::kind_name(v.kind));
  for (auto& k : v.keys)
    NN_CHECK(k == "dtype" || k == "shape" || k == "data_offsets", what, "unexpected key '", k,
             "' (expected dtype, shape and data_offsets)");
  const json::Value* dtype = v.find("dtype");
  const json::Value* shape = v.find("shape");
  const json::Value* offsets = v.find("data_offsets");
  NN_CHECK(dtype && shape && offsets, what, "missing ",
           !dtype ? "dtype" : !shape ? "shape" : "data_offsets");

  Entry e{name, kF32, {}, 0, 0};
  NN_CHECK(dtype->kind == K::string, what, "dtype must be a string, found ",
           json::kind_name(dtype->kind));
  const DTypeName* found = nullptr;
  for (auto& d : kDTypes)
    if (dtype->str == d.name) found = &d;
  NN_CHECK(found, what, "unknown dtype '", dtype->str,
           "' (libnn reads F32, F64, F16, BF16, I32, I64, U8)");
  e.dtype = found->dtype;

  NN_CHECK(shape->kind == K::array, what, "shape must be an array, found ",
           json::kind_name(shape->kind));
  // `bound` treats zero dims as 1, so strides stay representable even for empty tensors.
  uint64_t nbytes = element_size(e.dtype), bound = nbytes;
  for (auto& d : shape->items) {
    NN_CHECK(d.kind == K::integer && d.integer >= 0, what,
             "shape entries must be non-negative integers, found ",
             d.kind == K::integer ? std::to_string(d.integer) : json::kind_name(d.kind));
    e.shape.push_back(d.integer);
    nbytes *= uint64_t(d.integer);  // <= bound, so it cannot overflow when bound does not
    NN_CHECK(!__builtin_mul_overflow(bound, uint64_t(std::max<int64_t>(d.integer, 1)), &bound) &&
                 bound <= uint64_t(INT64_MAX),
             what, "shape ", shape_str(e.shape), "... is too large");
  }

  NN_CHECK(offsets->kind == K::array && offsets->items.size() == 2 &&
               offsets->items[0].kind == K::integer && offsets->items[1].kind == K::integer &&
               offsets->items[0].integer >= 0 && offsets->items[1].integer >= 0,
           what, "data_offsets must be two non-negative integers [begin, end]");
  e.begin = uint64_t(offsets->items[0].integer);
  e.end = uint64_t(offsets->items[1].integer);
  NN_CHECK(e.begin <= e.end, what, "data_offsets ", offsets_str(e), " end before they begin");
  NN_CHECK(e.end - e.begin == nbytes, what, "shape ", shape_str(e.shape), " of ", found->name,
           " needs ", nbytes, " bytes, but data_offsets ", offsets_str(e), " span ",
           e.end - e.begin);
  NN_CHECK(e.end <= data_size, what, "data_offsets ", offsets_str(e),
           " lie outside the data section (", data_size, " bytes); is the file truncated?");
  return e;
}

void read_exact(std::FILE* f, void* dst, size_t n, const std::string& where, const char* what) {
  if (n == 0) return;
  size_t got = std::fread(dst, 1, n, f);
  NN_CHECK(got == n, where, "cannot read ", what, ": ",
           std::ferror(f) ? errno_text() : "unexpected end of file");
}

}  // namespace

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  const std::string where = "safetensors file '" + path + "': ";
  std::set<std::string, std::less<>> names;
  std::vector<Tensor> host;
  host.reserve(tensors.size());
  for (auto& [name, t] : tensors) {
    NN_CHECK(name != "__metadata__", where, "the tensor name '__metadata__' is reserved");
    NN_CHECK(json::is_valid_utf8(name), where, "tensor name ", json::quote(name),
             " is not valid UTF-8");
    NN_CHECK(names.insert(name).second, where, "duplicate tensor name '", name, "'");
    NN_CHECK(t.defined(), where, "tensor '", name, "' is undefined");
    host.push_back(t.detach().cpu().contiguous());
  }
  for (auto& [k, v] : metadata)
    NN_CHECK(json::is_valid_utf8(k) && json::is_valid_utf8(v), where, "metadata ",
             json::quote(k), " is not valid UTF-8");

  std::vector<HeaderTensor> described;
  for (size_t i = 0; i < host.size(); ++i)
    described.push_back({tensors[i].first, host[i].dtype(), host[i].shape(), &host[i]});
  std::map<std::string, std::string> meta = metadata;
  meta.erase(kHeaderChecksumKey);
  meta[kChecksumKey] = hex32(data_crc(described));
  meta[kHeaderChecksumKey] = hex32(header_crc(meta, described));

  // Built with detail::cat: GCC 12 warns falsely (-Wrestrict) on "literal" + std::string.
  std::string header = "{\"__metadata__\":{";
  bool first = true;
  for (auto& [k, v] : meta) {
    header += detail::cat(first ? "" : ",", json::quote(k), ":", json::quote(v));
    first = false;
  }
  header += "}";
  uint64_t offset = 0;
  for (size_t i = 0; i < host.size(); ++i) {
    header += detail::cat(",", json::quote(tensors[i].first), ":{\"dtype\":\"",
                          st_name(host[i].dtype()), "\",\"shape\":[");
    for (size_t d = 0; d < host[i].shape().size(); ++d)
      header += detail::cat(d ? "," : "", host[i].shape()[d]);
    uint64_t end = offset + host[i].nbytes();
    header += detail::cat("],\"data_offsets\":[", offset, ",", end, "]}");
    offset = end;
  }
  header += "}";
  // Pad so the data starts 8-byte aligned, as the reference writer does (mmap readers
  // then see aligned tensors).
  header.resize((header.size() + 7) / 8 * 8, ' ');
  NN_CHECK(header.size() <= kMaxHeader, where, "header of ", header.size(),
           " bytes exceeds the format's limit of ", kMaxHeader);

  atomic_save::write(path, [&](const std::string& name) {
    File f(std::fopen(name.c_str(), "wb"));
    NN_CHECK(f, where, "cannot create '", name, "': ", errno_text());
    auto put = [&](const void* data, size_t n) {
      NN_CHECK(n == 0 || std::fwrite(data, 1, n, f.get()) == n, where, "cannot write '", name,
               "': ", errno_text());
    };
    uint64_t n = header.size();
    put(&n, 8);
    put(header.data(), header.size());
    for (auto& t : host) put(t.data_ptr(), t.nbytes());
    NN_CHECK(std::fflush(f.get()) == 0, where, "cannot write '", name, "': ", errno_text());
    NN_CHECK(std::fclose(f.release()) == 0, where, "cannot close '", name, "': ", errno_text());
  }, where);
}

SafetensorsFile load_safetensors(const std::string& path) {
  const std::string where = "safetensors file '" + path + "': ";
  File f(std::fopen(path.c_str(), "rb"));
  NN_CHECK(f, "cannot open safetensors file '", path, "': ", errno_text());
  struct stat st {};
  NN_CHECK(::fstat(fileno(f.get()), &st) == 0, where, "cannot stat: ", errno_text());
  NN_CHECK(S_ISREG(st.st_mode), where, "not a regular file");
  const uint64_t size = uint64_t(st.st_size);
  NN_CHECK(size >= 8, where, "the file is ", size,
           " bytes, shorter than the 8-byte header length every safetensors file starts with");

  uint64_t n = 0;
  read_exact(f.get(), &n, 8, where, "the header length");
  NN_CHECK(n <= kMaxHeader, where, "header length ", n, " is absurd (more than ", kMaxHeader,
           " bytes); not a safetensors file?");
  NN_CHECK(n <= size - 8, where, "header length ", n, " is larger than the rest of the file (",
           size - 8, " bytes); is the file truncated?");
  std::string text(n, '\0');
  read_exact(f.get(), text.data(), n, where, "the header");
  json::Value root;
  try {
    root = json::parse(text);
  } catch (const Error& e) {
    NN_ERROR(where, "malformed JSON header: ", e.what());
  }
  NN_CHECK(root.kind == json::Value::Kind::object, where,
           "the JSON header must be an object, found ", json::kind_name(root.kind));

  SafetensorsFile out;
  const uint64_t data_size = size - 8 - n;
  std::vector<Entry> entries;
  for (size_t i = 0; i < root.keys.size(); ++i) {
    const json::Value& v = root.items[i];
    if (root.keys[i] != "__metadata__") {
      entries.push_back(parse_entry(root.keys[i], v, data_size, where));
      continue;
    }
    NN_CHECK(v.kind == json::Value::Kind::object, where,
             "__metadata__ must be an object, found ", json::kind_name(v.kind));
    for (size_t j = 0; j < v.keys.size(); ++j) {
      NN_CHECK(v.items[j].kind == json::Value::Kind::string, where, "__metadata__ entry '",
               v.keys[j], "' must be a string, found ", json::kind_name(v.items[j].kind));
      out.metadata[v.keys[j]] = v.items[j].str;
    }
  }

  // The format asks for a packed data section: tensors back to back, no holes, nothing after.
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t expected = 0;
  const Entry* prev = nullptr;
  for (auto& e : entries) {
    NN_CHECK(e.begin >= expected, where, "tensors '", prev->name, "' ", offsets_str(*prev),
             " and '", e.name, "' ", offsets_str(e), " overlap");
    NN_CHECK(e.begin == expected, where, "a gap of ", e.begin - expected,
             " bytes before tensor '", e.name, "' ", offsets_str(e),
             "; the data section must be packed");
    expected = e.end;
    prev = &e;
  }
  NN_CHECK(expected == data_size, where, "trailing garbage: ", data_size - expected,
           " bytes after the last tensor's data (the header describes ", expected,
           " bytes of data, the file holds ", data_size, ")");

  auto read_hex32 = [&](const char* key) -> std::optional<uint32_t> {
    auto it = out.metadata.find(key);
    if (it == out.metadata.end()) return std::nullopt;
    const std::string& s = it->second;
    NN_CHECK(s.size() == 8 && s.find_first_not_of("0123456789abcdefABCDEF") == std::string::npos,
             where, "malformed ", key, " '", s, "' (expected 8 hex digits)");
    return uint32_t(std::stoul(s, nullptr, 16));
  };
  const std::optional<uint32_t> want_crc = read_hex32(kChecksumKey);
  // (a file another tool changed, passing libnn's metadata through, fails these checks:
  // dropping the libnn.* keys from its metadata takes the file as it is)
  const char* kModified = "; a file edited by another tool keeps libnn's checksums unless "
                          "the libnn.* metadata keys are dropped";
  if (const auto want = read_hex32(kHeaderChecksumKey)) {
    out.metadata.erase(kHeaderChecksumKey);
    std::vector<HeaderTensor> described;
    for (auto& e : entries) described.push_back({e.name, e.dtype, e.shape});
    const uint32_t got = header_crc(out.metadata, described);  // (kChecksumKey included)
    NN_CHECK(*want == got || *want == header_crc(out.metadata, described, false), where,
             "header checksum mismatch: the metadata or a tensor's name, dtype or shape was "
             "corrupted or modified (", kHeaderChecksumKey, " is ", hex32(*want),
             ", the header gives ", hex32(got), ")", kModified);
  }
  out.metadata.erase(kChecksumKey);

  std::vector<HeaderTensor> loaded;
  for (auto& e : entries) {
    Tensor t = empty(e.shape, e.dtype);
    read_exact(f.get(), t.data_ptr(), t.nbytes(), where, ("the data of '" + e.name + "'").c_str());
    out.tensors.emplace_back(e.name, std::move(t));
  }
  for (size_t i = 0; i < entries.size(); ++i)
    loaded.push_back({entries[i].name, entries[i].dtype, entries[i].shape, &out.tensors[i].second});
  if (want_crc) {
    const uint32_t got = data_crc(loaded);
    NN_CHECK(*want_crc == got || *want_crc == data_crc(loaded, false), where,
             "checksum mismatch: the file is corrupt or was modified (", kChecksumKey, " is ",
             hex32(*want_crc), ", the data gives ", hex32(got), ")", kModified);
  }
  return out;
}

}  // namespace nn::io
