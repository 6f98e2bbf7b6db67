#include "test_util.h"

using namespace nn;
using test::require_gradcheck;
using test::require_values;
using test::rnd;

namespace {
// Naive reference: reduce a (2, 3, 4) tensor over one dim with f.
Tensor naive(const Tensor& x, int dim, double (*f)(const std::vector<double>&)) {
  auto v = x.to_vector<double>();
  const int64_t s[3] = {2, 3, 4};
  Shape os{2, 3, 4};
  os[dim] = 1;
  std::vector<double> out;
  for (int64_t i = 0; i < os[0]; ++i)
    for (int64_t j = 0; j < os[1]; ++j)
      for (int64_t k = 0; k < os[2]; ++k) {
        std::vector<double> vals;
        for (int64_t r = 0; r < s[dim]; ++r) {
          int64_t idx[3] = {i, j, k};
          idx[dim] = r;
          vals.push_back(v[(idx[0] * 3 + idx[1]) * 4 + idx[2]]);
        }
        out.push_back(f(vals));
      }
  return tensor(out, os, kF64);
}
double vsum(const std::vector<double>& v) { double s = 0; for (double x : v) s += x; return s; }
double vmean(const std::vector<double>& v) { return vsum(v) / double(v.size()); }
double vmax(const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); }
double vmin(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }
double vvar(const std::vector<double>& v) {
  double m = vmean(v), q = 0;
  for (double x : v) q += (x - m) * (x - m);
  return q / double(v.size() - 1);
}
}  // namespace

TEST_CASE("reductions over each dim match a naive loop", "[reduce]") {
  Tensor x = rnd({2, 3, 4}, 1, false);
  for (int d = 0; d < 3; ++d) {
    INFO("dim " << d);
    test::require_close(sum(x, {d}, true), naive(x, d, vsum), 1e-12, 1e-12);
    test::require_close(mean(x, {d}, true), naive(x, d, vmean), 1e-12, 1e-12);
    test::require_close(amax(x, {d}, true), naive(x, d, vmax));
    test::require_close(amin(x, {d}, true), naive(x, d, vmin));
    test::require_close(var(x, {d}, 1, true), naive(x, d, vvar), 1e-12, 1e-12);
    // the same over a non-contiguous view of the same values
    Tensor xt = x.permute({2, 0, 1}).contiguous().permute({1, 2, 0});
    REQUIRE(!xt.is_contiguous());
    test::require_close(sum(xt, {d}, true), naive(x, d, vsum), 1e-12, 1e-12);
  }
  REQUIRE(sum(x, {1}).shape() == Shape{2, 4});
  REQUIRE(sum(x, {0, 2}).shape() == Shape{3});
  REQUIRE(sum(x, {-1, 0}, true).shape() == Shape{1, 3, 1});
  REQUIRE(sum(x).shape() == Shape{});
  REQUIRE(sum(x).item() == Approx(vsum(x.to_vector<double>())));
  REQUIRE(var(x, {}, 0).item() == Approx(var(x.reshape({24}), {0}, 0).item()));
}

TEST_CASE("transposed and permuted views reduce as their contiguous copies", "[reduce]") {
  // A transposed matrix (a linear layer's gradient read as (O, R) for the bias's sums) is
  // reduced in its memory order without a copy; a permutation whose kept dims run against
  // memory order takes the copying path. Both against the contiguous copy, large enough to
  // share out over threads.
  const Tensor m = rnd({700, 90}, 31, false).to(kF32);
  const Tensor x3 = rnd({9, 40, 33}, 32, false).to(kF32);
  for (const Tensor& v : {m.t(), x3.permute({2, 1, 0}), x3.permute({1, 0, 2}), x3.permute({0, 2, 1})}) {
    const Tensor c = v.contiguous();
    REQUIRE(!v.is_contiguous());
    for (int64_t d = 0; d < v.dim(); ++d) {
      INFO("view " << shape_str(v.shape()) << ", dim " << d);
      test::require_close(sum(v, {d}), sum(c, {d}), 1e-6, 1e-6);
      test::require_close(mean(v, {d}, true), mean(c, {d}, true), 1e-6, 1e-6);
      require_values(amax(v, {d}), amax(c, {d}).to_vector<double>());
      require_values(amin(v, {d}), amin(c, {d}).to_vector<double>());
    }
    test::require_close(sum(v, {0, v.dim() - 1}), sum(c, {0, v.dim() - 1}), 1e-6, 1e-6);
  }
}

TEST_CASE("large reductions split across threads", "[reduce]") {
  Tensor x = ones({1000, 1000});
  REQUIRE(sum(x).item() == 1e6);
  REQUIRE(sum(x, {0}).to_vector<float>()[999] == 1000.0f);
  REQUIRE(mean(x, {1}).to_vector<float>()[5] == 1.0f);
  Tensor r = arange(1000000, kF64);
  REQUIRE(amax(r).item() == 999999);
  REQUIRE(sum(r).item() == 499999500000.0);
}

TEST_CASE("integer sums are i64 and do not wrap", "[reduce]") {
  Tensor s = sum(ones({300}, kU8));
  REQUIRE(s.dtype() == kI64);
  REQUIRE(s.item() == 300);
  Tensor e = sum(eq(ones({300}, kU8), ones({300}, kU8)));
  REQUIRE(e.item() == 300);
  Tensor big = full({3}, 2e9, kI32);
  Tensor rows = sum(big.reshape({3, 1}), {1});
  REQUIRE(rows.dtype() == kI64);
  REQUIRE(sum(big).item() == 6e9);
}

TEST_CASE("argmax", "[reduce]") {
  Tensor x = tensor({1, 5, 5, 2, 0, -1}, kF64).reshape({2, 3});
  require_values(argmax(x, 1), {1, 0});
  require_values(argmax(x, 0), {1, 0, 0});
  REQUIRE(argmax(x, 1, true).shape() == Shape{2, 1});
  REQUIRE(argmax(x, 1).dtype() == kI64);
}

TEST_CASE("argmax on long rows: the first maximum, or the first NaN", "[reduce][cuda]") {
  const int64_t n = 1000;
  std::vector<double> v = rnd({5, n}, 3, false).to_vector<double>();
  v[0 * n + 700] = v[0 * n + 300] = 9;      // a tie: the first wins
  v[1 * n + 999] = 9;                       // the last element
  v[2 * n + 10] = NAN, v[2 * n + 5] = 9, v[2 * n + 500] = NAN;  // the first NaN wins
  for (int64_t i = 0; i < n; ++i) v[3 * n + i] = -INFINITY;     // all -inf: the first
  v[4 * n + 0] = 9;                         // the first element
  const std::vector<double> want{300, 999, 10, 0, 0};
  for (Device d : test::devices())  // (CUDA merges its threads' candidates: ties and NaN across them)
    for (DType t : {kF32, kF64, kF16, kBF16}) {
      INFO(d.str() << " " << dtype_name(t));
      require_values(argmax(tensor(v, {5, n}, t).to(d), 1).cpu(), want);
      require_values(argmax(tensor(v, {5, n}, t).to(d).t(), 0).cpu(), want);  // strided
    }
  // integers keep the scalar path
  require_values(argmax(tensor({3, 7, 7, 1}, kF64).to(kI64).reshape({1, 4}), 1), {1});
}

TEST_CASE("var of 16-bit data is computed in f32 and rounded once", "[reduce][cuda]") {
  // f16: 10,000 values of spread 3, whose sum of squares (~90,000) passes f16's 65,504;
  // bf16: values near 1000, where a mean rounded to bf16 (steps of 4 or 8) is off by several
  // units and every centred value with it. The reference: the same 16-bit values in f64.
  const Tensor a = (rnd({10000}, 31, false) * 3.0).to(kF16);
  const Tensor b = (rnd({6, 40}, 32, false) * 20.0 + 1000.0).to(kBF16);
  for (Device d : test::devices()) {
    INFO(d.str());
    Tensor va = var(a.to(d)), vb = var(b.to(d), {1});
    REQUIRE(va.dtype() == kF16);
    REQUIRE(vb.dtype() == kBF16);
    test::require_close(va.cpu(), var(a.to(kF64)), 1e-3, 0);
    test::require_close(vb.cpu(), var(b.to(kF64), {1}), 1e-2, 0);
  }
}

TEST_CASE("gradcheck: reductions", "[reduce][gradcheck]") {
  Tensor x = rnd({2, 3, 4}, 2);
  require_gradcheck([](const std::vector<Tensor>& in) { return sum(in[0], {1}); }, {x});
  require_gradcheck([](const std::vector<Tensor>& in) { return sum(in[0]); }, {x});
  require_gradcheck([](const std::vector<Tensor>& in) { return mean(in[0], {0, 2}, true); }, {x});
  require_gradcheck([](const std::vector<Tensor>& in) { return amax(in[0], {2}); }, {x});
  require_gradcheck([](const std::vector<Tensor>& in) { return amin(in[0], {0}); }, {x});
  require_gradcheck([](const std::vector<Tensor>& in) { return var(in[0], {1}); }, {x});
  require_gradcheck([](const std::vector<Tensor>& in) { return sum_to(in[0], {3, 1}); }, {x});
}

TEST_CASE("f16 and bf16 reductions equal f32's of the widened values, rounded once", "[reduce]") {
  // Computed in one pass on the CPU: sums in double as for f32, extrema compared as f32
  // values. (64, 33, 40) is large enough to share out over threads; each set of dims takes
  // another path: kept dims in the middle, the column sums of a (rows, 40) matrix, a single
  // output, long rows, and a strided input that is copied first.
  Tensor base = rnd({64, 33, 40}, 21, false) * 3.0;
  {  // a NaN and infinities for the extrema
    auto v = base.to_vector<double>();
    v[7] = NAN, v[1000] = INFINITY, v[2000] = -INFINITY;
    base = tensor(v, base.shape(), kF64);
  }
  for (DType h : {kBF16, kF16}) {
    INFO(dtype_name(h));
    const Tensor x = base.to(h);
    const Tensor xp = x.permute({2, 0, 1});  // strided
    for (const Tensor& in : {x, xp})
      for (const Shape& dims : {Shape{0}, Shape{1}, Shape{2}, Shape{0, 2}, Shape{0, 1}, Shape{}}) {
        INFO("dims " << shape_str(dims) << (in.is_contiguous() ? "" : ", strided"));
        const Tensor in32 = in.to(kF32);
        // equal values; a NaN's sign depends on whether inf - inf or the NaN came first
        test::require_close(sum(in, dims), sum(in32, dims).to(h), 0, 0);
        test::require_close(mean(in, dims), mean(in32, dims).to(h), 0, 0);
        test::require_same(amax(in, dims), amax(in32, dims).to(h));
        test::require_same(amin(in, dims), amin(in32, dims).to(h));
      }
    // finite values: the sums against an f64 reference (one rounding of a double sum)
    const Tensor xf = (rnd({300, 7}, 22, false) + 1.0).to(h);
    test::require_close(sum(xf, {0}).to(kF64), sum(xf.to(kF64), {0}), 1e-2, 1e-2);
    REQUIRE(sum(xf, {0}).dtype() == h);
  }
}
