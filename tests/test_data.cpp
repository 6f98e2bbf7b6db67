#include <unistd.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>

#include "test_util.h"

using namespace nn;
namespace fs = std::filesystem;

namespace {
// A fresh folder under the system temp dir, removed at the end of the test.
struct TempDir {
  fs::path path;
  TempDir() {
    static int n = 0;
    path = fs::temp_directory_path() / ("libnn_test_" + std::to_string(getpid()) + "_" + std::to_string(n++));
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

// A valid u8 IDX file of shape (n, 2, 2) with values i * 4 + j.
std::vector<uint8_t> idx_bytes(uint32_t n) {
  std::vector<uint8_t> b{0, 0, 0x08, 3, 0, 0, 0, uint8_t(n), 0, 0, 0, 2, 0, 0, 0, 2};
  for (uint32_t i = 0; i < n * 4; ++i) b.push_back(uint8_t(i));
  return b;
}

std::string read_error(const std::string& path) {
  return test::error_of([&] { data::read_idx(path); });
}
}  // namespace

TEST_CASE("IDX round trip, plain and gzip", "[data][idx]") {
  TempDir d;
  Tensor u = from_vector<uint8_t>({1, 2, 3, 250, 0, 7}, {2, 3});
  Tensor f = tensor({1.5, -2.25, 3e10}, kF32);
  Tensor i = from_vector<int32_t>({-5, 70000}, {2, 1});
  for (const char* ext : {"", ".gz"}) {
    data::write_idx(d.file(std::string("u") + ext), u);
    data::write_idx(d.file(std::string("f") + ext), f);
    data::write_idx(d.file(std::string("i") + ext), i);
    Tensor ru = data::read_idx(d.file(std::string("u") + ext));
    REQUIRE(ru.dtype() == kU8);
    REQUIRE(ru.shape() == Shape{2, 3});
    REQUIRE(ru.to_vector<uint8_t>() == u.to_vector<uint8_t>());
    REQUIRE(data::read_idx(d.file(std::string("f") + ext)).to_vector<float>() == f.to_vector<float>());
    REQUIRE(data::read_idx(d.file(std::string("i") + ext)).to_vector<int32_t>() == i.to_vector<int32_t>());
  }
  // a hand-made file in the on-disk layout
  write_bytes(d.file("hand"), idx_bytes(3));
  Tensor h = data::read_idx(d.file("hand"));
  REQUIRE(h.shape() == Shape{3, 2, 2});
  REQUIRE(h.to_vector<int64_t>()[11] == 11);
}

TEST_CASE("IDX reader rejects broken files with clear messages", "[data][idx][errors]") {
  TempDir d;
  std::string p = d.file("broken-idx3-ubyte");

  REQUIRE(read_error(d.file("missing")).find("cannot open IDX file '" + d.file("missing") + "'") !=
          std::string::npos);

  auto bad_magic = idx_bytes(2);
  bad_magic[0] = 0x1f;
  write_bytes(p, bad_magic);
  std::string e = read_error(p);
  REQUIRE(e.find(p) != std::string::npos);
  REQUIRE(e.find("wrong magic number") != std::string::npos);

  auto bad_type = idx_bytes(2);
  bad_type[2] = 0x07;
  write_bytes(p, bad_type);
  REQUIRE(read_error(p).find("wrong magic number") != std::string::npos);

  write_bytes(p, {0, 0});
  REQUIRE(read_error(p).find("truncated header") != std::string::npos);

  auto short_dims = idx_bytes(2);
  short_dims.resize(10);
  write_bytes(p, short_dims);
  REQUIRE(read_error(p).find("truncated header (3 dims announced") != std::string::npos);

  auto truncated = idx_bytes(2);
  truncated.resize(truncated.size() - 3);
  write_bytes(p, truncated);
  e = read_error(p);
  REQUIRE(e.find(p) != std::string::npos);
  REQUIRE(e.find("truncated: the header promises 8 bytes of data (2x2x2 u8), the file has only 5") !=
          std::string::npos);

  auto extra = idx_bytes(2);
  extra.push_back(9);
  write_bytes(p, extra);
  REQUIRE(read_error(p).find("size mismatch") != std::string::npos);

  auto huge = idx_bytes(1);
  huge[4] = 0xff;  // dim 0 = 0xff000001
  huge[8] = 0xff;
  write_bytes(p, huge);
  REQUIRE(read_error(p).find("implausibly large") != std::string::npos);
  auto zero_dim = idx_bytes(1);  // a 0 dim must not hide huge ones (count 0, strides overflow)
  zero_dim[4] = zero_dim[5] = zero_dim[6] = zero_dim[7] = 0;
  zero_dim[8] = 0x3e; zero_dim[12] = 0x3e;
  write_bytes(p, zero_dim);
  REQUIRE(read_error(p).find("implausibly large") != std::string::npos);
  // Found by fuzz_idx: 8 i32 dims whose product wraps around 2^64 to a small number.
  write_bytes(p, {0x00, 0x00, 0x0c, 0x08, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00,
                  0xc0, 0x00, 0x00, 0x00, 0x00, 0x84, 0x50, 0x00, 0xdf, 0x00, 0x00, 0x00,
                  0x0a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x8e, 0x00, 0x00});
  REQUIRE(read_error(p).find("implausibly large") != std::string::npos);

  // a gzip stream cut short
  std::string gz = d.file("cut.gz");
  data::write_idx(gz, arange(5000, kF32));
  fs::resize_file(gz, fs::file_size(gz) / 2);
  e = read_error(gz);
  REQUIRE((e.find("truncated") != std::string::npos || e.find("corrupt") != std::string::npos));
}

TEST_CASE("load_mnist checks that images and labels agree", "[data][mnist]") {
  TempDir d;
  data::write_idx(d.file("train-images-idx3-ubyte.gz"), ones({5, 28, 28}, kU8));
  data::write_idx(d.file("train-labels-idx1-ubyte.gz"), from_vector<uint8_t>({0, 1, 2, 3, 9}, {5}));
  auto ds = data::load_mnist(d.path.string(), true);
  REQUIRE(ds->size() == 5);
  REQUIRE(ds->data().shape() == Shape{5, 1, 28, 28});
  REQUIRE(ds->data().dtype() == kF32);
  REQUIRE(ds->target().dtype() == kI64);
  REQUIRE(amax(ds->data()).item() == Approx(1.0 / 255));
  std::string e = test::error_of([&] { data::load_mnist(d.path.string(), false); });
  REQUIRE(e.find("no t10k-images-idx3-ubyte") != std::string::npos);
  data::write_idx(d.file("train-labels-idx1-ubyte.gz"), from_vector<uint8_t>({0, 1, 2}, {3}));
  REQUIRE(test::error_of([&] { data::load_mnist(d.path.string(), true); }).find("holds 5 images") !=
          std::string::npos);
  data::write_idx(d.file("train-labels-idx1-ubyte.gz"), from_vector<uint8_t>({0, 1, 2, 3, 10}, {5}));
  REQUIRE(test::error_of([&] { data::load_mnist(d.path.string(), true); }).find("out of range") !=
          std::string::npos);
  REQUIRE(test::error_of([&] { data::load_mnist(d.file("nope"), true); }).find("does not exist") !=
          std::string::npos);
}

TEST_CASE("DataLoader batches, shuffles by seed and epoch, and resumes", "[data][loader]") {
  auto ds = std::make_shared<data::TensorDataset>(arange(10, kF64).reshape({10, 1}),
                                                  arange(10, kI64));
  data::DataLoaderOptions o;
  o.batch_size = 4;
  o.shuffle = false;
  data::DataLoader plain(ds, o);
  REQUIRE(plain.num_batches() == 3);
  std::vector<int64_t> sizes, targets;
  for (auto& b : plain) {
    sizes.push_back(b.data.shape()[0]);
    for (auto t : b.target.to_vector<int64_t>()) targets.push_back(t);
  }
  REQUIRE(sizes == std::vector<int64_t>{4, 4, 2});
  REQUIRE(targets == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  o.drop_last = true;
  REQUIRE(data::DataLoader(ds, o).num_batches() == 2);

  o.shuffle = true;
  o.drop_last = false;
  o.seed = 42;
  data::DataLoader a(ds, o), b(ds, o);
  auto e0 = a.order(0), e1 = a.order(1);
  REQUIRE(e0 == b.order(0));
  REQUIRE(e0 != e1);
  auto sorted = e0;
  std::sort(sorted.begin(), sorted.end());
  REQUIRE(sorted == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  // data and targets stay paired, batches follow the epoch's order
  std::vector<int64_t> seen;
  for (auto& batch : a) {
    REQUIRE(batch.data.reshape({-1}).to(kI64).to_vector<int64_t>() == batch.target.to_vector<int64_t>());
    for (auto t : batch.target.to_vector<int64_t>()) seen.push_back(t);
  }
  REQUIRE(seen == e0);
  REQUIRE(a.epoch() == 1);
  // resuming epoch 1 at batch 1 yields what a full epoch 1 yields from its second batch on
  b.set_epoch(1, 1);
  std::vector<int64_t> resumed;
  for (auto& batch : b)
    for (auto t : batch.target.to_vector<int64_t>()) resumed.push_back(t);
  REQUIRE(resumed == std::vector<int64_t>(e1.begin() + 4, e1.end()));
  // no prefetch thread: same batches
  o.prefetch = false;
  data::DataLoader c(ds, o);
  std::vector<int64_t> sync;
  for (auto& batch : c)
    for (auto t : batch.target.to_vector<int64_t>()) sync.push_back(t);
  REQUIRE(sync == e0);
  // leaving an epoch early and starting the next is fine
  for (auto& batch : a) { (void)batch; break; }
  int n = 0;
  for (auto& batch : a) { (void)batch; ++n; }
  REQUIRE(n == 3);
}

TEST_CASE("DataLoader reports errors from the dataset", "[data][loader][errors]") {
  struct Failing : data::Dataset {
    int64_t size() const override { return 8; }
    data::Batch get_batch(const std::vector<int64_t>& idx) const override {
      if (idx[0] >= 4) NN_ERROR("sample ", idx[0], " is unreadable");
      return {zeros({int64_t(idx.size())}), zeros({int64_t(idx.size())}, kI64)};
    }
  };
  data::DataLoaderOptions o;
  o.batch_size = 4;
  o.shuffle = false;
  data::DataLoader dl(std::make_shared<Failing>(), o);
  std::string e = test::error_of([&] { for (auto& b : dl) (void)b; });
  REQUIRE(e.find("sample 4 is unreadable") != std::string::npos);
  REQUIRE(test::error_of([] { data::TensorDataset(zeros({3, 2}), zeros({4})); }).find("same number of rows") !=
          std::string::npos);
  REQUIRE(test::error_of([] {
    data::DataLoader(std::make_shared<data::TensorDataset>(zeros({0, 2}), zeros({0})), {});
  }).find("empty") != std::string::npos);
}

TEST_CASE("ImageFolder decodes, crops and normalises JPEGs", "[data][images]") {
  if (!data::have_jpeg()) {
    WARN("libnn built without JPEG support: ImageFolder test skipped");
    return;
  }
  TempDir d;
  Generator g(1);
  // two classes; class 1 images are bright, class 0 dark
  for (int c = 0; c < 2; ++c) {
    fs::create_directories(d.path / ("class" + std::to_string(c)));
    for (int i = 0; i < 3; ++i) {
      Tensor img = (rand({30 + 10 * i, 40, 3}, kF32, &g) * 40.0 + double(c ? 200 : 10)).to(kU8);
      data::write_jpeg(d.file("class" + std::to_string(c) + "/img" + std::to_string(i) + ".jpg"), img);
    }
  }
  write_bytes(d.file("class0/notes.txt"), {1, 2, 3});  // ignored
  data::ImageFolderOptions o;
  o.size = 16;
  data::ImageFolder train(d.path.string(), o);
  REQUIRE(train.size() == 6);
  REQUIRE(train.classes() == std::vector<std::string>{"class0", "class1"});
  data::Batch b = train.get_batch({0, 3, 5});
  REQUIRE(b.data.shape() == Shape{3, 3, 16, 16});
  REQUIRE(b.target.to_vector<int64_t>() == std::vector<int64_t>{0, 1, 1});
  // normalised with ImageNet statistics: dark images well below 0, bright ones above
  REQUIRE(mean(b.data.select(0, 0)).item() < -1.0);
  REQUIRE(mean(b.data.select(0, 1)).item() > 1.0);
  o.train = false;
  data::ImageFolder eval(d.path.string(), o);
  test::require_close(eval.get_batch({4}).data, eval.get_batch({4}).data, 0, 0);  // no randomness
  write_bytes(d.file("class1/broken.jpg"), {0xff, 0xd8, 0xff, 0x00, 0x01});
  data::ImageFolder with_broken(d.path.string(), o);
  std::string e = test::error_of([&] { with_broken.get_batch({0, 1, 2, 3, 4, 5, 6}); });
  REQUIRE(e.find("broken.jpg") != std::string::npos);
  REQUIRE(test::error_of([&] { data::ImageFolder(d.file("none")); }).find("does not exist") !=
          std::string::npos);
}
