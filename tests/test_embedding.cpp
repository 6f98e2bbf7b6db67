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

TEST_CASE("padding_idx rows get no gradient; i32 indices work", "[embedding]") {
  Tensor w = ones({3, 2}, kF64).requires_grad_();
  sum(embedding(w, from_vector<int32_t>({0, 1, 1, 2}, {4}), 1)).backward();
  require_values(w.grad(), {1, 1, 0, 0, 1, 1});
}

TEST_CASE("gradcheck: embedding", "[embedding][gradcheck]") {
  Tensor idx = from_vector<int64_t>({2, 0, 2, 1, 2}, {5});
  test::require_gradcheck([&](const std::vector<Tensor>& in) { return embedding(in[0], idx); },
                          {test::rnd({3, 4}, 1)});
}
