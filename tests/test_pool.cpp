#include "test_util.h"

using namespace nn;
using test::require_gradcheck;
using test::rnd;

namespace {
enum class Kind { max, avg_pad, avg_nopad };
// Pooling by the definition over every window.
Tensor naive_pool(const Tensor& x, Pool2dParams p, Kind kind) {
  if (p.stride[0] == 0) p.stride = p.kernel;
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t OH = (H + 2 * p.padding[0] - p.dilation[0] * (p.kernel[0] - 1) - 1) / p.stride[0] + 1;
  const int64_t OW = (W + 2 * p.padding[1] - p.dilation[1] * (p.kernel[1] - 1) - 1) / p.stride[1] + 1;
  auto v = x.to_vector<double>();
  std::vector<double> out;
  for (int64_t pl = 0; pl < N * C; ++pl)
    for (int64_t y = 0; y < OH; ++y)
      for (int64_t xx = 0; xx < OW; ++xx) {
        double best = -INFINITY, s = 0;
        int64_t inside = 0, padded = 0;
        for (int64_t i = 0; i < p.kernel[0]; ++i)
          for (int64_t j = 0; j < p.kernel[1]; ++j) {
            int64_t iy = y * p.stride[0] - p.padding[0] + i * p.dilation[0];
            int64_t ix = xx * p.stride[1] - p.padding[1] + j * p.dilation[1];
            bool in_pad = iy >= -p.padding[0] && iy < H + p.padding[0] &&
                          ix >= -p.padding[1] && ix < W + p.padding[1];
            padded += in_pad;
            if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
            double e = v[(pl * H + iy) * W + ix];
            best = std::max(best, e);
            s += e;
            ++inside;
          }
        out.push_back(kind == Kind::max ? best : s / double(kind == Kind::avg_pad ? padded : inside));
      }
  return tensor(out, {N, C, OH, OW}, kF64);
}
Pool2dParams pp(int64_t k, int64_t s = 0, int64_t p = 0, int64_t d = 1) {
  Pool2dParams q;
  q.kernel = {k, k};
  q.stride = {s, s};
  q.padding = {p, p};
  q.dilation = {d, d};
  return q;
}
}  // namespace

TEST_CASE("max and average pooling match the definition", "[pool]") {
  Tensor x = rnd({2, 3, 7, 6}, 1, false);
  for (auto p : {pp(2), pp(3, 2), pp(3, 1, 1), pp(2, 1, 0, 2), pp(3, 3, 1)}) {
    INFO("kernel " << p.kernel[0] << " stride " << p.stride[0] << " pad " << p.padding[0]);
    test::require_close(max_pool2d(x, p), naive_pool(x, p, Kind::max));
    p.dilation = {1, 1};
    test::require_close(avg_pool2d(x, p), naive_pool(x, p, Kind::avg_pad), 1e-12, 1e-12);
    p.count_include_pad = false;
    test::require_close(avg_pool2d(x, p), naive_pool(x, p, Kind::avg_nopad), 1e-12, 1e-12);
  }
  REQUIRE(test::error_of([&] { max_pool2d(x, pp(2, 2, 3)); }).find("half the kernel") !=
          std::string::npos);
}

TEST_CASE("adaptive average pooling", "[pool]") {
  Tensor x = arange(2 * 5 * 7, kF64).reshape({1, 2, 5, 7});
  Tensor g = adaptive_avg_pool2d(x, {1, 1});
  test::require_close(g, mean(x, {2, 3}, true), 1e-12, 1e-12);
  Tensor y = adaptive_avg_pool2d(x, {2, 3});
  REQUIRE(y.shape() == Shape{1, 2, 2, 3});
  // rows [0,3) and [2,5), cols [0,3), [2,5), [4,7)
  double expect = mean(x.select(1, 0).slice(1, 2, 5).slice(2, 2, 5)).item();
  REQUIRE(y.select(1, 0).select(1, 1).select(1, 1).item() == Approx(expect));
  test::require_close(adaptive_avg_pool2d(x, {5, 7}), x);
}

TEST_CASE("gradcheck: pooling", "[pool][gradcheck]") {
  Tensor x = rnd({2, 2, 6, 5}, 2);  // continuous random values: no ties in max pooling
  for (auto p : {pp(2), pp(3, 2, 1), pp(2, 1, 0, 2)})
    require_gradcheck([p](const std::vector<Tensor>& in) { return max_pool2d(in[0], p); }, {x});
  for (auto p : {pp(2), pp(3, 2, 1)}) {
    require_gradcheck([p](const std::vector<Tensor>& in) { return avg_pool2d(in[0], p); }, {x});
    Pool2dParams q = p;
    q.count_include_pad = false;
    require_gradcheck([q](const std::vector<Tensor>& in) { return avg_pool2d(in[0], q); }, {x});
  }
  require_gradcheck([](const std::vector<Tensor>& in) { return adaptive_avg_pool2d(in[0], {4, 3}); }, {x});
  require_gradcheck([](const std::vector<Tensor>& in) { return adaptive_avg_pool2d(in[0], {1, 1}); }, {x});
}
