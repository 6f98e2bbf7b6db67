// TensorDataset and the MNIST-format loader.
#include <nn/autograd.h>
#include <nn/data.h>
#include <nn/ops.h>

#include <filesystem>

#include "data/folder.h"

namespace nn::data {

TensorDataset::TensorDataset(Tensor data, Tensor target)
    : data_(std::move(data)), target_(std::move(target)) {
  NN_CHECK(data_.defined() && target_.defined(), "TensorDataset: data and target must be defined");
  NN_CHECK(data_.dim() >= 1 && target_.dim() >= 1 && data_.shape()[0] == target_.shape()[0],
           "TensorDataset: data ", shape_str(data_.shape()), " and target ",
           shape_str(target_.shape()), " must have the same number of rows");
}

Batch TensorDataset::get_batch(const std::vector<int64_t>& indices) const {
  NoGradGuard ng;
  Tensor idx = from_vector(indices, {int64_t(indices.size())}).to(data_.device());
  return {index_select(data_, idx), index_select(target_, idx)};
}

namespace {
std::string find_file(const std::string& root, const std::string& stem) {
  namespace fs = std::filesystem;
  // The usual names, and the dotted variant some mirrors use (train-images.idx3-ubyte).
  std::string dotted = stem;
  if (auto p = dotted.find("-idx"); p != std::string::npos) dotted[p] = '.';
  for (const auto& name : {stem + ".gz", stem, dotted + ".gz", dotted}) {
    fs::path p = fs::path(root) / name;
    if (fs::exists(p)) return p.string();
  }
  NN_ERROR("MNIST data not found: no ", stem, "[.gz] in '", root, "'");
}
}  // namespace

std::shared_ptr<TensorDataset> load_mnist(const std::string& root, bool train) {
  namespace fs = std::filesystem;
  detail::check_folder(root, "MNIST data directory");
  const std::string split = train ? "train" : "t10k";
  std::string ip = find_file(root, split + "-images-idx3-ubyte");
  std::string lp = find_file(root, split + "-labels-idx1-ubyte");
  Tensor images = read_idx(ip), labels = read_idx(lp);
  NN_CHECK(images.dtype() == kU8 && images.dim() == 3, "'", ip, "': expected u8 images of 3 "
           "dims (N, rows, cols), got ", dtype_name(images.dtype()), " ", shape_str(images.shape()));
  // (MNIST, Fashion-MNIST, KMNIST, EMNIST: all 28 x 28, the size the models are built for)
  NN_CHECK(images.shape()[1] == 28 && images.shape()[2] == 28, "'", ip, "': expected 28 x 28 "
           "images, got ", images.shape()[1], " x ", images.shape()[2]);
  NN_CHECK(labels.dtype() == kU8 && labels.dim() == 1, "'", lp, "': expected u8 labels of 1 "
           "dim, got ", dtype_name(labels.dtype()), " ", shape_str(labels.shape()));
  NN_CHECK(images.shape()[0] == labels.shape()[0], "'", ip, "' holds ", images.shape()[0],
           " images but '", lp, "' holds ", labels.shape()[0], " labels");
  NN_CHECK(images.shape()[0] > 0, "'", ip, "' holds no images");
  NoGradGuard ng;
  Tensor x = mul(images.to(kF32), 1.0 / 255.0)
                 .reshape({images.shape()[0], 1, images.shape()[1], images.shape()[2]});
  Tensor y = labels.to(kI64);
  int64_t maxlabel = int64_t(amax(y).item());
  NN_CHECK(maxlabel < 10, "'", lp, "': label ", maxlabel, " is out of range for 10 classes");
  return std::make_shared<TensorDataset>(x, y);
}

}  // namespace nn::data
