// Listing data folders (internal): the ImageNet-style image folders and the aclImdb-style
// text folders read their class folders and files the same way.
#pragma once
#include <algorithm>
#include <filesystem>
#include <functional>
#include <string>
#include <system_error>
#include <vector>

namespace nn::data::detail {

// The sorted names in `dir` of its sub-folders (want_dirs) or of its other entries that
// `keep` accepts (all of them without `keep`). Hidden entries (".git", macOS's "._x.jpg"
// metadata files) are never data. Throws std::filesystem::filesystem_error when `dir`
// cannot be read.
inline std::vector<std::string> sorted_names(
    const std::filesystem::path& dir, bool want_dirs,
    const std::function<bool(const std::string&)>& keep = {}) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    std::error_code ec;
    const bool is_dir = e.is_directory(ec);
    std::string name = e.path().filename().string();
    if (name.rfind('.', 0) == 0 || is_dir != want_dirs) continue;
    if (!want_dirs && keep && !keep(name)) continue;
    names.push_back(std::move(name));
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace nn::data::detail
