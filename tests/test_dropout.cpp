#include "kernels/philox.h"
#include "test_util.h"

using namespace nn;
using test::rnd;

TEST_CASE("dropout zeroes a p fraction and scales the rest", "[dropout]") {
  Generator g(5);
  Tensor x = ones({100000});
  Tensor y = dropout(x, 0.3, true, &g);
  auto v = y.to_vector<float>();
  int64_t zeros_ = 0;
  for (float e : v) {
    REQUIRE((e == 0.0f || std::abs(e - 1.0f / 0.7f) < 1e-6f));
    zeros_ += e == 0.0f;
  }
  REQUIRE(std::abs(double(zeros_) / 1e5 - 0.3) < 0.01);
  REQUIRE(std::abs(mean(y).item() - 1.0) < 0.02);
  // eval mode and p = 0 are the identity; p = 1 zeroes
  REQUIRE(dropout(x, 0.3, false).is_same(x));
  REQUIRE(dropout(x, 0.0, true).is_same(x));
  REQUIRE(sum(dropout(x, 1.0, true)).item() == 0);
  REQUIRE(test::error_of([&] { dropout(x, 1.5, true); }).find("[0, 1]") != std::string::npos);
}

TEST_CASE("dropout masks are reproducible and independent of threads", "[dropout]") {
  Generator a(9), b(9);
  Tensor x = ones({50000});
  auto m1 = dropout(x, 0.5, true, &a).to_vector<float>();
  int threads = num_threads();
  set_num_threads(1);
  auto m2 = dropout(x, 0.5, true, &b).to_vector<float>();
  set_num_threads(threads);
  REQUIRE(m1 == m2);
  auto m3 = dropout(x, 0.5, true, &a).to_vector<float>();  // the generator moved on
  REQUIRE(m1 != m3);
}

TEST_CASE("dropout's CPU mask is the Philox stream the CUDA kernel draws", "[dropout]") {
  // element i of a draw at (seed, offset) keeps when the uniform of counter offset + i / 4,
  // lane i % 4 (kernels/philox.h, one counter at a time) is at least p
  for (double p : {0.1, 0.25, 0.5, 0.9, 0.999999}) {
    Generator g(11);
    dropout(ones({37}), p, true, &g);  // so the draw below starts at a nonzero offset
    const uint64_t offset = g.offset();
    const int64_t n = 4 * 64 * 3 + 7;  // several counter batches and a ragged end
    auto y = dropout(ones({n}), p, true, &g).to_vector<float>();
    int64_t mismatches = 0;
    for (int64_t i = 0; i < n; ++i) {
      rng::U32x4 r = rng::philox(11, offset + uint64_t(i / 4));
      const bool keep = rng::to_uniform(r.v[i % 4]) >= float(p);
      mismatches += keep != (y[size_t(i)] != 0.0f);
    }
    INFO("p " << p);
    REQUIRE(mismatches == 0);
  }
}

TEST_CASE("gradcheck: dropout", "[dropout][gradcheck]") {
  // Re-seed inside fn so every evaluation draws the same mask.
  test::require_gradcheck([](const std::vector<Tensor>& in) {
    Generator g(3);
    return dropout(in[0], 0.4, true, &g);
  }, {rnd({4, 5}, 1)});
}

TEST_CASE("f16 and bf16 dropout: f32's of the widened values, rounded once", "[dropout]") {
  // One pass on the CPU; the same seed draws the same mask whatever the dtype. Long enough
  // for several threads' batches of counters, and an odd length.
  for (DType h : {kBF16, kF16}) {
    INFO(dtype_name(h));
    Tensor x = (rnd({70001}, 51, false) * 3.0).to(h);
    Tensor g = rnd({70001}, 52, false).to(h);
    Generator a(9), b(9);
    Tensor xh = x.detach().requires_grad_(true), x32 = x.to(kF32).requires_grad_(true);
    Tensor y = dropout(xh, 0.3, true, &a), y32 = dropout(x32, 0.3, true, &b);
    REQUIRE(y.dtype() == h);
    test::require_same(y, y32.to(h));
    (y * g).sum().backward();
    (y32 * g.to(kF32)).sum().backward();
    test::require_same(xh.grad(), x32.grad().to(h));
  }
}
