#include <limits>
#include <type_traits>

#include "backend/backend.h"
#include "backend/cpu/gemm.h"
#if defined(__x86_64__)
#include <immintrin.h>
#endif
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
  // a large product, threaded inside the GEMM
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

// An inner dim of 0 is a sum of nothing: zeros (plus the bias), and empty gradients.
TEST_CASE("matmul and linear with an empty inner dim", "[matmul]") {
  Tensor a = rnd({5, 0}, 1), b = rnd({0, 4}, 2), w = rnd({4, 0}, 3), bias = rnd({4}, 4);
  Tensor x = rnd({2, 3, 0}, 5);
  Tensor c = matmul(a, b), l = linear(x, w, bias);
  test::require_close(c, zeros({5, 4}, kF64), 0, 0);
  test::require_close(l, bias.detach().expand({2, 3, 4}), 0, 0);
  sum(c).backward();
  sum(l).backward();
  REQUIRE(a.grad().shape() == Shape{5, 0});
  REQUIRE(b.grad().shape() == Shape{0, 4});
  REQUIRE(x.grad().shape() == Shape{2, 3, 0});
  REQUIRE(w.grad().shape() == Shape{4, 0});
  test::require_close(bias.grad(), full({4}, 6.0, TensorOptions(kF64)), 0, 0);
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

// White-box: the CPU backend's GEMM (packed f32 kernel, Eigen otherwise) against a naive
// double product, over edge tiles, several K slices, column blocks wider than one pack, both
// layouts of each operand, general strides, and alpha / beta (beta == 0 must not read C).
// T = BFloat16 checks gemm_bf16 (bf16 operands, f32 result) against the double product of
// the same bf16 values.
namespace {
// With `prepacked` (float only), B goes through pack_b_once and gemm_prepacked.
template <typename T>
void check_gemm(int64_t M, int64_t N, int64_t K, int a_layout, int b_layout, double alpha,
                double beta, uint32_t seed, bool prepacked = false) {
  constexpr bool bf16 = std::is_same_v<T, nn::BFloat16>;
  using CT = std::conditional_t<bf16, float, T>;  // the result's type
  // layout 0: row-major, 1: column-major (a transpose read in place), 2: both strides > 1
  auto fill = [&](auto& v) {
    for (auto& x : v) {
      seed = seed * 1664525u + 1013904223u;
      x = std::remove_reference_t<decltype(x)>(float(double(seed >> 8) / double(1 << 24) * 2 - 1));
    }
  };
  auto make = [&](int64_t R, int64_t C, int layout, std::vector<T>& buf) {
    buf.resize(size_t(layout == 2 ? 3 * R * C + 3 : R * C));
    fill(buf);
    if (layout == 0) return nn::cpu::MatRef<T>{buf.data(), C, 1};
    if (layout == 1) return nn::cpu::MatRef<T>{buf.data(), 1, R};
    return nn::cpu::MatRef<T>{buf.data(), 3 * C, 3};
  };
  std::vector<T> abuf, bbuf;
  auto A = make(M, K, a_layout, abuf);
  auto B = make(K, N, b_layout, bbuf);
  const int64_t ldc = N + 3;
  std::vector<CT> c(size_t(M * ldc));
  fill(c);
  if (beta == 0) std::fill(c.begin(), c.end(), std::numeric_limits<CT>::quiet_NaN());
  std::vector<CT> c0 = c;
  if constexpr (bf16) {
    auto bits = [](const nn::cpu::MatRef<T>& X) {
      return nn::cpu::MatRef<uint16_t>{reinterpret_cast<const uint16_t*>(X.p), X.rs, X.cs};
    };
    nn::cpu::gemm_bf16(M, N, K, float(alpha), bits(A), bits(B), float(beta), c.data(), ldc);
  } else if constexpr (std::is_same_v<T, float>) {
    if (prepacked)
      nn::cpu::gemm_prepacked(M, N, K, T(alpha), A, *nn::cpu::pack_b_once(K, N, B), T(beta),
                              c.data(), ldc);
    else
      nn::cpu::gemm<T>(M, N, K, T(alpha), A, B, T(beta), c.data(), ldc);
  } else {
    nn::cpu::gemm<T>(M, N, K, T(alpha), A, B, T(beta), c.data(), ldc);
  }
  const double tol = std::is_same_v<CT, float> ? 2e-6 * double(K + 1) : 1e-12 * double(K + 1);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < ldc; ++j) {
      const double got = c[i * ldc + j];
      if (j >= N) {  // padding between rows untouched
        REQUIRE((std::isnan(got) ? std::isnan(double(c0[i * ldc + j]))
                                 : got == double(c0[i * ldc + j])));
        continue;
      }
      double want = 0;
      for (int64_t k = 0; k < K; ++k)
        want += double(float(A.p[i * A.rs + k * A.cs])) * double(float(B.p[k * B.rs + j * B.cs]));
      want = alpha * want + (beta == 0 ? 0.0 : beta * double(c0[i * ldc + j]));
      if (!(std::abs(got - want) <= tol)) {
        INFO("M " << M << " N " << N << " K " << K << " layouts " << a_layout << b_layout
                  << " beta " << beta << " at (" << i << ", " << j << "): got " << got
                  << ", expected " << want);
        REQUIRE(std::abs(got - want) <= tol);
      }
    }
}
}  // namespace

#if defined(__x86_64__)
TEST_CASE("CPU GEMM with denormal operands: values, and the caller's FP mode kept", "[matmul]") {
  // The packed kernels flush denormals while they run (an FMA meeting one is 100x slower on
  // Intel CPUs); the caller's MXCSR, and so its own denormal arithmetic, must be untouched.
  using nn::cpu::F32Kernel;
  const test::CpuKernelGuard restore;
  for (F32Kernel kernel : {F32Kernel::avx2, F32Kernel::avx512}) {
    if (!nn::cpu::f32_kernel_supported(kernel)) continue;
    nn::cpu::set_f32_kernel(kernel);
    for (int64_t n : {40, 400}) {  // one thread, and a product big enough for the team
      std::vector<float> a(size_t(n * n), 1e-39f), b(size_t(n * n), 0.5f), c(size_t(n * n), 7.f);
      for (int64_t i = 0; i < n; ++i) a[size_t(i * n + i)] = 2.f;  // a denormal-filled 2 I
      // the control bits (FTZ, DAZ, rounding, exception masks), not the six sticky status
      // flags, which any inexact operation may raise
      constexpr unsigned kControl = ~0x3Fu;
      const unsigned csr = _mm_getcsr() & kControl;
      nn::cpu::gemm<float>(n, n, n, 1.f, nn::cpu::row_major<float>(a.data(), n),
                           nn::cpu::row_major<float>(b.data(), n), 0.f, c.data(), n);
      REQUIRE((_mm_getcsr() & kControl) == csr);
      for (float v : c) REQUIRE(std::abs(v - 1.f) < 1e-6f);
      volatile float tiny = 1e-38f;
      REQUIRE(tiny * 0.5f > 0.f);  // still gradual underflow here
    }
  }
}
#endif

TEST_CASE("CPU GEMM matches a naive product on every tile shape and layout", "[matmul]") {
  using nn::cpu::F32Kernel;
  const test::CpuKernelGuard restore;
  // every f32 kernel this CPU can run: Eigen's, the AVX2 tile (6 x 16), the AVX-512 tile (8 x 32)
  for (F32Kernel kernel : {F32Kernel::eigen, F32Kernel::avx2, F32Kernel::avx512}) {
    if (!nn::cpu::f32_kernel_supported(kernel)) {
      WARN("f32 kernel " << int(kernel) << " not supported on this CPU: not checked");
      continue;
    }
    nn::cpu::set_f32_kernel(kernel);
    INFO("f32 kernel " << int(kernel));
    uint32_t seed = 1;
    for (int64_t M : {1, 2, 5, 6, 7, 8, 9, 13, 150})
      for (int64_t N : {1, 15, 16, 17, 31, 32, 33, 70})
        for (int64_t K : {0, 1, 9, 300})
          for (int layouts = 0; layouts < 4; ++layouts) {
            const double beta = layouts == 0 ? 0.0 : layouts == 1 ? 1.0 : -0.75;
            check_gemm<float>(M, N, K, layouts & 1, layouts >> 1, 0.5, beta, seed++);
            check_gemm<float>(M, N, K, layouts & 1, layouts >> 1, 0.5, beta, seed++, true);
            if (kernel == F32Kernel::eigen && M * N * K < 20000)
              check_gemm<double>(M, N, K, layouts >> 1, layouts & 1, 1.5, beta, seed++);
          }
    // general strides (neither is 1) on both paths
    check_gemm<float>(23, 37, 29, 2, 2, 1.0, 0.5, seed++);
    check_gemm<double>(23, 37, 29, 2, 0, 1.0, 0.0, seed++);
    // threaded: a grid of blocks over rows and columns, more columns than one packed block
    // (3072), more rows than one packed block (144), K over one slice (256)
    for (bool prepacked : {false, true}) {
      check_gemm<float>(300, 3100, 20, 0, 1, 1.0, 0.0, seed++, prepacked);
      check_gemm<float>(2, 3100, 300, 1, 0, 1.0, 1.0, seed++, prepacked);
      check_gemm<float>(400, 48, 600, 0, 0, -1.0, 0.25, seed++, prepacked);
      check_gemm<float>(32, 1000, 520, 0, 1, 1.0, 0.0, seed++, prepacked);  // a recurrence's step
    }
  }
}

TEST_CASE("CPU GEMM with B packed once: another kernel, shape or a change of B after packing", "[matmul]") {
  // Panels packed for one kernel are not read by another (the product packs B as usual); a
  // packed operand of another shape is refused; the packed copy keeps B's values as packed.
  using nn::cpu::F32Kernel;
  const test::CpuKernelGuard restore;
  const int64_t M = 9, N = 40, K = 300;
  std::vector<float> a(size_t(M * K)), b(size_t(K * N)), c(size_t(M * N)), want(size_t(M * N));
  for (size_t i = 0; i < a.size(); ++i) a[i] = float(i % 7) - 3.f;
  for (size_t i = 0; i < b.size(); ++i) b[i] = float(i % 5) - 2.f;  // small integers: exact sums
  const auto A = nn::cpu::row_major<float>(a.data(), K), B = nn::cpu::row_major<float>(b.data(), N);
  nn::cpu::gemm<float>(M, N, K, 1.f, A, B, 0.f, want.data(), N);
  for (F32Kernel packed_for : {F32Kernel::eigen, F32Kernel::avx2, F32Kernel::avx512})
    for (F32Kernel run_on : {F32Kernel::eigen, F32Kernel::avx2, F32Kernel::avx512}) {
      if (!nn::cpu::f32_kernel_supported(packed_for) || !nn::cpu::f32_kernel_supported(run_on)) continue;
      INFO("packed for " << int(packed_for) << ", run on " << int(run_on));
      nn::cpu::set_f32_kernel(packed_for);
      const auto pb = nn::cpu::pack_b_once(K, N, B);
      nn::cpu::set_f32_kernel(run_on);
      std::fill(c.begin(), c.end(), -1.f);
      nn::cpu::gemm_prepacked(M, N, K, 1.f, A, *pb, 0.f, c.data(), N);
      REQUIRE(c == want);
    }
  nn::cpu::set_f32_kernel(restore.f32);
  const auto pb = nn::cpu::pack_b_once(K, N, B);
  REQUIRE_THROWS_AS(nn::cpu::gemm_prepacked(M, N - 1, K, 1.f, A, *pb, 0.f, c.data(), N),
                    std::invalid_argument);
  if (nn::cpu::f32_kernel() != F32Kernel::eigen) {
    std::fill(b.begin(), b.end(), 0.f);  // after packing: the panels keep the values packed
    nn::cpu::gemm_prepacked(M, N, K, 1.f, A, *pb, 0.f, c.data(), N);
    REQUIRE(c == want);
  }
  // through the backend: the packed form serves the operand it was made from; another of the
  // same shape is multiplied as it is
  nn::backend::Backend& be = nn::backend::get(nn::kCPU);
  const Tensor a3 = randn({1, 9, 40}), b1 = randn({1, 40, 70}), b2 = randn({1, 40, 70});
  const auto packed = be.pack_operand(b1);
  for (const Tensor& bx : {b1, b2, b1.transpose(1, 2).contiguous().transpose(1, 2)}) {
    Tensor out = empty({1, 9, 70});
    be.gemm_packed(a3, bx, packed.get(), out, 1.0, 0.0);
    test::require_close(out, matmul(a3, bx), 1e-5, 1e-5);
  }
}

TEST_CASE("CPU bf16 GEMM matches a naive product on every tile shape and layout", "[matmul]") {
  // The AMX and the AVX512_BF16 kernels where the CPU has them, and the widened f32 product
  // they fall back to (matrix-vector shapes, other CPUs, LIBNN_CPU_GEMM=avx2): each against
  // the double product.
  using nn::cpu::F32Kernel;
  const test::CpuKernelGuard restore;
  struct Variant { F32Kernel f32; bool amx; };
  for (Variant v : {Variant{F32Kernel::avx2, false}, Variant{F32Kernel::avx512, false},
                    Variant{F32Kernel::avx512, true}}) {
    if (!nn::cpu::f32_kernel_supported(v.f32)) continue;
    if (v.amx && !nn::cpu::bf16_amx_supported()) {
      WARN("no AMX here (or the system does not allow it): the AMX kernel is not checked");
      continue;
    }
    nn::cpu::set_f32_kernel(v.f32);
    nn::cpu::set_bf16_amx(v.amx);
    const bool native = nn::cpu::bf16_gemm_native();
    REQUIRE(nn::cpu::bf16_amx() == v.amx);
    INFO("f32 kernel " << int(v.f32) << ", native bf16 " << native << ", AMX " << v.amx);
    if (v.f32 == F32Kernel::avx512 && !native) WARN("no AVX512_BF16 here: the bf16 kernel is not checked");
    uint32_t seed = 7;
    for (int64_t M : {1, 2, 7, 8, 9, 150})
      for (int64_t N : {1, 15, 16, 31, 32, 33, 70})  // AMX takes 16 columns or more
        for (int64_t K : {0, 1, 2, 15, 16, 17, 33, 300})
          for (int layouts = 0; layouts < 4; ++layouts)
            for (double beta : {0.0, -0.75})  // beta 0 (C not read) with every layout
              check_gemm<nn::BFloat16>(M, N, K, layouts & 1, layouts >> 1, 0.5, beta, seed++);
    check_gemm<nn::BFloat16>(23, 37, 29, 2, 2, 1.0, 0.5, seed++);  // general strides
    // threaded, several packed blocks and K slices (one odd), as for f32
    check_gemm<nn::BFloat16>(300, 3100, 20, 0, 1, 1.0, 0.0, seed++);
    check_gemm<nn::BFloat16>(2, 3100, 301, 1, 0, 1.0, 1.0, seed++);
    check_gemm<nn::BFloat16>(400, 48, 601, 0, 0, -1.0, 0.25, seed++);
    check_gemm<nn::BFloat16>(200, 96, 513, 1, 1, 1.0, 0.0, seed++);
    // AMX's 32 x 32 tiles with alpha 1 and beta 0 or 1 (C read into the tile registers and
    // stored from them): whole and partial tiles, three K slices of 512, both layouts of A
    check_gemm<nn::BFloat16>(96, 64, 1100, 1, 0, 1.0, 1.0, seed++);
    check_gemm<nn::BFloat16>(70, 100, 1030, 0, 1, 1.0, 0.0, seed++);
    check_gemm<nn::BFloat16>(64, 33, 64, 2, 0, 1.0, 1.0, seed++);
  }
}

TEST_CASE("bf16 matmul on the CPU: the AVX512_BF16 and AMX kernels against the widened product", "[matmul]") {
  // Through the ops layer (a batch of products, a transposed operand): bf16 results of each
  // native kernel and of the f32 product over widened operands (LIBNN_CPU_GEMM=avx2's path)
  // agree within one bf16 rounding, and all match the double product of the bf16 inputs.
  // Two shapes: three large products (threads inside each) and many small ones (a thread
  // per product).
  using nn::cpu::F32Kernel;
  if (!nn::cpu::f32_kernel_supported(F32Kernel::avx512)) {
    WARN("no AVX-512 here: not checked");
    return;
  }
  const test::CpuKernelGuard restore;
  nn::cpu::set_f32_kernel(F32Kernel::avx512);
  if (!nn::cpu::bf16_gemm_native()) {
    WARN("no AVX512_BF16 here: not checked");
    return;
  }
  if (!nn::cpu::bf16_amx_supported()) WARN("no AMX here: its kernel is not checked");
  struct Case { int64_t B, M, N, K; };
  for (bool amx : {false, true}) {
    if (amx && !nn::cpu::bf16_amx_supported()) continue;
    for (const Case& c : {Case{3, 150, 70, 301}, Case{24, 9, 40, 33}}) {
      const int64_t B = c.B, M = c.M, N = c.N, K = c.K;
      INFO("AMX " << amx << ", " << B << " products of " << M << " x " << N << " x " << K);
      nn::cpu::set_f32_kernel(F32Kernel::avx512);
      nn::cpu::set_bf16_amx(amx);
      const Tensor a = rnd({B, M, K}, 1, false).to(kBF16);
      const Tensor w = rnd({B, N, K}, 2, false).to(kBF16);
      const Tensor native = matmul(a, w.transpose(1, 2));
      nn::cpu::set_f32_kernel(F32Kernel::avx2);
      REQUIRE_FALSE(nn::cpu::bf16_gemm_native());
      const Tensor widened = matmul(a, w.transpose(1, 2));
      nn::cpu::set_f32_kernel(restore.f32);
      nn::cpu::set_bf16_amx(restore.amx);
      REQUIRE(native.dtype() == kBF16);
      REQUIRE(native.shape() == Shape{B, M, N});
      const auto n = native.to_vector<double>(), f = widened.to_vector<double>();
      const auto va = a.to_vector<double>(), vw = w.to_vector<double>();
      for (int64_t b = 0; b < B; ++b)
        for (int64_t i = 0; i < M; ++i)
          for (int64_t j = 0; j < N; ++j) {
            double want = 0, mag = 0;
            for (int64_t k = 0; k < K; ++k) {
              const double p = va[size_t((b * M + i) * K + k)] * vw[size_t((b * N + j) * K + k)];
              want += p;
              mag += std::abs(p);
            }
            const size_t at = size_t((b * M + i) * N + j);
            const double tol = std::abs(want) * 0x1p-8 + mag * 1e-6;  // bf16 rounding + f32 sums
            INFO("(" << b << ", " << i << ", " << j << "): native " << n[at] << ", widened " << f[at]
                     << ", double " << want);
            REQUIRE(std::abs(n[at] - want) <= tol);
            REQUIRE(std::abs(f[at] - want) <= tol);
            REQUIRE(std::abs(n[at] - f[at]) <= std::abs(want) * 0x1p-7 + mag * 2e-6);
          }
    }
  }
}
