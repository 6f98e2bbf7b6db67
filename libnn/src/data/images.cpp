// ImageDataset (u8 images in memory, normalised and augmented per batch), the CIFAR-10 /
// CIFAR-100 binary reader, and the synthetic stand-in for CIFAR.
#include <nn/data.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "data/folder.h"
#include "kernels/philox.h"

namespace nn::data {

namespace fs = std::filesystem;

namespace {
// Philox streams: one for augmentation, others for the synthetic set's classes and images.
constexpr uint64_t kAugmentStream = 0xA11C0DE5ull;
constexpr uint64_t kClassStream = 0xC1A55E5ull, kImageStream = 0x1A6E5ull;
// Counter block of (epoch, sample): each sample gets its own block in each epoch.
uint64_t sample_block(int64_t epoch, int64_t index) { return (uint64_t(epoch) << 40) | uint64_t(index); }
}  // namespace

ImageDataset::ImageDataset(Tensor images, Tensor labels, std::vector<std::string> classes)
    : classes_(std::move(classes)) {
  NN_CHECK(images.defined() && labels.defined(), "ImageDataset: images and labels must be defined");
  NN_CHECK(images.dtype() == kU8 && images.dim() == 4, "ImageDataset: images must be u8 (N, C, H, W), got ",
           dtype_name(images.dtype()), " ", shape_str(images.shape()));
  NN_CHECK(labels.dtype() == kI64 && labels.dim() == 1 && labels.shape()[0] == images.shape()[0],
           "ImageDataset: labels must be i64 (", images.shape()[0], "), got ", dtype_name(labels.dtype()),
           " ", shape_str(labels.shape()));
  images_ = images.detach().cpu().contiguous();
  labels_ = labels.detach().cpu().contiguous();
  int64_t max_label = -1;
  const int64_t* lb = labels_.data<int64_t>();
  for (int64_t i = 0; i < labels_.shape()[0]; ++i) {
    NN_CHECK(lb[i] >= 0, "ImageDataset: label ", lb[i], " of sample ", i, " is negative");
    max_label = std::max(max_label, lb[i]);
  }
  if (classes_.empty())
    for (int64_t c = 0; c <= max_label; ++c) classes_.push_back(std::to_string(c));
  NN_CHECK(max_label < int64_t(classes_.size()), "ImageDataset: label ", max_label, " but only ",
           classes_.size(), " class names");
  const size_t C = size_t(images_.shape()[1]);
  mean_.assign(C, 0.0f);
  inv_std_.assign(C, 1.0f);
}

void ImageDataset::set_normalization(std::vector<double> mean, std::vector<double> std) {
  const size_t C = size_t(images_.shape()[1]);
  NN_CHECK(mean.size() == C && std.size() == C, "ImageDataset::set_normalization: expected ", C,
           " means and standard deviations, got ", mean.size(), " and ", std.size());
  for (size_t c = 0; c < C; ++c) {
    NN_CHECK(std::isfinite(mean[c]) && std::isfinite(std[c]) && std[c] > 0,
             "ImageDataset::set_normalization: channel ", c, " has mean ", mean[c], " and std ", std[c],
             " (std must be positive)");
    mean_[c] = float(mean[c]);
    inv_std_[c] = float(1.0 / std[c]);
  }
}

std::pair<std::vector<double>, std::vector<double>> ImageDataset::channel_stats() const {
  const int64_t N = images_.shape()[0], C = images_.shape()[1], HW = images_.shape()[2] * images_.shape()[3];
  const uint8_t* px = images_.data<uint8_t>();
  std::vector<double> mean(static_cast<size_t>(C)), stdv(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) {
    // integer sums are exact: 255^2 * 2^40 pixels fits in 64 bits
    uint64_t s = 0, s2 = 0;
#pragma omp parallel for reduction(+ : s, s2)
    for (int64_t i = 0; i < N; ++i) {
      const uint8_t* p = px + (i * C + c) * HW;
      for (int64_t k = 0; k < HW; ++k) {
        s += p[k];
        s2 += uint64_t(p[k]) * p[k];
      }
    }
    const double n = double(N * HW);
    const double m = n > 0 ? double(s) / n : 0.0;
    mean[size_t(c)] = m / 255.0;
    stdv[size_t(c)] = n > 0 ? std::sqrt(std::max(0.0, double(s2) / n - m * m)) / 255.0 : 0.0;
  }
  return {mean, stdv};
}

void ImageDataset::set_augment(const ImageAugment& a) {
  NN_CHECK(a.pad >= 0, "ImageDataset: augmentation padding must be non-negative, got ", a.pad);
  augment_ = a;
}

std::shared_ptr<ImageDataset> ImageDataset::head(int64_t n) const {
  NN_CHECK(n >= 0, "ImageDataset::head: n must be non-negative, got ", n);
  n = std::min(n, size());
  auto out = std::make_shared<ImageDataset>(images_.slice(0, 0, n), labels_.slice(0, 0, n), classes_);
  out->mean_ = mean_;
  out->inv_std_ = inv_std_;
  out->augment_ = augment_;
  return out;
}

Batch ImageDataset::get_epoch_batch(const std::vector<int64_t>& indices, int64_t epoch) const {
  const int64_t n = int64_t(indices.size()), C = images_.shape()[1], H = images_.shape()[2],
                W = images_.shape()[3];
  for (int64_t idx : indices)
    NN_CHECK(idx >= 0 && idx < size(), "ImageDataset: sample ", idx, " out of range for ", size(), " images");
  std::vector<float> out(size_t(n * C * H * W));
  std::vector<int64_t> labels(static_cast<size_t>(n));
  const uint8_t* px = images_.data<uint8_t>();
  const int64_t* lb = labels_.data<int64_t>();
  const int64_t pad = augment_.pad;
#pragma omp parallel for if (n * C * H * W > (1 << 16))
  for (int64_t i = 0; i < n; ++i) {
    const int64_t idx = indices[size_t(i)];
    labels[size_t(i)] = lb[idx];
    int64_t dy = 0, dx = 0;
    bool flip = false;
    if (pad > 0 || augment_.flip) {
      float u[4];
      rng::uniform4(augment_.seed ^ kAugmentStream, sample_block(epoch, idx), u);
      // offsets in [-pad, pad]: the crop's corner in the padded image, less pad
      dy = std::min<int64_t>(int64_t(u[0] * float(2 * pad + 1)), 2 * pad) - pad;
      dx = std::min<int64_t>(int64_t(u[1] * float(2 * pad + 1)), 2 * pad) - pad;
      flip = augment_.flip && u[2] < 0.5f;
    }
    const uint8_t* src = px + idx * C * H * W;
    float* dst = out.data() + i * C * H * W;
    for (int64_t c = 0; c < C; ++c) {
      const float m = mean_[size_t(c)], s = inv_std_[size_t(c)], zero = -m * s;
      for (int64_t y = 0; y < H; ++y) {
        const int64_t sy = y + dy;
        for (int64_t x = 0; x < W; ++x) {
          const int64_t sx = (flip ? W - 1 - x : x) + dx;
          dst[(c * H + y) * W + x] = sy >= 0 && sy < H && sx >= 0 && sx < W
                                         ? (float(src[(c * H + sy) * W + sx]) * (1.0f / 255.0f) - m) * s
                                         : zero;
        }
      }
    }
  }
  return {from_vector(out, {n, C, H, W}), from_vector(labels, {n})};
}

// ---- CIFAR ---------------------------------------------------------------------------------

namespace {

struct CifarLayout {
  fs::path dir;
  bool hundred;  // CIFAR-100
};

CifarLayout find_cifar(const std::string& root) {
  detail::check_folder(root, "CIFAR data folder");
  const fs::path r(root), ten = r / "cifar-10-batches-bin", hundred = r / "cifar-100-binary";
  if (fs::exists(r / "data_batch_1.bin")) return {r, false};
  if (fs::exists(r / "train.bin")) return {r, true};
  const bool has10 = fs::exists(ten / "data_batch_1.bin"), has100 = fs::exists(hundred / "train.bin");
  NN_CHECK(!(has10 && has100), "'", root, "' holds both CIFAR-10 and CIFAR-100: name one, '", ten.string(),
           "' or '", hundred.string(), "'");
  if (has10) return {ten, false};
  if (has100) return {hundred, true};
  NN_ERROR("CIFAR data not found in '", root, "': expected data_batch_1.bin .. data_batch_5.bin and "
           "test_batch.bin (CIFAR-10), or train.bin and test.bin (CIFAR-100), the binary versions "
           "(data/fetch_cifar.sh downloads them), in it or in its cifar-10-batches-bin/ or "
           "cifar-100-binary/");
}

std::vector<std::string> read_names(const fs::path& p, size_t expected) {
  std::vector<std::string> names;
  if (!fs::exists(p)) {
    for (size_t c = 0; c < expected; ++c) names.push_back(std::to_string(c));
    return names;
  }
  std::ifstream f(p);
  NN_CHECK(f, "cannot open '", p.string(), "'");
  std::string line;
  while (std::getline(f, line)) {
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
    if (!line.empty()) names.push_back(line);
  }
  NN_CHECK(names.size() == expected, "'", p.string(), "' names ", names.size(), " classes, expected ", expected);
  return names;
}

}  // namespace

std::shared_ptr<ImageDataset> load_cifar(const std::string& root, bool train) {
  const CifarLayout L = find_cifar(root);
  std::vector<fs::path> files;
  if (L.hundred) files.push_back(L.dir / (train ? "train.bin" : "test.bin"));
  else if (train)
    for (int k = 1; k <= 5; ++k) files.push_back(L.dir / ("data_batch_" + std::to_string(k) + ".bin"));
  else files.push_back(L.dir / "test_batch.bin");
  const int64_t label_bytes = L.hundred ? 2 : 1, pixels = 3 * 32 * 32, record = label_bytes + pixels;
  const int64_t num_classes = L.hundred ? 100 : 10;

  std::vector<uint8_t> images;
  std::vector<int64_t> labels;
  for (const fs::path& p : files) {
    NN_CHECK(fs::exists(p), "CIFAR file '", p.string(), "' is missing");
    const int64_t bytes = int64_t(fs::file_size(p));
    NN_CHECK(bytes > 0 && bytes % record == 0, "CIFAR file '", p.string(), "' has ", bytes,
             " bytes, not a whole number of ", record, "-byte records (", L.hundred ? "CIFAR-100" : "CIFAR-10",
             " binary version)");
    std::ifstream f(p, std::ios::binary);
    NN_CHECK(f, "cannot open '", p.string(), "'");
    std::vector<uint8_t> buf(static_cast<size_t>(bytes));
    f.read(reinterpret_cast<char*>(buf.data()), bytes);
    NN_CHECK(f.gcount() == bytes, "CIFAR file '", p.string(), "': short read");
    const int64_t n = bytes / record;
    images.reserve(images.size() + size_t(n * pixels));
    for (int64_t r = 0; r < n; ++r) {
      const uint8_t* rec = buf.data() + r * record;
      const int64_t label = rec[label_bytes - 1];  // CIFAR-100: the fine label
      NN_CHECK(label < num_classes, "CIFAR file '", p.string(), "', record ", r, ": label ", label,
               " is not below ", num_classes);
      labels.push_back(label);
      images.insert(images.end(), rec + label_bytes, rec + record);
    }
  }
  std::vector<std::string> classes =
      read_names(L.dir / (L.hundred ? "fine_label_names.txt" : "batches.meta.txt"), size_t(num_classes));
  const int64_t n = int64_t(labels.size());
  return std::make_shared<ImageDataset>(from_vector(images, {n, 3, 32, 32}), from_vector(labels, {n}),
                                        std::move(classes));
}

// ---- synthetic images ----------------------------------------------------------------------

std::shared_ptr<ImageDataset> synthetic_images(int64_t n, int64_t classes, int64_t size, uint64_t seed,
                                               uint64_t class_seed) {
  NN_CHECK(n >= 0, "synthetic_images: n must be non-negative, got ", n);
  NN_CHECK(classes > 0, "synthetic_images: classes must be positive, got ", classes);
  NN_CHECK(size > 0, "synthetic_images: size must be positive, got ", size);
  struct Pattern {
    float colour[3], cos_t, sin_t, freq;
  };
  constexpr float kTwoPi = 6.2831853071795864f;
  std::vector<Pattern> pat(static_cast<size_t>(classes));
  for (int64_t k = 0; k < classes; ++k) {
    float u[4], v[4];
    rng::uniform4(class_seed ^ kClassStream, uint64_t(k) * 2, u);
    rng::uniform4(class_seed ^ kClassStream, uint64_t(k) * 2 + 1, v);
    Pattern& p = pat[size_t(k)];
    for (int c = 0; c < 3; ++c) p.colour[c] = 2 * u[c] - 1;
    const float theta = 0.5f * kTwoPi * u[3];
    p.cos_t = std::cos(theta);
    p.sin_t = std::sin(theta);
    p.freq = 1.0f + 3.0f * v[0];  // stripes across the image
  }
  const int64_t HW = size * size;
  std::vector<uint8_t> px(static_cast<size_t>(n * 3 * HW));
  std::vector<int64_t> labels(static_cast<size_t>(n));
#pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) {
    const int64_t label = i % classes;  // every class equally often
    labels[size_t(i)] = label;
    const Pattern& p = pat[size_t(label)];
    float u[4];
    const uint64_t stream = seed ^ kImageStream;
    rng::uniform4(stream, uint64_t(i) << 32, u);
    const float phase = kTwoPi * u[0], contrast = 0.5f + 0.5f * u[1];
    uint8_t* out = px.data() + i * 3 * HW;
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t q = 0; q < HW; q += 4) {
        float z[4];
        rng::normal4(stream, (uint64_t(i) << 32) + 1 + uint64_t(c * ((HW + 3) / 4) + q / 4), z);
        for (int64_t r = 0; r < 4 && q + r < HW; ++r) {
          const float y = float((q + r) / size), x = float((q + r) % size);
          const float stripe = std::sin(kTwoPi * p.freq * (x * p.cos_t + y * p.sin_t) / float(size) + phase);
          const float v = 0.5f + 0.15f * p.colour[c] + 0.25f * contrast * stripe + 0.08f * z[r];
          out[c * HW + q + r] = uint8_t(std::lround(std::clamp(v, 0.0f, 1.0f) * 255.0f));
        }
      }
  }
  std::vector<std::string> names;
  for (int64_t k = 0; k < classes; ++k) names.push_back(std::to_string(k));
  return std::make_shared<ImageDataset>(from_vector(px, {n, 3, size, size}), from_vector(labels, {n}),
                                        std::move(names));
}

}  // namespace nn::data
