// Event files are TFRecords: uint64 length, masked CRC-32C of the length, the record,
// masked CRC-32C of the record (all little-endian). Each record is a protobuf Event:
//   Event   { double wall_time = 1; int64 step = 2; string file_version = 3;
//             Summary summary = 5; }
//   Summary { repeated Value value = 1; }
//   Value   { string tag = 1; float simple_value = 2; }
#include <nn/error.h>
#include <nn/tensorboard.h>

#include <unistd.h>

#include <array>
#include <atomic>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "io/json.h"

namespace nn::train {

static_assert(std::endian::native == std::endian::little, "fixed-width fields are written as is");

namespace {

constexpr std::array<uint32_t, 256> make_crc32c_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;  // reflected
    t[i] = c;
  }
  return t;
}
constexpr auto kCrc32cTable = make_crc32c_table();

// TFRecord stores CRCs rotated and offset, because a CRC of data that itself contains CRCs
// is weak.
uint32_t masked_crc(const void* data, size_t n) {
  uint32_t crc = crc32c(data, n);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

// ---- protobuf encoding -----------------------------------------------------------------
void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += char(v | 0x80);
    v >>= 7;
  }
  out += char(v);
}
template <typename T>
void put_fixed(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}
void put_key(std::string& out, int field, int wire_type) {
  put_varint(out, uint64_t(field) << 3 | uint64_t(wire_type));
}
void put_bytes(std::string& out, int field, const std::string& s) {
  put_key(out, field, 2);
  put_varint(out, s.size());
  out += s;
}

// An Event with wall_time and step; the caller appends the rest.
std::string event_head(int64_t step) {
  double wall = std::chrono::duration<double>(
                    std::chrono::system_clock::now().time_since_epoch()).count();
  std::string e;
  put_key(e, 1, 1);
  put_fixed(e, wall);
  put_key(e, 2, 0);
  put_varint(e, uint64_t(step));  // int64: negative steps as ten-byte two's complement
  return e;
}

}  // namespace

uint32_t crc32c(const void* data, size_t n, uint32_t crc) {
  auto p = static_cast<const uint8_t*>(data);
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) crc = kCrc32cTable[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

TensorBoardWriter::TensorBoardWriter(const std::string& logdir) {
  std::error_code ec;
  std::filesystem::create_directories(logdir, ec);
  NN_CHECK(!ec, "TensorBoard: cannot create the log directory '", logdir, "': ", ec.message());
  char host[256] = "localhost";
  if (gethostname(host, sizeof host) != 0) std::strcpy(host, "localhost");
  host[sizeof host - 1] = '\0';
  auto now = std::chrono::duration_cast<std::chrono::seconds>(
                 std::chrono::system_clock::now().time_since_epoch()).count();
  // A counter tells apart two writers of one process in one second; "x" makes a clash with
  // another file (a process of the same pid on another host of a shared folder) an error,
  // never an overwrite.
  static std::atomic<int> writers{0};
  path_ = (std::filesystem::path(logdir) /
           ("events.out.tfevents." + std::to_string(now) + "." + host + "." +
            std::to_string(getpid()) + "." + std::to_string(writers++) + ".libnn"))
              .string();
  file_.reset(std::fopen(path_.c_str(), "wbx"));
  NN_CHECK(file_, "TensorBoard: cannot create the event file '", path_, "': ",
           std::strerror(errno));
  // TensorBoard reads the format version from the first event.
  std::string e = event_head(0);
  put_bytes(e, 3, "brain.Event:2");
  write_event(e);
  flush();
}

void TensorBoardWriter::add_scalar(const std::string& tag, double value, int64_t step) {
  // TensorBoard's readers stop at an event whose tag is not UTF-8, and every later one in the
  // file is lost with it
  NN_CHECK(io::json::is_valid_utf8(tag), "TensorBoard: the tag ", io::json::quote(tag),
           " is not valid UTF-8");
  std::string v;
  put_bytes(v, 1, tag);
  put_key(v, 2, 5);
  put_fixed(v, float(value));
  std::string summary;
  put_bytes(summary, 1, v);
  std::string e = event_head(step);
  put_bytes(e, 5, summary);
  write_event(e);
  flush();
}

void TensorBoardWriter::purge_from(int64_t step) {
  std::string session_log;
  put_key(session_log, 1, 0);  // SessionLog.status = START
  put_varint(session_log, 1);
  std::string e = event_head(step);
  put_bytes(e, 7, session_log);  // Event.session_log
  write_event(e);
  flush();
}

void TensorBoardWriter::write_event(const std::string& event) {
  std::string rec;
  put_fixed(rec, uint64_t(event.size()));
  put_fixed(rec, masked_crc(rec.data(), 8));
  rec += event;
  put_fixed(rec, masked_crc(event.data(), event.size()));
  NN_CHECK(std::fwrite(rec.data(), 1, rec.size(), file_.get()) == rec.size(),
           "TensorBoard: cannot write the event file '", path_, "': ", std::strerror(errno));
}

void TensorBoardWriter::flush() {
  NN_CHECK(std::fflush(file_.get()) == 0, "TensorBoard: cannot write the event file '", path_,
           "': ", std::strerror(errno));
}

}  // namespace nn::train
