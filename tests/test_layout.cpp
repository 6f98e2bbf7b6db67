// Channels-last (NHWC) memory format: layout propagation through elementwise ops, casts and
// moves, and conv / pool / batch norm results and gradients equal to the row-major ones.
#include "test_util.h"

using namespace nn;
using test::require_close;
using test::rnd;

namespace {
constexpr MemoryFormat kCL = MemoryFormat::channels_last;

Tensor cl(const Tensor& t) { return test::channels_last(t); }

Conv2dParams conv(int64_t s, int64_t p, int64_t g = 1) { return test::conv_params({s, s}, {p, p}, {1, 1}, g); }

// f(x) with x row-major and with x channels-last: equal outputs and equal gradients of every
// input; the channels-last output is channels-last.
void require_same_both_ways(const std::function<Tensor(const Tensor&)>& f, const Tensor& x0,
                            std::vector<Tensor> params = {}) {
  Tensor x = x0.detach().requires_grad_(true);
  Tensor y = f(x);
  Tensor w = rnd(y.shape(), 999, false);
  sum(mul(y, w)).backward();
  std::vector<Tensor> want{x.grad()};
  for (auto& p : params) {
    want.push_back(p.grad());
    p.set_grad(Tensor());
  }

  Tensor xc = x0.detach().requires_grad_(true);
  Tensor yc = f(cl(xc));
  INFO("output strides " << shape_str(yc.strides()));
  REQUIRE(yc.is_contiguous(kCL));
  if (yc.dim() == 4 && yc.shape()[1] > 1 && yc.shape()[2] * yc.shape()[3] > 1)
    REQUIRE_FALSE(yc.is_contiguous());
  require_close(yc, y, 1e-10, 1e-10);
  sum(mul(yc, w)).backward();
  require_close(xc.grad(), want[0], 1e-10, 1e-10);
  for (size_t i = 0; i < params.size(); ++i) {
    INFO("parameter " << i);
    require_close(params[i].grad(), want[i + 1], 1e-10, 1e-10);
    REQUIRE(params[i].grad().is_contiguous());  // parameters' gradients stay row-major
  }
}
}  // namespace

TEST_CASE("channels-last tensors: strides, conversion and its gradient", "[layout]") {
  Tensor x = rnd({2, 3, 4, 5}, 1);
  Tensor y = x.contiguous(kCL);
  REQUIRE(y.strides() == Shape{60, 1, 15, 3});
  REQUIRE(y.is_contiguous(kCL));
  REQUIRE_FALSE(y.is_contiguous());
  REQUIRE_FALSE(x.is_contiguous(kCL));
  require_close(y, x, 0, 0);
  REQUIRE(y.contiguous(kCL).is_same(y));                 // already channels-last: no copy
  REQUIRE(y.contiguous().is_contiguous());               // and back
  require_close(y.contiguous(), x, 0, 0);
  sum(mul(y, full(y.shape(), 3.0, kF64))).backward();
  require_close(x.grad(), full(x.shape(), 3.0, kF64), 0, 0);
  // Size-1 dims make both formats hold at once.
  REQUIRE(ones({2, 3, 1, 1}).is_contiguous(kCL));
  REQUIRE(ones({2, 1, 4, 4}).is_contiguous(kCL));
  REQUIRE(empty({2, 3, 4, 5}, kF32, kCL).strides() == Shape{60, 1, 15, 3});
  REQUIRE(test::error_of([] { ones({2, 3, 4}).contiguous(kCL); }).find("4-d") !=
          std::string::npos);
}

TEST_CASE("elementwise ops, casts and moves keep channels-last", "[layout]") {
  Tensor x = rnd({2, 3, 4, 5}, 2, false), b = rnd({1, 3, 1, 1}, 3, false);
  Tensor xc = cl(x);
  for (const Tensor& t : {relu(xc), add(xc, b), mul(b, xc), add(xc, xc), xc * 2.0,
                          where(gt(xc, b), xc, b), xc.to(kF32), xc.to(kF16).to(kF64)}) {
    REQUIRE(t.is_contiguous(kCL));
    REQUIRE_FALSE(t.is_contiguous());
  }
  require_close(add(xc, b), add(x, b), 0, 0);
  require_close(relu(xc), relu(x), 0, 0);
  require_close(where(gt(xc, b), xc, b), where(gt(x, b), x, b), 0, 0);
  require_close(xc.to(kF16), x.to(kF16), 0, 0);
  require_close(add(xc, x), mul(x, 2.0), 0, 0);  // mixed layouts still add up by index
  // Activations' fused backward on channels-last data.
  require_same_both_ways([](const Tensor& t) { return gelu(add(relu(t), 0.1)); }, x);
}

TEST_CASE("conv2d on channels-last input equals row-major, forward and backward", "[layout][conv]") {
  struct C { Shape x, w; Conv2dParams p; };
  for (const C& c : {C{{2, 4, 7, 6}, {5, 4, 3, 3}, conv(1, 1)}, C{{3, 3, 9, 9}, {4, 3, 3, 3}, conv(2, 0)},
                     C{{2, 6, 5, 5}, {4, 3, 3, 3}, conv(1, 1, 2)}, C{{2, 8, 4, 4}, {6, 8, 1, 1}, conv(1, 0)},
                     C{{2, 3, 5, 5}, {4, 3, 5, 5}, conv(1, 0)}}) {  // 1x1 output
    INFO("x " << shape_str(c.x) << " w " << shape_str(c.w));
    Tensor w = rnd(c.w, 10), b = rnd({c.w[0]}, 11);
    require_same_both_ways([&](const Tensor& x) { return conv2d(x, w, b, c.p); }, rnd(c.x, 12),
                           {w, b});
  }
}

TEST_CASE("gradcheck: conv2d, batch_norm and max_pool2d on channels-last input", "[layout][gradcheck]") {
  test::require_gradcheck([](const std::vector<Tensor>& in) {
    return conv2d(cl(in[0]), in[1], in[2], conv(2, 1));
  }, {rnd({2, 3, 5, 6}, 20), rnd({4, 3, 3, 3}, 21), rnd({4}, 22)});
  test::require_gradcheck([](const std::vector<Tensor>& in) {
    Tensor rm = zeros({3}, kF64), rv = ones({3}, kF64);
    return batch_norm(cl(in[0]), rm, rv, in[1], in[2], true, 0.1, 1e-5);
  }, {rnd({2, 3, 3, 4}, 23), rnd({3}, 24), rnd({3}, 25)});
  Pool2dParams mp;
  mp.kernel = {3, 3};
  mp.stride = {2, 2};
  mp.padding = {1, 1};
  test::require_gradcheck([mp](const std::vector<Tensor>& in) { return max_pool2d(cl(in[0]), mp); },
                          {rnd({2, 3, 6, 5}, 26)});
}

TEST_CASE("pools and batch norm on channels-last input equal row-major", "[layout][pool][norm]") {
  Pool2dParams mp;
  mp.kernel = {3, 3};
  mp.stride = {2, 2};
  mp.padding = {1, 1};
  Pool2dParams ap = mp;
  ap.count_include_pad = false;
  Tensor x = rnd({2, 5, 9, 8}, 30, false);
  require_same_both_ways([&](const Tensor& t) { return max_pool2d(t, mp); }, x);
  require_same_both_ways([&](const Tensor& t) { return avg_pool2d(t, ap); }, x);
  require_same_both_ways([](const Tensor& t) { return adaptive_avg_pool2d(t, {3, 2}); }, x);
  require_same_both_ways([](const Tensor& t) { return adaptive_avg_pool2d(t, {1, 1}); }, x);
  for (bool training : {true, false}) {
    INFO("training " << training);
    Tensor w = rnd({5}, 31), b = rnd({5}, 32);
    Tensor rm0 = rnd({5}, 33, false) * 0.1, rv0 = add(abs(rnd({5}, 34, false)), 0.5);
    Tensor rm = rm0.clone(), rv = rv0.clone(), rmc = rm0.clone(), rvc = rv0.clone();
    bool first = true;
    require_same_both_ways([&](const Tensor& t) {
      Tensor& m = first ? rm : rmc;
      Tensor& v = first ? rv : rvc;
      first = false;
      return batch_norm(t, m, v, w, b, training, 0.1, 1e-5);
    }, x, {w, b});
    require_close(rmc, rm, 1e-12, 1e-12);  // running statistics updated alike
    require_close(rvc, rv, 1e-12, 1e-12);
  }
}

TEST_CASE("a ResNet fed channels-last input gives the row-major logits and gradients", "[layout][models]") {
  auto net = models::ResNet(models::ResNetOptions().layers({1, 1, 1, 1}).num_classes(7));
  net.to(kF64);
  std::vector<Tensor> params = net.parameters();
  // 48 px keeps every stage above 1 x 1 (layer4 runs at 2 x 2), so the format is tested there.
  const Tensor x = rnd({2, 3, 48, 48}, 40, false);
  require_same_both_ways([&](const Tensor& t) {
    Tensor y = net.forward(t);
    return y.reshape({y.shape()[0], y.shape()[1], 1, 1});  // 4-d, so the helper can check it
  }, x, params);
  NoGradGuard ng;
  Pool2dParams mp;
  mp.kernel = {3, 3};
  mp.stride = {2, 2};
  mp.padding = {1, 1};
  Tensor h = max_pool2d(relu(net.bn1->forward(net.conv1->forward(cl(x)))), mp);
  for (auto& layer : {net.layer1, net.layer2, net.layer3, net.layer4}) {
    h = layer->forward(h);
    INFO("activation " << shape_str(h.shape()) << " strides " << shape_str(h.strides()));
    REQUIRE(h.is_contiguous(kCL));
    REQUIRE_FALSE(h.is_contiguous());
  }
}

TEST_CASE("preferred_memory_format: the CPU computes every float type channels-last", "[layout]") {
  for (DType t : {kF32, kF64, kF16, kBF16}) REQUIRE(preferred_memory_format(kCPU, t) == kCL);
}

TEST_CASE("16-bit conv, pools and batch norm on channels-last input equal row-major",
          "[layout][pool][norm][conv]") {
  // f16 and bf16 compute through f32 copies of the same layout (bf16 convolutions natively
  // where the CPU has AVX512_BF16): the channels-last results, gradients included, are
  // channels-last and equal the row-major ones within a 16-bit rounding.
  Pool2dParams mp;
  mp.kernel = {3, 3};
  mp.stride = {2, 2};
  mp.padding = {1, 1};
  for (DType dt : {kBF16, kF16}) {
    CAPTURE(dt);
    Tensor w = rnd({6, 5, 3, 3}, 60, false).to(dt).requires_grad_(true);
    Tensor bn_w = rnd({6}, 61, false).to(dt).requires_grad_(true);
    Tensor bn_b = rnd({6}, 62, false).to(dt).requires_grad_(true);
    auto net = [&](const Tensor& x, Tensor& rm, Tensor& rv) {
      Tensor h = relu(batch_norm(conv2d(x, w, {}, conv(1, 1)), rm, rv, bn_w, bn_b, true, 0.1, 1e-5));
      return add(avg_pool2d(h, mp), max_pool2d(h, mp));
    };
    const Tensor x0 = rnd({3, 5, 9, 8}, 63, false).to(dt);
    std::vector<Tensor> outs, grads;
    for (MemoryFormat f : {MemoryFormat::contiguous, kCL}) {
      Tensor rm = zeros({6}, kF32), rv = ones({6}, kF32);
      Tensor x = x0.contiguous(f).detach().requires_grad_(true);
      Tensor y = net(x, rm, rv);
      REQUIRE(y.dtype() == dt);
      REQUIRE(y.is_contiguous(f));
      sum(mul(y.to(kF32), rnd(y.shape(), 64, false).to(kF32))).backward();
      outs.push_back(y.to(kF64));
      for (Tensor* t : {&x, &w, &bn_w, &bn_b}) {
        grads.push_back(t->grad().to(kF64));
        t->set_grad(Tensor());
      }
      grads.push_back(rm.to(kF64));
    }
    const double tol = dt == kBF16 ? 3e-2 : 4e-3;
    require_close(outs[1], outs[0], tol, tol);
    for (size_t i = 0; i < 5; ++i) {
      INFO("gradient or statistic " << i);
      require_close(grads[5 + i], grads[i], tol, 4 * tol);
    }
  }
}

TEST_CASE("a channels-last leaf's gradient is channels-last, a row-major leaf's row-major", "[layout][autograd]") {
  // The first gradient is taken as it is when laid out as the leaf and seen by nothing else,
  // else copied into the leaf's layout; later ones are added in.
  Tensor base = rnd({2, 3, 4, 5}, 3, false);
  Tensor w = rnd({2, 3, 4, 5}, 4, false);
  Tensor xc = cl(base).detach().requires_grad_(true);
  REQUIRE(xc.is_contiguous(kCL));
  // (xc * 2) * w: the product's gradient w * 2 comes row-major (w is), so it is copied
  sum(mul(mul(xc, 2.0), w)).backward();
  REQUIRE(xc.grad().is_contiguous(kCL));
  REQUIRE_FALSE(xc.grad().is_contiguous());
  require_close(xc.grad(), w * 2.0, 0, 0);
  // a second backward adds in, the layout kept
  sum(mul(xc, w)).backward();
  REQUIRE(xc.grad().is_contiguous(kCL));
  require_close(xc.grad(), w * 3.0, 1e-15, 0);
  // a channels-last gradient handed straight to the leaf: taken or copied, channels-last
  Tensor xd = cl(base).detach().requires_grad_(true);
  Tensor g = cl(w);
  xd.backward(g);
  REQUIRE(xd.grad().is_contiguous(kCL));
  require_close(xd.grad(), w, 0, 0);
  g.mul_(2.0);  // the caller's tensor: the leaf's gradient must not share it
  require_close(xd.grad(), w, 0, 0);
  // a row-major leaf gets a row-major gradient from a channels-last one
  Tensor xr = base.detach().requires_grad_(true);
  sum(mul(xr, cl(w))).backward();
  REQUIRE(xr.grad().is_contiguous());
  require_close(xr.grad(), w, 0, 0);
}
