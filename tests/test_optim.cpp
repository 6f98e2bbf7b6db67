#include "test_util.h"

#include <limits>

using namespace nn;
using test::require_values;

namespace {
// A parameter with a fixed gradient.
Tensor param_with_grad(std::vector<double> p, std::vector<double> g) {
  Tensor t = tensor(p, {int64_t(p.size())}, kF64).requires_grad_();
  t.set_grad(tensor(g, {int64_t(g.size())}, kF64));
  return t;
}
}  // namespace

TEST_CASE("SGD matches hand-computed updates", "[optim]") {
  SECTION("plain with weight decay") {
    Tensor p = param_with_grad({1, -2}, {0.5, 1});
    optim::SGD opt({p}, optim::SGDOptions(0.1).weight_decay(0.01));
    opt.step();
    // p - lr * (g + wd * p)
    require_values(p, {1 - 0.1 * (0.5 + 0.01), -2 - 0.1 * (1 - 0.02)}, 1e-12);
  }
  SECTION("momentum over two steps") {
    Tensor p = param_with_grad({1}, {1});
    optim::SGD opt({p}, optim::SGDOptions(0.1).momentum(0.9));
    opt.step();  // buf = 1, p = 0.9
    p.set_grad(tensor({2}, kF64));
    opt.step();  // buf = 0.9 * 1 + 2 = 2.9, p = 0.9 - 0.29
    require_values(p, {0.61}, 1e-12);
  }
  SECTION("nesterov") {
    Tensor p = param_with_grad({1}, {1});
    optim::SGD opt({p}, optim::SGDOptions(0.1).momentum(0.9).nesterov(true));
    opt.step();  // buf = 1, d = 1 + 0.9 * 1 = 1.9, p = 1 - 0.19
    require_values(p, {0.81}, 1e-12);
  }
  SECTION("parameters without a gradient are left alone") {
    Tensor p = tensor({3}, kF64).requires_grad_();
    optim::SGD opt({p}, optim::SGDOptions(0.1));
    opt.step();
    require_values(p, {3});
  }
  REQUIRE(test::error_of([] { optim::SGD({ones({1}).requires_grad_()}, optim::SGDOptions(-1)); })
              .find("learning rate") != std::string::npos);
}

TEST_CASE("optimizers refuse settings that would corrupt the weights", "[optim]") {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  auto sgd = [](optim::SGDOptions o) {
    return test::error_of([&] { optim::SGD({ones({1}).requires_grad_()}, o); });
  };
  auto adamw = [](optim::AdamWOptions o) {
    return test::error_of([&] { optim::AdamW({ones({1}).requires_grad_()}, o); });
  };
  auto has = [](const std::string& error, const char* what) {
    INFO(error);
    return error.find(what) != std::string::npos;
  };
  CHECK(has(sgd(optim::SGDOptions(0.1).weight_decay(-1e-4)), "weight decay must be finite and >= 0"));
  CHECK(has(sgd(optim::SGDOptions(0.1).weight_decay(nan)), "weight decay"));
  CHECK(has(sgd(optim::SGDOptions(0.1).momentum(inf)), "momentum must be finite"));
  CHECK(has(sgd(optim::SGDOptions(0.1).momentum(nan)), "momentum"));
  CHECK(has(sgd(optim::SGDOptions(0.1).momentum(0.9).dampening(2)), "dampening must be in [0, 1]"));
  CHECK(has(adamw(optim::AdamWOptions(1e-3).weight_decay(-0.01)), "weight decay"));
  CHECK(has(adamw(optim::AdamWOptions(1e-3).eps(inf)), "eps must be finite"));
  CHECK(has(adamw(optim::AdamWOptions(1e-3).beta1(1)), "betas must be in [0, 1)"));
  // Adam's checks are AdamW's, in its own name
  const std::string adam_error = test::error_of(
      [] { optim::Adam({ones({1}).requires_grad_()}, optim::AdamOptions(1e-3).beta2(-0.1)); });
  CHECK(has(adam_error, "Adam: betas must be in [0, 1)"));
  CHECK(has(test::error_of([] {
              optim::Adam({ones({1}).requires_grad_()}, optim::AdamOptions(1e-3).weight_decay(-1));
            }),
            "weight decay"));
  // A group's own decay is checked too.
  CHECK(has(test::error_of([] {
              optim::SGD({optim::ParamGroup{{ones({1}).requires_grad_()}, -1.0, std::nullopt}}, optim::SGDOptions(0.1));
            }),
            "weight decay"));
  // And its rate's scale.
  for (double bad : {-0.5, nan, inf})
    CHECK(has(test::error_of([&] {
                optim::AdamW({optim::ParamGroup{{ones({1}).requires_grad_()}, std::nullopt, bad}},
                             optim::AdamWOptions(0.1));
              }),
              "lr_scale must be finite and >= 0"));
  // The edges that are valid stay valid.
  CHECK(sgd(optim::SGDOptions(0).momentum(0.9).dampening(1).weight_decay(0)).empty());
  CHECK(adamw(optim::AdamWOptions(0).eps(0).weight_decay(0)).empty());
}

TEST_CASE("AdamW and Adam (L2) match hand-computed updates", "[optim]") {
  for (bool decoupled : {true, false}) {
    INFO("decoupled " << decoupled);
    Tensor p = param_with_grad({1, -1}, {0.5, -2});
    std::unique_ptr<optim::Optimizer> opt;
    if (decoupled) opt = std::make_unique<optim::AdamW>(std::vector<Tensor>{p}, optim::AdamWOptions(0.01).weight_decay(0.1));
    else opt = std::make_unique<optim::Adam>(std::vector<Tensor>{p}, optim::AdamOptions(0.01).weight_decay(0.1));
    const double b1 = 0.9, b2 = 0.999, eps = 1e-8, lr = 0.01, wd = 0.1;
    std::vector<double> pv{1, -1}, m{0, 0}, v{0, 0};
    std::vector<std::vector<double>> grads{{0.5, -2}, {-1, 3}};
    for (int t = 1; t <= 2; ++t) {
      p.set_grad(tensor(grads[t - 1], {2}, kF64));
      opt->step();
      for (int i = 0; i < 2; ++i) {
        double g = grads[t - 1][i];
        if (decoupled) pv[i] *= 1 - lr * wd;
        else g += wd * pv[i];  // L2: through the moments
        m[i] = b1 * m[i] + (1 - b1) * g;
        v[i] = b2 * v[i] + (1 - b2) * g * g;
        double mh = m[i] / (1 - std::pow(b1, t)), vh = v[i] / (1 - std::pow(b2, t));
        pv[i] -= lr * mh / (std::sqrt(vh) + eps);
      }
      require_values(p, pv, 1e-10);
    }
  }
}

TEST_CASE("optimizer state round trip continues identically", "[optim]") {
  auto run = [](bool reload) {
    Tensor p = param_with_grad({1, 2, 3}, {0.1, -0.2, 0.3});
    auto opt = std::make_unique<optim::AdamW>(std::vector<Tensor>{p}, optim::AdamWOptions(0.1));
    opt->step();
    if (reload) {
      NamedTensors s = opt->state();
      opt = std::make_unique<optim::AdamW>(std::vector<Tensor>{p}, optim::AdamWOptions(0.5));
      opt->load_state(s);
    }
    p.set_grad(tensor({0.3, 0.2, -0.1}, kF64));
    opt->step();
    return p.to_vector<double>();
  };
  REQUIRE(run(false) == run(true));
}

TEST_CASE("optimizer state of another optimizer, another model or with bad values is refused, "
          "and a refused load changes nothing", "[optim][errors]") {
  auto params = [](int n) {
    std::vector<Tensor> ps;
    for (int i = 0; i < n; ++i) ps.push_back(param_with_grad({1, 2}, {0.1, -0.2}));
    return ps;
  };
  auto refused = [](optim::Optimizer& opt, const NamedTensors& s, const std::string& what) {
    return test::error_of([&] { opt.load_state(s); }).find(what) != std::string::npos;
  };
  std::vector<Tensor> four = params(4), two = params(2);
  optim::AdamW adam4(four, optim::AdamWOptions(0.1));
  adam4.step();
  optim::AdamW adam2(two, optim::AdamWOptions(0.1));
  adam2.step();
  optim::SGD sgd2(params(2), optim::SGDOptions(0.5).momentum(0.9));
  sgd2.step();
  const NamedTensors before = adam2.state();
  REQUIRE(refused(adam2, adam4.state(), "saved with 4 parameter(s)"));
  REQUIRE(refused(adam4, adam2.state(), "saved with 2 parameter(s)"));
  REQUIRE(refused(adam2, sgd2.state(), "written by SGD, not AdamW"));
  optim::Adam plain2(params(2), optim::AdamOptions(0.1));
  plain2.step();
  REQUIRE(refused(adam2, plain2.state(), "written by Adam, not AdamW"));
  REQUIRE(refused(plain2, adam2.state(), "written by AdamW, not Adam"));
  // a file without the description (older) is still checked by its buffers' names
  NamedTensors old;
  for (auto& [n, t] : sgd2.state())
    if (n == "steps" || n == "lr" || n.find(".momentum") != std::string::npos) old.emplace_back(n, t);
  REQUIRE(refused(adam2, old, "'0.0.momentum' is not part of AdamW's state"));
  auto with = [&](const std::string& name, double v) {
    NamedTensors s = adam2.state();
    for (auto& [n, t] : s)
      if (n == name) t = full({}, v, kF64);
    return s;
  };
  REQUIRE(refused(adam2, with("lr", -5), "'lr' is -5"));
  REQUIRE(refused(adam2, with("steps", NAN), "'steps' is nan"));
  REQUIRE(refused(adam2, with("0.1.step", 2.5), "whole number"));
  // nothing changed by the refusals: the state is still the one before them
  const NamedTensors after = adam2.state();
  REQUIRE(after.size() == before.size());
  for (size_t i = 0; i < after.size(); ++i) {
    REQUIRE(after[i].first == before[i].first);
    REQUIRE(after[i].second.to_vector<double>() == before[i].second.to_vector<double>());
  }
  REQUIRE(adam2.lr() == 0.1);
}

TEST_CASE("learning-rate schedules", "[optim]") {
  Tensor p = param_with_grad({1}, {1});
  optim::SGD opt({p}, optim::SGDOptions(1.0));
  optim::StepLR step(opt, 10, 0.5);
  REQUIRE(step.lr_at(9) == 1.0);
  REQUIRE(step.lr_at(10) == 0.5);
  REQUIRE(step.lr_at(25) == 0.25);
  optim::CosineLR cos(opt, 4, 104, 0.0);
  REQUIRE(cos.lr_at(0) == Approx(0.2));
  REQUIRE(cos.lr_at(3) == Approx(0.8));
  REQUIRE(cos.lr_at(4) == Approx(1.0));
  REQUIRE(cos.lr_at(54) == Approx(0.5));
  REQUIRE(cos.lr_at(104) == Approx(0.0).margin(1e-12));
  optim::SGD opt2({p}, optim::SGDOptions(1.0));  // a fresh optimizer: schedulers set the lr
  optim::LinearLR lin(opt2, 0, 10);
  REQUIRE(lin.lr_at(5) == Approx(0.5));
  lin.step();
  REQUIRE(opt2.lr() == Approx(0.9));
  lin.set_step(8);
  REQUIRE(opt2.lr() == Approx(0.2));
  // warm-up over the whole run: no decay phase, min_lr at the end and after
  optim::CosineLR all_warm(opt2, 10, 10, 0.1);
  REQUIRE(all_warm.lr_at(10) == 0.1);
  REQUIRE(all_warm.lr_at(1000) == 0.1);
  // a learning rate that is not finite, or below 0, is refused wherever it comes from
  const double lr = opt2.lr();
  const auto npos = std::string::npos;
  REQUIRE(test::error_of([&] { opt2.set_lr(NAN); }).find("must be finite and >= 0, got nan") != npos);
  REQUIRE(test::error_of([&] { opt2.set_lr(-0.1); }).find("got -0.1") != npos);
  REQUIRE(opt2.lr() == lr);
  REQUIRE(test::error_of([&] { optim::StepLR(opt, 1, NAN); }).find("gamma must be finite") != npos);
  REQUIRE(test::error_of([&] { optim::CosineLR(opt, 0, 10, -1.0); }).find("min_lr must be finite") != npos);
}

// The base a schedule decays from is the optimizer's initial lr (saved with its state): a
// scheduler made after load_state(), or a second one, does not start from a decayed lr.
TEST_CASE("schedules start from the initial lr, whenever they are made", "[optim]") {
  Tensor p = param_with_grad({1}, {1});
  optim::SGD a({p}, optim::SGDOptions(1.0));
  optim::CosineLR ca(a, 0, 100);
  ca.set_step(50);
  REQUIRE(a.lr() == Approx(0.5));
  optim::CosineLR again(a, 0, 100);  // a second one on the same optimizer
  REQUIRE(again.base_lr() == 1.0);
  optim::SGD b({p}, optim::SGDOptions(1.0));
  b.load_state(a.state());  // lr 0.5, initial lr 1
  optim::CosineLR cb(b, 0, 100);  // made after loading, as in PyTorch's usual order
  cb.set_step(50);
  REQUIRE(b.lr() == Approx(0.5));
}

// 16-bit parameters (a model cast with .to(kF16)) step on the CPU as on CUDA: in f32, rounded
// back once; and a model cast after the optimizer made its state still steps (the state
// follows its parameter).
TEST_CASE("optimizers step 16-bit parameters, and parameters cast after their state was made",
          "[optim]") {
  for (DType dt : {kF16, kBF16}) {
    INFO(dtype_name(dt));
    for (int kind = 0; kind < 3; ++kind) {
      Tensor p16 = tensor({0.5, -1.25, 2}, {3}).to(dt).requires_grad_();
      Tensor p32 = p16.to(kF32).detach().requires_grad_();
      std::unique_ptr<optim::Optimizer> o16, o32;
      if (kind == 0) {
        o16 = std::make_unique<optim::SGD>(std::vector<Tensor>{p16}, optim::SGDOptions(0.1).momentum(0.9));
        o32 = std::make_unique<optim::SGD>(std::vector<Tensor>{p32}, optim::SGDOptions(0.1).momentum(0.9));
      } else if (kind == 1) {
        o16 = std::make_unique<optim::AdamW>(std::vector<Tensor>{p16}, optim::AdamWOptions(0.1));
        o32 = std::make_unique<optim::AdamW>(std::vector<Tensor>{p32}, optim::AdamWOptions(0.1));
      } else {  // L2 through the moments
        o16 = std::make_unique<optim::Adam>(std::vector<Tensor>{p16}, optim::AdamOptions(0.1).weight_decay(0.5));
        o32 = std::make_unique<optim::Adam>(std::vector<Tensor>{p32}, optim::AdamOptions(0.1).weight_decay(0.5));
      }
      for (int s = 0; s < 3; ++s) {
        p16.set_grad(tensor({1.0, -2.0, 0.25}, {3}).to(dt));
        p32.set_grad(tensor({1.0, -2.0, 0.25}, {3}));
        o16->step();
        o32->step();
      }
      test::require_close(p16.to(kF32), p32, 2e-2, 1e-2);
    }
  }
  Linear lin(3, 2);
  optim::AdamW opt(lin.parameters(), optim::AdamWOptions(0.1));
  sum(lin.forward(ones({1, 3}))).backward();
  opt.step();
  lin.to(kF64);
  lin.zero_grad();
  sum(lin.forward(ones({1, 3}, kF64))).backward();
  opt.step();  // (threw: the f32 state was read as f64)
  int moments = 0;
  for (auto& [name, t] : opt.state())
    if (name.find("exp_avg") != std::string::npos) {
      REQUIRE(t.dtype() == kF64);
      ++moments;
    }
  REQUIRE(moments == 4);  // two per parameter, weight and bias
}

TEST_CASE("clip_grad_norm scales to the max norm", "[optim]") {
  Tensor a = param_with_grad({0, 0}, {3, 0}), b = param_with_grad({0}, {4});
  double n = optim::clip_grad_norm({a, b}, 1.0);
  REQUIRE(n == Approx(5.0));
  // libtorch's factor, max_norm / (norm + 1e-6), to the last digits (param_with_grad is f64)
  require_values(a.grad(), {3 / (5 + 1e-6), 0}, 1e-13);
  require_values(b.grad(), {4 / (5 + 1e-6)}, 1e-13);
  REQUIRE(optim::clip_grad_norm({a, b}, 10.0) == Approx(1.0).epsilon(1e-5));
}

// A NaN or inf among the gradients: the norm says so and every gradient is left as it was
// (the loss scaler's step is skipped; scaling would spread the NaN). A negative max_norm is
// refused. clip_grad_norm_ gives the norm as an f64 tensor on the gradients' device. On the
// CPU and, when present, CUDA.
TEST_CASE("clip_grad_norm leaves non-finite gradients alone", "[optim][cuda]") {
  for (Device d : test::devices())
    for (const double bad : {std::nan(""), double(INFINITY)}) {
      INFO(d.str() << " " << bad);
      Tensor a = zeros({2}, TensorOptions(kF32).device(d)).requires_grad_();
      a.set_grad(tensor({30, bad}, {2}).to(kF32).to(d));
      Tensor b = zeros({1}, TensorOptions(kF16).device(d)).requires_grad_();
      b.set_grad(tensor({40}, {1}).to(kF16).to(d));
      Tensor n = optim::clip_grad_norm_({a, b}, 1.0);
      REQUIRE(n.dtype() == kF64);
      REQUIRE(n.device() == d);
      REQUIRE(n.numel() == 1);
      const double v = n.item();
      REQUIRE((std::isnan(bad) ? std::isnan(v) : std::isinf(v)));
      Tensor ga = a.grad().cpu();
      REQUIRE(ga.data<float>()[0] == 30.f);
      REQUIRE(b.grad().cpu().to(kF32).data<float>()[0] == 40.f);
      // and finite ones are clipped by the tensor form as by the double one
      a.set_grad(tensor({30, 0}, {2}).to(kF32).to(d));
      REQUIRE(optim::clip_grad_norm_({a, b}, 1.0).item() == Approx(50.0));
      require_values(a.grad().cpu(), {0.6, 0}, 1e-6);
      REQUIRE(test::error_of([&] { optim::clip_grad_norm({a, b}, -1.0); })
                  .find("max_norm must be finite and >= 0, got -1") != std::string::npos);
    }
}

// A diverging run's gradients: finite, but their squares, or the sum of the squares, beyond
// f32's range. The norm is summed in double, so it is finite and the gradients are clipped
// (an f32 sum would give inf and leave them unclipped). On the CPU and, when present, CUDA.
TEST_CASE("clip_grad_norm of f32 gradients whose squares overflow f32", "[optim][cuda]") {
  for (Device d : test::devices()) {
    INFO(d.str());
    Tensor a = zeros({2}, TensorOptions(kF32).device(d)).requires_grad_();
    a.set_grad(tensor({3e20, 0}, {2}).to(kF32).to(d));
    Tensor b = zeros({70001}, TensorOptions(kF32).device(d)).requires_grad_();
    b.set_grad(full({70001}, 1e19, kF32).to(d));  // each square fits f32, their sum does not
    const double want = std::sqrt(9e40 + 70001 * 1e38);
    REQUIRE(optim::clip_grad_norm({a, b}, 1.0) == Approx(want).epsilon(1e-6));
    require_values(a.grad().cpu(), {3e20 / want, 0}, 1e-6);
    test::require_close(b.grad().cpu(), full({70001}, float(1e19 / want), kF32), 1e-5, 1e-12);
  }
}

// The fused path: gradients of four dtypes (one a transposed view, one large enough for many
// blocks on CUDA) in one call per dtype; the norm against a sum in double, every gradient
// scaled in place. On the CPU and, when present, on CUDA.
TEST_CASE("clip_grad_norm over mixed dtypes and views", "[optim][cuda]") {
  for (Device d : test::devices()) {
    INFO(d.str());
    Generator g(3);
    std::vector<Tensor> grads{randn({70001}, kF32, &g), randn({33}, kF32, &g).to(kF16),
                              randn({5}, kF32, &g).to(kBF16), randn({4, 6}, kF64, &g)};
    double want = 0;
    for (auto& t : grads) want += sum(square(t.to(kF64))).item();
    want = std::sqrt(want);
    std::vector<Tensor> params;
    for (auto& t : grads) {
      Tensor p = zeros(t.shape(), TensorOptions(t.dtype()).device(d)).requires_grad_();
      p.set_grad(t.to(d).clone());  // clipping works in place
      params.push_back(p);
    }
    Tensor w = zeros({6, 4}, TensorOptions(kF64).device(d)).requires_grad_();
    w.set_grad(grads[3].to(d).clone().transpose(0, 1));  // the same values, a non-contiguous view
    params.push_back(w);
    want = std::sqrt(want * want + sum(square(grads[3])).item());
    const double n = optim::clip_grad_norm(params, 1.0);
    REQUIRE(n == Approx(want).epsilon(1e-5));
    const double f = 1.0 / (want + 1e-6);
    for (size_t i = 0; i < grads.size(); ++i) {
      INFO("gradient " << i);
      const double rtol = grads[i].dtype() == kF32 || grads[i].dtype() == kF64 ? 1e-6 : 1e-2;
      test::require_close(params[i].grad().cpu().to(kF64), grads[i].to(kF64) * f, rtol, 1e-7);
    }
    test::require_close(w.grad().contiguous().cpu(), grads[3].transpose(0, 1).contiguous() * f,
                        1e-9, 1e-9);
  }
}

// A partly frozen model's parameters() go to the optimizer as in PyTorch: the frozen ones get
// no gradient and are skipped (they were refused); a tensor that is not a leaf still is.
TEST_CASE("optimizers take frozen parameters and leave them", "[optim]") {
  manual_seed(9);
  Sequential net{std::make_shared<Linear>(3, 3), std::make_shared<Linear>(3, 2)};
  auto& first = static_cast<Linear&>(*net.named_children()[0].second);
  first.weight.requires_grad_(false);
  const Tensor frozen = first.weight.clone();
  for (int kind = 0; kind < 2; ++kind) {
    std::unique_ptr<optim::Optimizer> opt;
    if (kind == 0) opt = std::make_unique<optim::AdamW>(net.parameters(), optim::AdamWOptions(0.1));
    else opt = std::make_unique<optim::SGD>(net.parameters(), optim::SGDOptions(0.1).momentum(0.9));
    const Tensor before = first.bias.clone();
    sum(net.forward(randn({4, 3}))).backward();
    opt->step();
    test::require_close(first.weight, frozen, 0, 0);
    CHECK(sum(abs(first.bias - before)).item() > 0);
    opt->zero_grad();
  }
  Tensor leaf = ones({2}).requires_grad_(true);
  CHECK(test::error_of([&] { optim::SGD({mul(leaf, 2.0)}, optim::SGDOptions(0.1)); })
            .find("every parameter must be a leaf tensor") != std::string::npos);
}

TEST_CASE("a step refuses a parameter whose data changed shape or layout, before any update",
          "[optim][errors]") {
  for (const bool adam : {false, true}) {
    INFO((adam ? "AdamW" : "SGD"));
    Tensor x = ones({2}).requires_grad_(), y = ones({2}).requires_grad_();
    std::unique_ptr<optim::Optimizer> o;
    if (adam) o = std::make_unique<optim::AdamW>(std::vector<Tensor>{x, y}, optim::AdamWOptions(0.1));
    else o = std::make_unique<optim::SGD>(std::vector<Tensor>{x, y}, optim::SGDOptions(0.1));
    (x * y).sum().backward();
    y.set_data(ones({1 << 20}));  // (read past the gradient's two floats, it crashed)
    test::require_error("a gradient of shape [2] for a parameter of shape [1048576]", [&] { o->step(); });
    REQUIRE(x.to_vector<float>() == std::vector<float>{1, 1});  // x, before y, not stepped either
    y.set_data(zeros({4}).slice(0, 0, 4, 2));  // [2], every other element
    REQUIRE(!y.is_contiguous());
    test::require_error("parameters must be contiguous", [&] { o->step(); });
    y.set_data(ones({2}));
    o->step();
    if (adam) {  // state made for [2]: a parameter now of another shape is refused
      y.set_data(ones({3}));
      y.set_grad(ones({3}));
      test::require_error("has shape [2]: its data changed shape after a step", [&] { o->step(); });
    }
  }
  Tensor z = ones({2}).requires_grad_();
  test::require_error("cannot take i64 data", [&] { z.set_data(ones({2}, kI64)); });
}
