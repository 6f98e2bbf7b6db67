// TensorBoard event files, decoded here by a reader written from the TFRecord and protobuf
// specs (tests/io/read_tfevents.py checks the same files independently of this code).
#include <nn/tensorboard.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "test_util.h"

namespace fs = std::filesystem;
using nn::train::crc32c;
using nn::train::TensorBoardWriter;

namespace {

struct Event {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version, tag;
  float value = 0;
  bool has_value = false;
  int64_t session_status = -1;  // SessionLog.status; -1: no session_log
};

uint32_t masked(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

struct Reader {
  const std::string& b;
  size_t pos = 0;
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0;; shift += 7) {
      REQUIRE(pos < b.size());
      uint8_t c = uint8_t(b[pos++]);
      v |= uint64_t(c & 0x7f) << shift;
      if (!(c & 0x80)) return v;
    }
  }
  template <typename T>
  T fixed() {
    REQUIRE(pos + sizeof(T) <= b.size());
    T v;
    std::memcpy(&v, b.data() + pos, sizeof(T));
    pos += sizeof(T);
    return v;
  }
  std::string bytes() {
    uint64_t n = varint();
    REQUIRE(pos + n <= b.size());
    std::string s = b.substr(pos, n);
    pos += n;
    return s;
  }
};

Event decode_event(const std::string& msg) {
  Event e;
  Reader r{msg};
  while (r.pos < msg.size()) {
    uint64_t key = r.varint();
    switch (key) {
      case (1 << 3) | 1: e.wall_time = r.fixed<double>(); break;
      case (2 << 3) | 0: e.step = int64_t(r.varint()); break;
      case (3 << 3) | 2: e.file_version = r.bytes(); break;
      case (5 << 3) | 2: {
        std::string summary = r.bytes();
        Reader s{summary};
        REQUIRE(s.varint() == ((1 << 3) | 2));  // Summary.value
        std::string value = s.bytes();
        REQUIRE(s.pos == summary.size());        // one value per event
        Reader v{value};
        while (v.pos < value.size()) {
          uint64_t k = v.varint();
          if (k == ((1 << 3) | 2)) e.tag = v.bytes();
          else if (k == ((2 << 3) | 5)) { e.value = v.fixed<float>(); e.has_value = true; }
          else FAIL("unexpected Value field key " << k);
        }
        break;
      }
      case (7 << 3) | 2: {  // SessionLog { SessionStatus status = 1; }
        std::string log = r.bytes();
        Reader l{log};
        REQUIRE(l.varint() == ((1 << 3) | 0));
        e.session_status = int64_t(l.varint());
        REQUIRE(l.pos == log.size());
        break;
      }
      default: FAIL("unexpected Event field key " << key);
    }
  }
  return e;
}

// Checks the TFRecord framing of every record and decodes the events.
std::vector<Event> read_events(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::string b{std::istreambuf_iterator<char>(f), {}};
  std::vector<Event> out;
  Reader r{b};
  while (r.pos < b.size()) {
    const char* len_bytes = b.data() + r.pos;
    uint64_t len = r.fixed<uint64_t>();
    uint32_t len_crc = r.fixed<uint32_t>();
    REQUIRE(len_crc == masked(crc32c(len_bytes, 8)));
    REQUIRE(r.pos + len + 4 <= b.size());
    std::string data = b.substr(r.pos, len);
    r.pos += len;
    uint32_t data_crc = r.fixed<uint32_t>();
    REQUIRE(data_crc == masked(crc32c(data.data(), data.size())));
    out.push_back(decode_event(data));
  }
  return out;
}

}  // namespace

TEST_CASE("crc32c matches the published check values", "[train][tensorboard]") {
  REQUIRE(crc32c("123456789", 9) == 0xe3069283u);
  std::string zeros(32, '\0'), ones(32, '\xff'), ascending;
  for (int i = 0; i < 32; ++i) ascending += char(i);
  REQUIRE(crc32c(zeros.data(), 32) == 0x8a9136aau);  // RFC 3720 B.4
  REQUIRE(crc32c(ones.data(), 32) == 0x62a8ab43u);
  REQUIRE(crc32c(ascending.data(), 32) == 0x46dd794eu);
  REQUIRE(crc32c("6789", 4, crc32c("12345", 5)) == 0xe3069283u);  // continued
  REQUIRE(crc32c(nullptr, 0) == 0);
}

TEST_CASE("TensorBoardWriter writes framed scalar events, flushed as they come", "[train][tensorboard]") {
  struct Cleanup {
    fs::path root = fs::temp_directory_path() / ("libnn_tb_" + std::to_string(getpid()));
    ~Cleanup() { fs::remove_all(root); }
  } cleanup;
  fs::path dir = cleanup.root / "run1";
  fs::remove_all(cleanup.root);
  double t0 = double(time(nullptr));
  TensorBoardWriter w(dir.string());  // creates the directory
  std::string name = fs::path(w.path()).filename().string();
  REQUIRE(fs::path(w.path()).parent_path() == dir);
  REQUIRE(name.rfind("events.out.tfevents.", 0) == 0);
  REQUIRE(name.find(std::string(".").append(std::to_string(getpid())).append(".")) != std::string::npos);
  REQUIRE(name.size() > 6);
  REQUIRE(name.substr(name.size() - 6) == ".libnn");

  w.add_scalar("train/loss", 0.5, 1);
  w.add_scalar("train/loss", 0.25, 2);
  // read while the writer is alive: every scalar is on disk already
  auto ev = read_events(w.path());
  REQUIRE(ev.size() == 3);
  w.add_scalar("val/acc", 0.875, 1ll << 40);
  w.add_scalar("neg", -1.5, -3);  // int64 step as a ten-byte varint
  w.add_scalar("tiny", 1e-30, 7);
  ev = read_events(w.path());
  REQUIRE(ev.size() == 6);

  REQUIRE(ev[0].file_version == "brain.Event:2");
  REQUIRE_FALSE(ev[0].has_value);
  // time() may read a coarse clock a tick behind the writer's: 2 s of slack on each side
  for (auto& e : ev) {
    REQUIRE(e.wall_time >= t0 - 2);
    REQUIRE(e.wall_time <= double(time(nullptr)) + 2);
  }
  struct Want { const char* tag; float value; int64_t step; };
  Want want[] = {{"train/loss", 0.5f, 1}, {"train/loss", 0.25f, 2}, {"val/acc", 0.875f, 1ll << 40},
                 {"neg", -1.5f, -3}, {"tiny", 1e-30f, 7}};
  for (int i = 0; i < 5; ++i) {
    INFO("scalar " << i);
    REQUIRE(ev[i + 1].file_version.empty());
    REQUIRE(ev[i + 1].tag == want[i].tag);
    REQUIRE(ev[i + 1].has_value);
    REQUIRE(ev[i + 1].value == want[i].value);
    REQUIRE(ev[i + 1].step == want[i].step);
  }
  // A second writer on the same folder within the second gets a file of its own: the first
  // one's events stay (the two names were equal, and the second truncated the first).
  TensorBoardWriter w2(dir.string());
  REQUIRE(w2.path() != w.path());
  w2.add_scalar("train/loss", 9, 1);
  REQUIRE(read_events(w.path()).size() == 6);
  REQUIRE(read_events(w2.path()).size() == 2);
  // a tag that is not UTF-8 (Latin-1 "café") is refused and nothing is written: TensorBoard
  // stops reading a file at such a tag, so every later scalar was lost
  REQUIRE(test::error_of([&] { w2.add_scalar("acc/caf\xe9", 0.5, 2); }).find("is not valid UTF-8") !=
          std::string::npos);
  w2.add_scalar("caf\u00e9", 0.5, 2);
  REQUIRE(read_events(w2.path()).size() == 3);
}

TEST_CASE("TensorBoardWriter marks where a resumed run starts again", "[train][tensorboard]") {
  test::TempDir d;
  TensorBoardWriter w(d.file("tb"));
  w.purge_from(6);
  w.add_scalar("train/loss", 0.5, 6);
  const auto ev = read_events(w.path());
  REQUIRE(ev.size() == 3);
  // a SessionLog START (1) at the step: readers drop the steps >= 6 of earlier files
  REQUIRE(ev[1].step == 6);
  REQUIRE(ev[1].session_status == 1);
  REQUIRE_FALSE(ev[1].has_value);
  REQUIRE(ev[1].wall_time >= ev[0].wall_time);
  REQUIRE(ev[2].session_status == -1);
  REQUIRE(ev[2].tag == "train/loss");
}

TEST_CASE("TensorBoardWriter reports a log directory it cannot create", "[train][tensorboard][errors]") {
  fs::path file = fs::temp_directory_path() / ("libnn_tb_file_" + std::to_string(getpid()));
  std::ofstream(file) << "a file, not a directory";
  std::string e = test::error_of([&] { TensorBoardWriter w((file / "logs").string()); });
  fs::remove(file);
  REQUIRE(e.find("TensorBoard: cannot create the log directory '" + (file / "logs").string() + "': ") == 0);
}
