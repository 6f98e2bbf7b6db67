#include "test_util.h"

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

TEST_CASE("non-scalar backward takes the output gradient", "[autograd]") {
  Tensor x = tensor({1, 2, 3}, kF64).requires_grad_();
  Tensor y = x * x;
  y.backward(tensor({1, 0, 2}, kF64));
  require_values(x.grad(), {2, 0, 12});
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

TEST_CASE("gradients flow through views", "[autograd][views]") {
  auto fn = [](const std::vector<Tensor>& in) {
    Tensor x = in[0];
    Tensor a = x.transpose(0, 1).reshape({3, 4}).slice(1, 1, 4, 2);  // (3, 2)
    Tensor b = x.unsqueeze(0).expand({2, 4, 3}).permute({2, 0, 1}).flatten(1);  // (3, 8)
    return concat({a, b, x.select(0, 2).unsqueeze(1)}, 1);
  };
  test::require_gradcheck(fn, {test::rnd({4, 3}, 2)});
  test::require_gradcheck(
      [](const std::vector<Tensor>& in) { return stack({in[0], in[1] * 2.0}, 1); },
      {test::rnd({2, 3}, 3), test::rnd({2, 3}, 4)});
  test::require_gradcheck(
      [](const std::vector<Tensor>& in) {
        return index_select(in[0], from_vector<int64_t>({2, 0, 2}, {3}));
      },
      {test::rnd({3, 2}, 5)});
  test::require_gradcheck([](const std::vector<Tensor>& in) { return in[0].to(kF32).to(kF64); },
                          {test::rnd({3}, 6)}, GradcheckOptions{1e-3, 1e-3, 1e-3});
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
