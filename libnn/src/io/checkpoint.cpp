#include <nn/checkpoint.h>
#include <nn/io.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <filesystem>

#include "io/atomic_save.h"

namespace nn::io {

namespace fs = std::filesystem;

namespace {

constexpr const char* kStepKey = "libnn.step";
constexpr const char* kPrefixes[] = {"model.", "optim.", "extra."};
constexpr const char* kFilePrefix = "ckpt-";
constexpr const char* kFileSuffix = ".safetensors";

// The whole of `s` as a decimal number of type T (no sign for unsigned, no spaces).
template <typename T>
bool parse_decimal(const std::string& s, T& out) {
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return !s.empty() && ec == std::errc() && end == s.data() + s.size();
}

// Step of "ckpt-0000000042.safetensors", or -1 when the name is not a checkpoint's.
int64_t step_of(const std::string& name) {
  const std::string pre = kFilePrefix, suf = kFileSuffix;
  if (name.size() < pre.size() + 10 + suf.size() || name.compare(0, pre.size(), pre) != 0 ||
      name.compare(name.size() - suf.size(), suf.size(), suf) != 0)
    return -1;
  std::string digits = name.substr(pre.size(), name.size() - pre.size() - suf.size());
  int64_t step = -1;
  if (digits.find_first_not_of("0123456789") != std::string::npos || !parse_decimal(digits, step))
    return -1;
  return step;
}

// "safetensors file '<path>': checksum mismatch ..." -> "checksum mismatch ...".
std::string reason(const std::string& msg, const std::string& path) {
  for (const char* what : {"safetensors file '", "checkpoint '"}) {
    std::string head = what + path + "': ";
    if (msg.rfind(head, 0) == 0) return msg.substr(head.size());
  }
  return msg;
}

}  // namespace

void save_checkpoint(const std::string& path, const Checkpoint& c) {
  NN_CHECK(c.step >= 0, "checkpoint '", path, "': step must be >= 0, got ", c.step);
  NamedTensors all;
  all.reserve(c.model.size() + c.optimizer.size() + c.extra.size());
  const NamedTensors* groups[] = {&c.model, &c.optimizer, &c.extra};
  for (int g = 0; g < 3; ++g)
    for (auto& [name, t] : *groups[g]) all.emplace_back(kPrefixes[g] + name, t);
  for (const char* reserved : {kStepKey, kChecksumKey, kHeaderChecksumKey})
    NN_CHECK(!c.meta.count(reserved), "checkpoint '", path, "': meta key '", reserved,
             "' is reserved for libnn");
  auto meta = c.meta;
  meta[kStepKey] = std::to_string(c.step);
  save_safetensors(path, all, meta);
}

Checkpoint load_checkpoint(const std::string& path) {
  SafetensorsFile f = load_safetensors(path);
  Checkpoint c;
  auto it = f.metadata.find(kStepKey);
  NN_CHECK(it != f.metadata.end(), "checkpoint '", path,
           "': not a libnn checkpoint (no '", kStepKey, "' in its metadata)");
  NN_CHECK(parse_decimal(it->second, c.step) && c.step >= 0, "checkpoint '", path, "': '",
           kStepKey, "' is '", it->second, "', expected a non-negative integer");
  f.metadata.erase(it);
  c.meta = std::move(f.metadata);
  NamedTensors* groups[] = {&c.model, &c.optimizer, &c.extra};
  for (auto& [name, t] : f.tensors) {
    int g = 0;
    while (g < 3 && name.rfind(kPrefixes[g], 0) != 0) ++g;
    NN_CHECK(g < 3, "checkpoint '", path, "': tensor '", name,
             "' has none of the prefixes model., optim., extra.");
    groups[g]->emplace_back(name.substr(std::string(kPrefixes[g]).size()), std::move(t));
  }
  return c;
}

Checkpointer::Checkpointer(std::string dir, int keep_last)
    : dir_(std::move(dir)), keep_last_(keep_last) {
  NN_CHECK(!dir_.empty(), "Checkpointer: the directory name is empty");
  NN_CHECK(keep_last >= 1, "Checkpointer: keep_last must be >= 1, got ", keep_last);
}

std::vector<std::string> Checkpointer::list() const {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  fs::directory_iterator it(dir_, ec), end;
  // a folder not made yet has no checkpoints; one that cannot be read (permissions, a file
  // system gone away) is an error: a resumed run must not start over for it
  if (ec == std::errc::no_such_file_or_directory) return {};
  for (; !ec && it != end; it.increment(ec)) {
    std::string name = it->path().filename().string();
    int64_t step = step_of(name);
    if (step >= 0) found.emplace_back(step, it->path().string());
  }
  NN_CHECK(!ec, "Checkpointer: cannot read the folder '", dir_, "': ", ec.message());
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(std::move(f.second));
  return out;
}

std::string Checkpointer::save(const Checkpoint& c) {
  NN_CHECK(c.step >= 0, "Checkpointer: step must be >= 0, got ", c.step);
  std::error_code ec;
  fs::create_directories(dir_, ec);
  NN_CHECK(!ec, "Checkpointer: cannot create the directory '", dir_, "': ", ec.message());
  char name[64];
  std::snprintf(name, sizeof name, "%s%010lld%s", kFilePrefix, (long long)c.step, kFileSuffix);
  const std::string path = (fs::path(dir_) / name).string();
  save_checkpoint(path, c);

  // Pruning is best effort: a file we cannot delete must not stop the training run. Only
  // checkpoints older than this one are pruned: a newer file is never ours to delete.
  std::vector<std::string> files;
  try {
    files = list();
  } catch (const Error&) {  // (the checkpoint is written: a folder that reads badly keeps all)
  }
  while (!files.empty() && files.back() != path) files.pop_back();
  size_t keep = size_t(keep_last_);
  for (size_t i = 0; i + keep < files.size(); ++i) fs::remove(files[i], ec);
  // (any checkpoint's: a save killed midway may have been of a step never saved again)
  for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
    auto base = atomic_save::stale_tmp_base(it->path().filename().string());
    if (base && step_of(*base) >= 0) {
      std::error_code ignored;
      fs::remove(it->path(), ignored);
    }
  }
  return path;
}

std::optional<Checkpoint> Checkpointer::load_latest(std::vector<std::string>* warnings) const {
  auto files = list();
  for (auto it = files.rbegin(); it != files.rend(); ++it) {
    try {
      return load_checkpoint(*it);
    } catch (const std::exception& e) {  // nn::Error, and bad_alloc on a damaged huge file
      if (warnings) warnings->push_back("skipping " + *it + ": " + reason(e.what(), *it));
    }
  }
  return std::nullopt;
}

void save_generator(std::map<std::string, std::string>& meta, const std::string& key,
                    const Generator& g) {
  meta[key + ".seed"] = std::to_string(g.seed());
  meta[key + ".offset"] = std::to_string(g.offset());
}

void load_generator(const std::map<std::string, std::string>& meta, const std::string& key,
                    Generator& g) {
  uint64_t v[2];
  const std::string names[2] = {key + ".seed", key + ".offset"};
  for (int i = 0; i < 2; ++i) {
    auto it = meta.find(names[i]);
    NN_CHECK(it != meta.end(), "checkpoint meta has no '", names[i],
             "' (generator state saved under another key, or not at all)");
    NN_CHECK(parse_decimal(it->second, v[i]), "checkpoint meta '", names[i], "' is '",
             it->second, "', expected a non-negative decimal integer");
  }
  g.set_state(v[0], v[1]);
}

}  // namespace nn::io
