#include <nn/error.h>
#include <nn/train.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "io/json.h"
#include "io/atomic_save.h"

namespace nn::train {

bool stdout_is_terminal() { return isatty(fileno(stdout)) == 1; }

Progress::Progress(std::string label, int64_t total, int64_t plain_every)
    : label_(std::move(label)), total_(total), plain_every_(plain_every),
      tty_(stdout_is_terminal()) {}

void Progress::update(int64_t done, const std::function<std::string()>& info) {
  if (!tty_) {
    if (plain_every_ > 0 && (done % plain_every_ == 0 || done == total_)) {
      std::printf("%s %lld/%lld %s\n", label_.c_str(), (long long)done, (long long)total_,
                  info().c_str());
      std::fflush(stdout);
    }
    return;
  }
  double now = clock_.seconds();
  if (done != total_ && last_draw_ >= 0 && now - last_draw_ < 0.1) return;
  last_draw_ = now;
  constexpr int kWidth = 24;
  int filled = total_ > 0 ? int(kWidth * done / total_) : kWidth;
  std::string bar(size_t(filled), '#');
  bar.resize(kWidth, '.');
  std::printf("\r\033[K%s [%s] %lld/%lld %s", label_.c_str(), bar.c_str(), (long long)done,
              (long long)total_, info().c_str());
  std::fflush(stdout);
}

void Progress::finish() {
  if (tty_) {
    std::printf("\r\033[K");
    std::fflush(stdout);
  }
}

JsonLine& JsonLine::add(const std::string& key, double v) {
  char buf[32];
  if (std::isfinite(v)) {  // the shortest of 15 or 17 digits that reads back as v
    std::snprintf(buf, sizeof buf, "%.15g", v);
    if (std::strtod(buf, nullptr) != v) std::snprintf(buf, sizeof buf, "%.17g", v);
  } else {
    std::snprintf(buf, sizeof buf, "null");
  }
  fields_.emplace_back(key, buf);
  return *this;
}
JsonLine& JsonLine::add(const std::string& key, int64_t v) {
  fields_.emplace_back(key, std::to_string(v));
  return *this;
}
JsonLine& JsonLine::add(const std::string& key, const std::string& v) {
  fields_.emplace_back(key, io::json::quote(v));
  return *this;
}
std::string JsonLine::str() const {
  std::string s = "{";
  for (size_t i = 0; i < fields_.size(); ++i)
    s += (i ? ", " : "") + io::json::quote(fields_[i].first) + ": " + fields_[i].second;
  return s + "}";
}

void append_line(const std::string& path, const std::string& line) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0666);
  NN_CHECK(fd >= 0, "cannot open '", path, "' for appending: ", std::strerror(errno));
  // All of the line or none of it: a write cut short (a full disk) is taken back, so that
  // the next line, of a resumed run say, does not continue a broken one.
  struct stat st{};
  const bool regular = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  const std::string text = line + "\n";
  size_t done = 0;
  int err = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      err = n < 0 ? errno : ENOSPC;
      break;
    }
    done += size_t(n);
  }
  if (err != 0 && done > 0 && regular) {
    const int ignored = ::ftruncate(fd, st.st_size);  // best effort: the error is what matters
    (void)ignored;
  }
  ::close(fd);
  NN_CHECK(err == 0, "writing to '", path, "' failed: ", std::strerror(err));
}

void write_file(const std::string& path, const std::string& text) {
  io::atomic_save::write(path, [&](const std::string& name) {
    std::ofstream f(name, std::ios::binary | std::ios::trunc);
    NN_CHECK(f.good(), "cannot open '", name, "' for writing: ", std::strerror(errno));
    f << text;
    f.flush();
    NN_CHECK(f.good(), "writing to '", name, "' failed: ", std::strerror(errno));
  });
}

}  // namespace nn::train
