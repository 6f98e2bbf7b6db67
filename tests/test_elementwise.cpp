#include "test_util.h"
#include <cstring>

using namespace nn;
using test::require_gradcheck;
using test::require_values;
using test::rnd;

namespace {
// Applies a unary op to each element on the host, as the reference.
Tensor host_map(const Tensor& x, double (*f)(double)) {
  auto v = x.to_vector<double>();
  for (auto& e : v) e = f(e);
  return tensor(v, x.shape(), kF64);
}

// Every binary op but pow (floating types only; tested with its gradients), by name.
using BinaryFn = Tensor (*)(const Tensor&, const Tensor&);
const std::pair<const char*, BinaryFn> kBinaryOps[] = {
    {"add", [](const Tensor& a, const Tensor& b) { return a + b; }},
    {"sub", [](const Tensor& a, const Tensor& b) { return a - b; }},
    {"mul", [](const Tensor& a, const Tensor& b) { return a * b; }},
    {"div", [](const Tensor& a, const Tensor& b) { return a / b; }},
    {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); }},
    {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); }},
    {"eq", [](const Tensor& a, const Tensor& b) { return eq(a, b); }},
    {"ne", [](const Tensor& a, const Tensor& b) { return ne(a, b); }},
    {"lt", [](const Tensor& a, const Tensor& b) { return lt(a, b); }},
    {"le", [](const Tensor& a, const Tensor& b) { return le(a, b); }},
    {"gt", [](const Tensor& a, const Tensor& b) { return gt(a, b); }},
    {"ge", [](const Tensor& a, const Tensor& b) { return ge(a, b); }}};
}  // namespace

TEST_CASE("unary ops match the C library", "[elementwise]") {
  Tensor x = tensor({-2.5, -1, -0.1, 0.3, 1, 4}, kF64);
  Tensor pos = tensor({0.1, 0.5, 1, 2, 9}, kF64);
  test::require_close(exp(x), host_map(x, [](double v) { return std::exp(v); }));
  test::require_close(log(pos), host_map(pos, [](double v) { return std::log(v); }));
  test::require_close(sqrt(pos), host_map(pos, [](double v) { return std::sqrt(v); }));
  test::require_close(rsqrt(pos), host_map(pos, [](double v) { return 1 / std::sqrt(v); }));
  test::require_close(tanh(x), host_map(x, [](double v) { return std::tanh(v); }));
  test::require_close(sigmoid(x), host_map(x, [](double v) { return 1 / (1 + std::exp(-v)); }));
  test::require_close(relu(x), host_map(x, [](double v) { return v > 0 ? v : 0; }));
  test::require_close(gelu(x), host_map(x, [](double v) {
    return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
  }));
  test::require_close(abs(x), host_map(x, [](double v) { return std::abs(v); }));
  test::require_close(neg(x), host_map(x, [](double v) { return -v; }));
  test::require_close(square(x), host_map(x, [](double v) { return v * v; }));
  test::require_close(pow(pos, 1.5), host_map(pos, [](double v) { return std::pow(v, 1.5); }));
  test::require_close(clamp(x, -1, 1), host_map(x, [](double v) { return std::clamp(v, -1.0, 1.0); }));
  test::require_close(log1p(pos), host_map(pos, [](double v) { return std::log1p(v); }));
  test::require_close(silu(x), host_map(x, [](double v) { return v / (1 + std::exp(-v)); }));
  test::require_close(leaky_relu(x, 0.2), host_map(x, [](double v) { return v > 0 ? v : 0.2 * v; }));
  test::require_close(elu(x, 1.5), host_map(x, [](double v) { return v > 0 ? v : 1.5 * std::expm1(v); }));
  require_values(leaky_relu(tensor({-3.0, 2.0}, kF64)), {-0.03, 2.0});  // PyTorch's default slope
  test::require_close(softplus(x), host_map(x, [](double v) { return std::log1p(std::exp(v)); }));
  // softplus(x, beta) as PyTorch's: x itself past beta x = 20 (25 at beta 1: 25, not 25 + 1e-11)
  Tensor wide = tensor({-30, -1, 0.5, 9, 10.5, 25}, kF64);
  require_values(softplus(wide, 2.0), {std::log1p(std::exp(-60.0)) / 2, std::log1p(std::exp(-2.0)) / 2,
                                       std::log1p(std::exp(1.0)) / 2, std::log1p(std::exp(18.0)) / 2,
                                       10.5, 25});
  require_values(softplus(tensor({25.0}, kF64)), {25.0});
  REQUIRE(test::error_of([&] { softplus(x, 0.0); }).find("beta must be positive") != std::string::npos);
  // log1p keeps small arguments' digits, where log(1 + x) loses them
  require_values(log1p(tensor({1e-10}, kF64)), {std::log1p(1e-10)});
  require_values(log1p(tensor({1e-10f}, kF32)).to(kF64), {double(std::log1p(1e-10f))});
  require_values(gelu(tensor({1.0}, kF64)), {0.8413447460685429});
  // the f32 path agrees with f64
  test::require_close(gelu(x.to(kF32)), gelu(x), 1e-6, 1e-6);
  test::require_close(sigmoid(x.to(kF32)), sigmoid(x), 1e-6, 1e-6);
}

TEST_CASE("f32 GELU, tanh, sigmoid, SiLU and their gradients agree with f64, contiguous and strided", "[elementwise]") {
  // The f32 path on contiguous data (and on rows of a column slice) is vectorised (Eigen's
  // erf, exp, tanh); other strided data takes the general loop. Both within a few f32 ulps of
  // the f64 values over [-10, 10].
  Tensor x = arange(-10.0, 10.0, 0.00390625, kF64).reshape({64, 80});
  Tensor g = rnd({64, 80}, 3, false);
  using Fn = Tensor (*)(const Tensor&);
  for (const auto& [name, fn] : std::vector<std::pair<const char*, Fn>>{
           {"gelu", [](const Tensor& t) { return gelu(t); }}, {"tanh", [](const Tensor& t) { return tanh(t); }},
           {"sigmoid", [](const Tensor& t) { return sigmoid(t); }}, {"silu", [](const Tensor& t) { return silu(t); }}}) {
    INFO(name);
    const Fn f = fn;  // (a lambda cannot capture a structured binding before C++20's clang 16)
    Tensor want = f(x);
    test::require_close(f(x.to(kF32)), want, 1e-6, 1e-6);
    test::require_close(f(x.to(kF32).t()), want.t(), 1e-6, 1e-6);
    test::require_close(f(x.to(kF32).narrow(1, 3, 50)), want.narrow(1, 3, 50), 1e-6, 1e-6);
    auto grad_of = [&](const Tensor& in, const Tensor& gout) {
      Tensor v = in.detach().requires_grad_();
      (f(v) * gout).sum().backward();
      return v.grad();
    };
    Tensor want_grad = grad_of(x, g);
    test::require_close(grad_of(x.to(kF32), g.to(kF32)), want_grad, 1e-5, 1e-6);
    test::require_close(grad_of(x.to(kF32).t(), g.to(kF32).t()), want_grad.t(), 1e-5, 1e-6);
  }
  // NaN and the infinities: NaN stays NaN, the limits hold
  Tensor edge = tensor({NAN, INFINITY, -INFINITY, 0.0, 30.0, -30.0, 100.0, -100.0}, kF32);
  for (Tensor y : {tanh(edge), sigmoid(edge)}) REQUIRE(std::isnan(y.to_vector<float>()[0]));
  REQUIRE(tanh(edge).to_vector<float>()[1] == 1.0f);
  REQUIRE(tanh(edge).to_vector<float>()[2] == -1.0f);
  REQUIRE(sigmoid(edge).to_vector<float>()[1] == 1.0f);
  REQUIRE(sigmoid(edge).to_vector<float>()[2] == 0.0f);
  REQUIRE(tanh(edge).to_vector<float>()[3] == 0.0f);
  REQUIRE(sigmoid(edge).to_vector<float>()[3] == 0.5f);
  // silu(-100) = -100 / (1 + e^100): -3.7e-42, a subnormal, or -0 where flushed; never +0
  const float silu_tail = silu(edge).to_vector<float>()[7];
  REQUIRE(silu_tail > -1e-41f);
  REQUIRE(std::signbit(silu_tail));
  // tanh's tail past |x| = 4 (where Eigen's tanh is already 1 from 7.9) also beside a NaN
  const std::vector<float> tail = tanh(tensor({NAN, 8.5, -8.5}, kF32)).to_vector<float>();
  REQUIRE(std::isnan(tail[0]));
  REQUIRE(tail[1] == float(std::tanh(8.5)));
  REQUIRE(tail[1] < 1.0f);
  REQUIRE(tail[2] == -tail[1]);
}

TEST_CASE("vectorised f32 unary values do not depend on position, threads or layout", "[elementwise][parallel]") {
  // Eigen's scalar code (unaligned heads, tails) rounds exp differently from its packets: each
  // value must be the same wherever it sits and however the threads split the tensor.
  Tensor x = (rnd({40009}, 21, false) * 4.0).to(kF32);
  for (auto f : std::vector<Tensor (*)(const Tensor&)>{tanh, sigmoid, gelu, silu}) {
    const Tensor full = f(x);
    test::require_same(f(x.narrow(0, 3, 30001).contiguous()), full.narrow(0, 3, 30001));
    const int threads = nn::num_threads();
    nn::set_num_threads(1);
    const Tensor one = f(x);
    nn::set_num_threads(threads);
    test::require_same(one, full);
    // rows of a column slice (the vectorised row path) as the same values made contiguous
    Tensor m = x.narrow(0, 0, 40000).reshape({200, 200});
    test::require_same(f(m.narrow(1, 7, 150)), f(m.narrow(1, 7, 150).contiguous()));
  }
}

TEST_CASE("binary ops, scalars and comparisons", "[elementwise]") {
  Tensor a = tensor({1, 2, 3, 4}, kF64), b = tensor({4, 3, 2, 1}, kF64);
  require_values(a + b, {5, 5, 5, 5});
  require_values(a - b, {-3, -1, 1, 3});
  require_values(a * b, {4, 6, 6, 4});
  require_values(a / b, {0.25, 2.0 / 3, 1.5, 4});
  require_values(pow(a, b), {1, 8, 9, 4});
  require_values(maximum(a, b), {4, 3, 3, 4});
  require_values(minimum(a, b), {1, 2, 2, 1});
  require_values(2.0 - a, {1, 0, -1, -2});
  require_values(12.0 / a, {12, 6, 4, 3});
  require_values(a / 2.0, {0.5, 1, 1.5, 2});
  require_values(a + 1.0, {2, 3, 4, 5});
  require_values(gt(a, b), {0, 0, 1, 1});
  require_values(le(a, b), {1, 1, 0, 0});
  require_values(eq(a, tensor({1, 0, 3, 0}, kF64)), {1, 0, 1, 0});
  require_values(ne(a, b), {1, 1, 1, 1});
  require_values(where(gt(a, b), a, b), {4, 3, 3, 4});
  // a condition of another dtype holds where it is not zero: 0.5 (no truncation), 1e-300 (no
  // underflow to f32's 0), NaN; an i64 256 (no wrap to a u8 0)
  const Tensor av = tensor({1, 2, 3, 4}, kF32), bv = tensor({-1, -2, -3, -4}, kF32);
  require_values(where(tensor({0.5, 1e-300, 0, NAN}, kF64), av, bv), {1, 2, -3, 4});
  require_values(where(tensor({256, 0, -1, 0}, kI64), av.to(kU8), zeros({4}, kU8)), {1, 0, 3, 0});
  require_values(ones({3}, kI64) + ones({3}, kI64), {2, 2, 2});
  require_values(tensor({7, -7}, kI32) * tensor({2, 3}, kI32), {14, -21});
  // integer division truncates; by zero it is an error (the CPU would trap), and the lowest
  // value by -1 wraps (it would trap too)
  require_values(tensor({7, -7}, kI64) / tensor({2, 2}, kI64), {3, -3});
  REQUIRE(test::error_of([] { tensor({1, 2}, kI64) / tensor({0, 1}, kI64); })
              .find("integer division by zero") != std::string::npos);
  REQUIRE(test::error_of([] { tensor({1}, kU8) / tensor({0}, kU8); })
              .find("integer division by zero") != std::string::npos);
  // a NaN in either operand of maximum/minimum is the result, whichever side it is on
  for (Tensor m : {maximum(tensor({1.0, NAN}), tensor({NAN, 2.0})),
                   minimum(tensor({1.0, NAN}), tensor({NAN, 2.0}))})
    for (double v : m.to_vector<double>()) REQUIRE(std::isnan(v));
  Tensor lowest = full({1}, double(INT32_MIN), kI32);
  REQUIRE((lowest / full({1}, -1.0, kI32)).item() == double(INT32_MIN));
}

TEST_CASE("integer tensors with scalars: whole scalars compute exactly, fractional ones are "
          "refused", "[elementwise][errors]") {
  Tensor a = arange(50, kI64);
  // by a whole scalar: integer division, as of two integer tensors (a * (1 / 49) gave 49 / 49
  // = 0 and 3 / 3 truncated from 0.999...)
  Tensor q = a / 49.0;
  REQUIRE(q.dtype() == kI64);
  REQUIRE(q.to_vector<int64_t>()[49] == 1);
  REQUIRE(q.to_vector<int64_t>()[48] == 0);
  require_values(tensor({7, -7, 9}, kI32) / 3.0, {2, -2, 3});
  REQUIRE(test::error_of([] { tensor({1}, kI64) / 0.0; }).find("integer division by zero") !=
          std::string::npos);
  require_values(tensor({1, 2}, kI64) + 1.0, {2, 3});
  require_values(tensor({1, 2}, kI64) * 3.0, {3, 6});
  require_values(10.0 - tensor({1, 2}, kI64), {9, 8});
  require_values(clamp(tensor({-5, 0, 5}, kI64), 0, INFINITY), {0, 0, 5});
  // a fractional scalar would be truncated: a clear error instead
  for (auto f : std::vector<std::function<void()>>{
           [] { tensor({1, 2}, kI64) + 0.5; }, [] { tensor({1, 2}, kI32) * 0.5; },
           [] { 2.5 - tensor({1}, kU8); }, [] { tensor({1}, kI64) / 2.5; },
           [] { clamp(tensor({1}, kI64), 1.5, 4.0); }})
    REQUIRE(test::error_of(f).find("fractional scalar") != std::string::npos);
}

TEST_CASE("integer tensors with scalars compute in int64 and wrap, past 2^53 and past their "
          "type's range, on every backend", "[elementwise][cuda]") {
  const int64_t big = (int64_t(1) << 53) + 1;  // no double holds it
  for (Device d : test::devices()) {
    INFO(d.str());
    auto i64 = [&](std::vector<int64_t> v) {
      const int64_t n = int64_t(v.size());
      return from_vector<int64_t>(std::move(v), {n}).to(d);
    };
    auto values = [](const Tensor& t) { return t.cpu().to(kI64).to_vector<int64_t>(); };
    const Tensor a = i64({big, INT64_MAX, INT64_MIN, -7});
    using V = std::vector<int64_t>;
    REQUIRE(values(a + 1.0) == V{big + 1, INT64_MIN, INT64_MIN + 1, -6});
    REQUIRE(values(a * 3.0) == V{3 * big, INT64_MAX - 2, INT64_MIN, -21});
    REQUIRE(values(5.0 - a) == V{5 - big, INT64_MIN + 6, INT64_MIN + 5, 12});
    REQUIRE(values(neg(a)) == V{-big, -INT64_MAX, INT64_MIN, 7});
    REQUIRE(values(abs(a)) == V{big, INT64_MAX, INT64_MIN, 7});
    REQUIRE(values(clamp(a, -5.0, 1e30)) == V{big, INT64_MAX, -5, -5});  // 1e30: no bound
    REQUIRE(values(clamp(a, -0x1p63, 0x1p53)) == V{int64_t(1) << 53, int64_t(1) << 53, INT64_MIN, -7});
    // narrower types wrap as their int64 results do
    const Tensor i = full({3}, 2e9, TensorOptions(kI32).device(d));
    REQUIRE(values(i * 2.0) == V{-294967296, -294967296, -294967296});
    REQUIRE(values(neg(full({1}, double(INT32_MIN), TensorOptions(kI32).device(d)))) == V{INT32_MIN});
    REQUIRE(values(square(full({1}, 65536, TensorOptions(kI32).device(d)))) == V{0});
    const Tensor u = i64({200, 5, 1}).to(kU8);
    REQUIRE(values(u + 100.0) == V{44, 105, 101});
    REQUIRE(values(3.0 - u) == V{59, 254, 2});
    REQUIRE(values(neg(u)) == V{56, 251, 255});
    // a clamp bound past the type's range is that end of it; a divisor past it divides in i64
    REQUIRE(values(clamp(u, -5.0, -1.0)) == V{0, 0, 0});
    REQUIRE(values(clamp(i, 3e9, 4e9)) == V{INT32_MAX, INT32_MAX, INT32_MAX});
    REQUIRE(values(i / 3e9) == V{0, 0, 0});
    REQUIRE(values(i / -1e9) == V{-2, -2, -2});
    REQUIRE(values(u / 300.0) == V{0, 0, 0});
    // in place too
    Tensor w = i64({big});
    w.add_(1.0);
    w.mul_(2.0);
    REQUIRE(values(w) == V{2 * (big + 1)});
  }
  // a scalar outside int64 (where int tensors compute) is refused, as a fractional one is
  for (auto f : std::vector<std::function<void()>>{
           [] { tensor({1}, kI64) + 1e19; }, [] { tensor({1}, kI32) * -1e30; },
           [] { 0x1p63 - tensor({1}, kU8); }})
    REQUIRE(test::error_of(f).find("outside int64's range") != std::string::npos);
  Tensor w = tensor({1, 2}, kI32);
  REQUIRE(test::error_of([&] { w.mul_(0.5); }).find("fractional scalar") != std::string::npos);
  const uint64_t version = w.storage()->version();
  REQUIRE(test::error_of([&] { w.add_(tensor({1, 1}, kI32), 0.5); }).find("fractional scalar") !=
          std::string::npos);
  REQUIRE(w.storage()->version() == version);  // refused before anything counted as a write
  require_values(w, {1, 2});
}

TEST_CASE("elementwise ops on large and strided tensors use every path", "[elementwise]") {
  // Large enough to run on several threads; transposed to take the strided loop.
  Generator g(11);
  Tensor a = randn({300, 500}, kF32, &g), b = randn({500, 300}, kF32, &g).t();
  Tensor c = a * b + 1.0;
  const auto va = a.to_vector<float>(), vb = b.contiguous().to_vector<float>();
  Tensor row = randn({500}, kF32, &g);
  const auto vr = row.to_vector<float>();
  Tensor d = a + row;  // broadcast along rows
  // every element against a loop here
  std::vector<float> want_c(va.size()), want_d(va.size());
  for (size_t i = 0; i < va.size(); ++i) {
    want_c[i] = va[i] * vb[i] + 1.0f;
    want_d[i] = va[i] + vr[i % 500];
  }
  test::require_close(c, from_vector<float>(want_c, {300, 500}), 1e-6, 1e-7);
  test::require_close(d, from_vector<float>(want_d, {300, 500}), 0, 0);
}

TEST_CASE("copies into permuted and channels-last targets follow the target's memory order",
          "[elementwise][layout]") {
  // The loops visit dims in the target's memory order: a channels-last to channels-last copy
  // is one flat run, a row-major source read across it; every element lands where it belongs.
  Generator g(12);
  const Tensor src = randn({3, 5, 7, 4}, kF64, &g);
  const std::vector<double> want = src.to_vector<double>();
  for (const Tensor& from : {src, src.contiguous(MemoryFormat::channels_last)}) {
    Tensor cl = empty(src.shape(), kF64, MemoryFormat::channels_last);
    cl.copy_(from);
    REQUIRE(cl.to_vector<double>() == want);
    Tensor f32 = empty(src.shape(), kF32, MemoryFormat::channels_last);
    f32.copy_(from);  // a conversion, the same walk
    REQUIRE(f32.to_vector<double>() == src.to(kF32).to_vector<double>());
    Tensor perm = empty({4, 7, 3, 5}, kF64).permute({2, 3, 1, 0});  // strides (5, 1, 15, 105)
    perm.copy_(from);
    REQUIRE(perm.to_vector<double>() == want);
  }
  // a broadcast source across a channels-last target
  Tensor cl = empty({2, 3, 4, 5}, kF64, MemoryFormat::channels_last);
  cl.copy_(arange(3, kF64).reshape({1, 3, 1, 1}));
  REQUIRE(cl.select(0, 1).select(1, 2).select(1, 4).to_vector<double>() == std::vector<double>{0, 1, 2});
}

// At NaN, elu's gradient is NaN and leaky_relu's the incoming one times the slope, as
// PyTorch's vectorised kernels give them, on each device. (PyTorch's scalar path, which only
// a tensor shorter than a vector takes, gives elu the incoming gradient there.)
TEST_CASE("elu and leaky_relu gradients at NaN are PyTorch's", "[elementwise][cuda]") {
  for (Device d : test::devices()) {
    for (DType dt : {kF32, kF64}) {
      INFO(d.str() << " " << dtype_name(dt));
      Tensor x0 = arange(40, kF64) - 20.0;
      x0.data<double>()[3] = NAN;
      x0.data<double>()[31] = NAN;
      for (int leaky = 0; leaky < 2; ++leaky) {
        Tensor x = x0.to(dt).to(d).clone().requires_grad_(true);  // (a fresh leaf each time)
        Tensor y = leaky ? leaky_relu(x, 0.1) : elu(x, 1.5);
        y.backward(full({40}, 2.0, x.options()));
        const std::vector<double> gv = x.grad().to(kF64).cpu().to_vector<double>();
        for (int i = 0; i < 40; ++i) {
          INFO((leaky ? "leaky_relu" : "elu") << " element " << i);
          const double v = i - 20.0;
          const bool nan = i == 3 || i == 31;
          if (nan && !leaky) {
            REQUIRE(std::isnan(gv[size_t(i)]));
            continue;
          }
          const double want = leaky ? (v > 0 && !nan ? 2.0 : 0.2) : (v > 0 ? 2.0 : 2.0 * 1.5 * std::exp(v));
          REQUIRE(gv[size_t(i)] == Approx(want).epsilon(1e-6));
        }
      }
    }
  }
}

// relu keeps NaN (a ReLU that zeroed it would hide a divergence), and its gradient at NaN is
// the incoming one, as PyTorch's threshold_backward gives: on the vectorised f32 path (40
// elements), f64, the 16-bit types, and in batch_norm_relu, where one NaN makes its channel
// NaN.
TEST_CASE("relu passes NaN on: alone and after batch norm", "[elementwise][norm]") {
  for (DType dt : {kF32, kF64, kBF16, kF16}) {
    INFO(dtype_name(dt));
    Tensor x0 = arange(40, kF32) - 20.0;
    x0.data<float>()[3] = NAN;
    x0.data<float>()[31] = NAN;
    Tensor x = x0.to(dt).detach().requires_grad_(true);
    Tensor y = relu(x);
    const std::vector<float> yv = y.to_vector<float>();
    for (int i = 0; i < 40; ++i) {
      INFO("element " << i);
      if (i == 3 || i == 31) REQUIRE(std::isnan(yv[size_t(i)]));
      else REQUIRE(yv[size_t(i)] == std::max(float(i - 20), 0.f));
    }
    y.backward(full({40}, 2.0, dt));
    const std::vector<float> gv = x.grad().to_vector<float>();
    for (int i = 0; i < 40; ++i) REQUIRE(gv[size_t(i)] == (i == 3 || i > 20 ? 2.f : 0.f));
  }
  for (MemoryFormat f : {MemoryFormat::contiguous, MemoryFormat::channels_last}) {
    INFO("channels-last " << (f == MemoryFormat::channels_last));
    Tensor x = rnd({2, 3, 2, 2}, 7, false).to(kF32);
    x.data<float>()[4 + 1] = NAN;  // sample 0, channel 1
    x = x.contiguous(f);
    const Tensor y = batch_norm_relu(x, {}, zeros({3}), ones({3}), {}, {}, true).contiguous();
    for (int64_t c = 0; c < 3; ++c) {
      INFO("channel " << c);
      for (float v : y.select(1, c).contiguous().to_vector<float>())
        REQUIRE(bool(std::isnan(v)) == (c == 1));
    }
  }
}

TEST_CASE("gradcheck: unary ops", "[elementwise][gradcheck]") {
  Tensor x = rnd({3, 4}, 1);
  for (auto f : std::vector<Tensor (*)(const Tensor&)>{exp, tanh, sigmoid, gelu, silu, neg, square, abs, relu}) {
    require_gradcheck([f](const std::vector<Tensor>& in) { return f(in[0]); }, {x});
  }
  Tensor p = rnd({3, 4}, 2, false);
  p = (abs(p) + 0.5).detach().requires_grad_();
  require_gradcheck([](const std::vector<Tensor>& in) { return log(in[0]); }, {p});
  require_gradcheck([](const std::vector<Tensor>& in) { return sqrt(in[0]); }, {p});
  require_gradcheck([](const std::vector<Tensor>& in) { return rsqrt(in[0]); }, {p});
  require_gradcheck([](const std::vector<Tensor>& in) { return pow(in[0], 2.5); }, {p});
  require_gradcheck([](const std::vector<Tensor>& in) { return 3.0 / in[0]; }, {p});
  require_gradcheck([](const std::vector<Tensor>& in) { return clamp(in[0], -0.5, 0.7); }, {x});
  require_gradcheck([](const std::vector<Tensor>& in) { return log1p(in[0]); }, {p});
  require_gradcheck([](const std::vector<Tensor>& in) { return softplus(in[0]); }, {x});
  require_gradcheck([](const std::vector<Tensor>& in) { return softplus(in[0], 3.0); }, {x});
  require_gradcheck([](const std::vector<Tensor>& in) { return leaky_relu(in[0], 0.3); }, {x});
  require_gradcheck([](const std::vector<Tensor>& in) { return elu(in[0], 0.7); }, {x});
  // at 0, as PyTorch: leaky_relu's gradient is the slope, elu's alpha
  Tensor zero = zeros({1}, kF64).requires_grad_();
  (leaky_relu(zero, 0.3) + elu(zero, 0.7)).sum().backward();
  require_values(zero.grad(), {0.3 + 0.7});
  // past the threshold the gradient is 1 (the function is x there)
  Tensor big = tensor({21.0, 30.0, -40.0}, kF64).requires_grad_();
  softplus(big).sum().backward();
  require_values(big.grad(), {1.0, 1.0, 1 / (1 + std::exp(40.0))});
  require_gradcheck([](const std::vector<Tensor>& in) { return 2.0 - in[0] * 3.0 + 1.0; }, {x});
}

TEST_CASE("gradcheck: binary ops with broadcasting", "[elementwise][gradcheck]") {
  Tensor a = rnd({2, 3, 4}, 3), b = rnd({3, 1}, 4), c = rnd({4}, 5);
  require_gradcheck([](const std::vector<Tensor>& in) { return in[0] + in[1]; }, {a, b});
  require_gradcheck([](const std::vector<Tensor>& in) { return in[0] - in[1]; }, {a, c});
  require_gradcheck([](const std::vector<Tensor>& in) { return in[0] * in[1]; }, {a, b});
  Tensor bp = (abs(rnd({3, 1}, 6, false)) + 0.5).detach().requires_grad_();
  require_gradcheck([](const std::vector<Tensor>& in) { return in[0] / in[1]; }, {a, bp});
  Tensor ap = (abs(rnd({2, 3, 4}, 7, false)) + 0.5).detach().requires_grad_();
  require_gradcheck([](const std::vector<Tensor>& in) { return pow(in[0], in[1]); }, {ap, c});
  require_gradcheck([](const std::vector<Tensor>& in) { return maximum(in[0], in[1]); }, {a, c});
  require_gradcheck([](const std::vector<Tensor>& in) { return minimum(in[0], in[1]); }, {a, b});
  Tensor cond = gt(rnd({3, 4}, 8, false), zeros({}, kF64));
  require_gradcheck([cond](const std::vector<Tensor>& in) { return where(cond, in[0], in[1]); },
                    {a, b});
}

TEST_CASE("pow's gradients at a zero base are libtorch's limits, not NaN", "[elementwise]") {
  Tensor a = tensor({0.0, 0.0, 2.0}, kF64).requires_grad_();
  Tensor b = tensor({0.0, 2.0, 3.0}, kF64).requires_grad_();
  sum(pow(a, b)).backward();
  require_values(a.grad(), {0, 0, 12});
  require_values(b.grad(), {0, 0, 8 * std::log(2.0)}, 1e-12);
  Tensor c = tensor({0.0, 3.0}, kF64).requires_grad_();
  sum(pow(c, 0.0)).backward();
  require_values(c.grad(), {0, 0});
}

TEST_CASE("gradients at kinks and bounds are libtorch's", "[elementwise][cuda]") {
  // where finite differences cannot tell: clamp gives no gradient on a bound (PyTorch 2.15's
  // strict test; an infinite bound is no bound), relu and abs give 0 at 0, pow with a
  // negative base and a whole exponent is differentiable in the base (and NaN in the
  // exponent, log of a negative number)
  for (Device d : test::devices()) {
    INFO(d.str());
    auto leaf = [&](std::vector<double> v) { return tensor(v, {int64_t(v.size())}, kF32).to(d).requires_grad_(); };
    Tensor x = leaf({-1, 0.5, 2, 3});
    sum(clamp(x, -1, 2)).backward();
    require_values(x.grad().cpu(), {0, 1, 0, 0});
    Tensor y = leaf({-INFINITY, -1, 2, NAN});
    sum(clamp(y, -INFINITY, 2)).backward();
    require_values(y.grad().cpu(), {1, 1, 0, 0});
    Tensor z = leaf({0, -0.0, 1}), w = leaf({0, -0.0, -1});
    sum(relu(z)).backward();
    sum(abs(w)).backward();
    require_values(z.grad().cpu(), {0, 0, 1});
    require_values(w.grad().cpu(), {0, 0, -1});
    Tensor a = leaf({-2, -3}), b = leaf({3, 2});
    sum(pow(a, b)).backward();
    require_values(a.grad().cpu(), {12, -6});
    for (float v : b.grad().cpu().to_vector<float>()) REQUIRE(std::isnan(v));
  }
}

TEST_CASE("maximum splits the gradient on ties, and gives a NaN output's to the NaN input", "[elementwise][cuda]") {
  Tensor a = tensor({1, 2}, kF64).requires_grad_(), b = tensor({1, 3}, kF64).requires_grad_();
  sum(maximum(a, b)).backward();
  require_values(a.grad(), {0.5, 0});
  require_values(b.grad(), {0.5, 1});
  // NaN in a, in b, in both: the output is the NaN of a, of b, of a (binary_value in
  // kernels/math.cuh), and the gradient goes where the output came from
  for (Device d : test::devices())
    for (Tensor (*op)(const Tensor&, const Tensor&) : {maximum, minimum}) {
      INFO(d.str());
      Tensor x = tensor({NAN, 1, NAN}, kF32).to(d).requires_grad_();
      Tensor y = tensor({2, NAN, NAN}, kF32).to(d).requires_grad_();
      Tensor out = op(x, y);
      REQUIRE(std::isnan(out.cpu().to_vector<float>()[0]));
      sum(out).backward();
      require_values(x.grad().cpu(), {1, 0, 1});
      require_values(y.grad().cpu(), {0, 1, 0});
    }
}

TEST_CASE("f16 and bf16 elementwise on the CPU: f32 math on the widened values, rounded once", "[elementwise]") {
  // The CPU computes 16-bit maps in one pass; each element must be exactly what widening to
  // f32, computing and rounding back gives (the path every 16-bit op took before), also with
  // broadcasting and transposed (strided) operands.
  for (DType h : {kBF16, kF16}) {
    INFO(dtype_name(h));
    Tensor x = (rnd({37, 21}, 1, false) * 4.0).to(h);
    Tensor pos = (abs(rnd({37, 21}, 2, false)) + 0.1).to(h);
    Tensor y = rnd({21}, 3, false).to(h);           // broadcast over the rows
    Tensor xt = rnd({21, 37}, 4, false).to(h).t();  // strided
    // Special values too: infinities, NaN, -0, a large value (x * x overflows either range; f16
    // takes 3e38 as inf), a tiny one (an f16 subnormal).
    {
      auto v = x.to(kF32).to_vector<float>();
      v[5] = INFINITY, v[6] = -INFINITY, v[7] = NAN, v[8] = -0.0f, v[9] = 3e38f, v[10] = -1e-30f;
      v[11] = 3e-6f, v[12] = 200.0f;
      x = tensor(std::vector<double>(v.begin(), v.end()), {37, 21}).to(h);
    }
    auto same = [&](const Tensor& got, const Tensor& want, const char* what) {
      INFO(what);
      REQUIRE(got.dtype() == h);
      test::require_same(got, want);
    };
    using U = Tensor (*)(const Tensor&);
    const std::pair<const char*, U> unary[] = {
        {"exp", [](const Tensor& t) { return exp(t); }},
        {"tanh", [](const Tensor& t) { return tanh(t); }},
        {"sigmoid", [](const Tensor& t) { return sigmoid(t); }},
        {"relu", [](const Tensor& t) { return relu(t); }},
        {"gelu", [](const Tensor& t) { return gelu(t); }},
        {"silu", [](const Tensor& t) { return silu(t); }},
        {"softplus", [](const Tensor& t) { return softplus(t); }},
        {"softplus, beta 2", [](const Tensor& t) { return softplus(t, 2.0); }},
        {"leaky_relu", [](const Tensor& t) { return leaky_relu(t, 0.2); }},
        {"elu", [](const Tensor& t) { return elu(t); }},
        {"abs", [](const Tensor& t) { return abs(t); }},
        {"neg", [](const Tensor& t) { return neg(t); }},
        {"square", [](const Tensor& t) { return square(t); }},
        {"clamp", [](const Tensor& t) { return clamp(t, -1.5, 0.7); }},
        {"add_scalar", [](const Tensor& t) { return t + 0.3; }},
        {"mul_scalar", [](const Tensor& t) { return t * 1.7; }},
        {"rsub_scalar", [](const Tensor& t) { return 2.0 - t; }}};
    for (const auto& [name, f] : unary) {
      same(f(x), f(x.to(kF32)).to(h), name);
      same(f(xt), f(xt.to(kF32)).to(h), name);
    }
    same(log(pos), log(pos.to(kF32)).to(h), "log");
    same(log1p(pos), log1p(pos.to(kF32)).to(h), "log1p");
    same(sqrt(pos), sqrt(pos.to(kF32)).to(h), "sqrt");
    same(rsqrt(pos), rsqrt(pos.to(kF32)).to(h), "rsqrt");
    same(pow(pos, 1.5), pow(pos.to(kF32), 1.5).to(h), "pow_scalar");
    same(1.0 / pos, (1.0 / pos.to(kF32)).to(h), "rdiv_scalar");
    for (const auto& [name, f] : kBinaryOps) {
      same(f(x, y), f(x.to(kF32), y.to(kF32)).to(h), name);
      same(f(x, xt), f(x.to(kF32), xt.to(kF32)).to(h), name);
    }
    same(pow(pos, x), pow(pos.to(kF32), x.to(kF32)).to(h), "pow");
    // the fused backwards against the f64 gradient of the same values: tanh and sigmoid read
    // their 16-bit outputs, so 1 - t^2 carries t's rounding (up to 2^-7 near |t| = 1) times g
    for (const char* name : {"relu", "tanh", "sigmoid", "gelu", "silu", "softplus", "leaky_relu", "elu"}) {
      INFO(name);
      auto f = [&](const Tensor& t) {
        const std::string n = name;
        return n == "relu"      ? relu(t)
               : n == "tanh"    ? tanh(t)
               : n == "sigmoid" ? sigmoid(t)
               : n == "silu"    ? silu(t)
               : n == "softplus" ? softplus(t)
               : n == "leaky_relu" ? leaky_relu(t, 0.2)
               : n == "elu"     ? elu(t, 1.5)
                                 : gelu(t);
      };
      Tensor g = rnd({37, 21}, 5, false).to(h);
      Tensor xf = (rnd({37, 21}, 1, false) * 4.0).to(h);  // finite values
      Tensor xb = xf.detach().requires_grad_(true), x64 = xf.to(kF64).requires_grad_(true);
      (f(xb) * g).sum().backward();
      (f(x64) * g.to(kF64)).sum().backward();
      REQUIRE(xb.grad().dtype() == h);
      test::require_close(xb.grad().to(kF64), x64.grad(), 2e-2, 4e-2);
      // relu's, GELU's, SiLU's and softplus's read x alone: bit for bit the f32 backward's,
      // rounded once
      if (std::string(name) != "tanh" && std::string(name) != "sigmoid") {
        Tensor x32 = xf.to(kF32).requires_grad_(true);
        (f(x32) * g.to(kF32)).sum().backward();
        same(xb.grad(), x32.grad().to(h), name);
      }
    }
  }
}

TEST_CASE("16-bit GELU, tanh, sigmoid, SiLU over several threads' blocks equal f32's rounded once", "[elementwise]") {
  // Long enough for both threads and several of the widening blocks, with an odd length so
  // the second thread's run starts off a block boundary, and a view at an odd offset.
  for (DType h : {kBF16, kF16})
    for (int k = 0; k < 4; ++k) {
      Tensor (*f)(const Tensor&) = std::vector<Tensor (*)(const Tensor&)>{gelu, tanh, sigmoid, silu}[size_t(k)];
      INFO(dtype_name(h) << " op " << k);
      Tensor x = (rnd({100003}, 11, false) * 3.0).to(h);
      Tensor g = rnd({100003}, 12, false).to(h);
      test::require_same(f(x), f(x.to(kF32)).to(h));
      Tensor xv = x.narrow(0, 1, 70001);
      test::require_same(f(xv), f(xv.to(kF32)).to(h));
      if (k == 1 || k == 2) continue;  // (tanh's and sigmoid's gradients read the rounded outputs)
      Tensor xb = x.detach().requires_grad_(true), x32 = x.to(kF32).requires_grad_(true);
      (f(xb) * g).sum().backward();
      (f(x32) * g.to(kF32)).sum().backward();
      test::require_same(xb.grad(), x32.grad().to(h));
    }
}

// A tensor divided by a scalar is divided, as in PyTorch, not multiplied by the reciprocal:
// that was an ulp off for a third of x / 3, and infinite where 1 / b overflows the dtype.
TEST_CASE("division by a scalar divides", "[elementwise][cuda]") {
  for (Device d : test::devices()) {
    INFO(d.str());
    Tensor x = add(arange(100000, kF32), 1.0).to(d);
    for (double b : {3.0, 10.0, 49.0, -7.0, 0.1}) {
      INFO("b = " << b);
      test::require_same((x / b).cpu(), div(x, full({}, b, x.options())).cpu());
    }
    const Tensor tiny = full({2}, 1e-30, TensorOptions(kF32).device(d));
    test::require_close((tiny / 1e-39).cpu(), full({2}, 1e9), 1e-6, 0);
    for (DType h : {kBF16, kF16}) {  // computed in f32, rounded once
      Tensor xh = x.narrow(0, 0, 2000).to(h);
      test::require_same((xh / 3.0).cpu(), (xh.to(kF32) / 3.0).to(h).cpu());
    }
    // the gradient is g / b
    Tensor p = full({3}, 2.0, TensorOptions(kF64).device(d)).requires_grad_(true);
    sum(p / 4.0).backward();
    test::require_close(p.grad().cpu(), full({3}, 0.25, kF64), 0, 0);
  }
}

// A bound or threshold past a floating dtype's finite range: clamp, smooth L1 and Huber compare
// with it in their backward (and the losses in their forward) through a 0-d tensor of the data's
// dtype, which could not hold it (full refuses it: the backward threw); every value of the
// dtype compares with it as with the infinity of its sign.
TEST_CASE("bounds past a 16-bit dtype's range: clamp, smooth L1 and Huber", "[elementwise][loss]") {
  for (DType dt : {kF16, kBF16, kF32}) {
    // (bf16's largest finite value is 3.39e38, below f32's 3.40e38)
    const double big = dt == kF16 ? 1e5 : dt == kBF16 ? 3.4e38 : 1e39;
    INFO(dtype_name(dt));
    Tensor x = tensor({-INFINITY, -3.0, 0.5, 7.0, INFINITY}, kF64).to(dt).requires_grad_();
    Tensor y = clamp(x, -big, big);
    sum(y).backward();
    require_values(x.grad().to(kF64), {0, 1, 1, 1, 0});  // the infinities are clamped: no gradient
    if (dt == kF32) continue;  // (a threshold past f32 is past the f32 arithmetic the losses do)
    Tensor a = tensor({0.5, -2.0}, kF64).to(dt).requires_grad_(), t = zeros({2}, dt);
    Tensor l = add(smooth_l1_loss(a, t, Reduction::sum, big), huber_loss(a, t, Reduction::sum, big));
    l.backward();
    // both quadratic: 0.5 d^2 / beta + 0.5 d^2, gradient d / beta + d
    require_values(l.to(kF64), {0.5 * (0.25 + 4.0) / big + 0.5 * (0.25 + 4.0)}, 1e-2);
    require_values(a.grad().to(kF64), {0.5 / big + 0.5, -2.0 / big - 2.0}, 1e-2);
  }
}

// (Catch 2 indents a long name's next lines past its first ": ", which must come early: a
// header line with no room left never ends)
TEST_CASE("binary ops of every dtype on special values are C++'s, integers wrapping",
          "[elementwise][cuda]") {
  // Every pair of the values below, on each backend: contiguous, and broadcast (a column
  // against a row: the strided loops). The expected values come from C++ here: floating types in their own
  // arithmetic (f16 and bf16 in f32, rounded once), integers in int64 narrowed to their type
  // (two's-complement wrap-around), comparisons as 1 or 0 from the operands' order.
  const std::vector<Device> devices = test::devices();
  auto check = [&]<typename T>(const std::vector<T>& xs, const std::vector<T>& divisors) {
    INFO(dtype_name(dtype_of<T>()));
    constexpr bool is_int = std::is_integral_v<T>;
    // C: the type computed in and read back (f16 and bf16 widen to f32 exactly)
    using C = std::conditional_t<std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>, float, T>;
    auto expected = [&](const std::string& op, C x, C y) -> C {
      const int order = x < y ? -1 : x == y ? 0 : x > y ? 1 : 2;  // 2: unordered (a NaN)
      const std::map<std::string, bool> cmp = {
          {"eq", order == 0}, {"ne", order != 0}, {"lt", order == -1},
          {"le", order == -1 || order == 0}, {"gt", order == 1}, {"ge", order == 1 || order == 0}};
      if (cmp.count(op)) return C(cmp.at(op) ? 1 : 0);
      if (op == "maximum" || op == "minimum") {  // (a tie gives the second: max(0, -0) is -0)
        if (order == 2) return C(NAN);
        return op == "maximum" ? (order == 1 ? x : y) : (order == -1 ? x : y);
      }
      C r{};
      if constexpr (is_int) {  // exact in 128 bits, then the low bits
        const __int128 a = x, b = y;
        if (op == "add") r = C(a + b);
        if (op == "sub") r = C(a - b);
        if (op == "mul") r = C(a * b);
        if (op == "div") r = C(a / b);
      } else {
        if (op == "add") r = x + y;
        if (op == "sub") r = x - y;
        if (op == "mul") r = x * y;
        if (op == "div") r = x / y;
      }
      return C(T(r));  // (rounded to T once)
    };
    for (const auto& [name, op] : kBinaryOps) {
      for (Device d : devices) {
        INFO(name << " on " << d.str());
        const std::vector<T>& ys = std::string(name) == "div" ? divisors : xs;
        const int64_t n = int64_t(xs.size()), m = int64_t(ys.size());
        const Tensor col = from_vector<T>(xs, {n, 1}, d), row = from_vector<T>(ys, {1, m}, d);
        for (bool broadcast : {true, false}) {
          INFO("broadcast " << broadcast);
          const Tensor a = broadcast ? col : col.expand({n, m}).contiguous();
          const Tensor b = broadcast ? row : row.expand({n, m}).contiguous();
          const Tensor got = op(a, b);
          REQUIRE(got.dtype() == dtype_of<T>());
          REQUIRE(got.shape() == Shape{n, m});
          const std::vector<C> g = got.cpu().to(dtype_of<C>()).template to_vector<C>();
          for (int64_t i = 0; i < n; ++i)
            for (int64_t j = 0; j < m; ++j) {
              const C x = C(xs[size_t(i)]), y = C(ys[size_t(j)]);
              const C want = expected(name, x, y), have = g[size_t(i * m + j)];
              INFO(+x << " " << name << " " << +y << ": got " << +have << ", expected " << +want);
              // (floats bit for bit, a NaN as any NaN)
              REQUIRE(((have != have && want != want) || std::memcmp(&have, &want, sizeof(C)) == 0));
            }
        }
      }
    }
  };
  auto floats = []<typename T>() {
    std::vector<T> v;
    for (double d : {-double(INFINITY), -3.5, -1.0, -0.0, 0.0, 1e-3, 0.5, 1.0, 2.0, 3.5, 250.0, 6e4,
                     double(INFINITY), double(NAN)})
      v.push_back(T(float(d)));
    return v;
  };
  check(floats.operator()<float>(), floats.operator()<float>());
  check(floats.operator()<double>(), floats.operator()<double>());
  check(floats.operator()<Half>(), floats.operator()<Half>());
  check(floats.operator()<BFloat16>(), floats.operator()<BFloat16>());
  check(std::vector<int32_t>{INT32_MIN, INT32_MIN + 1, -70000, -7, -1, 0, 1, 2, 7, 65536, INT32_MAX},
        std::vector<int32_t>{INT32_MIN, -7, -1, 1, 2, 7, INT32_MAX});
  check(std::vector<int64_t>{INT64_MIN, INT64_MIN + 1, -(int64_t(1) << 40) - 1, -7, -1, 0, 1, 2, 7,
                             (int64_t(1) << 53) + 1, INT64_MAX},
        std::vector<int64_t>{INT64_MIN, -7, -1, 1, 2, 7, int64_t(1) << 33, INT64_MAX});
  check(std::vector<uint8_t>{0, 1, 2, 7, 100, 128, 200, 255}, std::vector<uint8_t>{1, 2, 7, 128, 255});
}

TEST_CASE("copies between a 16-bit type and f64, an integer type or the other 16-bit type",
          "[elementwise]") {
  // What each target holds, from the documented conversions: a 16-bit value converts as its
  // f32 value does, and a value rounds to a 16-bit type from f32; a floating value becomes an
  // integer truncated toward zero through int64, saturating there (NaN as 0), then keeping the
  // target's low bits. Into contiguous and transposed targets.
  auto to_i64 = [](double v) -> int64_t {
    if (v != v) return 0;
    if (v >= 9223372036854775808.0) return INT64_MAX;
    if (v <= -9223372036854775808.0) return INT64_MIN;
    return int64_t(v);
  };
  // t's values as T (f16 and bf16 read through f32, which holds them exactly)
  auto read = []<typename T>(const Tensor& t) {
    if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
      std::vector<T> v;
      for (float f : t.to(kF32).to_vector<float>()) v.push_back(T(f));
      return v;
    } else {
      return t.template to_vector<T>();
    }
  };
  auto bits_equal = [](const auto& a, const auto& b) { return std::memcmp(&a, &b, sizeof(a)) == 0; };
  // from: x (2 x 3); want(i): the element i's value as T; into contiguous and
  // transposed targets of T, and x's second row broadcast over four rows
  auto check = [&]<typename T>(const Tensor& x, auto want) {
    INFO(dtype_name(x.dtype()) << " to " << dtype_name(dtype_of<T>()));
    Tensor t = empty({3, 2}, TensorOptions(dtype_of<T>())).t();
    Tensor rows = empty({4, 3}, TensorOptions(dtype_of<T>()));
    {
      NoGradGuard ng;
      t.copy_(x);
      rows.copy_(x.narrow(0, 1, 1).expand({4, 3}));
    }
    for (const Tensor& got : {x.to(dtype_of<T>()), t.contiguous(), rows}) {
      const std::vector<T> g = read.template operator()<T>(got);
      for (size_t i = 0; i < g.size(); ++i) {
        INFO("element " << i << " of " << g.size());
        const T w = want(g.size() == 12 ? 3 + i % 3 : i);
        REQUIRE((bits_equal(g[i], w) || (g[i] != g[i] && w != w)));
      }
    }
  };
  const std::vector<double> vals = {0.5, -3.75, 300.25, 1e10, -INFINITY, double(NAN)};
  const std::vector<int64_t> ints = {-7, 300, 65519, 65520, int64_t(1) << 40, INT64_MIN};
  auto from16 = [&]<typename H>() {
    const Tensor f64 = from_vector<double>(vals, {2, 3});
    auto h = [&](size_t i) { return H(float(vals[i])); };
    check.template operator()<H>(f64, h);  // f64 -> 16 bits
    const Tensor x = f64.to(dtype_of<H>());
    auto f = [&](size_t i) { return float(h(i)); };
    check.template operator()<double>(x, [&](size_t i) { return double(f(i)); });
    check.template operator()<int64_t>(x, [&](size_t i) { return to_i64(f(i)); });
    check.template operator()<int32_t>(x, [&](size_t i) { return int32_t(to_i64(f(i))); });
    check.template operator()<uint8_t>(x, [&](size_t i) { return uint8_t(to_i64(f(i))); });
    using O = std::conditional_t<std::is_same_v<H, Half>, BFloat16, Half>;
    check.template operator()<O>(x, [&](size_t i) { return O(f(i)); });
    // integers -> 16 bits
    const Tensor i64 = from_vector<int64_t>(ints, {2, 3});
    check.template operator()<H>(i64, [&](size_t i) { return H(float(ints[i])); });
    check.template operator()<H>(i64.to(kI32), [&](size_t i) { return H(float(int32_t(ints[i]))); });
    check.template operator()<H>(i64.to(kU8), [&](size_t i) { return H(float(uint8_t(ints[i]))); });
  };
  from16.operator()<Half>();
  from16.operator()<BFloat16>();
}
