// Training checkpoints: model, optimizer and extra tensors plus string metadata in one
// safetensors file, written atomically, with the newest few kept and a corrupt newest one
// skipped on resume.
#pragma once
#include <nn/module.h>
#include <nn/random.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace nn::io {

struct Checkpoint {
  NamedTensors model;      // e.g. Module::state_dict()
  NamedTensors optimizer;  // e.g. Optimizer::state()
  NamedTensors extra;      // anything else (loss scaler, EMA weights, ...)
  std::map<std::string, std::string> meta;  // "libnn.step", "libnn.crc32" are reserved
  int64_t step = 0;
};

// One checkpoint as one safetensors file: tensors named "model.<name>", "optim.<name>",
// "extra.<name>"; meta in "__metadata__" plus "libnn.step". Loading throws nn::Error naming
// the file when it is not a valid libnn checkpoint.
void save_checkpoint(const std::string& path, const Checkpoint& c);
Checkpoint load_checkpoint(const std::string& path);

// Checkpoints of one run in `dir`, as dir/ckpt-<step, 10 digits>.safetensors.
class Checkpointer {
 public:
  explicit Checkpointer(std::string dir, int keep_last = 3);
  // Creates `dir` if missing, writes atomically, then deletes all but the newest `keep_last`
  // checkpoints (and temporary files that crashed saves left behind). Returns the path.
  std::string save(const Checkpoint& c);
  // The newest checkpoint that loads; a corrupt, truncated or unreadable newer one is
  // skipped with "skipping <file>: <reason>" appended to `warnings`. nullopt if none loads
  // (or there are none).
  std::optional<Checkpoint> load_latest(std::vector<std::string>* warnings = nullptr) const;
  // Checkpoint paths, oldest (lowest step) first.
  std::vector<std::string> list() const;
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  int keep_last_;
};

// A generator's state in checkpoint meta, as decimal strings "<key>.seed" and
// "<key>.offset". load_generator throws nn::Error when a key is missing or malformed.
void save_generator(std::map<std::string, std::string>& meta, const std::string& key,
                    const Generator& g);
void load_generator(const std::map<std::string, std::string>& meta, const std::string& key,
                    Generator& g);

}  // namespace nn::io
