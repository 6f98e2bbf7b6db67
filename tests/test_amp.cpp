#include "test_util.h"

using namespace nn;

namespace {
// A parameter whose gradient we set by hand.
Tensor param(std::vector<double> v) {
  return tensor(v, {int64_t(v.size())}).requires_grad_();
}
}  // namespace

TEST_CASE("GradScaler skips the step on an inf gradient and backs off", "[amp]") {
  Tensor p = param({1, 2});
  optim::SGD opt({p}, optim::SGDOptions(0.1));
  amp::GradScaler scaler;
  REQUIRE(scaler.get_scale() == 65536.0);
  p.set_grad(tensor({65536.0, INFINITY}));
  REQUIRE_FALSE(scaler.step(opt));
  REQUIRE(scaler.found_inf());
  scaler.update();
  test::require_values(p, {1, 2});  // untouched
  REQUIRE(scaler.get_scale() == 32768.0);
  p.set_grad(tensor({NAN, 0.0}));
  REQUIRE_FALSE(scaler.step(opt));
  scaler.update();
  REQUIRE(scaler.get_scale() == 16384.0);
  // a clean step unscales the gradient before stepping
  p.set_grad(tensor({16384.0, -32768.0}));
  REQUIRE(scaler.step(opt));
  scaler.update();
  test::require_values(p, {1 - 0.1 * 1, 2 + 0.1 * 2}, 1e-6);
  REQUIRE(test::error_of([&] { scaler.update(); }).find("without step()") != std::string::npos);
  // no gradient at all (a frozen or detached model): an error, as in libtorch, not a step
  // that changes nothing and counts toward the scale's growth
  p.set_grad(Tensor());
  REQUIRE(test::error_of([&] { scaler.step(opt); }).find("has a gradient") != std::string::npos);
  test::require_values(p, {1 - 0.1 * 1, 2 + 0.1 * 2}, 1e-6);  // not stepped
  // and the scaler is not left half-way: with a gradient again it steps and counts as usual
  p.set_grad(tensor({0.0, 0.0}));
  REQUIRE(scaler.step(opt));
  scaler.update();
  REQUIRE(scaler.growth_tracker() == 2);
}

// The pattern of a GAN's training: one scaler, two optimizers. Each optimizer's gradients are
// unscaled once (a second unscale_ does nothing) and it is skipped on its own inf alone; the
// scale backs off if either had one.
TEST_CASE("one GradScaler serves two optimizers, each unscaled once and skipped on its own inf",
          "[amp]") {
  Tensor a = param({1}), b = param({1});
  optim::SGD opt_a({a}, optim::SGDOptions(0.1)), opt_b({b}, optim::SGDOptions(0.1));
  amp::GradScaler scaler;
  a.set_grad(tensor({2.0 * 65536}));
  b.set_grad(tensor({3.0 * 65536}));
  REQUIRE(scaler.step(opt_a));
  REQUIRE(scaler.step(opt_b));
  REQUIRE_FALSE(scaler.found_inf());
  scaler.update();
  test::require_values(a, {1 - 0.1 * 2}, 1e-6);
  test::require_values(b, {1 - 0.1 * 3}, 1e-6);
  REQUIRE(scaler.get_scale() == 65536.0);
  a.set_grad(tensor({65536.0}));
  b.set_grad(tensor({INFINITY}));
  scaler.unscale_(opt_a);
  scaler.unscale_(opt_a);
  REQUIRE(scaler.step(opt_a));
  REQUIRE_FALSE(scaler.step(opt_b));
  REQUIRE(scaler.found_inf());
  scaler.update();
  test::require_values(a, {0.8 - 0.1 * 1}, 1e-6);
  test::require_values(b, {0.7}, 1e-6);
  REQUIRE(scaler.get_scale() == 32768.0);
}

TEST_CASE("GradScaler grows the scale after growth_interval clean steps", "[amp]") {
  Tensor p = param({0});
  optim::SGD opt({p}, optim::SGDOptions(0.0));
  amp::GradScalerOptions o;
  o.growth_interval = 3;
  amp::GradScaler scaler(o);
  for (int i = 0; i < 3; ++i) {
    REQUIRE(scaler.get_scale() == 65536.0);
    p.set_grad(tensor({1.0}));
    scaler.step(opt);
    scaler.update();
  }
  REQUIRE(scaler.get_scale() == 131072.0);
  REQUIRE(scaler.growth_tracker() == 0);
  // an overflow resets the count
  p.set_grad(tensor({1.0}));
  scaler.step(opt);
  scaler.update();
  p.set_grad(tensor({INFINITY}));
  scaler.step(opt);
  scaler.update();
  REQUIRE(scaler.get_scale() == 65536.0);
  REQUIRE(scaler.growth_tracker() == 0);
  // state round trip
  amp::GradScaler other;
  other.load_state(scaler.state());
  REQUIRE(other.get_scale() == 65536.0);
  // bad values are refused and change nothing
  for (auto [scale, tracker] : {std::pair{-1.0, 0.0}, {65536.0, -1e6}, {65536.0, 0.5}}) {
    NamedTensors bad{{"scale", full({}, scale, kF64)}, {"growth_tracker", full({}, tracker, kF64)}};
    REQUIRE(test::error_of([&] { other.load_state(bad); }).find("GradScaler state: invalid") !=
            std::string::npos);
    REQUIRE(other.get_scale() == 65536.0);
    REQUIRE(other.growth_tracker() == 0);
  }
  // the scaled loss
  REQUIRE(scaler.scale(tensor({2.0})).item() == 131072.0);
  // a second step() before update() would step with gradients still scaled: refused
  p.set_grad(tensor({1.0}));
  scaler.step(opt);
  REQUIRE(test::error_of([&] { scaler.step(opt); }).find("already called") != std::string::npos);
  scaler.update();
  // the scale stops short of f32's overflow (the loss is scaled in f32), and its state loads
  amp::GradScalerOptions big;
  big.init_scale = 2e38;
  big.growth_interval = 1;
  amp::GradScaler capped(big);
  for (int i = 0; i < 3; ++i) {
    p.set_grad(tensor({0.0}));
    capped.step(opt);
    capped.update();
  }
  REQUIRE(capped.get_scale() == 2e38);
  amp::GradScaler loaded;
  loaded.load_state(capped.state());
  big.init_scale = INFINITY;
  REQUIRE(test::error_of([&] { amp::GradScaler bad(big); }).find("init_scale") != std::string::npos);
}

// Gradients of every floating dtype, one of them a non-contiguous view, unscaled in one call
// per dtype: values divided by the scale and rounded to their dtype, and an overflow noticed
// in any of them, including one that only appears on rounding to f16. On the CPU and, when
// present, on CUDA.
TEST_CASE("GradScaler unscales gradients of every dtype and finds any overflow", "[amp][cuda]") {
  for (Device d : test::devices()) {
    INFO(d.str());
    auto make = [&](std::vector<double> v, DType t) {
      Tensor p = tensor(v, {int64_t(v.size())}).to(t).to(d).requires_grad_();
      return p;
    };
    Tensor a = make({0, 0, 0}, kF32), b = make({0, 0}, kF16), c = make({0, 0}, kBF16),
           e = make({0, 0}, kF64), m = make({0, 0, 0, 0}, kF32);
    m = m.reshape({2, 2}).detach().requires_grad_();
    optim::SGD opt({a, b, c, e, m}, optim::SGDOptions(0.0));
    amp::GradScalerOptions o;
    o.init_scale = 1024;
    amp::GradScaler scaler(o);
    auto grads = [&](double bad) {
      a.set_grad(tensor({1024.0, -512.0, 3.0}).to(d));
      b.set_grad(tensor({2048.0, bad}).to(kF16).to(d));
      c.set_grad(tensor({-4096.0, 1.0}).to(kBF16).to(d));
      e.set_grad(tensor({1.0, 1e300}, TensorOptions(kF64)).to(d));
      Tensor mt = tensor({1.0, 2.0, 3.0, 4.0}).reshape({2, 2}).to(d) * 1024.0;
      m.set_grad(mt.transpose(0, 1));  // a non-contiguous gradient
    };
    grads(1024.0);
    scaler.unscale_(opt);
    REQUIRE_FALSE(scaler.found_inf());
    test::require_values(a.grad().cpu(), {1.0, -0.5, 3.0 / 1024.0});
    test::require_values(b.grad().cpu().to(kF32), {2.0, 1.0});
    test::require_values(c.grad().cpu().to(kF32), {-4.0, 1.0 / 1024.0});
    test::require_values(e.grad().cpu(), {1.0 / 1024.0, 1e300 / 1024.0});
    test::require_values(m.grad().contiguous().cpu().reshape({4}), {1.0, 3.0, 2.0, 4.0});
    scaler.update();
    // 65504 (f16's largest) times 1/scale stays finite; with a scale of 1/4 it overflows f16
    // only when rounded back (262016 in f32)
    for (double bad : {double(INFINITY), double(NAN)}) {
      grads(bad);
      scaler.unscale_(opt);
      REQUIRE(scaler.found_inf());
      scaler.update();
    }
    amp::GradScalerOptions q;
    q.init_scale = 0.25;
    amp::GradScaler small(q);
    grads(65504.0);
    small.unscale_(opt);
    REQUIRE(small.found_inf());
    REQUIRE(std::isinf(b.grad().cpu().to(kF32).select(0, 1).item()));
  }
}

TEST_CASE("autocast runs matmul-like ops in 16 bits and sensitive ones in f32", "[amp]") {
  Linear fc(8, 4);
  Tensor x = randn({3, 8});
  {
    amp::AutocastGuard ac(kF16);
    REQUIRE(amp::autocast_enabled());
    Tensor h = fc.forward(x);
    REQUIRE(h.dtype() == kF16);
    REQUIRE(softmax(h, 1).dtype() == kF32);
    REQUIRE(layer_norm(h, {4}).dtype() == kF32);
    REQUIRE(sum(h).dtype() == kF32);
    REQUIRE((h + ones({3, 4})).dtype() == kF32);  // promotes with an f32 residual
    Tensor loss = cross_entropy(h, from_vector<int64_t>({0, 1, 3}, {3}));
    REQUIRE(loss.dtype() == kF32);
    loss.backward();
  }
  REQUIRE_FALSE(amp::autocast_enabled());
  REQUIRE(fc.weight.grad().dtype() == kF32);  // master weights keep f32 gradients
  { amp::AutocastGuard ac(kBF16);
    REQUIRE(matmul(x, x.t()).dtype() == kBF16);
    // layer norm in f32 with 16-bit parameters too (a model cast with .to(kBF16))
    const Tensor w = ones({8}, kBF16), b = zeros({8}, kBF16);
    REQUIRE(layer_norm(x.to(kBF16), {8}, w, b).dtype() == kF32); }
  REQUIRE(test::error_of([] { amp::AutocastGuard ac(kF32); }).find("f16 or bf16") != std::string::npos);
}

// PyTorch's autocast runs pow, 1 / x, exp, log, log1p, rsqrt and softplus in f32 (exp(12) is
// 162,755, inf in f16): a 16-bit input gives an f32 result, and its gradient comes back in the
// input's dtype; outside autocast they keep the input's dtype.
TEST_CASE("autocast runs pow, reciprocal, exp, log, log1p, rsqrt and softplus in f32", "[amp][cuda]") {
  using Op = Tensor (*)(const Tensor&);
  const std::vector<std::pair<const char*, Op>> ops = {
      {"exp", [](const Tensor& x) { return exp(x); }},
      {"log", [](const Tensor& x) { return log(x); }},
      {"log1p", [](const Tensor& x) { return log1p(x); }},
      {"rsqrt", [](const Tensor& x) { return rsqrt(x); }},
      {"softplus", [](const Tensor& x) { return softplus(x); }},
      {"pow scalar", [](const Tensor& x) { return pow(x, 3.5); }},
      {"pow tensor", [](const Tensor& x) { return pow(x, full({}, 3.5, x.options())); }},
      {"reciprocal", [](const Tensor& x) { return 1.0 / x; }}};
  for (Device d : test::devices()) {
    for (DType dt : {kF16, kBF16}) {
      for (const auto& [name, f] : ops) {
        const Op op = f;  // (clang 14 captures no structured binding)
        INFO(name << " " << dtype_name(dt) << " on " << d.str());
        const Tensor x16 = tensor({12.0, 0.75, 30.0}, kF32).to(dt).to(d);
        Tensor x = x16.clone().requires_grad_();
        Tensor y;
        {
          amp::AutocastGuard ac(dt);
          y = op(x);
        }
        REQUIRE(y.dtype() == kF32);
        test::require_close(y.cpu(), op(x16.to(kF32)).cpu(), 1e-6, 0);  // the f32 value, not rounded
        sum(y).backward();
        REQUIRE(x.grad().dtype() == dt);
        REQUIRE(op(x16).dtype() == dt);  // no autocast: the input's dtype
      }
    }
  }
}

TEST_CASE("autocast conv1d computes in 16 bits, also on a 16-bit input, with f32 weight gradients", "[amp]") {
  Conv1d c(Conv1dOptions(4, 3, 3).padding(1));
  const Tensor x = randn({2, 4, 9});
  const Tensor want = c.forward(x);
  for (bool lowered_input : {false, true}) {
    INFO("16-bit input " << lowered_input);
    c.zero_grad();
    amp::AutocastGuard ac(kBF16);
    // a bf16 input with the module's f32 weight: the dtype check sees the lowered weight
    Tensor y = c.forward(lowered_input ? x.to(kBF16) : x);
    REQUIRE(y.dtype() == kBF16);
    test::require_close(y.to(kF32), want, 0.05, 0.05);
    sum(y.to(kF32)).backward();
    REQUIRE(c.weight.grad().dtype() == kF32);
    REQUIRE(c.bias.grad().dtype() == kF32);
  }
}

// Linear under autocast lowers its f32 input, weight and bias itself, so their gradients are
// the GEMMs' f32 sums of the 16-bit operands, never rounded to 16 bits: within f32 rounding of
// the f64 sums of the same 16-bit values (a gradient rounded to f16 would be off by up to
// 2^-11 of it, bf16 by 2^-8), on every device, with the bias's from the same GEMM and without.
TEST_CASE("autocast Linear's input, weight and bias gradients are f32 sums, never rounded to 16 bits", "[amp][cuda]") {
  for (Device d : test::devices())
    for (DType half : {kF16, kBF16})
      for (bool with_bias : {true, false}) {
        INFO(d.str() << " " << dtype_name(half) << ", bias " << with_bias);
        Tensor x = test::rnd({96, 40}, 1, false).to(kF32).to(d).requires_grad_();
        Tensor w = test::rnd({24, 40}, 2, false).to(kF32).to(d).requires_grad_();
        Tensor b = with_bias ? test::rnd({24}, 3, false).to(kF32).to(d).requires_grad_() : Tensor();
        Tensor g = test::rnd({96, 24}, 4, false).to(half);
        {
          amp::AutocastGuard ac(half);
          Tensor y = linear(x, w, b);
          REQUIRE(y.dtype() == half);
          y.backward(g.to(d));
        }
        REQUIRE(w.grad().dtype() == kF32);
        REQUIRE(x.grad().dtype() == kF32);
        const Tensor g64 = g.to(kF64), x64 = x.detach().cpu().to(half).to(kF64);
        test::require_close(w.grad().cpu().to(kF64), matmul(g64.t(), x64), 1e-5, 1e-5);
        const Tensor w64 = w.detach().cpu().to(half).to(kF64);
        test::require_close(x.grad().cpu().to(kF64), matmul(g64, w64), 1e-5, 1e-5);
        if (with_bias) {
          REQUIRE(b.grad().dtype() == kF32);
          test::require_close(b.grad().cpu().to(kF64), sum(g64, {0}), 1e-5, 1e-5);
        }
      }
}

// The input's gradient keeps the input's dtype and shape whatever its layout: a 3-d transposed
// f32 view gets f32 sums, an input already in f16 a 16-bit gradient; and backward() takes an
// f32 gradient for the f16 output (cast to the output's dtype first, as PyTorch does).
TEST_CASE("autocast Linear's input gradient for strided and 16-bit inputs", "[amp][cuda]") {
  for (Device d : test::devices()) {
    INFO(d.str());
    const Tensor w0 = test::rnd({24, 40}, 5, false).to(kF32);
    const Tensor g0 = test::rnd({6, 8, 24}, 6, false).to(kF16);
    const Tensor w64 = w0.to(kF16).to(kF64), g64 = g0.to(kF64);
    // x (6, 8, 40) as the transpose of a (8, 6, 40) tensor: not contiguous
    Tensor base = test::rnd({8, 6, 40}, 7, false).to(kF32).to(d);
    Tensor x = base.transpose(0, 1).detach().requires_grad_();
    REQUIRE_FALSE(x.is_contiguous());
    Tensor h = test::rnd({6, 8, 40}, 8, false).to(kF16).to(d).requires_grad_();
    const Tensor w = w0.to(d);
    {
      amp::AutocastGuard ac(kF16);
      linear(x, w).backward(g0.to(kF32).to(d));  // an f32 gradient for the f16 output
      linear(h, w).backward(g0.to(d));
    }
    REQUIRE(x.grad().dtype() == kF32);
    REQUIRE(x.grad().shape() == Shape{6, 8, 40});
    test::require_close(x.grad().cpu().to(kF64), matmul(g64, w64), 1e-5, 1e-5);
    REQUIRE(h.grad().dtype() == kF16);
    test::require_close(h.grad().cpu().to(kF64), matmul(g64, w64), 1e-2, 1e-2);
  }
}

TEST_CASE("a small conv net in FP16 matches FP32 within FP16 tolerance", "[amp][cuda]") {
  for (Device d : {kCPU, kCUDA}) {
    if (d.is_cuda() && !test::have_cuda()) continue;
    INFO("device " << d.str());
    manual_seed(4);
    Sequential net{std::make_shared<Conv2d>(Conv2dOptions(3, 8, 3).padding({1, 1})),
                   std::make_shared<BatchNorm2d>(8), std::make_shared<ReLU>(),
                   std::make_shared<MaxPool2d>(2), std::make_shared<Flatten>(),
                   std::make_shared<Linear>(8 * 4 * 4, 5)};
    net.to(d);
    Generator g(5);
    Tensor x = randn({4, 3, 8, 8}, kF32, &g).to(d), y = randint(0, 5, {4}, kI64, &g).to(d);
    auto run = [&](bool half) {
      net.zero_grad();
      Tensor loss;
      {
        amp::AutocastGuard ac(kF16, half);
        loss = cross_entropy(net.forward(x), y);
      }
      loss.backward();
      std::vector<Tensor> out{loss.detach().cpu()};
      for (auto& p : net.parameters()) out.push_back(p.grad().cpu());
      return out;
    };
    auto f32 = run(false), f16 = run(true);
    for (size_t i = 0; i < f32.size(); ++i) {
      INFO("result " << i << " (loss, then gradients)");
      REQUIRE(f16[i].dtype() == kF32);
      test::require_close(f16[i], f32[i], 2e-2, 2e-2);
    }
  }
}

// Autocast casts every floating tensor but f64 to its dtype, as PyTorch: an f16 input in a
// bf16 region, and a model cast to bf16 run under f16 autocast (both were dtype mismatches);
// f64 and integer tensors stay as they are. Gradients come back in each leaf's own dtype.
TEST_CASE("autocast lowers f16 and bf16 operands of the other 16-bit type", "[amp][cuda]") {
  for (Device d : test::devices()) {
    INFO(d.str());
    manual_seed(8);
    for (auto [model_t, input_t, region] : {std::tuple{kF32, kF16, kBF16}, std::tuple{kBF16, kF32, kF16},
                                            std::tuple{kBF16, kF16, kF16}, std::tuple{kF16, kBF16, kBF16}}) {
      INFO(dtype_name(model_t) << " model, " << dtype_name(input_t) << " input, " << dtype_name(region));
      Linear fc(8, 4);
      fc.to(d);
      fc.to(model_t);
      Conv2d conv(Conv2dOptions(2, 3, 3).padding({1, 1}));
      conv.to(d);
      conv.to(model_t);
      Tensor x = randn({3, 8}).to(d).to(input_t).requires_grad_(true);
      Tensor img = randn({2, 2, 5, 5}).to(d).to(input_t);
      amp::AutocastGuard ac(region);
      Tensor y = fc.forward(x);
      CHECK(y.dtype() == region);
      CHECK(conv.forward(img).dtype() == region);
      CHECK(matmul(x, x.t()).dtype() == region);
      sum(y.to(kF32)).backward();
      CHECK(x.grad().dtype() == input_t);
      CHECK(fc.weight.grad().dtype() == model_t);
    }
    amp::AutocastGuard ac(kBF16);
    CHECK(amp::autocast_lower(ones({2}, kF64)).dtype() == kF64);
    CHECK(amp::autocast_lower(ones({2}, kI64)).dtype() == kI64);
    CHECK(matmul(ones({2, 2}, kF64), ones({2, 2}, kF64)).dtype() == kF64);
  }
}
