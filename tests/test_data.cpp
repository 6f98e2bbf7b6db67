#include <unistd.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <set>

#include "data/folder.h"
#include "test_util.h"

#ifdef LIBNN_TEST_JPEG
#include <cstdio>
// jpeglib.h needs <cstdio> first
#include <jpeglib.h>
#endif

using namespace nn;
namespace fs = std::filesystem;
using test::TempDir;

namespace {
// Whether libnn reads JPEGs; without, the ImageFolder case is skipped with a warning.
bool jpeg_or_skip() {
  if (data::have_jpeg()) return true;
  WARN("libnn built without JPEG support: ImageFolder test skipped");
  return false;
}

// A fresh folder under the system temp dir, removed at the end of the test.
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

// IDX stores dims in 32 bits: a larger one is refused (it had wrapped: 2^32 + 5 read back as
// 5). A file is written beside its path and renamed: a rewrite replaces it whole, a failed one
// (here: the path is a folder) leaves no temporary behind.
TEST_CASE("write_idx refuses a dim past 32 bits and replaces files whole", "[data][mnist]") {
  test::TempDir d;
  REQUIRE(test::error_of([&] { data::write_idx(d.file("big"), zeros({(int64_t(1) << 32) + 5, 0}, kU8)); })
              .find("32 bits") != std::string::npos);
  const std::string p = d.file("x.gz");
  data::write_idx(p, arange(5000, kF32));
  data::write_idx(p, arange(3, kF32));
  REQUIRE(data::read_idx(p).to_vector<float>() == std::vector<float>{0, 1, 2});
  fs::create_directory(d.file("folder"));
  REQUIRE(test::error_of([&] { data::write_idx(d.file("folder"), arange(3, kF32)); }).find("cannot rename") !=
          std::string::npos);
  REQUIRE(d.names() == std::vector<std::string>{"folder", "x.gz"});
  // through a symbolic link the file it names is replaced, not the link; a device stays one
  fs::create_symlink("x.gz", d.file("link.gz"));
  data::write_idx(d.file("link.gz"), arange(2, kF32));
  REQUIRE(fs::is_symlink(d.file("link.gz")));
  REQUIRE(data::read_idx(p).to_vector<float>() == std::vector<float>{0, 1});
  REQUIRE(d.names() == std::vector<std::string>{"folder", "link.gz", "x.gz"});
  data::write_idx("/dev/null", arange(2, kF32));
  REQUIRE(fs::is_character_file("/dev/null"));
  // a write cut short (the file size limit, as a full disk) names the file asked for, and
  // leaves neither it nor a temporary
  std::string e;
  test::with_file_size_limit(100, [&] { e = test::error_of([&] { data::write_idx(d.file("cut"), arange(5000, kF32)); }); });
  REQUIRE(e.find("write_idx: writing '" + d.file("cut") + "' failed") != std::string::npos);
  REQUIRE(d.names() == std::vector<std::string>{"folder", "link.gz", "x.gz"});
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
  // images of another size (the models' first dense layer would fail, or an MLP train on them)
  data::write_idx(d.file("train-labels-idx1-ubyte.gz"), from_vector<uint8_t>({0, 1, 2, 3, 9}, {5}));
  for (Shape s : {Shape{5, 32, 32}, Shape{5, 14, 56}, Shape{5, 0, 28}}) {
    data::write_idx(d.file("train-images-idx3-ubyte.gz"), zeros(s, kU8));
    REQUIRE(test::error_of([&] { data::load_mnist(d.path.string(), true); })
                .find("expected 28 x 28 images, got " + std::to_string(s[1]) + " x " +
                      std::to_string(s[2])) != std::string::npos);
  }
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
  // a batch larger than the data is one partial batch, however large (n + b - 1 overflowed
  // into 0 batches)
  o.drop_last = false;
  o.batch_size = std::numeric_limits<int64_t>::max();
  REQUIRE(data::DataLoader(ds, o).num_batches() == 1);
  o.batch_size = 4;

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
  // a loop may skip a bad batch and go on, as in PyTorch: batch 1 (samples 4-7) throws, the
  // iterator stands on it with no batch (not batch 0's), then the next ones come; with
  // prefetch the next ++ waited forever for the worker that had died
  struct SkipOne : data::Dataset {
    int64_t size() const override { return 12; }
    data::Batch get_batch(const std::vector<int64_t>& idx) const override {
      if (idx[0] == 4) NN_ERROR("sample 4 is unreadable");
      return {full({int64_t(idx.size())}, double(idx[0])), zeros({int64_t(idx.size())}, kI64)};
    }
  };
  for (bool prefetch : {true, false}) {
    INFO("prefetch " << prefetch);
    o.prefetch = prefetch;
    data::DataLoader skipping(std::make_shared<SkipOne>(), o);
    std::vector<double> firsts;
    int errors = 0;
    auto it = skipping.begin();
    while (it != skipping.end()) {
      firsts.push_back(it->data.defined() ? it->data.to_vector<float>()[0] : -1);
      try {
        ++it;
      } catch (const Error& err) {
        REQUIRE(std::string(err.what()).find("sample 4 is unreadable") != std::string::npos);
        REQUIRE(it.index() == 1);
        ++errors;
      }
    }
    REQUIRE(errors == 1);
    REQUIRE(firsts == std::vector<double>{0, -1, 8});
    // the epoch's first batch failing (begin() throws, there is no iterator to step past it):
    // the next begin() goes on in that epoch after it (it had started the next epoch)
    struct FirstBad : data::Dataset {
      int64_t size() const override { return 12; }
      data::Batch get_batch(const std::vector<int64_t>& idx) const override {
        if (idx[0] == 0) NN_ERROR("sample 0 is unreadable");
        return {full({int64_t(idx.size())}, double(idx[0])), zeros({int64_t(idx.size())}, kI64)};
      }
    };
    data::DataLoader first_bad(std::make_shared<FirstBad>(), o);
    REQUIRE(test::error_of([&] { first_bad.begin(); }).find("sample 0 is unreadable") != std::string::npos);
    REQUIRE(first_bad.epoch() == 0);
    std::vector<double> rest;
    for (auto& b : first_bad) rest.push_back(b.data.to_vector<float>()[0]);
    REQUIRE(rest == std::vector<double>{4, 8});
    REQUIRE(first_bad.epoch() == 1);
  }
  REQUIRE(test::error_of([] { data::TensorDataset(zeros({3, 2}), zeros({4})); }).find("same number of rows") !=
          std::string::npos);
  REQUIRE(test::error_of([] {
    data::DataLoader(std::make_shared<data::TensorDataset>(zeros({0, 2}), zeros({0})), {});
  }).find("empty") != std::string::npos);
}

TEST_CASE("ImageFolder decodes, crops and normalises JPEGs", "[data][images]") {
  if (!jpeg_or_skip()) return;
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
  // no randomness in eval: every epoch sees the same image, where training draws another crop
  test::require_close(eval.get_epoch_batch({4}, 1).data, eval.get_epoch_batch({4}, 0).data, 0, 0);
  REQUIRE(test::first_far(train.get_epoch_batch({4}, 1).data.to_vector<double>(),
                          train.get_epoch_batch({4}, 0).data.to_vector<double>(), 0, 0) >= 0);
  write_bytes(d.file("class1/broken.jpg"), {0xff, 0xd8, 0xff, 0x00, 0x01});
  data::ImageFolder with_broken(d.path.string(), o);
  std::string e = test::error_of([&] { with_broken.get_batch({0, 1, 2, 3, 4, 5, 6}); });
  REQUIRE(e.find("broken.jpg") != std::string::npos);
  REQUIRE(test::error_of([&] { data::ImageFolder(d.file("none")); }).find("does not exist") !=
          std::string::npos);
}

namespace {
// The RGB of image i of a batch, un-normalised to [0, 255]: (3, S, S).
Tensor rgb_of(const data::Batch& b, int64_t i) {
  Tensor mean = tensor({0.485, 0.456, 0.406}).reshape({3, 1, 1});
  Tensor stdv = tensor({0.229, 0.224, 0.225}).reshape({3, 1, 1});
  return (b.data.select(0, i) * stdv + mean) * 255.0;
}
}  // namespace

TEST_CASE("ImageFolder's training crop is torchvision's RandomResizedCrop", "[data][images]") {
  using data::detail::random_resized_crop;
  // inside the image, whole pixels, scale 0.08..1 and ratio 3/4..4/3 (up to the rounding of a
  // side), else torchvision's fallback: the centre crop with the ratio clamped
  for (auto [W, H] : {std::pair{500, 333}, {333, 500}, {224, 224}, {900, 300}, {300, 900}, {1, 1}, {2, 1000}}) {
    INFO(W << " x " << H);
    const double fw = W >= H * 4.0 / 3 ? std::llround(H * 4.0 / 3) : W;
    const double fh = H >= W * 4.0 / 3 ? std::llround(W * 4.0 / 3) : H;
    const data::detail::CropBox fallback{std::floor((W - fw) / 2), std::floor((H - fh) / 2), fw, fh};
    int fallbacks = 0;
    for (uint64_t block = 0; block < 2000; ++block) {
      const auto b = random_resized_crop(W, H, 77, block);
      REQUIRE((b.w >= 1 && b.h >= 1 && b.x0 >= 0 && b.y0 >= 0));
      REQUIRE((b.x0 + b.w <= W && b.y0 + b.h <= H));
      REQUIRE((b.x0 == std::floor(b.x0) && b.y0 == std::floor(b.y0) && b.w == std::floor(b.w) && b.h == std::floor(b.h)));
      const auto again = random_resized_crop(W, H, 77, block);  // the same draw every time
      REQUIRE((again.x0 == b.x0 && again.y0 == b.y0 && again.w == b.w && again.h == b.h));
      if (b.x0 == fallback.x0 && b.y0 == fallback.y0 && b.w == fallback.w && b.h == fallback.h) {
        ++fallbacks;
        continue;
      }
      REQUIRE((b.w + 0.5) / (b.h - 0.5) >= 0.75);
      REQUIRE((b.w - 0.5) / (b.h + 0.5) <= 4.0 / 3);
      REQUIRE((b.w + 0.5) * (b.h + 0.5) >= 0.08 * W * H);
    }
    // ten attempts leave few images to the fallback: none where most boxes fit, about
    // 0.72^10 = 3.8% of a 3:1 panorama's (72% of its draws do not fit), all of a sliver's
    if (std::min(W, H) >= 224 && std::max(W, H) <= 2 * std::min(W, H)) CHECK(fallbacks < 5);
    if (std::max(W, H) == 3 * std::min(W, H)) CHECK((fallbacks > 30 && fallbacks < 150));
    if (W == 2) CHECK(fallbacks == 2000);
  }
  // libjpeg's scale: the largest 1/d that keeps the side (a crop's shorter one) at least S
  REQUIRE(data::detail::scale_denom(1024, 64) == 8);
  REQUIRE(data::detail::scale_denom(290, 64) == 4);
  REQUIRE(data::detail::scale_denom(128, 64) == 2);
  REQUIRE(data::detail::scale_denom(100, 64) == 1);
}

TEST_CASE("ImageFolder replays an epoch's crops and flips, and names a PNG in disguise", "[data][images]") {
  if (!jpeg_or_skip()) return;
  TempDir d;
  Generator g(5);
  fs::create_directories(d.path / "a");
  for (int i = 0; i < 4; ++i)
    data::write_jpeg(d.file("a/" + std::to_string(i) + ".jpg"),
                     (rand({300 + 40 * i, 200, 3}, kF32, &g) * 255.0).to(kU8));
  data::ImageFolderOptions o;
  o.size = 24;
  data::ImageFolder train(d.path.string(), o);
  const std::vector<int64_t> all{0, 1, 2, 3};
  // a resumed epoch sees the same crops and flips; another epoch other ones
  test::require_close(train.get_epoch_batch(all, 3).data, train.get_epoch_batch(all, 3).data, 0, 0);
  REQUIRE(sum(abs(train.get_epoch_batch(all, 3).data - train.get_epoch_batch(all, 4).data)).item() > 1);
  REQUIRE(test::error_of([&] { train.get_epoch_batch({4}, 0); }).find("out of range") != std::string::npos);
  write_bytes(d.file("a/n02105855_2933.jpg"), {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0, 0, 13});
  data::ImageFolder with_png(d.path.string(), o);
  REQUIRE(test::error_of([&] { with_png.get_epoch_batch({4}, 0); }).find("is a PNG file, not a JPEG") !=
          std::string::npos);
}

// The JPEG of `path` with its frame header (SOF0) claiming w x h pixels.
static void claim_size(const std::string& path, int w, int h) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  std::vector<unsigned char> b((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  size_t i = 2;  // after SOI: segments of FF, marker, 2-byte length
  while (i + 9 < b.size() && !(b[i] == 0xFF && b[i + 1] == 0xC0)) i += 2 + (size_t(b[i + 2]) << 8 | b[i + 3]);
  REQUIRE(i + 9 < b.size());
  const unsigned char dims[4] = {uint8_t(h >> 8), uint8_t(h), uint8_t(w >> 8), uint8_t(w)};
  f.seekp(std::streamoff(i + 5));
  f.write(reinterpret_cast<const char*>(dims), 4);
}

TEST_CASE("ImageFolder refuses a JPEG of more pixels than max_pixels before decoding it",
          "[data][images][errors]") {
  if (!jpeg_or_skip()) return;
  TempDir d;
  Generator g(3);
  fs::create_directories(d.path / "a");
  data::write_jpeg(d.file("a/small.jpg"), (rand({40, 50, 3}, kF32, &g) * 255.0).to(kU8));
  data::write_jpeg(d.file("a/bomb.jpg"), (rand({16, 16, 3}, kF32, &g) * 255.0).to(kU8));
  // 30000 x 30000 in the header of a 16 x 16 file: decoding it would take a 2.7 GB buffer
  // before finding the data short
  claim_size(d.file("a/bomb.jpg"), 30000, 30000);
  data::ImageFolderOptions o;
  o.size = 16;
  data::ImageFolder folder(d.path.string(), o);  // (bomb.jpg sorts first: index 0)
  const std::string e = test::error_of([&] { folder.get_epoch_batch({0}, 0); });
  REQUIRE(e.find("bomb.jpg' is 30000 x 30000 = 900000000 pixels, more than the limit of 178956970") !=
          std::string::npos);
  REQUIRE(folder.get_epoch_batch({1}, 0).data.size(0) == 1);
  // the limit is the file's width x height: 50 x 40 is 2000 pixels
  o.max_pixels = 2000;
  REQUIRE(data::ImageFolder(d.path.string(), o).get_epoch_batch({1}, 0).data.size(0) == 1);
  o.max_pixels = 1999;
  REQUIRE(test::error_of([&] { data::ImageFolder(d.path.string(), o).get_epoch_batch({1}, 0); })
              .find("small.jpg' is 50 x 40 = 2000 pixels, more than the limit of 1999") != std::string::npos);
  // 0 is no limit: the bomb is then decoded (at 1/8, its short data read as gray, as libjpeg
  // and PIL read a data segment that ends at a marker)
  o.max_pixels = 0;
  REQUIRE(data::ImageFolder(d.path.string(), o).get_epoch_batch({0}, 0).data.size(0) == 1);
  o.max_pixels = -1;
  REQUIRE(test::error_of([&] { data::ImageFolder(d.path.string(), o); }).find("max_pixels must be 0") !=
          std::string::npos);
}

TEST_CASE("ImageFolder: a truncated JPEG is an error, hidden files are skipped, an empty class "
          "is refused", "[data][images][errors]") {
  if (!jpeg_or_skip()) return;
  TempDir d;
  Generator g(2);
  fs::create_directories(d.path / "a");
  data::write_jpeg(d.file("a/noise.jpg"), (rand({64, 64, 3}, kF32, &g) * 255.0).to(kU8));
  write_bytes(d.file("a/._noise.jpg"), {0, 5, 22, 7});  // a macOS resource fork: not an image
  data::ImageFolderOptions o;
  o.size = 16;
  o.train = false;
  data::ImageFolder ok(d.path.string(), o);
  REQUIRE(ok.size() == 1);
  ok.get_batch({0});
  // cut to half: libjpeg would fill the rest with gray and say nothing
  const auto full_size = fs::file_size(d.file("a/noise.jpg"));
  fs::resize_file(d.file("a/noise.jpg"), full_size / 2);
  REQUIRE(test::error_of([&] { ok.get_batch({0}); }).find("Premature end of JPEG file") !=
          std::string::npos);
  fs::create_directories(d.path / "b");
  REQUIRE(test::error_of([&] { data::ImageFolder(d.path.string(), o); })
              .find("class folder 'b' holds no .jpg/.jpeg files") != std::string::npos);
  // writing: an error, never the process's end (libjpeg's default exits)
  REQUIRE(test::error_of([&] { data::write_jpeg(d.file("x.jpg"), zeros({0, 4, 3}, kU8)); })
              .find("sides must be 1 to 65500") != std::string::npos);
}

TEST_CASE("ImageFolder shrinks with an antialiasing filter: one-pixel stripes average to gray",
          "[data][images]") {
  if (!jpeg_or_skip()) return;
  TempDir d;
  fs::create_directories(d.path / "a");
  // 64 x 64, columns alternately black and white; eval at 32 resizes the shorter side to 36
  // (decoded at full scale: 64 / 2 < 36) and shrinks the centre 56 x 56 by 1.75
  std::vector<uint8_t> px(64 * 64 * 3);
  for (size_t i = 0; i < px.size(); ++i) px[i] = (i / 3) % 2 ? 255 : 0;
  data::write_jpeg(d.file("a/stripes.jpg"), from_vector(px, {64, 64, 3}), 100);
  data::ImageFolderOptions o;
  o.size = 32;
  o.train = false;
  Tensor rgb = rgb_of(data::ImageFolder(d.path.string(), o).get_batch({0}), 0);
  // sampling two pixels per output pixel (bilinear without a filter) gives values near 0 and
  // 255 wherever a sample falls near a pixel centre; the filter keeps all within about 128 +- 30
  REQUIRE(amin(rgb).item() > 85);
  REQUIRE(amax(rgb).item() < 170);
}

TEST_CASE("ImageFolder maps its crop onto a reduced-scale decode exactly", "[data][images]") {
  if (!jpeg_or_skip()) return;
  TempDir d;
  fs::create_directories(d.path / "a");
  // 145 x 145, a left-to-right ramp. Eval at 16 decodes at 1/8 (145 / 8 >= 18 = 16 * 8/7):
  // 19 x 19 pixels, the last block partial, so decoded / file size (19 / 145) is not 1/8;
  // taken as the scale it stretched the crop (the right columns read the file 6 pixels too
  // far right, 10 levels of this ramp)
  const int W = 145;
  std::vector<uint8_t> px(size_t(W) * W * 3);
  for (int y = 0; y < W; ++y)
    for (int x = 0; x < W; ++x)
      for (int c = 0; c < 3; ++c) px[(size_t(y) * W + x) * 3 + c] = uint8_t(std::lround(x * 250.0 / (W - 1)));
  data::write_jpeg(d.file("a/ramp.jpg"), from_vector(px, {W, W, 3}), 100);
  data::ImageFolderOptions o;
  o.size = 16;
  o.train = false;
  Tensor rgb = rgb_of(data::ImageFolder(d.path.string(), o).get_batch({0}), 0);  // (3, 16, 16)
  const double side = W * 7.0 / 8, x0 = (W - side) / 2;
  for (int c = 1; c < 15; ++c) {  // (the outermost columns' filters reach past the crop)
    INFO("column " << c);
    const double want = (x0 + (c + 0.5) * side / 16 - 0.5) * 250.0 / (W - 1);
    CHECK(mean(rgb.select(2, c)).item() == Approx(want).margin(3));
  }
}

#ifdef LIBNN_TEST_JPEG
TEST_CASE("ImageFolder reads CMYK JPEGs (Adobe's inverted inks) as PIL does", "[data][images]") {
  TempDir d;
  fs::create_directories(d.path / "a");
  // stored (inverted) C, M, Y, K: no ink; magenta + yellow; full black; and the RGB expected
  const std::vector<std::pair<std::array<uint8_t, 4>, std::array<double, 3>>> cases = {
      {{255, 255, 255, 255}, {255, 255, 255}},
      {{255, 0, 0, 255}, {255, 0, 0}},
      {{255, 255, 255, 0}, {0, 0, 0}},
      {{255, 255, 127, 255}, {255, 255, 127}}};
  for (size_t n = 0; n < cases.size(); ++n) {
    const std::string path = d.file("a/" + std::to_string(n) + ".jpg");
    FILE* f = std::fopen(path.c_str(), "wb");
    REQUIRE(f);
    jpeg_compress_struct c;
    jpeg_error_mgr err;
    c.err = jpeg_std_error(&err);
    jpeg_create_compress(&c);
    jpeg_stdio_dest(&c, f);
    c.image_width = c.image_height = 16;
    c.input_components = 4;
    c.in_color_space = JCS_CMYK;
    jpeg_set_defaults(&c);  // writes the Adobe marker for CMYK
    jpeg_set_quality(&c, 100, TRUE);
    jpeg_start_compress(&c, TRUE);
    std::vector<uint8_t> row(16 * 4);
    for (size_t x = 0; x < 16; ++x) std::copy(cases[n].first.begin(), cases[n].first.end(), &row[x * 4]);
    while (c.next_scanline < c.image_height) {
      JSAMPROW r = row.data();
      jpeg_write_scanlines(&c, &r, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    std::fclose(f);
  }
  data::ImageFolderOptions o;
  o.size = 8;
  o.train = false;
  data::ImageFolder folder(d.path.string(), o);
  data::Batch b = folder.get_batch({0, 1, 2, 3});
  for (size_t n = 0; n < cases.size(); ++n) {
    Tensor m = mean(rgb_of(b, int64_t(n)), {1, 2});
    test::require_close(m, tensor({cases[n].second[0], cases[n].second[1], cases[n].second[2]}),
                        0, 3.0);
  }
}
#endif

namespace {
// CIFAR binary records: `label_bytes` label bytes (the last is the class), then 3072 pixels,
// here pixel k of record r = (r * 7 + k) % 256.
std::vector<uint8_t> cifar_records(const std::vector<std::vector<uint8_t>>& labels) {
  std::vector<uint8_t> b;
  for (size_t r = 0; r < labels.size(); ++r) {
    b.insert(b.end(), labels[r].begin(), labels[r].end());
    for (int k = 0; k < 3072; ++k) b.push_back(uint8_t((r * 7 + size_t(k)) % 256));
  }
  return b;
}
}  // namespace

TEST_CASE("load_cifar reads CIFAR-10 and CIFAR-100 binary files", "[data][cifar]") {
  TempDir d;
  fs::create_directories(d.path / "cifar-10-batches-bin");
  for (int k = 1; k <= 5; ++k)
    write_bytes(d.file("cifar-10-batches-bin/data_batch_" + std::to_string(k) + ".bin"),
                cifar_records({{uint8_t(k)}, {uint8_t(9 - k)}}));
  write_bytes(d.file("cifar-10-batches-bin/test_batch.bin"), cifar_records({{3}}));
  std::ofstream(d.file("cifar-10-batches-bin/batches.meta.txt"))
      << "airplane\nautomobile\nbird\ncat\ndeer\ndog\nfrog\nhorse\nship\ntruck\n\n";
  auto train = data::load_cifar(d.path.string(), true);  // finds the unpacked folder inside
  REQUIRE(train->size() == 10);
  REQUIRE(train->images().shape() == Shape{10, 3, 32, 32});
  REQUIRE(train->labels().to_vector<int64_t>() == std::vector<int64_t>{1, 8, 2, 7, 3, 6, 4, 5, 5, 4});
  REQUIRE(train->classes().size() == 10);
  REQUIRE(train->classes()[9] == "truck");
  // record 1 of data_batch_3.bin is sample 5; its green plane starts at pixel 1024
  REQUIRE(int(train->images().select(0, 5).select(0, 1).select(0, 0).select(0, 0).item()) == (7 + 1024) % 256);
  auto test = data::load_cifar(d.file("cifar-10-batches-bin"), false);
  REQUIRE(test->labels().to_vector<int64_t>() == std::vector<int64_t>{3});
  // unnormalised, unaugmented batches are pixels / 255
  data::Batch b = test->get_batch({0});
  REQUIRE(b.data.shape() == Shape{1, 3, 32, 32});
  test::require_close(b.data, test->images().to(kF32) / 255.0, 1e-7, 0);

  // CIFAR-100: two label bytes (coarse, fine); the fine one is the class
  TempDir h;
  write_bytes(h.file("train.bin"), cifar_records({{1, 99}, {2, 0}, {19, 42}}));
  write_bytes(h.file("test.bin"), cifar_records({{0, 7}}));
  auto c100 = data::load_cifar(h.path.string(), true);
  REQUIRE(c100->labels().to_vector<int64_t>() == std::vector<int64_t>{99, 0, 42});
  REQUIRE(c100->classes().size() == 100);  // numbered without fine_label_names.txt
  REQUIRE(c100->classes()[42] == "42");

  // errors name the file and what is wrong
  auto err = [](const std::string& root, bool train) {
    return test::error_of([&] { data::load_cifar(root, train); });
  };
  REQUIRE(err(d.file("nowhere"), true).find("does not exist") != std::string::npos);
  TempDir empty;
  REQUIRE(err(empty.path.string(), true).find("CIFAR data not found") != std::string::npos);
  write_bytes(h.file("test.bin"), std::vector<uint8_t>(3074 * 2 - 1, 0));
  std::string e = err(h.path.string(), false);
  REQUIRE(e.find("test.bin") != std::string::npos);
  REQUIRE(e.find("whole number of 3074-byte records") != std::string::npos);
  write_bytes(h.file("test.bin"), cifar_records({{0, 100}}));
  REQUIRE(err(h.path.string(), false).find("label 100 is not below 100") != std::string::npos);
  fs::remove(d.file("cifar-10-batches-bin/data_batch_4.bin"));
  REQUIRE(err(d.path.string(), true).find("data_batch_4.bin' is missing") != std::string::npos);
  std::ofstream(d.file("cifar-10-batches-bin/batches.meta.txt")) << "airplane\nautomobile\n";
  REQUIRE(err(d.path.string(), false).find("names 2 classes, expected 10") != std::string::npos);
}

TEST_CASE("ImageDataset normalises, and crops and flips by (seed, epoch, sample)", "[data][cifar]") {
  Generator g(5);
  Tensor images = (rand({6, 2, 5, 4}, kF32, &g) * 255.0).to(kU8);
  data::ImageDataset ds(images, from_vector<int64_t>({0, 1, 2, 0, 1, 2}, {6}));
  REQUIRE(ds.classes() == std::vector<std::string>{"0", "1", "2"});
  auto [mean, stdv] = ds.channel_stats();
  Tensor pix = images.to(kF64) / 255.0;
  for (int c = 0; c < 2; ++c) {
    REQUIRE(mean[size_t(c)] == Approx(nn::mean(pix.select(1, c)).item()).epsilon(1e-12));
    REQUIRE(stdv[size_t(c)] == Approx(std::sqrt(nn::var(pix.select(1, c), {}, 0).item())).epsilon(1e-9));
  }
  ds.set_normalization({0.25, 0.5}, {2.0, 0.5});
  Tensor expect = (pix - tensor({0.25, 0.5}, {1, 2, 1, 1}, kF64)) / tensor({2.0, 0.5}, {1, 2, 1, 1}, kF64);
  test::require_close(ds.get_batch({0, 1, 2, 3, 4, 5}).data.to(kF64), expect, 1e-6, 1e-6);

  // Every augmented sample is a shifted (by at most `pad`), maybe mirrored copy, with the
  // normalised value of a zero pixel where the shift leaves the image.
  ds.set_augment({.pad = 2, .flip = true, .seed = 9});
  const std::vector<float> zero{-0.125f, -1.0f};
  auto is_view_of = [&](const Tensor& out, int64_t i) {
    auto o = out.to_vector<float>();
    auto e = expect.select(0, i).to(kF32).to_vector<float>();
    for (int flip = 0; flip < 2; ++flip)
      for (int dy = -2; dy <= 2; ++dy)
        for (int dx = -2; dx <= 2; ++dx) {
          bool same = true;
          for (int c = 0; c < 2 && same; ++c)
            for (int y = 0; y < 5 && same; ++y)
              for (int x = 0; x < 4 && same; ++x) {
                int sy = y + dy, sx = (flip ? 3 - x : x) + dx;
                float want = sy >= 0 && sy < 5 && sx >= 0 && sx < 4 ? e[size_t((c * 5 + sy) * 4 + sx)] : zero[size_t(c)];
                same = std::abs(o[size_t((c * 5 + y) * 4 + x)] - want) < 1e-5f;
              }
          if (same) return true;
        }
    return false;
  };
  std::set<std::vector<float>> distinct;
  for (int64_t epoch = 0; epoch < 8; ++epoch) {
    data::Batch b = ds.get_epoch_batch({4, 1}, epoch);
    REQUIRE(b.target.to_vector<int64_t>() == std::vector<int64_t>{1, 1});
    REQUIRE(is_view_of(b.data.select(0, 0), 4));
    REQUIRE(is_view_of(b.data.select(0, 1), 1));
    // the same sample in another batch, at another position: the same crop
    test::require_close(ds.get_epoch_batch({2, 3, 1}, epoch).data.select(0, 2), b.data.select(0, 1), 0, 0);
    distinct.insert(b.data.select(0, 0).to_vector<float>());
  }
  REQUIRE(distinct.size() >= 5);  // 50 crops and flips: 8 epochs rarely repeat one
  ds.set_augment({.pad = 2, .flip = true, .seed = 10});
  bool differs = false;
  for (int64_t epoch = 0; epoch < 4; ++epoch)
    differs |= distinct.count(ds.get_epoch_batch({4}, epoch).data.select(0, 0).to_vector<float>()) == 0;
  REQUIRE(differs);
  auto first = ds.head(2);
  REQUIRE(first->size() == 2);
  test::require_close(first->get_epoch_batch({1}, 3).data, ds.get_epoch_batch({1}, 3).data, 0, 0);

  REQUIRE(test::error_of([&] { ds.get_batch({6}); }).find("out of range") != std::string::npos);
  REQUIRE(test::error_of([&] { ds.set_normalization({0.5}, {1.0}); }).find("expected 2") != std::string::npos);
  REQUIRE(test::error_of([&] { ds.set_normalization({0.5, 0.5}, {1.0, 0.0}); }).find("positive") != std::string::npos);
  REQUIRE(test::error_of([&] { data::ImageDataset(images.to(kF32), zeros({6}, kI64)); }).find("u8") !=
          std::string::npos);
  REQUIRE(test::error_of([&] { data::ImageDataset(images, from_vector<int64_t>({0, 0, 0, 0, 0, -1}, {6})); })
              .find("negative") != std::string::npos);
}

TEST_CASE("the DataLoader tells the data set its epoch: augmented epochs replay on resume", "[data][cifar][loader]") {
  auto ds = data::synthetic_images(40, 4, 8, 1);
  ds->set_augment({.pad = 3, .flip = true, .seed = 2});
  data::DataLoaderOptions o;
  o.batch_size = 8;
  o.seed = 7;
  data::DataLoader a(ds, o), b(ds, o);
  std::vector<Tensor> epoch2;
  for (int e = 0; e < 3; ++e)
    for (auto& batch : a)
      if (e == 2) epoch2.push_back(batch.data);
  b.set_epoch(2, 3);  // a resumed run: epoch 2 from its fourth batch
  int k = 3;
  for (auto& batch : b) test::require_close(batch.data, epoch2[size_t(k++)], 0, 0);
  REQUIRE(k == 5);
  // batch 4 of epoch 2 is the data set's epoch-2 view of those samples, not its epoch-0 one
  const auto order = a.order(2);
  const std::vector<int64_t> last(order.begin() + 32, order.begin() + 40);
  test::require_close(epoch2[4], ds->get_epoch_batch(last, 2).data, 0, 0);
  REQUIRE(amax(abs(epoch2[4] - ds->get_epoch_batch(last, 0).data)).item() > 0);
}

TEST_CASE("synthetic_images: balanced, reproducible, and a different seed gives other images", "[data][cifar]") {
  auto s = data::synthetic_images(30, 3, 16, 4);
  REQUIRE(s->images().shape() == Shape{30, 3, 16, 16});
  REQUIRE(s->classes().size() == 3);
  auto labels = s->labels().to_vector<int64_t>();
  for (int64_t c = 0; c < 3; ++c) REQUIRE(std::count(labels.begin(), labels.end(), c) == 10);
  REQUIRE(s->images().to_vector<uint8_t>() == data::synthetic_images(30, 3, 16, 4)->images().to_vector<uint8_t>());
  REQUIRE(s->images().to_vector<uint8_t>() != data::synthetic_images(30, 3, 16, 5)->images().to_vector<uint8_t>());
  REQUIRE(data::synthetic_images(2, 5, 8, 0)->classes().size() == 5);  // classes without images still count
  REQUIRE(test::error_of([] { data::synthetic_images(4, 0, 8, 0); }).find("classes must be positive") !=
          std::string::npos);
}

TEST_CASE("DataLoader: a loop over the loader inside another is refused, not hung",
          "[data][errors]") {
  auto ds = std::make_shared<data::TensorDataset>(arange(8.0).reshape({8, 1}), arange(8.0));
  for (const bool prefetch : {true, false}) {
    INFO("prefetch " << prefetch);
    data::DataLoaderOptions o;
    o.batch_size = 2;
    o.prefetch = prefetch;
    data::DataLoader dl(ds, o);
    auto outer = dl.begin();
    int64_t inner = 0;
    for (auto& b : dl) inner += b.data.shape()[0];
    REQUIRE(inner == 8);
    test::require_error("this iteration was ended by a newer begin()", [&] { ++outer; });
    int64_t again = 0;  // a new iteration still works
    for (auto& b : dl) again += b.data.shape()[0];
    REQUIRE(again == 8);
  }
}
