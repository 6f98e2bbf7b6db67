#include "test_util.h"

#include <algorithm>
#include <tuple>

using namespace nn;
using test::require_values;

TEST_CASE("factories fill shapes, dtypes and values", "[tensor]") {
  Tensor z = zeros({2, 3});
  REQUIRE(z.shape() == Shape{2, 3});
  REQUIRE(z.dtype() == kF32);
  REQUIRE(z.numel() == 6);
  REQUIRE(z.is_contiguous());
  require_values(z, {0, 0, 0, 0, 0, 0});
  require_values(ones({2}, kI64), {1, 1});
  require_values(full({3}, 2.5, kF64), {2.5, 2.5, 2.5});
  require_values(arange(4), {0, 1, 2, 3});
  require_values(arange(1.0, 2.0, 0.25, kF64), {1, 1.25, 1.5, 1.75});
  require_values(arange(3.0, 0.0, -1.5, kF64), {3, 1.5});
  REQUIRE(arange(0).numel() == 0);
  REQUIRE(arange(2.0, 2.0, -1.0, kF64).numel() == 0);
  // as PyTorch: an end behind start for the step's sign is an error, as are NaN and sizes
  // past int64 (whose conversion was undefined)
  REQUIRE(test::error_of([] { arange(-1); }).find("not reachable") != std::string::npos);
  REQUIRE(test::error_of([] { arange(0.0, 1.0, -0.5); }).find("not reachable") != std::string::npos);
  REQUIRE(test::error_of([] { arange(0.0, NAN, 1.0); }).find("finite") != std::string::npos);
  REQUIRE(test::error_of([] { arange(0.0, 1e30, 1.0); }).find("too many") != std::string::npos);
  REQUIRE(tensor({1, 2, 3}, kI32).dtype() == kI32);
  REQUIRE(from_vector<int64_t>({1, 2, 3, 4}, {2, 2}).to_vector<int64_t>() ==
          std::vector<int64_t>{1, 2, 3, 4});
  REQUIRE(test::error_of([] { from_vector<float>({1, 2, 3}, {2, 2}); }).find("holds 4") !=
          std::string::npos);
}

TEST_CASE("views share storage and writes show through", "[tensor][views]") {
  Tensor base = arange(24, kF64).reshape({2, 3, 4});
  REQUIRE(base.is_contiguous());
  Tensor t = base.transpose(0, 2);  // (4, 3, 2)
  REQUIRE(t.shape() == Shape{4, 3, 2});
  REQUIRE(!t.is_contiguous());
  REQUIRE(t.storage() == base.storage());
  REQUIRE(t.select(0, 1).select(0, 2).select(0, 1).item() == base.select(0, 1).select(0, 2).select(0, 1).item());

  Tensor s = base.slice(2, 1, 4, 2);  // columns 1 and 3
  REQUIRE(s.shape() == Shape{2, 3, 2});
  REQUIRE(s.storage() == base.storage());
  require_values(s.select(0, 0).select(0, 0), {1, 3});
  {
    NoGradGuard ng;
    s.fill_(-1);
  }
  require_values(base.select(0, 0).select(0, 0), {0, -1, 2, -1});

  Tensor v = base.view({6, 4});
  v.select(0, 5).fill_(7);
  require_values(base.select(0, 1).select(0, 2), {7, 7, 7, 7});

  Tensor u = base.unsqueeze(1);
  REQUIRE(u.shape() == Shape{2, 1, 3, 4});
  REQUIRE(u.squeeze(1).shape() == Shape{2, 3, 4});
  REQUIRE(ones({1, 3, 1}).squeeze().shape() == Shape{3});
  REQUIRE(base.permute({2, 0, 1}).shape() == Shape{4, 2, 3});
  REQUIRE(base.flatten(1).shape() == Shape{2, 12});
  REQUIRE(base.narrow(1, 1, 2).shape() == Shape{2, 2, 4});
}

TEST_CASE("copies across memory orders (transposes, permutes) move every element", "[tensor][views]") {
  // A copy whose source and destination run along different dims goes by tiles (edges,
  // outer dims, dtype conversions, and a destination that is itself the transposed view):
  // each element against index arithmetic on the source's values.
  const Shape sh{5, 37, 66};
  const Tensor x = arange(5 * 37 * 66, kF32).reshape(sh);
  const std::vector<double> xv = x.to_vector<double>();
  auto at = [&](int64_t i, int64_t j, int64_t k) { return xv[size_t((i * sh[1] + j) * sh[2] + k)]; };
  for (const std::vector<int64_t>& perm : {std::vector<int64_t>{0, 2, 1}, {2, 0, 1}, {1, 2, 0}, {2, 1, 0}}) {
    INFO("permute " << perm[0] << perm[1] << perm[2]);
    const Tensor v = x.permute(perm);
    for (DType dt : {kF32, kF64, kBF16}) {
      const Tensor c = v.to(dt).contiguous();
      REQUIRE(c.is_contiguous());
      const std::vector<double> got = c.to_vector<double>();
      int64_t n = 0, bad = 0;
      int64_t idx[3];
      for (idx[perm[0]] = 0; idx[perm[0]] < sh[perm[0]]; ++idx[perm[0]])
        for (idx[perm[1]] = 0; idx[perm[1]] < sh[perm[1]]; ++idx[perm[1]])
          for (idx[perm[2]] = 0; idx[perm[2]] < sh[perm[2]]; ++idx[perm[2]]) {
            const double want = dt == kBF16 ? double(bf16_bits_to_float(float_to_bf16_bits(float(at(idx[0], idx[1], idx[2])))))
                                            : at(idx[0], idx[1], idx[2]);
            if (got[size_t(n++)] != want) ++bad;
          }
      REQUIRE(bad == 0);
    }
  }
  // into a transposed destination: out^T = m, so out = m^T
  const Tensor m = arange(70 * 45, kF32).reshape({70, 45});
  Tensor out = zeros({45, 70});
  {
    NoGradGuard ng;
    out.t().copy_(m);
  }
  const std::vector<double> mv = m.to_vector<double>(), ov = out.to_vector<double>();
  int64_t bad = 0;
  for (int64_t i = 0; i < 70; ++i)
    for (int64_t j = 0; j < 45; ++j)
      if (ov[size_t(j * 70 + i)] != mv[size_t(i * 45 + j)]) ++bad;
  REQUIRE(bad == 0);
}

TEST_CASE("expand broadcasts with stride 0", "[tensor][views]") {
  Tensor col = tensor({1, 2, 3}, kF64).reshape({3, 1});
  Tensor e = col.expand({3, 4});
  REQUIRE(e.strides()[1] == 0);
  REQUIRE(e.storage() == col.storage());
  require_values(e.contiguous().select(0, 2), {3, 3, 3, 3});
  REQUIRE(test::error_of([&] { col.expand({2, 4}); }).find("cannot expand") != std::string::npos);
  // -1 keeps an existing dim; a new leading dim needs a size
  for (Shape bad : {Shape{-1, 3, 4}, Shape{-2, 3, 4}})
    REQUIRE(test::error_of([&] { col.expand(bad); }).find("cannot expand") != std::string::npos);
  REQUIRE(col.expand({0, 3, 4}).numel() == 0);
}

TEST_CASE("random fills of f16 and bf16 are f32's draws rounded once", "[tensor]") {
  for (DType t : {kF16, kBF16}) {
    Generator g1(7), g2(7);
    Tensor h = randn({1001}, t, &g1), f = randn({1001}, kF32, &g2);
    REQUIRE(h.dtype() == t);
    test::require_close(h.to(kF32), f.to(t).to(kF32), 0, 0);
    Tensor u = empty({64}, t);
    u.uniform_(-2, 2);
    REQUIRE(amax(abs(u.to(kF32)), {0}).item() <= 2);
    // U[0, 1) never gives 1: the draw keeps the type's significand bits (rounded to nearest,
    // about 1 in 4000 f16 draws, 1 in 500 bf16, were exactly 1)
    Generator g3(9);
    Tensor r = rand({200000}, t, &g3).to(kF32);
    REQUIRE(amax(r).item() < 1);
    REQUIRE(amax(r).item() > 0.99);
    REQUIRE(amin(r).item() >= 0);
    // a range whose grid is coarser still (1 in 2048 f16 draws of [0.5, 1) rounded to 1): a
    // draw that rounds up to the top is the bottom
    Tensor top = empty({200000}, t);
    top.uniform_(0.5, 1, &g3);
    REQUIRE(amax(top.to(kF32)).item() < 1);
    REQUIRE(amin(top.to(kF32)).item() == 0.5);
  }
  // a reversed range, a negative or non-finite spread: errors, as in PyTorch
  Tensor e = empty({4});
  REQUIRE(test::error_of([&] { e.uniform_(1, 0); }).find("low <= high") != std::string::npos);
  REQUIRE(test::error_of([&] { e.uniform_(0, INFINITY); }).find("low <= high") != std::string::npos);
  REQUIRE(test::error_of([&] { e.normal_(0, -1); }).find("std >= 0") != std::string::npos);
  REQUIRE(test::error_of([&] { e.normal_(NAN, 1); }).find("std >= 0") != std::string::npos);
}

TEST_CASE("item<int64_t>() reads 64-bit integers exactly", "[tensor]") {
  const int64_t big = (int64_t(1) << 53) + 1;  // not a double
  REQUIRE(from_vector<int64_t>({big}, {1}).item<int64_t>() == big);
  REQUIRE(from_vector<int64_t>({-big}, {}).item<int64_t>() == -big);
  REQUIRE(full({1}, 2.75).item<int64_t>() == 2);
  REQUIRE(test::error_of([] { (void)zeros({2}, kI64).item<int64_t>(); }).find("exactly one") !=
          std::string::npos);
}

TEST_CASE("in-place writes: a source sharing memory is read before the write, an expanded "
          "target is refused", "[tensor][views]") {
  NoGradGuard ng;
  for (DType dt : {kF64, kF32, kBF16}) {
    CAPTURE(dt);
    // shifted slices of one buffer, both directions
    Tensor a = arange(6, dt);
    a.narrow(0, 1, 5).copy_(a.narrow(0, 0, 5));
    require_values(a, {0, 0, 1, 2, 3, 4});
    Tensor b = arange(6, dt);
    b.narrow(0, 0, 5).copy_(b.narrow(0, 1, 5));
    require_values(b, {1, 2, 3, 4, 5, 5});
    Tensor c = arange(6, dt);
    c.narrow(0, 1, 5).add_(c.narrow(0, 0, 5));
    require_values(c, {0, 1, 3, 5, 7, 9});
    // a square matrix from its own transpose, and a row broadcast over its own matrix
    Tensor m = arange(9, dt).reshape({3, 3});
    m.copy_(m.t());
    require_values(m, {0, 3, 6, 1, 4, 7, 2, 5, 8});
    Tensor r = arange(9, dt).reshape({3, 3});
    r.copy_(r.select(0, 1));
    require_values(r, {3, 4, 5, 3, 4, 5, 3, 4, 5});
    // the same view, and a permuted target that holds each element once
    Tensor s = arange(4, dt);
    s.copy_(s);
    require_values(s, {0, 1, 2, 3});
    Tensor p = arange(6, dt).reshape({2, 3});
    p.t().mul_(2);
    require_values(p, {0, 2, 4, 6, 8, 10});
  }

  Tensor col = tensor({1, 2, 3}, kF64).reshape({3, 1});
  Tensor e = col.expand({3, 4});
  for (auto& [name, write] : std::vector<std::pair<std::string, std::function<void()>>>{
           {"mul_", [&] { e.mul_(2); }},
           {"add_", [&] { e.add_(ones({3, 4}, kF64)); }},
           {"copy_", [&] { e.copy_(arange(12, kF64).reshape({3, 4})); }},
           {"uniform_", [&] { e.uniform_(0, 1); }},
           {"normal_", [&] { e.normal_(0, 1); }}}) {
    CAPTURE(name);
    std::string err = test::error_of(write);
    REQUIRE(err.find(name + ": the tensor of shape [3, 4]") != std::string::npos);
    REQUIRE(err.find("more than one index") != std::string::npos);
    require_values(col, {1, 2, 3});  // nothing written
  }
  e.fill_(5);  // one value for every index: well defined
  require_values(col, {5, 5, 5});
}

// add_ writes in place in one pass when the operand is of the target's kind (same dtype and
// device, into a row-major target, broadcast or not, itself included), and through a
// temporary otherwise (promotion, alpha, a non-row-major target); the scalar form counts
// integer tensors (batch norm's num_batches_tracked) and refuses a fraction there.
TEST_CASE("add_ of a tensor or a scalar, in place", "[tensor]") {
  NoGradGuard ng;
  Tensor x = arange(6, kF32).reshape({2, 3});
  x.add_(tensor({10, 20, 30}, kF32));  // a broadcast row
  require_values(x, {10, 21, 32, 13, 24, 35});
  x.add_(x);  // the very same view
  require_values(x, {20, 42, 64, 26, 48, 70});
  x.add_(ones({2, 3}, kF32), 0.5);
  require_values(x, {20.5, 42.5, 64.5, 26.5, 48.5, 70.5});
  Tensor h = arange(3, kF16);
  h.add_(tensor({0.25, 0.5, 0.75}, kF32));  // promotes, rounds back to f16
  REQUIRE(h.dtype() == kF16);
  require_values(h, {0.25, 1.5, 2.75});
  Tensor t = arange(6, kF32).reshape({2, 3}).t();  // not row-major
  t.add_(ones({3, 2}, kF32));
  require_values(t.contiguous(), {1, 4, 2, 5, 3, 6});
  Tensor n = zeros({}, kI64);
  n.add_(1);
  n.add_(1);
  REQUIRE(n.item<int64_t>() == 2);
  REQUIRE(test::error_of([&] { n.add_(0.5); }).find("fractional scalar 0.5") != std::string::npos);
  REQUIRE(n.item<int64_t>() == 2);
  Tensor f = full({2}, 1.5, kF32);
  f.add_(-0.25);
  require_values(f, {1.25, 1.25});
  // as libtorch: a floating operand is not truncated into an integer tensor; i64 into i32 is
  Tensor i = tensor({1, 2, 3}, kI32);
  REQUIRE(test::error_of([&] { i.add_(tensor({0.5, 0.7, -0.9}, kF32)); }).find("would be truncated") != std::string::npos);
  i.add_(tensor({1, 1, 1}, kI64));
  REQUIRE(i.dtype() == kI32);
  require_values(i, {2, 3, 4});
}

TEST_CASE("view refuses incompatible strides, reshape copies", "[tensor][views]") {
  Tensor t = arange(6, kF64).reshape({2, 3}).t();
  REQUIRE(test::error_of([&] { t.view({6}); }).find("reshape") != std::string::npos);
  Tensor r = t.reshape({6});
  require_values(r, {0, 3, 1, 4, 2, 5});
  REQUIRE(r.storage() != t.storage());
  require_values(t.contiguous().view({6}), {0, 3, 1, 4, 2, 5});
  REQUIRE(test::error_of([&] { t.reshape({4}); }).find("invalid for 6") != std::string::npos);
  REQUIRE(arange(12).view({-1, 4}).shape() == Shape{3, 4});
}

TEST_CASE("broadcasting in binary ops", "[tensor][broadcast]") {
  Tensor a = tensor({1, 2, 3}, kF64).reshape({3, 1});
  Tensor b = tensor({10, 20, 30, 40}, kF64);
  Tensor c = a + b;
  REQUIRE(c.shape() == Shape{3, 4});
  require_values(c.select(0, 1), {12, 22, 32, 42});
  REQUIRE(broadcast_shapes({5, 1, 3}, {4, 1}) == Shape{5, 4, 3});
  REQUIRE(test::error_of([] { broadcast_shapes({3}, {4}); }).find("do not broadcast") !=
          std::string::npos);
  // a broadcast (stride-0) and a transposed operand together
  Tensor m = arange(6, kF64).reshape({3, 2}).t();  // (2, 3) non-contiguous
  require_values(m * tensor({1, 10, 100}, kF64), {0, 20, 400, 1, 30, 500});
}

TEST_CASE("f16 and bf16 conversions round to nearest even", "[tensor][dtype]") {
  // 1 + 2^-11 is halfway between 1 and the next half (1 + 2^-10): ties to even -> 1.
  REQUIRE(float(Half(1.0f + 0x1p-11f)) == 1.0f);
  REQUIRE(float(Half(1.0f + 3 * 0x1p-11f)) == 1.0f + 0x1p-9f);
  REQUIRE(float(Half(65504.0f)) == 65504.0f);
  REQUIRE(std::isinf(float(Half(70000.0f))));
  REQUIRE(float(Half(0x1p-24f)) == 0x1p-24f);  // smallest subnormal
  REQUIRE(float(Half(0x1p-26f)) == 0.0f);
  REQUIRE(std::isnan(float(Half(NAN))));
  REQUIRE(float(Half(-2.5f)) == -2.5f);
  REQUIRE(float(BFloat16(1.0f + 0x1p-8f)) == 1.0f);  // tie -> even
  REQUIRE(float(BFloat16(1.0f + 3 * 0x1p-8f)) == 1.0f + 0x1p-6f);
  REQUIRE(float(BFloat16(3.0e38f)) == std::ldexp(226.0f, 120));  // 8 significant bits
  // tensors round trip through the storage types
  Tensor x = tensor({0.5, -1.25, 1024, 3.140625});
  require_values(x.to(kF16).to(kF32), {0.5, -1.25, 1024, 3.140625});
  require_values(x.to(kBF16).to(kF32), {0.5, -1.25, 1024, 3.140625});
  REQUIRE(x.to(kF16).nbytes() == 8);
  require_values(tensor({1.7, -2.2, 300}).to(kU8).to(kI64), {1, 254, 44});
}

TEST_CASE("f16 conversions: every half value, and every rounding boundary between them", "[tensor][dtype]") {
  // The conversions are branch-free selects (so loops of them vectorise); checked here
  // against the definition for all 65536 halves.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const uint32_t sign = h >> 15, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    const float f = half_bits_to_float(uint16_t(h));
    INFO("half 0x" << std::hex << h);
    if (exp == 0x1f) {
      REQUIRE((man ? std::isnan(f) : std::isinf(f)));
      REQUIRE(std::signbit(f) == bool(sign));
      continue;
    }
    const double mag = exp ? std::ldexp(1024.0 + man, int(exp) - 25) : std::ldexp(double(man), -24);
    REQUIRE(double(f) == (sign ? -mag : mag));
    REQUIRE(std::signbit(f) == bool(sign));
    REQUIRE(float_to_half_bits(f) == h);  // exact values round trip, -0 included
    // the midpoint to the next half up in magnitude (exact in f32) rounds to the even one,
    // and the floats either side of it to the nearer one
    if ((h & 0x7fff) == 0x7bff) continue;  // 65504: above it lies the overflow threshold
    const float next = half_bits_to_float(uint16_t(h + 1));
    const float mid = float((double(f) + double(next)) / 2);
    REQUIRE(double(mid) == (double(f) + double(next)) / 2);
    REQUIRE(float_to_half_bits(mid) == ((h & 1) ? h + 1 : h));
    REQUIRE(float_to_half_bits(std::nextafter(mid, f)) == h);
    REQUIRE(float_to_half_bits(std::nextafter(mid, next)) == h + 1);
  }
  // overflow: 65520 (the midpoint above 65504) and beyond go to inf; NaN stays NaN
  REQUIRE(float_to_half_bits(std::nextafter(65520.0f, 0.0f)) == 0x7bff);
  REQUIRE(float_to_half_bits(65520.0f) == 0x7c00);
  REQUIRE(float_to_half_bits(-1e30f) == 0xfc00);
  REQUIRE(float_to_half_bits(INFINITY) == 0x7c00);
  REQUIRE((float_to_half_bits(NAN) & 0x7fff) == 0x7e00);
  // below half the smallest subnormal: zero of the same sign; f32 subnormals too
  REQUIRE(float_to_half_bits(0x1p-25f) == 0x0000);  // a tie between 0 and 2^-24: even
  REQUIRE(float_to_half_bits(std::nextafter(0x1p-25f, 1.0f)) == 0x0001);
  REQUIRE(float_to_half_bits(-1e-40f) == 0x8000);
}

TEST_CASE("seeded random init is reproducible", "[tensor][random]") {
  Generator g1(7), g2(7), g3(8);
  auto a = randn({1000}, kF32, &g1).to_vector<float>();
  auto b = randn({1000}, kF32, &g2).to_vector<float>();
  auto c = randn({1000}, kF32, &g3).to_vector<float>();
  REQUIRE(a == b);
  REQUIRE(a != c);
  manual_seed(3);
  Tensor r1 = rand({5});
  manual_seed(3);
  Tensor r2 = rand({5});
  REQUIRE(r1.to_vector<float>() == r2.to_vector<float>());
  Generator g(1);
  Tensor n = randn({200000}, kF64, &g);
  REQUIRE(std::abs(mean(n).item()) < 0.01);
  REQUIRE(std::abs(var(n).item() - 1.0) < 0.02);
  Tensor u = rand({200000}, kF64, &g);
  REQUIRE(amin(u).item() >= 0.0);
  REQUIRE(amax(u).item() < 1.0);
  REQUIRE(std::abs(mean(u).item() - 0.5) < 0.01);
  Tensor k = randint(3, 7, {10000}, kI64, &g);
  REQUIRE(amin(k).item() == 3);
  REQUIRE(amax(k).item() == 6);
}

// randint: every value of a wide range reachable (the draws had 24 random bits: below 2^30 only
// multiples of 64), ranges wider than INT64_MAX, even counts per value, and a range the dtype
// cannot hold refused (it had wrapped: 250..300 as u8 gave 40, 15, ...).
TEST_CASE("randint covers its range evenly and refuses one its dtype cannot hold", "[tensor][random]") {
  Generator g(5);
  auto wide = randint(0, int64_t(1) << 30, {4096}, kI64, &g).to_vector<int64_t>();
  int64_t odd = 0;
  for (int64_t v : wide) {
    REQUIRE((v >= 0 && v < (int64_t(1) << 30)));
    odd += v % 2;
  }
  CHECK((odd > 1800 && odd < 2300));
  const int64_t lo = -(int64_t(1) << 62), hi = int64_t(1) << 62;
  for (int64_t v : randint(lo, hi, {1000}, kI64, &g).to_vector<int64_t>()) REQUIRE((v >= lo && v < hi));
  auto full_range = randint(INT64_MIN, INT64_MAX, {1000}, kI64, &g).to_vector<int64_t>();
  REQUIRE(std::count_if(full_range.begin(), full_range.end(), [](int64_t v) { return v < 0; }) > 400);
  REQUIRE(std::count(full_range.begin(), full_range.end(), INT64_MAX) == 0);
  Tensor k = randint(0, 10, {100000}, kI64, &g);
  for (int64_t c = 0; c < 10; ++c) {
    INFO("value " << c);
    const double n = sum(eq(k, full({}, double(c), kI64))).item();
    REQUIRE(std::abs(n - 10000) < 400);  // about 4 standard deviations
  }
  auto u8 = randint(250, 256, {600}, kU8, &g).to(kI64).to_vector<int64_t>();
  REQUIRE(*std::min_element(u8.begin(), u8.end()) == 250);
  REQUIRE(*std::max_element(u8.begin(), u8.end()) == 255);
  for (auto [l, h, t] : {std::tuple{int64_t(250), int64_t(300), kU8}, std::tuple{int64_t(-1), int64_t(3), kU8},
                         std::tuple{int64_t(0), int64_t(5000000000), kI32}, std::tuple{int64_t(0), int64_t(70000), kF16}}) {
    INFO(l << ", " << h);
    const int64_t l_ = l, h_ = h;  // (clang before 16 lets no lambda capture a structured binding)
    const DType t_ = t;
    REQUIRE(test::error_of([&] { randint(l_, h_, {4}, t_); }).find("does not fit") != std::string::npos);
  }
  Generator a(9), b(9);
  REQUIRE(randint(-5, 5, {33}, kI32, &a).to_vector<int32_t>() == randint(-5, 5, {33}, kI32, &b).to_vector<int32_t>());
  REQUIRE(test::error_of([] { randint(3, 3, {1}); }).find("empty range") != std::string::npos);
}

// Edge rules as PyTorch has them: a dim named twice is an error; t() of a 0-d or 1-d tensor
// is itself and of more than 2 dims an error (it had swapped dims 0 and 1); a 0-d tensor
// squeezes, softmaxes and argmaxes along dim 0 or -1; narrow counts a negative start from
// the end.
TEST_CASE("dims named twice, t() beyond 2 dims, 0-d softmax and argmax, negative narrow", "[tensor]") {
  REQUIRE(test::error_of([] { sum(ones({2, 3}), {1, -1}); }).find("appears more than once") != std::string::npos);
  REQUIRE(test::error_of([] { zeros({2, 3, 4}).t(); }).find("at most 2 dims") != std::string::npos);
  Tensor v = arange(3);
  REQUIRE(v.t().is_same(v));
  REQUIRE(zeros({2, 3}).t().shape() == Shape{3, 2});
  Tensor s = full({}, 3.0);
  REQUIRE(s.squeeze(0).dim() == 0);
  REQUIRE(s.squeeze(-1).item() == 3);
  REQUIRE(test::error_of([&] { s.squeeze(1); }).find("out of range") != std::string::npos);
  Tensor x = full({}, 2.5).requires_grad_(true);
  Tensor p = softmax(x, 0), lp = log_softmax(x, -1);
  REQUIRE(p.dim() == 0);
  REQUIRE(p.item() == 1);
  REQUIRE(lp.item() == 0);
  (p + lp).backward();
  REQUIRE(x.grad().item() == 0);
  REQUIRE(argmax(s, 0).dim() == 0);
  REQUIRE(argmax(s, -1).item() == 0);
  REQUIRE(test::error_of([&] { argmax(s, 1); }).find("out of range") != std::string::npos);
  Tensor r = arange(5, kF32);
  REQUIRE(r.narrow(0, -2, 2).to_vector<float>() == std::vector<float>{3, 4});
  REQUIRE(test::error_of([&] { r.narrow(0, -6, 1); }).find("outside dim") != std::string::npos);
}

// Mixed dtypes meet in their common one, as torch.cat and torch.stack (it had been an error,
// which autocast regions, where a 16-bit result meets an f32 tensor, ran into); gradients go
// back to each input in its own dtype.
TEST_CASE("concat and stack of mixed dtypes promote as binary ops do", "[tensor]") {
  Tensor a = full({2}, 1.5, kF16).requires_grad_(true), b = full({1}, 2.25, kF32).requires_grad_(true);
  Tensor c = concat({a, b});
  REQUIRE(c.dtype() == kF32);
  REQUIRE(c.to_vector<float>() == std::vector<float>{1.5f, 1.5f, 2.25f});
  sum(c * 2.0).backward();
  REQUIRE(a.grad().dtype() == kF16);
  REQUIRE(a.grad().to(kF32).to_vector<float>() == std::vector<float>{2, 2});
  REQUIRE(b.grad().to_vector<float>() == std::vector<float>{2});
  REQUIRE(stack({full({2}, 1.0, kBF16), full({2}, 3.0, kF16)}).dtype() == kF32);  // (as binary ops)
  REQUIRE(stack({arange(2, kI64), full({2}, 0.5, kF64)}).to_vector<double>() == std::vector<double>{0, 1, 0.5, 0.5});
  REQUIRE(concat({arange(2, kU8), arange(2, kI32)}).dtype() == kI32);
}

TEST_CASE("printing", "[tensor]") {
  std::string s = tensor({1, 2.5}).str();
  REQUIRE(s.find("tensor([1.0000, 2.5000]") == 0);
  REQUIRE(s.find("dtype=f32") != std::string::npos);
  REQUIRE(arange(3, kI64).str().find("[0, 1, 2]") != std::string::npos);
  // 64-bit integers print exactly (through a double, INT64_MAX printed as INT64_MIN)
  const std::string i64 = from_vector<int64_t>({INT64_MAX, (int64_t(1) << 53) + 1, -3}, {3}).str();
  REQUIRE(i64.find("[9223372036854775807, 9007199254740993, -3]") != std::string::npos);
  std::string big = arange(5000).str();
  REQUIRE(big.find("...") != std::string::npos);
  REQUIRE(big.size() < 400);
  REQUIRE(Tensor().str() == "tensor(undefined)");
}

TEST_CASE("bad uses give clear errors", "[tensor][errors]") {
  REQUIRE(test::error_of([] { ones({2}).item(); }).find("exactly one") != std::string::npos);
  REQUIRE(test::error_of([] { matmul(ones({2, 2}, kF32), ones({2, 2}, kF64)); })
              .find("dtype mismatch") != std::string::npos);
  REQUIRE(test::error_of([] { ones({2}).select(1, 0); }).find("out of range") != std::string::npos);
  REQUIRE(test::error_of([] { Device("gpu"); }).find("unknown device") != std::string::npos);
  REQUIRE(test::error_of([] { dtype_from_name("f8"); }).find("unknown dtype") != std::string::npos);
  // factories do not wrap or saturate a value an integer dtype cannot hold (300 as u8 was 44)
  for (const auto& c : {std::pair{300.0, kU8}, {-1.0, kU8}, {1e20, kI64}, {0x1p31, kI32}, {0.5, kI32}, {double(NAN), kI64},
                        {1e300, kF32}, {-1e39, kBF16}, {65520.0, kF16}}) {
    const double value = c.first;  // (clang 14 captures no structured binding)
    const DType dt = c.second;
    INFO(value << " as " << dt);
    REQUIRE(test::error_of([=] { full({2}, value, dt); }).find("cannot be stored in a") != std::string::npos);
    REQUIRE(test::error_of([=] { tensor({1, value}, dt); }).find("cannot be stored in a") != std::string::npos);
    Tensor z = zeros({2}, dt);
    REQUIRE(test::error_of([=] { Tensor(z).fill_(value); }).find("cannot be stored in a") != std::string::npos);
    require_values(z, {0, 0});
  }
  require_values(full({1}, 255, kU8), {255});
  // a floating dtype takes its finite range, infinities and NaN (1e300 as f32 became inf)
  require_values(full({1}, 65504, kF16), {65504});
  REQUIRE(full({1}, -3e38, kBF16).item() < -2.9e38);
  REQUIRE(tensor({1e300}, kF64).item() == 1e300);
  REQUIRE(std::isinf(full({1}, INFINITY, kF16).item()));
  REQUIRE(std::isnan(zeros({1}).fill_(NAN).item()));
  require_values(tensor({-0x1p31, 0x1p31 - 1}, kI32), {-0x1p31, 0x1p31 - 1});
  if (!cuda_available()) {
    std::string msg = test::error_of([] { ones({2}).to(kCUDA); });
    REQUIRE((msg.find("without CUDA") != std::string::npos ||
             msg.find("no CUDA device") != std::string::npos));
    // the reason cuda_unavailable_reason gives is the one the error names
    const std::string why = cuda_unavailable_reason();
    INFO(msg << " / " << why);
    REQUIRE_FALSE(why.empty());
    REQUIRE(msg.find(why) != std::string::npos);
  } else {
    REQUIRE(cuda_unavailable_reason().empty());
  }
}

TEST_CASE("device_name names the CPU and each CUDA device", "[tensor][cuda]") {
  REQUIRE_FALSE(device_name(kCPU).empty());
  if (cuda_available()) {
    const std::string name = device_name(kCUDA);
    INFO(name);
    REQUIRE_FALSE(name.empty());
    REQUIRE(name != "cuda:0");
    REQUIRE(test::error_of([] { device_name(Device("cuda:99")); }).find("only") !=
            std::string::npos);
  } else {
    REQUIRE(test::error_of([] { device_name(kCUDA); }).find("CUDA") != std::string::npos);
  }
}

TEST_CASE("the caching allocator reuses freed blocks", "[tensor][memory]") {
  empty_cache();
  { Tensor warm = empty({1 << 20}); }
  MemoryStats before = memory_stats();
  for (int i = 0; i < 10; ++i) Tensor t = empty({1 << 20});
  MemoryStats after = memory_stats();
  REQUIRE(after.num_system_allocs == before.num_system_allocs);
  REQUIRE(after.num_allocs == before.num_allocs + 10);
  REQUIRE(after.peak_allocated >= (size_t(1) << 22));
}

// White-box: the allocator every device shares, over a fake system allocator with an 8 MiB
// budget, so the out-of-memory path runs without exhausting a real device.
#include "core/allocator.h"

#include <cstdlib>
#include <map>

TEST_CASE("out of memory: the allocator returns its cache, retries, then names the sizes",
          "[tensor][memory]") {
  const size_t budget = size_t(8) << 20;
  size_t used = 0;
  int system_frees = 0;
  std::map<void*, size_t> live;
  CachingAllocator a(
      "test:0",
      [&](size_t n) -> void* {
        if (used + n > budget) return nullptr;
        void* p = std::malloc(n);
        used += n;
        live[p] = n;
        return p;
      },
      [&](void* p) {
        used -= live.at(p);
        live.erase(p);
        std::free(p);
        ++system_frees;
      });
  const size_t four = size_t(4) << 20, six = size_t(6) << 20;
  void* x = a.allocate(four);
  a.deallocate(x, four);  // cached: still held from the system
  REQUIRE(a.stats().reserved == four);
  void* y = a.allocate(six);  // 4 + 6 > 8: the cache goes back to the system, then it fits
  REQUIRE(system_frees == 1);
  REQUIRE(a.stats().reserved == six);
  const std::string e = test::error_of([&] { a.allocate(six); });
  REQUIRE(e.find("out of memory on test:0: tried to allocate 6 MiB (6291456 bytes); 6 MiB already "
                 "in use by tensors (peak 6 MiB)") != std::string::npos);
  a.deallocate(y, six);
  REQUIRE(a.stats().allocated == 0);
}

TEST_CASE("LIBNN_NO_MEMORY_CACHING=1: exact sizes from the system, given back when freed",
          "[tensor][memory]") {
  std::vector<size_t> asked;
  int frees = 0;
  auto make = [&] {
    return CachingAllocator(
        "test:0",
        [&](size_t n) {
          asked.push_back(n);
          return std::malloc(n);
        },
        [&](void* p) {
          ++frees;
          std::free(p);
        });
  };
  const char* before = std::getenv("LIBNN_NO_MEMORY_CACHING");
  const std::string saved = before ? before : "";
  setenv("LIBNN_NO_MEMORY_CACHING", "1", 1);
  {
    CachingAllocator a = make();
    void* p = a.allocate(100);
    REQUIRE(asked == std::vector<size_t>{100});
    REQUIRE(a.stats().reserved == 100);
    a.deallocate(p, 100);
    REQUIRE(frees == 1);
    REQUIRE(a.stats().reserved == 0);
    REQUIRE(a.stats().allocated == 0);
  }
  setenv("LIBNN_NO_MEMORY_CACHING", "0", 1);  // anything but 1: the cache as usual
  {
    CachingAllocator a = make();
    void* p = a.allocate(100);
    REQUIRE(asked.back() == 512);
    a.deallocate(p, 100);
    REQUIRE(frees == 1);  // kept
  }
  if (before) setenv("LIBNN_NO_MEMORY_CACHING", saved.c_str(), 1);
  else unsetenv("LIBNN_NO_MEMORY_CACHING");
}

// The memory the CPU allocator may still take, read from fake /proc and cgroup files.
#include "backend/cpu/system_memory.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

TEST_CASE("memory_room: the machine's and the cgroups' limits, whichever is least",
          "[tensor][memory]") {
  namespace fs = std::filesystem;
  const fs::path root = fs::temp_directory_path() / ("libnn_room_" + std::to_string(::getpid()));
  fs::remove_all(root);
  auto write = [&](const std::string& path, const std::string& text) {
    fs::create_directories((root / path).parent_path());
    std::ofstream(root / path) << text;
  };
  auto room_of = [&] { return cpu::memory_room(root.string()); };
  const char* cgroup = "under the memory cgroup's limit";
  REQUIRE_FALSE(room_of().has_value());  // nothing readable
  write("proc/meminfo", "MemTotal:  4096 kB\nMemFree:  10 kB\nMemAvailable:  1000 kB\nSwapFree:  0 kB\n");
  REQUIRE(room_of());
  CHECK(room_of()->bytes == 1000 * 1024);
  CHECK(room_of()->where == "on the machine");

  SECTION("cgroup v2 with a limit: limit - (usage - page cache)") {
    write("proc/self/cgroup", "0::/job\n");
    write("sys/fs/cgroup/job/cgroup.procs", "1\n");
    write("sys/fs/cgroup/job/memory.max", "600000\n");
    write("sys/fs/cgroup/job/memory.current", "500000\n");
    write("sys/fs/cgroup/job/memory.stat", "anon 380000\nfile 120000\nactive_file 20000\ninactive_file 100000\n");
    CHECK(room_of()->bytes == 220000);
    CHECK(room_of()->where == cgroup);
    write("sys/fs/cgroup/job/memory.current", "800000\n");  // over the limit: no room
    CHECK(room_of()->bytes == 0);
    // free swap is room too: a group at its limit swaps before it is killed
    write("proc/meminfo", "MemAvailable:  1000 kB\nSwapFree:  1 kB\n");
    CHECK(room_of()->bytes == 1024);
    write("sys/fs/cgroup/job/memory.max", "max\n");  // no limit: the machine's
    CHECK(room_of()->bytes == 1001 * 1024);
    CHECK(room_of()->where == "on the machine");
  }
  SECTION("cgroup v2: a limit on an ancestor holds, folders without the files are skipped") {
    write("proc/self/cgroup", "0::/user.slice/mid/job\n");
    write("sys/fs/cgroup/user.slice/mid/job/cgroup.procs", "1\n");  // no memory files here
    write("sys/fs/cgroup/user.slice/memory.max", "300000\n");
    write("sys/fs/cgroup/user.slice/memory.current", "100000\n");
    write("sys/fs/cgroup/user.slice/mid/memory.max", "max\n");
    write("sys/fs/cgroup/user.slice/mid/memory.current", "90000\n");
    CHECK(room_of()->bytes == 200000);
    CHECK(room_of()->where == cgroup);
  }
  SECTION("cgroup v2 in a container (its path not under the mount): the mount's files") {
    write("proc/self/cgroup", "0::/elsewhere/job\n");
    write("sys/fs/cgroup/memory.max", "500000\n");
    write("sys/fs/cgroup/memory.current", "100000\n");
    CHECK(room_of()->bytes == 400000);
  }
  SECTION("cgroup v1: the group and its ancestors, and the hierarchical limit") {
    write("proc/self/cgroup", "5:cpuacct,cpu:/x\n4:memory:/a/job\n0::/\n");
    write("sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");  // v1's "none"
    write("sys/fs/cgroup/memory/memory.usage_in_bytes", "900000\n");
    write("sys/fs/cgroup/memory/a/job/cgroup.procs", "1\n");
    write("sys/fs/cgroup/memory/a/job/memory.limit_in_bytes", "9223372036854771712\n");
    write("sys/fs/cgroup/memory/a/job/memory.usage_in_bytes", "300000\n");
    write("sys/fs/cgroup/memory/a/job/memory.stat", "cache 5\ntotal_active_file 10000\ntotal_inactive_file 40000\n");
    CHECK(room_of()->where == "on the machine");
    write("sys/fs/cgroup/memory/a/memory.limit_in_bytes", "800000\n");
    write("sys/fs/cgroup/memory/a/memory.usage_in_bytes", "500000\n");
    CHECK(room_of()->bytes == 300000);
    CHECK(room_of()->where == cgroup);
    // the ancestors not mounted: only the hierarchical limit against the group's own usage
    fs::remove_all(root / "sys/fs/cgroup/memory/a/memory.limit_in_bytes");
    write("sys/fs/cgroup/memory/a/job/memory.stat",
          "hierarchical_memory_limit 400000\ntotal_active_file 10000\ntotal_inactive_file 40000\n");
    CHECK(room_of()->bytes == 150000);
  }
  fs::remove_all(root);
}

TEST_CASE("the CPU refuses a block the machine cannot hold, with an out-of-memory error",
          "[tensor][memory]") {
  auto room = cpu::memory_room();
  if (!room) {
    WARN("no /proc/meminfo (not Linux): test skipped");
    return;
  }
  const size_t before = memory_stats().allocated;
  // Twice what is left (at least a checked block): Linux's overcommit could hand this out, and
  // the process would be killed when the pages are touched.
  const int64_t n = int64_t(std::max(room->bytes, size_t(64) << 20) / 2);  // f32: 2 x that in bytes
  const std::string e = test::error_of([&] { empty({n}); });
  INFO(e);
  CHECK(e.find("out of memory on cpu: tried to allocate") != std::string::npos);
  CHECK((e.find("MiB left on the machine") != std::string::npos ||
         e.find("MiB left under the memory cgroup's limit") != std::string::npos));
  CHECK(memory_stats().allocated == before);
  Tensor fine = ones({1 << 24});  // 64 MiB, checked and given
  CHECK(sum(fine).item() == double(1 << 24));
}

TEST_CASE("the out-of-memory error ends with what the device has left", "[tensor][memory]") {
  CachingAllocator a(
      "test:0", [](size_t) -> void* { return nullptr; }, [](void*) {},
      [] { return std::string("3 MiB left on the machine"); });
  CHECK(test::error_of([&] { a.allocate(1 << 20); })
            .find("tried to allocate 1 MiB (1048576 bytes); 0 MiB already in use by tensors (peak 0 MiB); "
                  "3 MiB left on the machine") != std::string::npos);
}

TEST_CASE("split and chunk give torch's pieces, views with gradients", "[tensor][shape]") {
  Tensor x = arange(0.0, 14.0, 1.0, kF64).reshape({2, 7}).requires_grad_();
  auto sizes = [](const std::vector<Tensor>& ps, int64_t d) {
    std::vector<int64_t> s;
    for (const Tensor& p : ps) s.push_back(p.shape()[d]);
    return s;
  };
  REQUIRE(sizes(split(x, 3, 1), 1) == std::vector<int64_t>{3, 3, 1});
  REQUIRE(sizes(split(x, 7, -1), 1) == std::vector<int64_t>{7});
  REQUIRE(sizes(split(x, 10, 1), 1) == std::vector<int64_t>{7});
  REQUIRE(sizes(chunk(x, 3, 1), 1) == std::vector<int64_t>{3, 3, 1});
  REQUIRE(sizes(chunk(x, 4, 1), 1) == std::vector<int64_t>{2, 2, 2, 1});
  REQUIRE(sizes(chunk(x, 6, 1), 1) == std::vector<int64_t>{2, 2, 2, 1});  // torch: fewer pieces
  REQUIRE(sizes(chunk(x, 2, 0), 0) == std::vector<int64_t>{1, 1});
  REQUIRE(sizes(split(zeros({0, 3}), 2, 0), 0) == std::vector<int64_t>{0});
  REQUIRE(sizes(chunk(zeros({0, 3}), 3, 0), 0) == std::vector<int64_t>{0, 0, 0});  // torch's count
  require_values(split(x, 3, 1)[2].reshape({-1}), {6, 13});
  // gradients flow back from each piece into its place
  std::vector<Tensor> ps = chunk(x, 3, 1);
  add(sum(ps[0]), add(mul(sum(ps[1]), 2.0), mul(sum(ps[2]), 3.0))).backward();
  require_values(x.grad().reshape({-1}), {1, 1, 1, 2, 2, 2, 3, 1, 1, 1, 2, 2, 2, 3});
  REQUIRE(test::error_of([&] { split(x, 0, 1); }).find("piece size must be positive") != std::string::npos);
  REQUIRE(test::error_of([&] { chunk(x, 0, 1); }).find("number of chunks must be positive") != std::string::npos);
  REQUIRE(test::error_of([&] { chunk(x, 2, 2); }).find("out of range") != std::string::npos);
}

TEST_CASE("pad: constant padding and crops, as torch's F.pad, with gradients", "[tensor][shape]") {
  Tensor x = arange(1.0, 7.0, 1.0, kF64).reshape({2, 3});
  // last dim: 1 before, crop 1 after; first dim: 2 after
  require_values(pad(x, {1, -1, 0, 2}, -5).reshape({-1}),
                 {-5, 1, 2, -5, 4, 5, -5, -5, -5, -5, -5, -5});
  REQUIRE(pad(x, {1, -1, 0, 2}).shape() == Shape{4, 3});
  test::require_close(pad(x, {}), x, 0, 0);
  // new memory whatever the amounts, as F.pad's: writing the result leaves x as it was
  for (const std::vector<int64_t>& amounts : {std::vector<int64_t>{}, std::vector<int64_t>{0, 0}, std::vector<int64_t>{-1, 0}}) {
    Tensor p = pad(x, amounts);
    p.fill_(7.0);
    require_values(x.reshape({-1}), {1, 2, 3, 4, 5, 6});
  }
  test::require_close(pad(x, {-1, -1}), x.narrow(1, 1, 1), 0, 0);
  test::require_gradcheck([](const std::vector<Tensor>& in) { return pad(in[0], {2, -1, -1, 3}, 1.5); },
                          {test::rnd({2, 4, 5}, 41)});
  test::require_gradcheck([](const std::vector<Tensor>& in) { return pad(in[0].t(), {1, 1}); },
                          {test::rnd({3, 2}, 42)});
  auto has = [](const std::string& e, const char* what) { INFO(e); return e.find(what) != std::string::npos; };
  REQUIRE(has(test::error_of([&] { pad(x, {1}); }), "two amounts per padded dim, at most 4"));
  REQUIRE(has(test::error_of([&] { pad(x, {1, 1, 1, 1, 1, 1}); }), "at most 4 for a 2-d tensor, got 6"));
  REQUIRE(has(test::error_of([&] { pad(x, {-2, -2}); }), "cropping 4 from dim 1 of size 3"));
  // a fill value its integer dtype cannot hold is refused, naming pad (300 as u8 was 44)
  REQUIRE(has(test::error_of([&] { pad(ones({2}, kU8), {1, 1}, 300); }), "pad: the value 300 cannot be stored"));
  require_values(pad(ones({2}, kU8), {1, 0}, 255), {255, 1, 1});
}

TEST_CASE("pad: reflect, replicate and circular, as torch's F.pad modes", "[tensor][shape]") {
  // (PyTorch's values and gradients are in test_torch_reference.cpp)
  const Tensor x = arange(1.0, 5.0, 1.0, kF64).reshape({1, 4});
  require_values(pad(x, {2, 3}, PadMode::reflect), {3, 2, 1, 2, 3, 4, 3, 2, 1});
  require_values(pad(x, {2, 3}, PadMode::replicate), {1, 1, 1, 2, 3, 4, 4, 4, 4});
  require_values(pad(x, {2, 4}, PadMode::circular), {3, 4, 1, 2, 3, 4, 1, 2, 3, 4});
  require_values(pad(x, {1, 0, 1, 1}, PadMode::replicate).reshape({-1}),
                 {1, 1, 2, 3, 4, 1, 1, 2, 3, 4, 1, 1, 2, 3, 4});
  // the first dim too (any dim), a view's values, new memory with nothing padded
  require_values(pad(x.t(), {0, 0, 1, 1}, PadMode::reflect).reshape({-1}), {2, 1, 2, 3, 4, 3});
  Tensor same = pad(x, {0, 0}, PadMode::reflect);
  same.fill_(0.0);
  require_values(x, {1, 2, 3, 4});
  REQUIRE(pad(x, {1, 1}, PadMode::constant, 9.0).to_vector<double>()[0] == 9.0);
  test::require_gradcheck([](const std::vector<Tensor>& in) { return pad(in[0], {2, 1, 0, 1}, PadMode::reflect); },
                          {test::rnd({2, 3, 4}, 43)});
  auto has = [](const std::string& e, const char* what) { INFO(e); return e.find(what) != std::string::npos; };
  REQUIRE(has(test::error_of([&] { pad(x, {4, 0}, PadMode::reflect); }), "needs each less than the size of dim 1 (4)"));
  REQUIRE(has(test::error_of([&] { pad(x, {0, 5}, PadMode::circular); }), "at most the size of dim 1 (4)"));
  REQUIRE(has(test::error_of([&] { pad(x, {-1, 0}, PadMode::replicate); }), "amounts >= 0"));
  REQUIRE(has(test::error_of([&] { pad(zeros({2, 0}), {1, 1}, PadMode::replicate); }), "empty dim 1"));
  REQUIRE(has(test::error_of([&] { pad(x, {1}, PadMode::reflect); }), "two amounts per padded dim"));
}

TEST_CASE("factories and reads refuse what they cannot do exactly", "[tensor][errors]") {
  test::require_error("from_blob: a null pointer for 3 elements", [] { from_blob(nullptr, {3}, kF32); });
  REQUIRE(from_blob(nullptr, {0}, kF32).numel() == 0);
  test::require_error("has too many elements", [] { ones({1, 1}).expand({int64_t(1) << 40, int64_t(1) << 40}); });
  // a floating dtype's exact integers: no draw rounds to high
  test::require_error("does not fit a bf16 tensor (its integers are exact in [-256, 256])",
                      [] { randint(0, 1000, {4}, kBF16); });
  test::require_error("does not fit a f16 tensor", [] { randint(0, 2050, {4}, kF16); });
  const Tensor r = randint(0, 257, {20000}, kBF16);
  const std::vector<float> v = r.to_vector<float>();
  REQUIRE(*std::max_element(v.begin(), v.end()) <= 256.f);
  REQUIRE(*std::min_element(v.begin(), v.end()) >= 0.f);
  // item<int32_t>, item<int64_t>: a value the type cannot hold throws
  test::require_error("item(): 5000000000 does not fit int32_t",
                      [] { full({}, 5e9, kI64).item<int32_t>(); });
  REQUIRE(full({}, 5e9, kI64).item<int64_t>() == 5000000000);
  REQUIRE(full({}, -2147483648.0, kI64).item<int32_t>() == INT32_MIN);
  test::require_error("does not fit int64_t", [] { full({}, 1e30, kF64).item<int64_t>(); });
  test::require_error("does not fit int32_t", [] { full({}, NAN, kF32).item<int32_t>(); });
  REQUIRE(full({}, -3.75, kF32).item<int32_t>() == -3);
}
