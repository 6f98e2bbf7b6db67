#include <limits>

#include "test_util.h"

using namespace nn;
using test::require_values;

TEST_CASE("embedding looks up rows and scatters gradients back", "[embedding]") {
  Tensor w = arange(12, kF64).reshape({4, 3}).detach().requires_grad_();
  Tensor idx = from_vector<int64_t>({3, 0, 3, 1}, {2, 2});
  Tensor e = embedding(w, idx);
  REQUIRE(e.shape() == Shape{2, 2, 3});
  require_values(e.select(0, 0).select(0, 0), {9, 10, 11});
  require_values(e.select(0, 1).select(0, 1), {3, 4, 5});
  sum(e * 2.0).backward();
  // row 3 used twice, row 2 never
  require_values(w.grad(), {2, 2, 2, 2, 2, 2, 0, 0, 0, 4, 4, 4});
  REQUIRE(test::error_of([&] { embedding(w, from_vector<int64_t>({4}, {1})); })
              .find("out of range for 4 rows") != std::string::npos);
}

TEST_CASE("padding_idx rows get no gradient, and i32 indices work", "[embedding]") {
  Tensor w = ones({3, 2}, kF64).requires_grad_();
  sum(embedding(w, from_vector<int32_t>({0, 1, 1, 2}, {4}), 1)).backward();
  require_values(w.grad(), {1, 1, 0, 0, 1, 1});
  // a negative padding_idx counts from the end (-1 is the last row), as in libtorch
  w.set_grad(Tensor());
  sum(embedding(w, from_vector<int64_t>({0, 1, 2}, {3}), -1)).backward();
  require_values(w.grad(), {1, 1, 1, 1, 0, 0});
  REQUIRE(test::error_of([&] { embedding(w, from_vector<int64_t>({0}, {1}), -4); })
              .find("padding_idx -4 out of range for 3") != std::string::npos);
  REQUIRE(test::error_of([&] { embedding(w, from_vector<int64_t>({0}, {1}), 3); })
              .find("padding_idx 3 out of range") != std::string::npos);
}

TEST_CASE("gradcheck: embedding", "[embedding][gradcheck]") {
  Tensor idx = from_vector<int64_t>({2, 0, 2, 1, 2}, {5});
  test::require_gradcheck([&](const std::vector<Tensor>& in) { return embedding(in[0], idx); },
                          {test::rnd({3, 4}, 1)});
}

TEST_CASE("embedding_bag averages each row's kept tokens", "[embedding]") {
  Tensor w = arange(8, kF64).reshape({4, 2}).detach().requires_grad_();  // rows (0,1) (2,3) (4,5) (6,7)
  Tensor ids = from_vector<int64_t>({1, 3, 0, 2, 2, 2, 0, 0, 1}, {3, 3});
  Tensor keep = from_vector<uint8_t>({1, 1, 0, 1, 1, 1, 0, 0, 0}, {3, 3});
  Tensor e = embedding_bag(w, ids, keep);
  REQUIRE(e.shape() == Shape{3, 2});
  // row 0: mean of rows 1, 3; row 1: rows 2, 2, 2; row 2: no tokens -> zeros
  require_values(e, {4, 5, 4, 5, 0, 0});
  sum(e).backward();
  // row 0 contributes 1/2 to rows 1 and 3, row 1 contributes 1/3 three times to row 2; the
  // masked-out ids (0 and 1 in row 2, 0 in row 0) get nothing
  require_values(w.grad(), {0, 0, 0.5, 0.5, 1, 1, 0.5, 0.5});
  // without a mask every token counts
  require_values(embedding_bag(w, from_vector<int64_t>({0, 3}, {1, 2})), {3, 4});
  REQUIRE(test::error_of([&] { embedding_bag(w, from_vector<int64_t>({4}, {1, 1})); })
              .find("out of range for 4 rows") != std::string::npos);
}

TEST_CASE("embedding_bag equals the gather-and-mean it fuses, values and gradients", "[embedding]") {
  // Random bags with repeated ids, i32 and i64 ids, rows with no kept token; against the
  // unfused composition (embedding, masked sum, divide), f32 and f64.
  Generator g(5);
  const int64_t V = 50, D = 37, N = 9, L = 23;
  Tensor ids = randint(0, V, {N, L}, kI64, &g);
  Tensor keep = lt(rand({N, L}, kF32, &g), full({}, 0.7)).to(kU8);
  {
    NoGradGuard ng;
    keep.select(0, 4).zero_();  // a row without tokens
  }
  for (DType t : {kF64, kF32}) {
    Tensor w = randn({V, D}, t, &g);
    Tensor gout = randn({N, D}, t, &g);
    auto fused = [&](const Tensor& id, const Tensor& k) {
      Tensor wv = w.detach().requires_grad_();
      Tensor out = embedding_bag(wv, id, k);
      (out * gout).sum().backward();
      return std::pair{out.detach(), wv.grad()};
    };
    auto unfused = [&](const Tensor& k) {
      Tensor wv = w.detach().requires_grad_();
      Tensor m = k.defined() ? k.to(t) : ones({N, L}, t);
      Tensor out = sum(embedding(wv, ids) * m.unsqueeze(2), {1}) / clamp(sum(m, {1}, true), 1.0, 1e30);
      (out * gout).sum().backward();
      return std::pair{out.detach(), wv.grad()};
    };
    const double tol = t == kF64 ? 1e-12 : 1e-5;
    for (const Tensor& k : {keep, Tensor()}) {
      auto [want, want_grad] = unfused(k);
      auto [got, got_grad] = fused(ids, k);
      test::require_close(got, want, tol, tol);
      test::require_close(got_grad, want_grad, tol, tol);
      test::require_close(fused(ids.to(kI32), k).first, want, tol, tol);
    }
  }
}

TEST_CASE("embedding_bag: padded tokens add nothing, even from a non-finite row", "[embedding]") {
  Tensor w = ones({3, 2}, kF32);
  {
    NoGradGuard ng;
    w.select(0, 0).fill_(std::numeric_limits<double>::infinity());  // row 0: the padding row
  }
  Tensor ids = from_vector<int64_t>({1, 2, 0, 0}, {1, 4});
  Tensor keep = from_vector<uint8_t>({1, 1, 0, 0}, {1, 4});
  require_values(embedding_bag(w, ids, keep), {1, 1});
  // no tokens at all: zeros, not NaN
  require_values(embedding_bag(w, from_vector<int64_t>({}, {2, 0})), {0, 0, 0, 0});
  // the ids must be integers on the table's device
  REQUIRE(test::error_of([&] { embedding_bag(w, ones({1, 2}, kF32)); }).find("i64 or i32") !=
          std::string::npos);
}

TEST_CASE("gradcheck: embedding_bag with a padding mask", "[embedding][gradcheck]") {
  Tensor ids = from_vector<int64_t>({2, 0, 2, 1, 1, 0, 3, 2}, {2, 4});
  Tensor keep = from_vector<uint8_t>({1, 1, 1, 0, 1, 0, 1, 1}, {2, 4});
  test::require_gradcheck([&](const std::vector<Tensor>& in) { return embedding_bag(in[0], ids, keep); },
                          {test::rnd({4, 3}, 2)});
  test::require_gradcheck([&](const std::vector<Tensor>& in) { return embedding_bag(in[0], ids); },
                          {test::rnd({4, 3}, 3)});
}
