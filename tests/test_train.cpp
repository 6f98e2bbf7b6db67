// End to end: a few training steps on the CPU whose loss must fall.
#include "test_util.h"

using namespace nn;

namespace {
// Two Gaussian blobs per class in 2-D, labels 0..2.
data::Batch blobs(int64_t n, uint64_t seed) {
  Generator g(seed);
  Tensor y = randint(0, 3, {n}, kI64, &g);
  Tensor centres = tensor({2, 0, -1, 1.7, -1, -1.7}).reshape({3, 2});
  Tensor x = index_select(centres, y) + randn({n, 2}, kF32, &g) * 0.5;
  return {x, y};
}
}  // namespace

TEST_CASE("an MLP learns separable blobs with AdamW", "[train]") {
  manual_seed(1);
  auto net = std::make_shared<Sequential>();
  net->push_back(std::make_shared<Linear>(2, 32));
  net->push_back(std::make_shared<GELU>());
  net->push_back(std::make_shared<LayerNorm>(32));
  net->push_back(std::make_shared<Linear>(32, 3));
  optim::AdamW opt(net->parameters(), optim::AdamWOptions(0.01));
  auto b = blobs(256, 2);
  double first = 0, last = 0;
  for (int step = 0; step < 100; ++step) {
    Tensor loss = cross_entropy(net->forward(b.data), b.target);
    if (step == 0) first = loss.item();
    last = loss.item();
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
  REQUIRE(last < 0.5 * first);
  NoGradGuard ng;
  auto test = blobs(512, 3);
  double acc = mean(eq(argmax(net->forward(test.data), 1), test.target).to(kF32)).item();
  REQUIRE(acc > 0.9);
}

TEST_CASE("a small CNN with batch norm and pooling trains with SGD", "[train]") {
  manual_seed(2);
  // Images whose class is the quadrant holding a bright square.
  Generator g(4);
  const int64_t n = 64;
  Tensor y = randint(0, 4, {n}, kI64, &g);
  Tensor x = randn({n, 1, 8, 8}, kF32, &g) * 0.1;
  {
    auto yv = y.to_vector<int64_t>();
    NoGradGuard ng;
    for (int64_t i = 0; i < n; ++i) {
      int64_t r = (yv[i] / 2) * 4, c = (yv[i] % 2) * 4;
      Tensor patch = x.select(0, i).select(0, 0).slice(0, r, r + 4).slice(1, c, c + 4);
      patch.add_(ones({4, 4}));
    }
  }
  auto net = std::make_shared<Sequential>();
  net->push_back(std::make_shared<Conv2d>(Conv2dOptions(1, 8, 3).padding({1, 1})));
  net->push_back(std::make_shared<BatchNorm2d>(8));
  net->push_back(std::make_shared<ReLU>());
  net->push_back(std::make_shared<MaxPool2d>(2));
  net->push_back(std::make_shared<Dropout>(0.1));
  net->push_back(std::make_shared<AdaptiveAvgPool2d>(Size2{2, 2}));
  net->push_back(std::make_shared<Flatten>());
  net->push_back(std::make_shared<Linear>(32, 4));
  optim::SGD opt(net->parameters(), optim::SGDOptions(0.1).momentum(0.9));
  double first = 0, last = 0;
  for (int step = 0; step < 40; ++step) {
    Tensor loss = cross_entropy(net->forward(x), y);
    if (step == 0) first = loss.item();
    last = loss.item();
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
  INFO("first " << first << " last " << last);
  REQUIRE(last < 0.3 * first);
}

// 2100 steps: 4200 calls, past the 4096 whose times the profiler reads in one batch
TEST_CASE("the profiler counts and times every call, and reset drops those not yet read", "[train]") {
  test::check_profiler(kCPU, 2100);
}

// train::write_file replaces a file whole (a temporary beside it, renamed over it).

#include <filesystem>
#include <fstream>
#include <sstream>

TEST_CASE("write_file replaces a file whole and leaves no temporary", "[train]") {
  namespace fs = std::filesystem;
  test::TempDir dir;
  const std::string path = dir.file("r.json");
  auto read = [&] {
    std::ifstream f(path);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  };
  train::write_file(path, "{\"a\": 1, \"long\": \"0123456789\"}\n");
  CHECK(read() == "{\"a\": 1, \"long\": \"0123456789\"}\n");
  train::write_file(path, "{}\n");  // shorter: nothing of the old text is left
  CHECK(read() == "{}\n");
  CHECK(std::distance(fs::directory_iterator(dir.path), fs::directory_iterator()) == 1);
  const std::string e = test::error_of([&] { train::write_file(dir.file("no/r.json"), "x"); });
  CHECK(e.find("cannot open '" + dir.file("no/r.json") + ".tmp-") != std::string::npos);
}

TEST_CASE("append_line writes a whole line or none, and write_file writes a device in place", "[train]") {
  test::TempDir dir;
  const std::string path = dir.file("m.jsonl");
  train::append_line(path, "{\"epoch\": 1}");
  // a write cut short (the file size limit, as a full disk) is taken back: the next line
  // does not continue a broken one
  std::string e;
  test::with_file_size_limit(20, [&] {
    e = test::error_of([&] { train::append_line(path, "{\"epoch\": 2, \"train_loss\": 0.5}"); });
  });
  CHECK(e.find("writing to '" + path + "' failed: File too large") != std::string::npos);
  train::append_line(path, "{\"epoch\": 2}");
  std::ifstream f(path);
  std::stringstream text;
  text << f.rdbuf();
  CHECK(text.str() == "{\"epoch\": 1}\n{\"epoch\": 2}\n");
  // /dev/null stays a device (a temporary renamed over it would replace it)
  train::write_file("/dev/null", "x");
  CHECK(std::filesystem::is_character_file("/dev/null"));
}

// Metrics read back as the numbers written: the fewest digits that round-trip (0.1 stays
// "0.1", not 0.10000000000000001), 17 where 15 do not (10 digits lost these).
TEST_CASE("JsonLine writes numbers that read back exactly", "[train]") {
  const double third = 1.0 / 3.0;
  const std::string s = train::JsonLine()
                            .add("big", 123456789012.5)
                            .add("small", 0.0012345678901234567)
                            .add("tenth", 0.1)
                            .add("third", third)
                            .add("n", 3)
                            .add("nan", NAN)
                            .str();
  REQUIRE(s.find("\"big\": 123456789012.5,") != std::string::npos);
  REQUIRE(s.find("\"tenth\": 0.1,") != std::string::npos);
  REQUIRE(s.find("\"n\": 3,") != std::string::npos);
  REQUIRE(s.find("\"nan\": null}") != std::string::npos);
  auto value_of = [&](const std::string& key) {
    const size_t at = s.find("\"" + key + "\": ");
    REQUIRE(at != std::string::npos);
    return std::strtod(s.c_str() + at + key.size() + 4, nullptr);
  };
  REQUIRE(value_of("small") == 0.0012345678901234567);
  REQUIRE(value_of("third") == third);
}

// JSON is UTF-8: a string's valid characters stay as they are, control characters are
// escaped, and bytes that are not UTF-8 (a Latin-1 file name in --predictions) become
// U+FFFD, where they were copied and made the line unreadable to a JSON reader.
TEST_CASE("JsonLine strings are valid UTF-8 JSON", "[train]") {
  const std::string s = train::JsonLine()
                            .add("ok", std::string("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"))
                            .add("latin1", std::string("caf\xe9.txt"))
                            .add("cut", std::string("\xe2\x82"))
                            .add("ctl", std::string("a\"b\\c\n\x01"))
                            .str();
  INFO(s);
  CHECK(s.find("\"ok\": \"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"") != std::string::npos);
  CHECK(s.find("\"latin1\": \"caf\\ufffd.txt\"") != std::string::npos);
  CHECK(s.find("\"cut\": \"\\ufffd\\ufffd\"") != std::string::npos);
  CHECK(s.find("\"ctl\": \"a\\\"b\\\\c\\n\\u0001\"") != std::string::npos);
}
