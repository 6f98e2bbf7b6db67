#include "test_util.h"

using namespace nn;
using test::require_gradcheck;
using test::rnd;

TEST_CASE("softmax and log_softmax", "[softmax]") {
  Tensor x = rnd({3, 4, 5}, 1, false);
  for (int64_t d : {0, 1, 2, -1}) {
    Tensor p = softmax(x, d);
    test::require_close(sum(p, {d}), ones(sum(p, {d}).shape(), kF64), 1e-12, 1e-12);
    test::require_close(p, exp(x) / sum(exp(x), {d}, true), 1e-12, 1e-12);
    test::require_close(log_softmax(x, d), log(p), 1e-12, 1e-12);
  }
  // stable for large inputs
  Tensor big = tensor({1000, 1001, 1002}, kF64);
  test::require_close(softmax(big, 0), softmax(tensor({0, 1, 2}, kF64), 0), 1e-12, 1e-12);
  REQUIRE(std::isfinite(log_softmax(tensor({-1e4, 0, 1e4}), 0).to_vector<float>()[0]));
}

// A masked (-inf) logit has probability 0 exactly, log-probability -inf, and gradient 0 (the
// incoming one through log_softmax), in the vectorised rows (37 values) as in the scalar
// tails, f32 and f64; likewise cross-entropy's gradient (test_attention.cpp checks a masked
// key's). Eigen's vectorised exp gives about 2e-39 for -inf, which these must not pass on.
TEST_CASE("masked (-inf) logits get exactly zero probability and gradient", "[softmax][loss]") {
  for (DType dt : {kF32, kF64}) {
    INFO(dtype_name(dt));
    Tensor x0 = rnd({3, 37}, 3, false).to(kF32);
    std::vector<int64_t> masked;
    for (int64_t i = 0; i < 3 * 37; i += 5) {
      if (i % 37 == 0) continue;  // the targets below stay finite
      x0.data<float>()[i] = -INFINITY;
      masked.push_back(i);
    }
    const Tensor target = from_vector<int64_t>({0, 0, 0}, {3});
    for (int kind = 0; kind < 3; ++kind) {
      INFO((kind == 0 ? "softmax" : kind == 1 ? "log_softmax" : "cross_entropy"));
      Tensor x = x0.to(dt).detach().requires_grad_(true);
      Tensor y = kind == 0 ? softmax(x, 1) : kind == 1 ? log_softmax(x, 1) : cross_entropy(x, target);
      if (kind < 2) {
        const std::vector<double> yv = y.to_vector<double>();
        for (int64_t i : masked) REQUIRE(yv[size_t(i)] == (kind == 0 ? 0.0 : -INFINITY));
      }
      const Tensor w = rnd({3, 37}, 4, false).to(dt);
      sum(kind < 2 ? mul(y, w) : y).backward();
      // log_softmax's x - lse moves with a masked x: its gradient there is the incoming one
      const std::vector<double> gv = x.grad().to_vector<double>(), wv = w.to_vector<double>();
      for (int64_t i : masked) REQUIRE(gv[size_t(i)] == (kind == 1 ? wv[size_t(i)] : 0.0));
    }
  }
}

TEST_CASE("gradcheck: softmax and log_softmax", "[softmax][gradcheck]") {
  Tensor x = rnd({3, 4, 2}, 2);
  for (int64_t d : {0, 1, 2}) {
    require_gradcheck([d](const std::vector<Tensor>& in) { return softmax(in[0], d); }, {x});
    require_gradcheck([d](const std::vector<Tensor>& in) { return log_softmax(in[0], d); }, {x});
  }
}

TEST_CASE("softmax log_softmax and cross_entropy on long rows equal a by-hand reference with their gradients", "[softmax][loss]") {
  // Rows of 1,000 and 37 values run the vectorised exponentials (and their tails), in f32
  // and f64; one row holds -inf logits. The reference: plain loops in double.
  for (int64_t D : {1000, 37}) {
    const int64_t N = 4;
    std::vector<double> v = (rnd({N, D}, 10 + D, false) * 5.0).to_vector<double>();
    v[2 * D + 3] = v[2 * D + 7] = -INFINITY;
    const std::vector<double> gv = rnd({N, D}, 20 + D, false).to_vector<double>();
    const std::vector<int64_t> tv{1, 5, 0, 7};
    std::vector<double> p(N * D), lp(N * D), dp(N * D), dlp(N * D), ce(N), dce(N * D);
    for (int64_t i = 0; i < N; ++i) {
      double m = -INFINITY, s = 0, gs = 0, gps = 0;
      for (int64_t d = 0; d < D; ++d) m = std::max(m, v[i * D + d]);
      for (int64_t d = 0; d < D; ++d) s += std::exp(v[i * D + d] - m);
      for (int64_t d = 0; d < D; ++d) {
        p[i * D + d] = std::exp(v[i * D + d] - m) / s;
        lp[i * D + d] = v[i * D + d] - m - std::log(s);
        gs += gv[i * D + d];
        gps += gv[i * D + d] * p[i * D + d];
      }
      for (int64_t d = 0; d < D; ++d) {
        dp[i * D + d] = p[i * D + d] * (gv[i * D + d] - gps);
        dlp[i * D + d] = gv[i * D + d] - p[i * D + d] * gs;
        dce[i * D + d] = (p[i * D + d] - (d == tv[i] ? 1.0 : 0.0)) / double(N);  // mean over rows
      }
      ce[i] = -lp[i * D + tv[i]];
    }
    const double ce_mean = (ce[0] + ce[1] + ce[2] + ce[3]) / double(N);
    auto ref = [&](const std::vector<double>& r) { return tensor(r, {N, D}, kF64); };
    const Tensor t = tensor(std::vector<double>{1, 5, 0, 7}, {N}, kF64).to(kI64);
    for (DType dt : {kF32, kF64}) {
      INFO("row length " << D << " dtype " << dt);
      const double tol = dt == kF32 ? 1e-5 : 1e-12;
      for (bool log : {false, true}) {
        INFO("log " << log);
        Tensor x = tensor(v, {N, D}, dt).requires_grad_();
        Tensor y = log ? log_softmax(x, 1) : softmax(x, 1);
        test::require_close(y.to(kF64), ref(log ? lp : p), tol, tol);
        y.backward(tensor(gv, {N, D}, dt));
        test::require_close(x.grad().to(kF64), ref(log ? dlp : dp), 10 * tol, 10 * tol);
      }
      Tensor x = tensor(v, {N, D}, dt).requires_grad_();
      Tensor l = cross_entropy(x, t);
      REQUIRE(std::abs(l.item() - ce_mean) <= tol * (1 + std::abs(ce_mean)));
      l.backward();
      test::require_close(x.grad().to(kF64), ref(dce), 10 * tol, 10 * tol);
      // with label smoothing, mass on a class whose logit is -inf costs an infinite loss
      CrossEntropyOptions smooth;
      smooth.label_smoothing = 0.1;
      REQUIRE(std::isinf(cross_entropy(tensor(v, {N, D}, dt), t, smooth).item()));
    }
    // a NaN logit gives a NaN loss and NaN probabilities in its row only
    v[D + 11] = NAN;
    Tensor xn = tensor(v, {N, D}, kF32);
    REQUIRE(std::isnan(cross_entropy(xn, t).item()));
    std::vector<float> pn = softmax(xn, 1).to_vector<float>();
    REQUIRE(std::isnan(pn[D]));
    REQUIRE(std::isnan(pn[2 * D - 1]));
    REQUIRE(std::isfinite(pn[0]));
  }
}

TEST_CASE("f16 and bf16 softmax equal f32's of the widened values, rounded once", "[softmax]") {
  // One pass on the CPU, each row widened into f32 buffers. Rows of 64 sit at the same
  // alignment as the f32 tensor's rows, so Eigen splits them into the same packets and the
  // outputs are equal bit for bit; rows of 37 are compared with the f64 values, and so are
  // the gradients (computed from the rounded outputs, so not the f32 gradients rounded).
  for (DType h : {kBF16, kF16}) {
    INFO(dtype_name(h));
    for (bool log : {false, true}) {
      INFO((log ? "log_softmax" : "softmax"));
      auto f = [log](const Tensor& t, int64_t d) { return log ? log_softmax(t, d) : softmax(t, d); };
      Tensor x = (rnd({3, 50, 64}, 31, false) * 3.0).to(h);
      Tensor g = rnd({3, 50, 64}, 32, false).to(h);
      Tensor xb = x.detach().requires_grad_(true), x64 = x.to(kF64).requires_grad_(true);
      Tensor y = f(xb, -1);
      test::require_same(y, f(x.to(kF32), -1).to(h));
      (y * g).sum().backward();
      (f(x64, -1) * g.to(kF64)).sum().backward();
      REQUIRE(xb.grad().dtype() == h);
      // log_softmax's backward takes exp of the rounded log-probabilities: |y| up to ~10
      // rounded to 8 bits moves exp(y) by up to 4%, times sum(g)
      const double atol = log ? 2e-2 : 3e-3;
      test::require_close(xb.grad().to(kF64), x64.grad(), 3e-2, atol);
      // odd rows, and a softmax over the first dim (widened: its elements are strided)
      for (int64_t d : {-1, 0}) {
        INFO("dim " << d);
        Tensor xo = (rnd({40, 37}, 33, false) * 3.0).to(h);
        Tensor go = rnd({40, 37}, 34, false).to(h);
        Tensor xo16 = xo.detach().requires_grad_(true), x64 = xo.to(kF64).requires_grad_(true);
        Tensor yo = f(xo16, d), y64 = f(x64, d);
        REQUIRE(yo.dtype() == h);
        test::require_close(yo.to(kF64), y64, 1e-2, 1e-3);
        (yo * go).sum().backward();
        (y64 * go.to(kF64)).sum().backward();
        test::require_close(xo16.grad().to(kF64), x64.grad(), 3e-2, log ? 2e-2 : 3e-3);
      }
    }
  }
}

// Eigen's vectorised exp clamps its argument near -88.7 and gave about 2e-39 for anything
// below: a probability of e^-200 read 1.8e-40, the same as e^-100's. Arguments below the
// normal range now give 0 (their exact results are subnormal: 1.9e-44 for e^-100 / 2).
TEST_CASE("softmax of far-negative logits is 0, not Eigen's clamp", "[softmax][cuda]") {
  for (Device d : test::devices()) {
    INFO(d.str());
    const Tensor x = from_vector<float>({0, -100, -200, 0, -87}, {1, 5}).to(d);
    const std::vector<float> p = softmax(x, 1).cpu().to_vector<float>();
    CHECK(p[0] == 0.5f);
    CHECK(p[2] == 0.0f);
    CHECK(p[1] <= 2e-44f);
    CHECK(p[4] == Approx(0.5 * std::exp(-87.0)).epsilon(1e-5));  // still in the normal range
  }
}

TEST_CASE("log_softmax and cross_entropy keep log(sum)'s bits beside large logits",
          "[softmax][loss][cuda]") {
  // [big, big, 0]: log p = -ln 2 exactly to f32's rounding; m + log(sum) rounded first lost
  // log(sum)'s low bits to m's size (-0.6914 at 60000, -0.6875 at 1e6)
  const double ln2 = std::log(2.0);
  for (Device d : test::devices())
    for (float big : {1000.0f, 60000.0f, 1e6f}) {
      INFO(d.str() << " big " << big);
      const Tensor x = from_vector<float>({big, big, 0}, {1, 3}).to(d);
      CHECK(log_softmax(x, 1).cpu().to_vector<float>()[0] == Approx(-ln2).epsilon(2e-7));
      // over a dim that is not the last (columns: the strided loop, CUDA's column kernel)
      const Tensor cols = from_vector<float>({big, 0, big, 0, 0, 0}, {3, 2}).to(d);
      CHECK(log_softmax(cols, 0).cpu().to_vector<float>()[0] == Approx(-ln2).epsilon(2e-7));
      const Tensor t = from_vector<int64_t>({0}, {1}).to(d);
      CHECK(cross_entropy(x, t).item() == Approx(ln2).epsilon(2e-7));
      if (big < 65504) {  // f16: the f32 value rounded once
        const float h = log_softmax(x.to(kF16), 1).cpu().to(kF32).to_vector<float>()[0];
        CHECK(h == from_vector<float>({float(-ln2)}, {1}).to(kF16).to(kF32).item());
      }
    }
}

