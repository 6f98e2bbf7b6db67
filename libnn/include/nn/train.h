// Training-loop helpers shared by the apps: a progress line, per-epoch metrics as JSON
// lines, a stopwatch.
#pragma once
#include <chrono>
#include <functional>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace nn::train {

class Stopwatch {
 public:
  Stopwatch() : t0_(std::chrono::steady_clock::now()) {}
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  }
  void reset() { t0_ = std::chrono::steady_clock::now(); }

 private:
  std::chrono::steady_clock::time_point t0_;
};

// A live "label [####....] 42/469 loss 0.3121 2380 samples/s" line, redrawn in place on a
// terminal at most ~10 times a second. When stdout is not a terminal it prints a plain line
// every `plain_every` updates (0: never) so logs stay readable.
class Progress {
 public:
  Progress(std::string label, int64_t total, int64_t plain_every = 0);
  // `info` is called only when the line is drawn, so reading a value from a GPU (a host sync)
  // happens only then.
  void update(int64_t done, const std::function<std::string()>& info);
  void finish();  // clears the live line

 private:
  std::string label_;
  int64_t total_, plain_every_;
  bool tty_;
  double last_draw_ = -1;
  Stopwatch clock_;
};

// One JSON object per line, with fields in the order given. Values are numbers (written
// with the fewest digits, 15 or 17, that read back as the same double; NaN and inf as null)
// or strings (escaped).
class JsonLine {
 public:
  JsonLine& add(const std::string& key, double value);
  JsonLine& add(const std::string& key, int64_t value);
  JsonLine& add(const std::string& key, int value) { return add(key, int64_t(value)); }
  JsonLine& add(const std::string& key, const std::string& value);
  std::string str() const;

 private:
  std::vector<std::pair<std::string, std::string>> fields_;
};
// Appends the line to `path` (created if missing), all of it or none (a write cut short, by
// a full disk, is taken back); throws nn::Error if it cannot be written.
void append_line(const std::string& path, const std::string& line);
// Replaces `path` with `text` whole: written beside it, then renamed over it, so a reader (or
// a run killed while writing) never sees half a file; a `path` that is not a regular file
// (/dev/stdout, a pipe) is written in place; as save_safetensors, it removes what killed
// writes of `path` left beside it. Throws nn::Error if it cannot be written.
void write_file(const std::string& path, const std::string& text);

bool stdout_is_terminal();

}  // namespace nn::train

namespace nn::train {

// Runs `command` through /bin/sh on a background thread with `text` on its standard input
// (e.g. `mail -s "epoch done" me@example.com`, or a curl to a webhook). Never blocks the
// caller and never throws: a command that cannot start or exits non-zero prints one warning
// on stderr. Returns at once.
void notify_async(const std::string& command, const std::string& text);
// Waits up to `timeout_seconds` for the notify commands still running (a program calls it
// before it exits, so the last epoch's message is not lost); true when none is left.
bool wait_for_notifications(double timeout_seconds);

}  // namespace nn::train
