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

TEST_CASE("gradcheck: softmax and log_softmax", "[softmax][gradcheck]") {
  Tensor x = rnd({3, 4, 2}, 2);
  for (int64_t d : {0, 1, 2}) {
    require_gradcheck([d](const std::vector<Tensor>& in) { return softmax(in[0], d); }, {x});
    require_gradcheck([d](const std::vector<Tensor>& in) { return log_softmax(in[0], d); }, {x});
  }
}
