// Data: the IDX file format (MNIST and friends), datasets, and a DataLoader that shuffles
// with a seed, batches, and prepares the next batch on a background thread.
#pragma once
#include <nn/tensor.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace nn::data {

// Reads an IDX file, plain or gzip-compressed. Checks the magic number, the element type,
// the dimensions and that the data size matches them exactly; every error is an nn::Error
// naming the file and what is wrong. u8 data gives a u8 tensor; i8/i16/i32 give i32; f32
// and f64 keep their type.
Tensor read_idx(const std::string& path);
// Writes a tensor (u8, i32, f32 or f64) as IDX; gzip-compressed when path ends in ".gz".
void write_idx(const std::string& path, const Tensor& t);

struct Batch {
  Tensor data;
  Tensor target;
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual Batch get_batch(const std::vector<int64_t>& indices) const = 0;
  // The batch as epoch `epoch` (0-based) of a DataLoader sees it; the DataLoader calls this.
  // Data sets with random augmentation override it and draw each sample's randomness from
  // (seed, epoch, sample index), so a sample looks the same however the epoch was reached (a
  // resumed run sees the same crops), whatever the batch size, order or sharding. The default
  // ignores the epoch.
  virtual Batch get_epoch_batch(const std::vector<int64_t>& indices, int64_t /*epoch*/) const {
    return get_batch(indices);
  }
};

// Rows of `data` and `target` (dim 0) taken together.
class TensorDataset : public Dataset {
 public:
  TensorDataset(Tensor data, Tensor target);
  int64_t size() const override { return data_.shape()[0]; }
  Batch get_batch(const std::vector<int64_t>& indices) const override;
  const Tensor& data() const { return data_; }
  const Tensor& target() const { return target_; }

 private:
  Tensor data_, target_;
};

// MNIST-format data sets (MNIST, Fashion-MNIST): images as f32 (N, 1, 28, 28) scaled to
// [0, 1], labels as i64. Looks for train-images-idx3-ubyte[.gz] (or t10k-... for the test
// split) and the matching labels in `root`.
std::shared_ptr<TensorDataset> load_mnist(const std::string& root, bool train);

// Images held in memory as u8 (N, C, H, W) with i64 labels (CIFAR, synthetic sets). Batches are
// f32 (B, C, H, W): pixels / 255, then (x - mean[c]) / std[c]. With augmentation, each training
// sample is a random H x W crop of the image padded by `pad` zero pixels on every side, flipped
// left-right with probability 1/2 when `flip` is set (the usual CIFAR recipe); the randomness
// comes from (seed, epoch, sample index) (see Dataset::get_epoch_batch).
struct ImageAugment {
  int64_t pad = 0;  // 0: no random crop
  bool flip = false;
  uint64_t seed = 0;
};
class ImageDataset : public Dataset {
 public:
  ImageDataset(Tensor images, Tensor labels, std::vector<std::string> classes = {});
  int64_t size() const override { return images_.shape()[0]; }
  Batch get_batch(const std::vector<int64_t>& indices) const override { return get_epoch_batch(indices, 0); }
  Batch get_epoch_batch(const std::vector<int64_t>& indices, int64_t epoch) const override;
  // Per-channel normalisation applied to pixels / 255 (default: mean 0, std 1).
  void set_normalization(std::vector<double> mean, std::vector<double> std);
  // The per-channel mean and standard deviation of pixels / 255 over the whole set.
  std::pair<std::vector<double>, std::vector<double>> channel_stats() const;
  void set_augment(const ImageAugment& a);
  const Tensor& images() const { return images_; }
  const Tensor& labels() const { return labels_; }
  // Class names (from the data set's files, else "0", "1", ...).
  const std::vector<std::string>& classes() const { return classes_; }
  // The first n samples (a view of the same pixels; normalisation and augmentation kept).
  std::shared_ptr<ImageDataset> head(int64_t n) const;

 private:
  Tensor images_, labels_;
  std::vector<std::string> classes_;
  std::vector<float> mean_, inv_std_;
  ImageAugment augment_;
};

// CIFAR-10 or CIFAR-100 in the binary version (cifar-10-binary.tar.gz or
// cifar-100-binary.tar.gz from the CIFAR page), unpacked. `root` is the unpacked folder
// (cifar-10-batches-bin/ or cifar-100-binary/) or the folder holding it (an error if it holds
// both). CIFAR-10:
// data_batch_1.bin .. data_batch_5.bin for training and test_batch.bin, records of one label
// byte and 3072 pixel bytes (R, G, B planes of 32 x 32); class names from batches.meta.txt.
// CIFAR-100: train.bin and test.bin, records of a coarse and a fine label byte and the
// pixels; the fine labels (100 classes) are used, names from fine_label_names.txt. Every
// file is checked (size a whole number of records, labels in range); errors name the file.
std::shared_ptr<ImageDataset> load_cifar(const std::string& root, bool train);

// A learnable synthetic stand-in for CIFAR (for tests and offline demos): n RGB images of
// size x size in `classes` classes. Each class has its own colour and its own stripe pattern
// (orientation and frequency); each image has a random phase, contrast and pixel noise, so
// a model must learn the pattern, not memorise pixels. `class_seed` fixes the classes'
// colours and patterns and `seed` the images, so a test set is the same call with another
// seed. The same arguments always give the same set.
std::shared_ptr<ImageDataset> synthetic_images(int64_t n, int64_t classes, int64_t size,
                                               uint64_t seed, uint64_t class_seed = 0);

// An ImageNet-style folder: root/<class>/<image>.jpg (class = folder name, sorted). Images
// are decoded with libjpeg-turbo (down-scaled while decoding when much larger than needed),
// then for training a random resized crop (scale 0.08..1, aspect 3/4..4/3) and a random
// horizontal flip, for evaluation a resize of the shorter side to size * 8/7 and a centre
// crop; finally normalised with ImageNet's mean and std. Batches: f32 (N, 3, size, size),
// labels i64. Decoding runs on all cores. The crops are drawn from (seed, epoch, image index),
// as Dataset::get_epoch_batch describes. A file of more than `max_pixels` pixels (its header's
// width x height) is an error naming it, before anything is decoded: libjpeg holds a whole
// progressive file's coefficients whatever the scale (about 1.2 GB at 20000 x 20000, per
// decoding thread). The default is PIL's limit (twice its 89,478,485-pixel warning); 0 is none.
struct ImageFolderOptions {
  int64_t size = 224;
  bool train = true;
  uint64_t seed = 0;
  int64_t max_pixels = 178956970;
};
class ImageFolder : public Dataset {
 public:
  ImageFolder(const std::string& root, ImageFolderOptions opts = {});
  int64_t size() const override { return int64_t(files_.size()); }
  Batch get_batch(const std::vector<int64_t>& indices) const override { return get_epoch_batch(indices, 0); }
  Batch get_epoch_batch(const std::vector<int64_t>& indices, int64_t epoch) const override;
  const std::vector<std::string>& classes() const { return classes_; }

 private:
  ImageFolderOptions opts_;
  std::vector<std::string> classes_;
  std::vector<std::pair<std::string, int64_t>> files_;
};
// True when libnn was built with JPEG support.
bool have_jpeg();
// Writes an RGB u8 image (H, W, 3) as a JPEG (for tests and synthetic data).
void write_jpeg(const std::string& path, const Tensor& rgb, int quality = 90);

struct DataLoaderOptions {
  int64_t batch_size = 64;
  bool shuffle = true;
  bool drop_last = false;  // drop a last batch smaller than batch_size
  uint64_t seed = 0;       // the order of epoch e depends only on (seed, e)
  bool prefetch = true;    // prepare the next batch on a background thread
  // Data parallel: this loader yields shard `shard` of `shards`, the epoch's samples at
  // positions shard, shard + shards, ... of the shared order (every rank uses the same seed),
  // so one step of all ranks together sees what one batch of shards * batch_size would.
  int64_t shards = 1, shard = 0;
  // Drop the epoch's last (size % shards) samples so every shard has the same number of
  // batches (ranks that step together need that); off for evaluation, where the shards'
  // sums are simply added.
  bool even_shards = true;
};

// Iterating yields the batches of one epoch; each new iteration starts the next epoch. A
// batch whose samples fail to load throws from begin() or ++ (with or without prefetch);
// the iteration can go on past it, as PyTorch's does, to the next batch: after ++ threw,
// with the next ++; after begin() threw (the epoch's first batch), with the next begin(),
// which goes on in the same epoch from the batch after it. One iteration at a time: a
// begin() ends the one before it, whose iterator then throws on ++ (a loop over a loader
// nested in a loop over the same loader).
class DataLoader {
 public:
  DataLoader(std::shared_ptr<Dataset> dataset, DataLoaderOptions opts);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  int64_t num_batches() const;
  const DataLoaderOptions& options() const { return opts_; }
  // The epoch the next iteration runs (0-based), and the batch it starts at (for resuming
  // mid-epoch: the order is the same, the first `start_batch` batches are skipped).
  void set_epoch(int64_t epoch, int64_t start_batch = 0);
  int64_t epoch() const { return epoch_; }
  // The sample order of an epoch (this shard's part of it).
  std::vector<int64_t> order(int64_t epoch) const;
  // Samples per epoch in this shard.
  int64_t size() const;

  class Iterator {
   public:
    Batch& operator*() { return current_; }
    Batch* operator->() { return &current_; }
    Iterator& operator++();
    bool operator!=(const Iterator& o) const { return index_ != o.index_; }
    int64_t index() const { return index_; }

   private:
    friend class DataLoader;
    Iterator(DataLoader* dl, int64_t index, uint64_t iteration)
        : dl_(dl), index_(index), iteration_(iteration) {}
    DataLoader* dl_;
    int64_t index_;
    uint64_t iteration_;  // the begin() it came from
    Batch current_;
  };
  Iterator begin();
  Iterator end() { return Iterator(this, num_batches(), iteration_); }

 private:
  Batch make_batch(int64_t b) const;
  Batch next_batch(int64_t b);
  void stop_worker();

  std::shared_ptr<Dataset> dataset_;
  DataLoaderOptions opts_;
  int64_t epoch_ = 0, start_batch_ = 0;
  std::vector<int64_t> order_;
  int64_t order_epoch_ = 0;  // the epoch order_ belongs to
  uint64_t iteration_ = 0;   // begin() calls so far
  // background producer
  std::thread worker_;
  std::mutex mu_;
  std::condition_variable cv_;
  struct Prepared {  // a batch, or the error making it threw
    Batch batch;
    std::exception_ptr error;
  };
  std::deque<Prepared> queue_;
  bool stop_ = false;
};

}  // namespace nn::data
