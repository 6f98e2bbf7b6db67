// Scalars for TensorBoard: an event file (TFRecord framing around protobuf Event messages,
// both written by hand, so no TensorFlow or protobuf dependency) that `tensorboard --logdir`
// reads while the run is going.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

namespace nn::train {

class TensorBoardWriter {
 public:
  // Creates `logdir` if missing and the file
  // logdir/events.out.tfevents.<unix time>.<hostname>.<pid>.<n>.libnn (n: this process's
  // writers so far); throws nn::Error when either cannot be created (an existing file of
  // that name included: it is never overwritten).
  explicit TensorBoardWriter(const std::string& logdir);
  // Appends one scalar and flushes, so a live TensorBoard sees it at once. Throws nn::Error
  // when the write fails (disk full) or the tag is not valid UTF-8 (TensorBoard would stop
  // reading the file there; nothing is written).
  void add_scalar(const std::string& tag, double value, int64_t step);
  // Tells readers that the run starts again at `step`: the events at steps >= step that
  // earlier files of this folder hold (an interrupted run's, past the checkpoint it is
  // resumed from) are dropped, not drawn beside this writer's. A SessionLog START event at
  // that step, as PyTorch's SummaryWriter(purge_step) writes; TensorBoard's Rust reader drops
  // them anyway once a step comes again.
  void purge_from(int64_t step);
  void flush();
  const std::string& path() const { return path_; }

 private:
  void write_event(const std::string& event);
  struct Closer {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  std::unique_ptr<std::FILE, Closer> file_;
  std::string path_;
};

// CRC-32C (Castagnoli), as TFRecord framing uses; pass the previous result to continue.
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);

}  // namespace nn::train
