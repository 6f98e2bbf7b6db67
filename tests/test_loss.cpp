#include "test_util.h"

using namespace nn;
using test::require_gradcheck;
using test::require_values;
using test::rnd;

TEST_CASE("cross_entropy equals a hand-computed value", "[loss]") {
  Tensor logits = tensor({1, 2, 3, 1, 1, 1}, kF64).reshape({2, 3});
  Tensor target = from_vector<int64_t>({2, 0}, {2});
  // sample 0: -log(e^3 / (e^1 + e^2 + e^3)) = 0.40760596444; sample 1: log 3 = 1.09861228867
  const double l0 = 0.40760596444437, l1 = 1.09861228866811;
  CrossEntropyOptions none;
  none.reduction = Reduction::none;
  require_values(cross_entropy(logits, target, none), {l0, l1}, 1e-10);
  require_values(cross_entropy(logits, target), {(l0 + l1) / 2}, 1e-10);
  CrossEntropyOptions s;
  s.reduction = Reduction::sum;
  require_values(cross_entropy(logits, target, s), {l0 + l1}, 1e-10);
  // label smoothing 0.1: (1 - 0.1) * nll + 0.1 * mean over classes of -log p_c
  CrossEntropyOptions ls;
  ls.label_smoothing = 0.1;
  ls.reduction = Reduction::none;
  const double lse0 = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  const double smooth0 = 0.9 * l0 + 0.1 * ((lse0 - 1) + (lse0 - 2) + (lse0 - 3)) / 3;
  require_values(cross_entropy(logits, target, ls).slice(0, 0, 1), {smooth0}, 1e-10);
  // ignore_index drops a sample from the loss and from the mean
  Tensor t2 = from_vector<int64_t>({2, -100}, {2});
  require_values(cross_entropy(logits, t2), {l0}, 1e-10);
}

TEST_CASE("nll_loss is cross_entropy's second half, and its errors", "[loss]") {
  // nll_loss(log_softmax(x)) equals cross_entropy(x) in value and gradient (PyTorch's own
  // numbers in test_torch_reference.cpp), over extra dims and with an ignored class too
  const Tensor logits = rnd({3, 4, 5}, 4, false);
  const Tensor target = from_vector<int64_t>({0, 1, 3, 3, 2, -100, 0, 1, 2, 3, 3, 0, 1, 2, 0}, {3, 5});
  auto grads = [&](bool nll) {
    Tensor x = logits.detach().requires_grad_();
    Tensor l = nll ? nll_loss(log_softmax(x, 1), target) : cross_entropy(x, target);
    l.backward();
    return std::pair{l, x.grad()};
  };
  const auto [l_nll, g_nll] = grads(true);
  const auto [l_ce, g_ce] = grads(false);
  test::require_close(l_nll, l_ce, 1e-12, 1e-12);
  test::require_close(g_nll, g_ce, 1e-12, 1e-12);
  // i32 targets, and an all-ignored batch: mean 0 / 0 (NaN, as PyTorch's)
  test::require_close(nll_loss(log_softmax(logits, 1), target.to(kI32)), l_ce, 1e-12, 1e-12);
  REQUIRE(std::isnan(nll_loss(zeros({2, 3}), full({2}, -100.0, kI64)).item<double>()));
  // ignored elements are never read: -inf there (a masked log-probability) gives no NaN, with
  // ignore_index outside the classes or one of them
  Tensor lp = log_softmax(rnd({3, 4}, 6, false), 1);
  {
    NoGradGuard ng;
    lp.select(0, 1).fill_(-INFINITY);
  }
  const Tensor kept = index_select(lp, from_vector<int64_t>({0, 2}, {2}));  // rows 0 and 2
  const Tensor want = nll_loss(kept, from_vector<int64_t>({2, 1}, {2}));
  test::require_close(nll_loss(lp, from_vector<int64_t>({2, -100, 1}, {3})), want, 1e-12, 1e-12);
  NllLossOptions in_classes;
  in_classes.ignore_index = 3;
  test::require_close(nll_loss(lp, from_vector<int64_t>({2, 3, 1}, {3}), in_classes), want, 1e-12, 1e-12);
  in_classes.reduction = Reduction::none;
  require_values(nll_loss(lp, from_vector<int64_t>({2, 3, 1}, {3}), in_classes).slice(0, 1, 2), {0.0});
  // errors: a target out of range (not the ignored one), shapes, weights
  REQUIRE(test::error_of([&] { nll_loss(zeros({2, 3}), from_vector<int64_t>({0, 3}, {2})); })
              .find("target 3 at position 1 is outside [0, 3)") != std::string::npos);
  REQUIRE(test::error_of([&] { nll_loss(zeros({2, 3}), from_vector<int64_t>({-1, 0}, {2})); })
              .find("target -1 at position 0") != std::string::npos);
  REQUIRE(test::error_of([&] { nll_loss(zeros({2, 3}), from_vector<int64_t>({0}, {1})); })
              .find("target of shape") != std::string::npos);
  REQUIRE(test::error_of([&] { nll_loss(zeros({2, 3}), from_vector<int64_t>({0, 1}, {2}), {.weight = ones({2})}); })
              .find("weight of shape [2] for 3 classes") != std::string::npos);
  REQUIRE(test::error_of([&] { nll_loss(zeros({2, 3}), ones({2})); }).find("class indices") != std::string::npos);
}

TEST_CASE("normalize and cosine_similarity: zero rows, 16-bit, errors", "[loss]") {
  // a zero row stays zero with a finite gradient (the norm's blocked below eps)
  Tensor x = tensor({0.0, 0.0, 3.0, 4.0}, kF64).reshape({2, 2}).requires_grad_();
  Tensor y = normalize(x);
  require_values(y, {0, 0, 0.6, 0.8}, 1e-15);
  sum(y).backward();
  for (double g : x.grad().to_vector<double>()) REQUIRE(std::isfinite(g));
  // bf16 computes in f32 and rounds once: as the f32 result rounded
  const Tensor r = rnd({4, 9}, 5, false).to(kF32);
  REQUIRE(normalize(r.to(kBF16), 2.0, -1).dtype() == kBF16);
  test::require_same(normalize(r.to(kBF16), 2.0, -1), normalize(r.to(kBF16).to(kF32), 2.0, -1).to(kBF16));
  test::require_close(cosine_similarity(r, r, 1), ones({4}), 1e-6, 1e-6);
  test::require_close(cosine_similarity(r, neg(r), 0), full({9}, -1.0), 1e-6, 1e-6);
  // a zero row where eps^p underflows (1e-48 in f32), and a tiny eps for cosine: no 0 / 0
  for (const Tensor& z : {normalize(zeros({2, 3}), 4.0), cosine_similarity(zeros({2, 3}), r.narrow(1, 0, 3).narrow(0, 0, 2), 1, 1e-30)})
    for (double v : z.to_vector<double>()) REQUIRE(v == 0.0);
  Tensor zr = zeros({2, 3}).requires_grad_();
  sum(normalize(zr, 4.0)).backward();
  for (double g : zr.grad().to_vector<double>()) REQUIRE(std::isfinite(g));
  REQUIRE(test::error_of([&] { normalize(r, 0.5); }).find("p >= 1") != std::string::npos);
  REQUIRE(test::error_of([&] { cosine_similarity(r, ones({3})); }).find("broadcast") != std::string::npos);
}

TEST_CASE("cross_entropy over extra dims and its errors", "[loss]") {
  Tensor logits = rnd({2, 3, 4}, 1, false);  // (N, C, d)
  Tensor target = from_vector<int64_t>({0, 1, 2, 1, 2, 2, 0, 0}, {2, 4});
  Tensor flat = cross_entropy(logits.permute({0, 2, 1}).reshape({8, 3}), target.reshape({8}));
  test::require_close(cross_entropy(logits, target), flat, 1e-12, 1e-12);
  REQUIRE(test::error_of([&] { cross_entropy(rnd({2, 3}, 2, false), from_vector<int64_t>({0, 3}, {2})); })
              .find("out of range for 3 classes") != std::string::npos);
  REQUIRE(test::error_of([&] { cross_entropy(rnd({2, 3}, 2, false), from_vector<int64_t>({0}, {1})); })
              .find("target of shape") != std::string::npos);
  REQUIRE(test::error_of([&] { cross_entropy(rnd({2, 3}, 2, false), ones({2})); })
              .find("class indices") != std::string::npos);
  REQUIRE(test::error_of([&] { cross_entropy(zeros({2, 0}), from_vector<int64_t>({0, 0}, {2})); })
              .find("have no classes") != std::string::npos);
}

TEST_CASE("cross_entropy's mean over 16-bit logits past 65,504 rows", "[loss][cuda]") {
  // 70,000 rows: in f16 both the loss total (~110,000) and the row count overflow, so a
  // mean taken in 16 bits is inf / inf; the total and count are f32, the mean rounded once.
  const int64_t M = 70000, C = 5;
  const Tensor logits = rnd({M, C}, 41, false);
  std::vector<int64_t> t(M);
  for (int64_t i = 0; i < M; ++i) t[i] = (i * 7) % C;
  const Tensor target = from_vector<int64_t>(t, {M});
  for (Device d : test::devices())
    for (DType h : {kF16, kBF16}) {
      INFO(d.str() << " " << dtype_name(h));
      const Tensor lh = logits.to(h);
      Tensor want = cross_entropy(lh.to(kF64), target);  // the same 16-bit values in f64
      Tensor got = cross_entropy(lh.to(d), target.to(d));
      REQUIRE(got.dtype() == h);
      test::require_close(got.cpu(), want, h == kF16 ? 2e-3 : 1e-2, 0);
    }
}

TEST_CASE("gradcheck: cross_entropy and mse", "[loss][gradcheck]") {
  Tensor target = from_vector<int64_t>({1, 0, 3, 3, 2}, {5});
  for (double smoothing : {0.0, 0.2}) {
    CrossEntropyOptions o;
    o.label_smoothing = smoothing;
    require_gradcheck([&](const std::vector<Tensor>& in) { return cross_entropy(in[0], target, o); },
                      {rnd({5, 4}, 3)});
  }
  CrossEntropyOptions ig;
  ig.ignore_index = 3;
  require_gradcheck([&](const std::vector<Tensor>& in) { return cross_entropy(in[0], target, ig); },
                    {rnd({5, 4}, 4)});
  Tensor t3 = from_vector<int64_t>({0, 1, 2, 1, 0, 0}, {2, 3});
  require_gradcheck([&](const std::vector<Tensor>& in) { return cross_entropy(in[0], t3); },
                    {rnd({2, 3, 3}, 5)});
  require_gradcheck([](const std::vector<Tensor>& in) { return mse_loss(in[0], in[1]); },
                    {rnd({3, 2}, 6), rnd({3, 2}, 7)});
  require_values(mse_loss(tensor({1, 2}, kF64), tensor({2, 4}, kF64)), {2.5});
}

// The log-sum-exp the backward reads is saved in f32 for 16-bit logits: rounded to bf16, one
// near 100 is a multiple of 0.5 and scaled every probability by up to e^0.25 (the gradient's
// rows summed to 0.2 instead of 0). Compared with f64 on the same 16-bit values.
TEST_CASE("16-bit cross_entropy gradients far from zero", "[loss][cuda]") {
  const int64_t M = 64, C = 10;
  std::vector<int64_t> t(M);
  for (int64_t i = 0; i < M; ++i) t[size_t(i)] = (i * 3) % C;
  const Tensor target = from_vector<int64_t>(t, {M});
  CrossEntropyOptions o;
  o.reduction = Reduction::sum;  // gradients p - onehot, in [-1, 1]
  for (Device d : test::devices())
    for (DType h : {kBF16, kF16}) {
      INFO(d.str() << " " << dtype_name(h));
      const Tensor lh = (rnd({M, C}, 45, false) * 2.0 + 100.0).to(h);
      Tensor x64 = lh.to(kF64).requires_grad_(true), xh = lh.to(d).detach().requires_grad_(true);
      cross_entropy(x64, target, o).backward();
      cross_entropy(xh, target.to(d), o).backward();
      REQUIRE(xh.grad().dtype() == h);
      test::require_close(xh.grad().cpu().to(kF64), x64.grad(), 1e-2, 1e-2);
      // each row's gradient sums to 0 (the probabilities to 1)
      test::require_close(sum(xh.grad().cpu().to(kF64), {1}), zeros({M}, kF64), 0, 2e-2);
    }
}

TEST_CASE("binary_cross_entropy_with_logits: definition, gradients, weights and errors", "[loss]") {
  Tensor x = tensor({0.0, -2.0, 3.5, -0.25, 1.0, 7.0}, {2, 3}, kF64);
  Tensor y = tensor({1.0, 0.0, 0.25, 1.0, 0.5, 0.0}, {2, 3}, kF64);
  Tensor w = tensor({0.5, 2.0, 1.5}, {3}, kF64), pw = tensor({3.0, 0.5, 1.0}, {3}, kF64);
  // the definition, element by element
  auto want = [&](bool weighted, bool positive) {
    std::vector<double> out;
    auto xv = x.to_vector<double>(), yv = y.to_vector<double>();
    for (size_t i = 0; i < xv.size(); ++i) {
      const double p = 1 / (1 + std::exp(-xv[i])), c = i % 3;
      const double pwc = positive ? pw.to_vector<double>()[size_t(c)] : 1.0;
      double l = -(pwc * yv[i] * std::log(p) + (1 - yv[i]) * std::log(1 - p));
      if (weighted) l *= w.to_vector<double>()[size_t(c)];
      out.push_back(l);
    }
    return tensor(out, {2, 3}, kF64);
  };
  BceWithLogitsOptions none;
  none.reduction = Reduction::none;
  test::require_close(binary_cross_entropy_with_logits(x, y, none), want(false, false), 1e-12, 1e-12);
  BceWithLogitsOptions all = none;
  all.weight = w;
  all.pos_weight = pw;
  test::require_close(binary_cross_entropy_with_logits(x, y, all), want(true, true), 1e-12, 1e-12);
  all.reduction = Reduction::mean;
  test::require_close(binary_cross_entropy_with_logits(x, y, all), mean(want(true, true)), 1e-12, 1e-12);
  all.reduction = Reduction::sum;
  test::require_close(binary_cross_entropy_with_logits(x, y, all), sum(want(true, true)), 1e-12, 1e-12);
  // finite differences in every tensor: logits, targets, weight, pos_weight
  require_gradcheck([&](const std::vector<Tensor>& in) {
    BceWithLogitsOptions o;
    o.weight = in[2];
    o.pos_weight = in[3];
    return binary_cross_entropy_with_logits(in[0], in[1], o);
  }, {rnd({4, 3}, 1), rnd({4, 3}, 2), rnd({3}, 3), (abs(rnd({3}, 4, false)) + 0.5).detach().requires_grad_()});
  require_gradcheck([](const std::vector<Tensor>& in) {
    return binary_cross_entropy_with_logits(in[0], in[1]);
  }, {rnd({5}, 5), rnd({5}, 6)});
  // the gradient at a logit of 0 is sigmoid(0) - y exactly (a relu/abs composition has kinks
  // there), and a confident prediction's is its small probability, in f32 too (1 - 0.9999997
  // would keep one digit)
  Tensor edge = tensor({0.0f, 0.0f, -15.0f}, {3}, kF32).requires_grad_();
  binary_cross_entropy_with_logits(edge, tensor({1.0f, 0.0f, 0.0f}, {3}, kF32), none).sum().backward();
  auto gv = edge.grad().to_vector<float>();
  REQUIRE(gv[0] == -0.5f);
  REQUIRE(gv[1] == 0.5f);
  REQUIRE(std::abs(double(gv[2]) * (1 + std::exp(15.0)) - 1) < 1e-5);  // (the composition: 3% off)
  // errors
  REQUIRE(test::error_of([&] { binary_cross_entropy_with_logits(x, y.reshape({3, 2})); })
              .find("differ in shape") != std::string::npos);
  BceWithLogitsOptions bad;
  bad.pos_weight = tensor({1.0, 2.0}, kF64);
  REQUIRE(test::error_of([&] { binary_cross_entropy_with_logits(x, y, bad); })
              .find("pos_weight of shape [2] does not broadcast to the input's [2, 3]") != std::string::npos);
  bad.pos_weight = ones({4, 3}, kF64);  // would broadcast the loss to (4, 3), past the input
  REQUIRE(test::error_of([&] { binary_cross_entropy_with_logits(x, y, bad); })
              .find("pos_weight of shape [4, 3] does not broadcast") != std::string::npos);
  bad = {};
  bad.weight = ones({4, 2, 3}, kF64);
  REQUIRE(test::error_of([&] { binary_cross_entropy_with_logits(x, y, bad); })
              .find("weight of shape [4, 2, 3] does not broadcast to the input's [2, 3]") != std::string::npos);
  // a scalar pos_weight (or weight) broadcasts, as PyTorch's
  BceWithLogitsOptions scalar, vec;
  scalar.pos_weight = full({}, 2.5, kF64);
  vec.pos_weight = full({3}, 2.5, kF64);
  test::require_close(binary_cross_entropy_with_logits(x, y, scalar),
                      binary_cross_entropy_with_logits(x, y, vec), 0, 0);
}

TEST_CASE("top_k_correct counts targets among the k largest logits", "[loss]") {
  const double inf = std::numeric_limits<double>::infinity();
  // row 0: target 2 is the largest; row 1: target 0 is 3rd; row 2: target 1 ties the largest
  // (a tie counts for it); row 3: target 3 at -inf, behind three; row 4: a NaN target is never
  // correct (a diverged model scores 0); row 5: a NaN ranks above the target's 3, as
  // torch.topk ranks NaN first
  const double nan = std::nan("");
  Tensor logits = tensor({1, 2, 5, 0,      //
                          3, 4, 5, 1,      //
                          7, 7, 0, 0,      //
                          -1, 0, 1, -inf,  //
                          nan, 0, 1, 2,    //
                          nan, 3, 1, 2},
                         {6, 4}, kF64);
  Tensor target = from_vector<int64_t>({2, 0, 1, 3, 0, 1}, {6});
  REQUIRE(top_k_correct(logits, target, 1).item<int64_t>() == 2);  // rows 0, 2
  REQUIRE(top_k_correct(logits, target, 2).item<int64_t>() == 3);  // row 5
  REQUIRE(top_k_correct(logits, target, 3).item<int64_t>() == 4);  // row 1
  REQUIRE(top_k_correct(logits, target, 4).item<int64_t>() == 5);  // row 3; never row 4
  REQUIRE(top_k_correct(logits.to(kF32), target.to(kI32), 3).item<int64_t>() == 4);
  // top-1 agrees with argmax where there are no ties
  Tensor r = rnd({64, 10}, 3, false), t = argmax(rnd({64, 10}, 4, false), 1);
  REQUIRE(top_k_correct(r, t, 1).item<int64_t>() == sum(eq(argmax(r, 1), t)).item<int64_t>());
  REQUIRE(top_k_correct(r, t, 10).item<int64_t>() == 64);
  REQUIRE(test::error_of([&] { top_k_correct(logits, from_vector<int64_t>({2, 0, 1, 4, 0, 1}, {6}), 2); })
              .find("target classes must be in [0, 4), got 4") != std::string::npos);
  REQUIRE(test::error_of([&] { top_k_correct(logits, target, 0); }).find("k must be at least 1") !=
          std::string::npos);
}

TEST_CASE("l1, smooth L1 and Huber losses: definitions, reductions, gradients and errors", "[loss]") {
  Tensor x = tensor({-3.0, -0.7, -0.2, 0.0, 0.3, 1.0, 2.5, 4.0}, {2, 4}, kF64);
  Tensor y = zeros({2, 4}, kF64);
  require_values(l1_loss(x, y, Reduction::none).reshape({-1}), {3, 0.7, 0.2, 0, 0.3, 1, 2.5, 4});
  // beta 1: 0.5 d^2 inside, |d| - 0.5 outside; the boundary (|d| = 1) takes the outer branch
  require_values(smooth_l1_loss(x, y, Reduction::none).reshape({-1}),
                 {2.5, 0.245, 0.02, 0, 0.045, 0.5, 2.0, 3.5});
  require_values(huber_loss(x, y, Reduction::none, 2.0).reshape({-1}),
                 {4.0, 0.245, 0.02, 0, 0.045, 0.5, 3.0, 6.0});
  // Huber with delta is delta times smooth L1 with beta = delta; beta 0 is L1
  test::require_close(huber_loss(x, y, Reduction::none, 0.7), mul(smooth_l1_loss(x, y, Reduction::none, 0.7), 0.7));
  test::require_close(smooth_l1_loss(x, y, Reduction::sum, 0.0), l1_loss(x, y, Reduction::sum));
  test::require_close(l1_loss(x, y), mul(l1_loss(x, y, Reduction::sum), 1.0 / 8));
  for (auto loss : {0, 1, 2})
    test::require_gradcheck([loss](const std::vector<Tensor>& in) {
      return loss == 0 ? l1_loss(in[0], in[1]) : loss == 1 ? smooth_l1_loss(in[0], in[1], Reduction::sum, 0.8)
                                                           : huber_loss(in[0], in[1], Reduction::none, 1.3);
    }, {rnd({3, 4}, 31), rnd({3, 4}, 32)});
  // 16-bit inputs under autocast: the loss in f32
  {
    amp::AutocastGuard ac(kBF16);
    REQUIRE(huber_loss(x.to(kBF16), y.to(kBF16)).dtype() == kF32);
  }
  auto has = [](const std::string& e, const char* what) { INFO(e); return e.find(what) != std::string::npos; };
  REQUIRE(has(test::error_of([&] { smooth_l1_loss(x, y, Reduction::mean, -1); }), "beta must be finite and >= 0"));
  REQUIRE(has(test::error_of([&] { huber_loss(x, y, Reduction::mean, 0); }), "delta must be finite and > 0"));
  REQUIRE(has(test::error_of([&] { l1_loss(x, zeros({4, 2}, kF64)); }), "l1_loss: input [2, 4] and target [4, 2] differ in shape"));
  REQUIRE(has(test::error_of([&] { l1_loss(x, y.to(kF32)); }), "dtype mismatch"));
  REQUIRE(has(test::error_of([&] { mse_loss(ones({2}, kI64), ones({2}, kI64)); }), "needs a floating tensor"));
}
