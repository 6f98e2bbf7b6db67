#include "test_util.h"

using namespace nn;
using test::require_gradcheck;
using test::rnd;

namespace {
// Naive (M, K) @ (K, N) on the host.
Tensor naive_mm(const Tensor& a, const Tensor& b) {
  const int64_t M = a.size(0), K = a.size(1), N = b.size(1);
  auto va = a.to_vector<double>(), vb = b.to_vector<double>();
  std::vector<double> out(M * N, 0);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j)
      for (int64_t k = 0; k < K; ++k) out[i * N + j] += va[i * K + k] * vb[k * N + j];
  return tensor(out, {M, N}, kF64);
}
}  // namespace

TEST_CASE("matmul matches a naive product", "[matmul]") {
  Tensor a = rnd({5, 7}, 1, false), b = rnd({7, 3}, 2, false);
  test::require_close(matmul(a, b), naive_mm(a, b), 1e-12, 1e-12);
  // transposed operands are read in place
  Tensor at = rnd({7, 5}, 3, false).t(), bt = rnd({3, 7}, 4, false).t();
  test::require_close(matmul(at, bt), naive_mm(at.contiguous(), bt.contiguous()), 1e-12, 1e-12);
  // f32 agrees
  test::require_close(matmul(a.to(kF32), b.to(kF32)), naive_mm(a, b), 1e-5, 1e-5);
  // a large product, threaded inside Eigen
  Tensor big_a = rnd({200, 300}, 5, false), big_b = rnd({300, 100}, 6, false);
  test::require_close(matmul(big_a, big_b), naive_mm(big_a, big_b), 1e-10, 1e-10);
}

TEST_CASE("matmul batching and vector cases", "[matmul]") {
  Tensor a = rnd({2, 3, 4, 5}, 7, false), b = rnd({3, 5, 2}, 8, false);
  Tensor c = matmul(a, b);
  REQUIRE(c.shape() == Shape{2, 3, 4, 2});
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      test::require_close(c.select(0, i).select(0, j),
                          naive_mm(a.select(0, i).select(0, j), b.select(0, j)), 1e-12, 1e-12);
  Tensor v = rnd({5}, 9, false);
  REQUIRE(matmul(a, v).shape() == Shape{2, 3, 4});
  REQUIRE(matmul(v, b).shape() == Shape{3, 2});
  Tensor w = rnd({5}, 10, false);
  REQUIRE(matmul(v, w).shape() == Shape{});
  REQUIRE(matmul(v, w).item() == Approx(sum(v * w).item()));
  Tensor m = rnd({6, 5}, 11, false);
  REQUIRE(matmul(a, m.t()).shape() == Shape{2, 3, 4, 6});
  REQUIRE(test::error_of([&] { matmul(a, m); }).find("cannot be multiplied") != std::string::npos);
}

TEST_CASE("linear is x W^T + b", "[matmul]") {
  Tensor x = rnd({4, 3}, 12, false), w = rnd({2, 3}, 13, false), b = rnd({2}, 14, false);
  test::require_close(linear(x, w, b), matmul(x, w.t()) + b, 1e-12, 1e-12);
  test::require_close(linear(x, w), matmul(x, w.t()), 1e-12, 1e-12);
  Tensor x3 = rnd({2, 4, 3}, 15, false);
  REQUIRE(linear(x3, w, b).shape() == Shape{2, 4, 2});
  REQUIRE(test::error_of([&] { linear(rnd({4, 5}, 1, false), w, b); }).find("features") !=
          std::string::npos);
}

TEST_CASE("gradcheck: matmul and linear", "[matmul][gradcheck]") {
  require_gradcheck([](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); },
                    {rnd({3, 4}, 1), rnd({4, 2}, 2)});
  require_gradcheck([](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); },
                    {rnd({2, 3, 4}, 3), rnd({4, 2}, 4)});
  require_gradcheck([](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); },
                    {rnd({2, 1, 3, 4}, 5), rnd({3, 4, 2}, 6)});
  require_gradcheck([](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); },
                    {rnd({4}, 7), rnd({4, 3}, 8)});
  require_gradcheck([](const std::vector<Tensor>& in) { return matmul(in[0].t(), in[1]); },
                    {rnd({4, 3}, 9), rnd({4, 2}, 10)});
  require_gradcheck([](const std::vector<Tensor>& in) { return linear(in[0], in[1], in[2]); },
                    {rnd({2, 3, 4}, 11), rnd({5, 4}, 12), rnd({5}, 13)});
  require_gradcheck([](const std::vector<Tensor>& in) { return linear(in[0], in[1]); },
                    {rnd({3, 4}, 14), rnd({2, 4}, 15)});
}
