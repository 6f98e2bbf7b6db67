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
  // ceil_mode: the positions rounded up, less a last one that would start past the input
  auto positions = [&](int64_t in, int i) {
    const int64_t span = in + 2 * p.padding[i] - p.dilation[i] * (p.kernel[i] - 1) - 1;
    int64_t o = (p.ceil_mode ? (span + p.stride[i] - 1) : span) / p.stride[i] + 1;
    if (p.ceil_mode && (o - 1) * p.stride[i] - p.padding[i] >= in) --o;
    return o;
  };
  const int64_t OH = positions(H, 0), OW = positions(W, 1);
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
  // ceil_mode: last windows hanging past the input (7 x 6 at kernel 2 gives 4 x 3, at kernel 3
  // stride 2 pad 1 gives 4 x 4 where floor gives 4 x 3), row-major and channels-last
  for (auto p : {pp(2), pp(3, 2), pp(3, 2, 1), pp(2, 3, 1), pp(2, 2, 0, 2), pp(4, 3, 1)}) {
    p.ceil_mode = true;
    INFO("ceil_mode, kernel " << p.kernel[0] << " stride " << p.stride[0] << " pad " << p.padding[0]
                             << " dilation " << p.dilation[0]);
    for (const Tensor& in : {x, test::channels_last(x)}) {
      test::require_close(max_pool2d(in, p), naive_pool(x, p, Kind::max));
      if (p.dilation[0] != 1) continue;
      Pool2dParams q = p;
      test::require_close(avg_pool2d(in, q), naive_pool(x, q, Kind::avg_pad), 1e-12, 1e-12);
      q.count_include_pad = false;
      test::require_close(avg_pool2d(in, q), naive_pool(x, q, Kind::avg_nopad), 1e-12, 1e-12);
    }
  }
  {
    Pool2dParams c = pp(2);
    c.ceil_mode = true;
    REQUIRE(max_pool2d(x, c).shape() == Shape{2, 3, 4, 3});
    c = pp(3, 2, 1);
    c.ceil_mode = true;
    REQUIRE(avg_pool2d(x, c).shape() == Shape{2, 3, 4, 4});
    // 5 at kernel 2 stride 2 pad 1: rounding up gives 4 positions, the last starting at 5, past
    // the input: 3
    c = pp(2, 2, 1);
    c.ceil_mode = true;
    REQUIRE(max_pool2d(rnd({1, 1, 5, 5}, 3, false), c).shape() == Shape{1, 1, 3, 3});
    REQUIRE(MaxPool2d(Pool2dOptions(2).ceil_mode(true)).forward(x).shape() == Shape{2, 3, 4, 3});
    // a row shorter than the window has one (partial) window with ceil_mode, as PyTorch's
    Tensor thin = rnd({1, 2, 1, 3}, 4, false);
    c = pp(2, 2);
    c.ceil_mode = true;
    REQUIRE(max_pool2d(thin, c).shape() == Shape{1, 2, 1, 2});
    test::require_close(max_pool2d(thin, c), naive_pool(thin, c, Kind::max));
    test::require_close(avg_pool2d(thin, c), naive_pool(thin, c, Kind::avg_pad), 1e-12, 1e-12);
    c.ceil_mode = false;
    REQUIRE(test::error_of([&] { max_pool2d(thin, c); }).find("smaller than") != std::string::npos);
    REQUIRE(AvgPool2d(Pool2dOptions(2).ceil_mode(true)).forward(x).shape() == Shape{2, 3, 4, 3});
  }
  REQUIRE(test::error_of([&] { max_pool2d(x, pp(2, 2, 3)); }).find("half the kernel") !=
          std::string::npos);
  // average pooling has no dilation (it was ignored: the undilated average, silently)
  REQUIRE(test::error_of([&] { avg_pool2d(x, pp(2, 1, 0, 2)); }).find("no dilation") !=
          std::string::npos);
  REQUIRE(test::error_of([&] {
            AvgPool2d(Pool2dOptions(2).stride({1, 1}).dilation({2, 2})).forward(x);
          }).find("no dilation") != std::string::npos);
  // an empty image has no window, even 1x1 at stride 2
  for (bool avg : {false, true})
    REQUIRE(test::error_of([&] {
              Tensor e = zeros({1, 3, 0, 4});
              avg ? avg_pool2d(e, pp(1, 2)) : max_pool2d(e, pp(1, 2));
            }).find("smaller than") != std::string::npos);
  // ...and padding alone gives it none either (it made an output of zeros)
  for (bool avg : {false, true})
    REQUIRE(test::error_of([&] {
              Tensor e = zeros({1, 3, 0, 4});
              avg ? avg_pool2d(e, pp(2, 2, 1)) : max_pool2d(e, pp(2, 2, 1));
            }).find("no rows") != std::string::npos);
}

TEST_CASE("2x2 max pooling picks the first maximum, or a NaN, in window order", "[pool]") {
  // The 2x2 stride-2 case has its own vectorised loop: values and the gradient's routing
  // (the chosen index) against the rule, with ties, NaNs, an odd width (last column
  // dropped) and rows longer than a vector.
  for (DType dt : {kF32, kF64})
    for (int64_t W : {7, 23}) {
      const int64_t H = 5, OH = 2, OW = W / 2;
      std::vector<double> v(size_t(2 * H * W));
      for (size_t i = 0; i < v.size(); ++i) v[i] = double((i * 7919) % 5);
      v[0] = v[1] = v[W] = v[W + 1] = 4;               // window (0, 0): all equal
      v[2 * W + 3] = v[3 * W + 2] = 9;                  // window (1, 1): a tie for the maximum
      v[5] = NAN;                                       // window (0, 2): one NaN, second place
      v[size_t(H * W + 2 * W + 5)] = NAN;
      v[size_t(H * W + 3 * W + 4)] = NAN;               // two NaNs in one window
      Tensor x = tensor(v, {1, 2, H, W}, dt).requires_grad_();
      Tensor y = max_pool2d(x, pp(2));
      sum(y).backward();
      auto got = y.to_vector<double>();
      auto routed = x.grad().to_vector<double>();
      std::vector<double> want_routed(v.size(), 0.0);
      for (int64_t pl = 0; pl < 2; ++pl)
        for (int64_t oh = 0; oh < OH; ++oh)
          for (int64_t ow = 0; ow < OW; ++ow) {
            int64_t at = -1;
            for (int64_t k = 0; k < 4; ++k) {
              const int64_t i = pl * H * W + (2 * oh + k / 2) * W + 2 * ow + k % 2;
              if (at < 0 || v[size_t(i)] > v[size_t(at)] || std::isnan(v[size_t(i)])) at = i;
            }
            want_routed[size_t(at)] += 1.0;
            const double g = got[size_t((pl * OH + oh) * OW + ow)];
            INFO("dtype " << dtype_name(dt) << " W " << W << " window " << pl << "," << oh << ","
                          << ow);
            if (std::isnan(v[size_t(at)])) REQUIRE(std::isnan(g));
            else REQUIRE(g == v[size_t(at)]);
          }
      REQUIRE(routed == want_routed);
    }
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
  for (auto p : {pp(2), pp(3, 2, 1), pp(4, 3, 1)}) {  // ceil_mode's partial last windows
    p.ceil_mode = true;
    require_gradcheck([p](const std::vector<Tensor>& in) { return max_pool2d(in[0], p); }, {x});
    require_gradcheck([p](const std::vector<Tensor>& in) { return avg_pool2d(in[0], p); }, {x});
    Pool2dParams q = p;
    q.count_include_pad = false;
    require_gradcheck([q](const std::vector<Tensor>& in) { return avg_pool2d(in[0], q); }, {x});
  }
  require_gradcheck([](const std::vector<Tensor>& in) { return adaptive_avg_pool2d(in[0], {4, 3}); }, {x});
  require_gradcheck([](const std::vector<Tensor>& in) { return adaptive_avg_pool2d(in[0], {1, 1}); }, {x});
}

TEST_CASE("1-d pooling matches the definition along L, with gradients", "[pool]") {
  Tensor x = rnd({2, 3, 10}, 7);
  auto as_2d = [](const Pool1dParams& p) {
    Pool2dParams q;
    q.kernel = {1, p.kernel};
    q.stride = {1, p.stride == 0 ? p.kernel : p.stride};
    q.padding = {0, p.padding};
    q.dilation = {1, p.dilation};
    q.count_include_pad = p.count_include_pad;
    q.ceil_mode = p.ceil_mode;
    return q;
  };
  const std::vector<Pool1dParams> ps = {
      {.kernel = 2}, {.kernel = 3, .stride = 2, .padding = 1},
      {.kernel = 4, .stride = 3, .padding = 2, .count_include_pad = false, .ceil_mode = true}};
  for (const Pool1dParams& p : ps) {
    INFO("kernel " << p.kernel << " stride " << p.stride << " padding " << p.padding);
    const Tensor x4 = x.detach().unsqueeze(2);
    test::require_close(max_pool1d(x, p), naive_pool(x4, as_2d(p), Kind::max).squeeze(2), 0, 0);
    test::require_close(avg_pool1d(x, p),
                        naive_pool(x4, as_2d(p), p.count_include_pad ? Kind::avg_pad : Kind::avg_nopad)
                            .squeeze(2),
                        1e-12, 1e-12);
    require_gradcheck([p](const std::vector<Tensor>& in) { return max_pool1d(in[0], p); }, {x});
    require_gradcheck([p](const std::vector<Tensor>& in) { return avg_pool1d(in[0], p); }, {x});
  }
  Pool1dParams dil{.kernel = 3, .stride = 2, .padding = 1, .dilation = 2, .ceil_mode = true};
  test::require_close(max_pool1d(x, dil), naive_pool(x.detach().unsqueeze(2), as_2d(dil), Kind::max).squeeze(2), 0, 0);
  require_gradcheck([](const std::vector<Tensor>& in) { return adaptive_avg_pool1d(in[0], 4); }, {x});
  // window [2, 5) of 2..? rows: adaptive windows of 10 into 4: [0,3) [2,5) [5,8) [7,10)
  test::require_close(adaptive_avg_pool1d(x, 4).select(2, 1), mean(x.slice(2, 2, 5), {2}), 1e-12, 1e-12);
  // a transposed (N, L, C) input: no copy, the same values
  Tensor nlc = x.detach().transpose(1, 2).contiguous().transpose(1, 2);
  test::require_close(max_pool1d(nlc, ps[1]), max_pool1d(x.detach(), ps[1]), 0, 0);
  REQUIRE(max_pool1d(nlc, ps[1]).strides()[1] == 1);  // laid out as the input: channels innermost
  test::require_close(avg_pool1d(nlc, ps[2]), avg_pool1d(x.detach(), ps[2]), 1e-12, 1e-12);
  // modules
  REQUIRE(MaxPool1d(Pool1dOptions(3).stride(2)).forward(x).shape() == Shape{2, 3, 4});
  REQUIRE(AvgPool1d(2).forward(x).shape() == Shape{2, 3, 5});
  REQUIRE(AdaptiveAvgPool1d(1).forward(x).shape() == Shape{2, 3, 1});
  REQUIRE(MaxPool1d(Pool1dOptions(3).stride(2)).extra_repr() == "kernel_size=3, stride=2");
}

TEST_CASE("1-d pooling's errors speak of the 1-d input", "[pool][errors]") {
  auto said = [](const std::string& e, const char* op, const char* what) {
    INFO(e);
    return e.find(op) != std::string::npos && e.find(what) != std::string::npos &&
           e.find("2d") == std::string::npos;
  };
  const Tensor x = ones({1, 2, 5});
  REQUIRE(said(test::error_of([&] { max_pool1d(ones({1, 2, 5, 5}), {}); }), "max_pool1d:", "3-d"));
  REQUIRE(said(test::error_of([&] { max_pool1d(ones({1, 2, 2}), {.kernel = 3}); }), "max_pool1d:",
               "input [1, 2, 2] is smaller than the 3 window"));
  REQUIRE(said(test::error_of([&] { avg_pool1d(x, {.kernel = 2, .dilation = 2}); }), "avg_pool1d:",
               "no dilation"));
  REQUIRE(said(test::error_of([&] { avg_pool1d(x, {.kernel = 2, .padding = 2}); }), "avg_pool1d:",
               "half the kernel"));
  REQUIRE(said(test::error_of([&] { max_pool1d(zeros({1, 2, 0}), {.kernel = 2, .stride = 2, .padding = 1}); }),
               "max_pool1d:", "has no length"));
  REQUIRE(said(test::error_of([&] { adaptive_avg_pool1d(x, 0); }), "adaptive_avg_pool1d:", "positive"));
  REQUIRE(said(test::error_of([&] { adaptive_avg_pool1d(ones({1, 2, 0}), 2); }), "adaptive_avg_pool1d:",
               "empty input"));
  REQUIRE(said(test::error_of([&] { adaptive_avg_pool1d(ones({2, 5}), 2); }), "adaptive_avg_pool1d:", "3-d"));
}
