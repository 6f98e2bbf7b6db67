// Listing data folders (internal): the ImageNet-style image folders and the aclImdb-style
// text folders read their class folders and files the same way.
#pragma once
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <system_error>
#include <vector>

#include <nn/error.h>

namespace nn::data::detail {

// Throws nn::Error unless `root` is a folder: "<what> '<root>' does not exist<more>", or
// "... is a file, not a folder<more>".
inline void check_folder(const std::string& root, const char* what, const std::string& more = "") {
  std::error_code ec;
  const auto st = std::filesystem::status(root, ec);
  NN_CHECK(std::filesystem::exists(st), what, " '", root, "' does not exist", more);
  NN_CHECK(std::filesystem::is_directory(st), what, " '", root, "' is ",
           std::filesystem::is_regular_file(st) ? "a file" : "not a folder",
           std::filesystem::is_regular_file(st) ? ", not a folder" : "", more);
}

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

// ---- ImageFolder's geometry (image_folder.cpp) -----------------------------------------------

// A crop box, in the image file's own pixels.
struct CropBox {
  double x0, y0, w, h;
};

// torchvision's RandomResizedCrop (scale 0.08..1, ratio 3/4..4/3) on a W x H image: up to ten
// draws of an area and a log-uniform aspect ratio whose rounded box fits, at a uniformly drawn
// whole-pixel offset; else the centre crop with the ratio clamped to the range. Attempt a
// draws from the counter-based stream (key ^ a << 56, block), so a crop depends on the key
// and block (seed, epoch, image) only.
CropBox random_resized_crop(int W, int H, uint64_t key, uint64_t block);

// The largest libjpeg scale 1/d (d = 8, 4, 2, else 1) that keeps `side` pixels at least
// `min_side` after decoding.
int scale_denom(int side, int min_side);

}  // namespace nn::data::detail
