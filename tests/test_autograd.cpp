#include "test_util.h"

#include <pthread.h>

#include <cmath>
#include <limits>

using namespace nn;
using test::require_values;

TEST_CASE("backward computes and accumulates leaf gradients", "[autograd]") {
  Tensor x = tensor({1, 2, 3}, kF64).requires_grad_();
  Tensor y = sum(x * x + x);  // dy/dx = 2x + 1
  REQUIRE(y.requires_grad());
  REQUIRE(!y.is_leaf());
  y.backward();
  require_values(x.grad(), {3, 5, 7});
  sum(x * 2.0).backward();  // accumulates
  require_values(x.grad(), {5, 7, 9});
  x.set_grad(Tensor());
  sum(x).backward();
  require_values(x.grad(), {1, 1, 1});
}

TEST_CASE("a tensor used twice gets both contributions", "[autograd]") {
  Tensor x = tensor({2}, kF64).requires_grad_();
  Tensor a = x * 3.0;
  Tensor y = sum(a * a + a);  // 9x^2 + 3x -> 18x + 3
  y.backward();
  require_values(x.grad(), {39});
}

TEST_CASE("leaf gradients never alias each other", "[autograd]") {
  Tensor a = tensor({1, 2}, kF64).requires_grad_();
  Tensor b = tensor({3, 4}, kF64).requires_grad_();
  sum(a + b).backward();
  {
    NoGradGuard ng;
    Tensor ga = a.grad();
    ga.mul_(10);
  }
  require_values(a.grad(), {10, 10});
  require_values(b.grad(), {1, 1});
}

TEST_CASE("NoGradGuard and detach stop recording", "[autograd]") {
  Tensor x = tensor({1, 2}, kF64).requires_grad_();
  {
    NoGradGuard ng;
    Tensor y = x * 2.0;
    REQUIRE(!y.requires_grad());
    REQUIRE(!y.grad_fn());
  }
  REQUIRE(grad_enabled());
  Tensor d = x.detach();
  REQUIRE(!d.requires_grad());
  REQUIRE(d.storage() == x.storage());
  Tensor z = sum(d * x);  // only x's path carries gradient
  z.backward();
  require_values(x.grad(), {1, 2});
}

TEST_CASE("autograd misuse gives clear errors", "[autograd][errors]") {
  Tensor x = tensor({1, 2}, kF64).requires_grad_();
  Tensor y = sum(x * x);
  y.backward();
  REQUIRE(test::error_of([&] { y.backward(); }).find("retain_graph") != std::string::npos);
  Tensor z = x * 2.0;
  REQUIRE(test::error_of([&] { z.backward(); }).find("non-scalar") != std::string::npos);
  REQUIRE(test::error_of([&] { ones({2}).sum().backward(); }).find("does not require grad") !=
          std::string::npos);
  REQUIRE(test::error_of([&] { z.requires_grad_(false); }).find("leaf") != std::string::npos);
  REQUIRE(test::error_of([&] { x.fill_(0); }).find("NoGradGuard") != std::string::npos);
  REQUIRE(test::error_of([] { ones({2}, kI64).requires_grad_(); }).find("floating") !=
          std::string::npos);
  // retain_graph keeps the graph for a second pass
  Tensor w = tensor({3}, kF64).requires_grad_();
  Tensor v = sum(w * w);
  v.backward({}, true);
  v.backward();
  require_values(w.grad(), {12});
}

TEST_CASE("backward refuses a saved tensor changed in place since the forward pass",
          "[autograd][errors][version]") {
  auto changed = [](const std::function<void()>& f) {
    return test::error_of(f).find("changed in place") != std::string::npos;
  };
  Tensor w = tensor({1, 2}, kF64).requires_grad_();
  SECTION("an input that needs no gradient, changed directly or through a view") {
    for (int through_view = 0; through_view < 2; ++through_view) {
      Tensor x = tensor({3, 4}, kF64);
      Tensor y = sum(w * x);  // mul saves x for w's gradient
      if (through_view) x.slice(0, 1, 2).fill_(0);
      else x.mul_(0.0);
      REQUIRE(changed([&] { y.backward(); }));
    }
  }
  SECTION("a parameter changed under NoGradGuard, or by an optimizer step") {
    Tensor x = tensor({3, 4}, kF64);
    Tensor y = sum(matmul(x.reshape({1, 2}), w.reshape({2, 1})));
    {
      NoGradGuard ng;
      w.add_(ones({2}, kF64));
    }
    REQUIRE(changed([&] { y.backward(); }));
    Tensor z = sum(x * w);
    z.backward({}, true);
    optim::SGD opt({w}, optim::SGDOptions(0.1));
    opt.step();
    REQUIRE(changed([&] { z.backward(); }));  // the graph saw w before the step
  }
  SECTION("an output an op saved") {
    Tensor y = exp(w);  // exp saves its result
    Tensor loss = sum(y * 2.0);
    {
      NoGradGuard ng;
      y.fill_(0);
    }
    REQUIRE(changed([&] { loss.backward(); }));
  }
  SECTION("nothing is refused where the changed tensor was not saved") {
    Tensor x = tensor({3, 4}, kF64);
    Tensor y = sum(w + x);  // add saves neither input
    x.mul_(0.0);
    y.backward();
    require_values(w.grad(), {1, 1});
    // changed before the forward pass, or after backward: nothing to refuse either
    x.fill_(2);
    Tensor z = sum(w * x);
    w.set_grad(Tensor());
    z.backward();
    require_values(w.grad(), {2, 2});
    x.fill_(5);
  }
  SECTION("every in-place write moves the memory's version, through any view") {
    Tensor x = zeros({4}, kF64);
    uint64_t v = x.storage()->version();
    auto moved = [&] {
      const uint64_t now = x.storage()->version();
      const bool up = now > v;
      v = now;
      return up;
    };
    x.fill_(1);
    REQUIRE(moved());
    x.slice(0, 0, 2).add_(ones({2}, kF64));
    REQUIRE(moved());
    x.detach().mul_(2.0);
    REQUIRE(moved());
    x.copy_(ones({4}, kF64));
    REQUIRE(moved());
    x.normal_(0, 1);
    REQUIRE(moved());
    sum(x * 2.0);  // reading is no change
    REQUIRE(!moved());
    Tensor c = x.clone();  // memory of its own, counted apart
    const uint64_t vc = c.storage()->version();
    x.fill_(3);
    REQUIRE(c.storage()->version() == vc);
    REQUIRE(moved());
    // a write refused by its own checks leaves the version alone
    REQUIRE(!test::error_of([&] { x.copy_(ones({3}, kF64)); }).empty());
    REQUIRE(!test::error_of([&] { x.add_(ones({5}, kF64)); }).empty());
    REQUIRE(!test::error_of([&] { x.expand({2, 4}).mul_(2.0); }).empty());
    Tensor xi = zeros({4}, kI64);
    const uint64_t vi = xi.storage()->version();
    REQUIRE(!test::error_of([&] { xi.uniform_(0, 1); }).empty());
    REQUIRE(xi.storage()->version() == vi);
    REQUIRE(!moved());
  }
  SECTION("so a refused write does not spoil the graph that saved the tensor") {
    Tensor x = tensor({3, 4}, kF64);
    Tensor y = sum(w * x);
    REQUIRE(!test::error_of([&] { x.copy_(ones({3}, kF64)); }).empty());
    y.backward();
    require_values(w.grad(), {3, 4});
  }
}

TEST_CASE("in-place writes refuse a source whose gradient they would lose", "[autograd][errors]") {
  // In-place ops are not recorded: copying or adding a tensor that requires grad into a
  // buffer would drop its gradient without a word (libtorch records it; here it is refused)
  Tensor w = tensor({1, 2, 3}, kF64).requires_grad_();
  Tensor buf = zeros({2, 3}, kF64);
  for (auto f : std::vector<std::function<void()>>{[&] { buf.select(0, 0).copy_(w); },
                                                   [&] { buf.select(0, 1).copy_(w * 2.0); },
                                                   [&] { buf.select(0, 0).add_(w); }})
    REQUIRE(test::error_of(f).find("the source requires grad") != std::string::npos);
  REQUIRE(buf.storage()->version() == 0);
  // asked for explicitly: a detached source, or under NoGradGuard
  buf.select(0, 0).copy_(w.detach());
  {
    NoGradGuard ng;
    buf.select(0, 1).add_(w);
  }
  require_values(buf, {1, 2, 3, 1, 2, 3});
  // the recorded way gives both gradients
  Tensor b = concat({w.reshape({1, 3}), (w * 2.0).reshape({1, 3})}, 0);
  sum(b).backward();
  require_values(w.grad(), {3, 3, 3});
}

TEST_CASE("leaf gradients: none for a leaf that stopped requiring grad, never a view of a "
          "larger buffer, and set_grad's checks", "[autograd]") {
  Tensor w = tensor({1, 2}, kF64).requires_grad_(), u = tensor({3}, kF64).requires_grad_();
  Tensor y = sum(w * 2.0) + sum(u * 3.0);
  w.requires_grad_(false);  // after the forward pass: libtorch gives it no gradient
  y.backward();
  REQUIRE_FALSE(w.grad().defined());
  require_values(u.grad(), {3});
  // a leaf's part of a gradient that reaches it through a view (a slice of the whole, which
  // the view's backward passes on) is copied out, not kept: it would keep the whole alive
  Tensor a = tensor({1, 2}, kF64).requires_grad_();
  Tensor whole = concat({a.reshape({1, 2}), ones({1, 1000}, kF64)}, 1) * 2.0;
  sum(whole.slice(1, 0, 2).reshape({2}) * 3.0).backward();
  REQUIRE(a.grad().storage()->nbytes() == a.grad().nbytes());
  require_values(a.grad(), {6, 6});
  // a gradient of another dtype or device is refused where it is set, not mid-backward
  REQUIRE(test::error_of([&] { a.set_grad(zeros({2}, kF32)); }).find("set_grad") != std::string::npos);
  REQUIRE(test::error_of([&] { a.set_grad(zeros({3}, kF64)); }).find("set_grad") != std::string::npos);
}

TEST_CASE("non-scalar backward takes the output gradient", "[autograd]") {
  Tensor x = tensor({1, 2, 3}, kF64).requires_grad_();
  Tensor y = x * x;
  y.backward(tensor({1, 0, 2}, kF64));
  require_values(x.grad(), {2, 0, 12});
}

TEST_CASE("a long graph is freed without recursion, with or without backward", "[autograd]") {
  // 100,000 chained ops on a thread with a 1 MiB stack: freed node by node recursively,
  // such a chain needed several MiB (200,000 overflowed the main thread's 8 MiB)
  struct Run {
    bool backward;
    double grad = 0;
    std::string error;
  };
  auto body = [](void* arg) -> void* {
    auto* run = static_cast<Run*>(arg);
    try {
      Tensor x = tensor({1.0}, kF64).requires_grad_();
      {
        Tensor total = x;
        for (int i = 0; i < 100000; ++i) total = total + 1.0;
        if (run->backward) total.backward();
      }  // (the graph dies here)
      if (run->backward) run->grad = x.grad().item();
    } catch (const std::exception& e) {
      run->error = e.what();
    }
    return nullptr;
  };
  for (bool backward : {false, true}) {
    Run run;
    run.backward = backward;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, size_t(1) << 20);
    pthread_t thread;
    REQUIRE(pthread_create(&thread, &attr, body, &run) == 0);
    pthread_join(thread, nullptr);
    pthread_attr_destroy(&attr);
    REQUIRE(run.error.empty());
    if (backward) REQUIRE(run.grad == 1.0);
  }
}

TEST_CASE("gradcheck detects a wrong backward rule", "[autograd][gradcheck]") {
  // An op whose recorded gradient is deliberately off by a factor of two.
  auto wrong_square = [](const std::vector<Tensor>& in) {
    Tensor out;
    {
      NoGradGuard ng;
      out = in[0] * in[0];
    }
    out = out.detach();
    record("wrong_square", {in[0]}, out, [x = in[0].detach()](const Tensor& g, auto&) {
      return std::vector<Tensor>{g * x};  // correct would be 2 * g * x
    });
    return out;
  };
  auto r = gradcheck(wrong_square, {test::rnd({3}, 1)});
  REQUIRE(!r.ok);
  REQUIRE(r.message.find("analytic") != std::string::npos);
  test::require_gradcheck([](const std::vector<Tensor>& in) { return in[0] * in[0]; },
                          {test::rnd({3}, 1)});
}

TEST_CASE("gradcheck fails where its finite difference overflows", "[autograd][gradcheck]") {
  // exp(x) * 1e-10 at x = log(DBL_MAX): exp of the step up overflows to inf, so the central
  // difference is infinite and, as a tolerance of rtol * inf, would pass any analytic value;
  // the finite one here (about 1.8e298 times the weight) is not checked, and must not be
  // called so.
  Tensor x = full({1}, std::log(std::numeric_limits<double>::max()), kF64).requires_grad_();
  auto r = gradcheck([](const std::vector<Tensor>& in) { return exp(in[0]) * 1e-10; }, {x});
  REQUIRE_FALSE(r.ok);
  INFO(r.message);
  REQUIRE(r.message.find("numeric inf") != std::string::npos);
}

TEST_CASE("the tests' closeness check takes an infinity only from itself", "[autograd][gradcheck]") {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::nan("");
  REQUIRE(test::first_far({1.0, inf, -inf, nan}, {1.0 + 1e-7, inf, -inf, nan}, 1e-5, 1e-6) == -1);
  REQUIRE(test::first_far({0.0, 1e300}, {0.0, inf}, 1e-5, 1e-6) == 1);  // passed before
  REQUIRE(test::first_far({inf}, {-inf}, 1e-5, 1e-6) == 0);
  REQUIRE(test::first_far({inf}, {1e300}, 1e-5, 1e-6) == 0);
  REQUIRE(test::first_far({1.0, nan}, {1.0, 2.0}, 1e-5, 1e-6) == 1);
  REQUIRE(test::first_far({1.0, 2.0}, {1.0, nan}, 1e-5, 1e-6) == 1);
  REQUIRE(test::first_far({1.1}, {1.0}, 1e-5, 1e-6) == 0);
}

TEST_CASE("gradcheck checks the parameters a function reads by itself", "[autograd][gradcheck]") {
  // A module's parameters, passed as GradcheckOptions::params: checked, left as they were.
  auto lin = std::make_shared<Linear>(3, 2);
  lin->to(kF64);
  const Tensor w0 = lin->weight.clone();
  const Tensor old_grad = full({2, 3}, 7.0, kF64);
  lin->weight.set_grad(old_grad);
  GradcheckOptions opts;
  opts.params = lin->parameters();
  auto r = gradcheck([&](const std::vector<Tensor>& in) { return tanh(lin->forward(in[0])); },
                     {test::rnd({4, 3}, 1)}, opts);
  INFO(r.message);
  REQUIRE(r.ok);
  test::require_close(lin->weight, w0, 0, 0);
  REQUIRE(lin->weight.grad().data_ptr() == old_grad.data_ptr());
  REQUIRE_FALSE(lin->bias.grad().defined());
  // A parameter the backward never reaches (detached): its zero gradient is caught.
  auto r2 = gradcheck([&](const std::vector<Tensor>& in) {
    return matmul(in[0], lin->weight.detach().transpose(0, 1)) + lin->bias;
  }, {test::rnd({4, 3}, 1)}, opts);
  REQUIRE_FALSE(r2.ok);
  REQUIRE(r2.message.find("param 0 element") != std::string::npos);
  // only f64 CPU leaves that require grad
  GradcheckOptions bad;
  bad.params = {ones({2})};
  REQUIRE(test::error_of([&] { gradcheck([](const std::vector<Tensor>& in) { return in[0]; },
                                         {test::rnd({2}, 1)}, bad); })
              .find("params must be") != std::string::npos);
}

TEST_CASE("gradients flow through views", "[autograd][views]") {
  auto fn = [](const std::vector<Tensor>& in) {
    Tensor x = in[0];
    Tensor a = x.transpose(0, 1).reshape({3, 4}).slice(1, 1, 4, 2);  // (3, 2)
    Tensor b = x.unsqueeze(0).expand({2, 4, 3}).permute({2, 0, 1}).flatten(1);  // (3, 8)
    return concat({a, b, x.select(0, 2).unsqueeze(1)}, 1);
  };
  test::require_gradcheck(fn, {test::rnd({4, 3}, 2)});
  // leaves concatenated (one twice) get fresh gradients rather than slices
  test::require_gradcheck(
      [](const std::vector<Tensor>& in) { return concat({in[0], in[1], in[0]}, 0); },
      {test::rnd({2, 3}, 7), test::rnd({1, 3}, 8)});
  test::require_gradcheck(
      [](const std::vector<Tensor>& in) { return stack({in[0], in[1] * 2.0}, 1); },
      {test::rnd({2, 3}, 3), test::rnd({2, 3}, 4)});
  test::require_gradcheck(
      [](const std::vector<Tensor>& in) {
        return index_select(in[0], from_vector<int64_t>({2, 0, 2}, {3}));
      },
      {test::rnd({3, 2}, 5)});
  GradcheckOptions loose;  // through f32
  loose.eps = loose.atol = loose.rtol = 1e-3;
  test::require_gradcheck([](const std::vector<Tensor>& in) { return in[0].to(kF32).to(kF64); },
                          {test::rnd({3}, 6)}, loose);
}

TEST_CASE("mixed dtypes promote, and gradients return in each input's dtype", "[autograd][dtype]") {
  REQUIRE(promote_types(kF16, kF32) == kF32);
  REQUIRE(promote_types(kBF16, kF16) == kF32);
  REQUIRE(promote_types(kI64, kF16) == kF16);
  REQUIRE(promote_types(kU8, kI32) == kI32);
  REQUIRE(promote_types(kF64, kF32) == kF64);
  Tensor a = tensor({1, 2}, kF32).requires_grad_();
  Tensor b = tensor({3, 4}, kF64).requires_grad_();
  Tensor c = a * b;
  REQUIRE(c.dtype() == kF64);
  sum(c).backward();
  REQUIRE(a.grad().dtype() == kF32);
  REQUIRE(b.grad().dtype() == kF64);
  test::require_values(a.grad(), {3, 4});
  test::require_values(b.grad(), {1, 2});
  REQUIRE((ones({2}, kI64) + tensor({0.5, 1.5})).dtype() == kF32);
  REQUIRE(gt(ones({2}, kF32), ones({2}, kF64)).dtype() == kF64);
}
