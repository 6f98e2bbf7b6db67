#include "backend/cpu/gemm.h"
#include "test_util.h"

using namespace nn;

namespace {
// The unfused reference: softmax(q k^T * scale + mask) v with our basic ops.
Tensor reference(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& keep) {
  const double scale = 1.0 / std::sqrt(double(q.size(-1)));
  Tensor s = matmul(q, k.transpose(-1, -2)) * scale;  // (N, H, T, S)
  if (keep.defined()) {
    Tensor m = keep.reshape({keep.size(0), 1, 1, keep.size(1)}).to(s.dtype());
    s = where(m, s, full({}, -1e30, s.options()));
  }
  return matmul(softmax(s, -1), v);
}
}  // namespace

TEST_CASE("attention equals the unfused composition, forward and backward", "[attention]") {
  Tensor keep = from_vector<uint8_t>({1, 1, 1, 0, 0, 1, 1, 1, 1, 1}, {2, 5});
  for (bool masked : {false, true}) {
    INFO("masked " << masked);
    Tensor q = test::rnd({2, 3, 4, 8}, 1), k = test::rnd({2, 3, 5, 8}, 2), v = test::rnd({2, 3, 5, 6}, 3);
    Tensor m = masked ? keep : Tensor();
    Tensor out = scaled_dot_product_attention(q, k, v, m);
    Tensor ref_q = q.detach().requires_grad_(), ref_k = k.detach().requires_grad_(),
           ref_v = v.detach().requires_grad_();
    Tensor ref = reference(ref_q, ref_k, ref_v, m);
    test::require_close(out, ref, 1e-10, 1e-10);
    Tensor w = test::rnd(out.shape(), 4, false);
    sum(out * w).backward();
    sum(ref * w).backward();
    test::require_close(q.grad(), ref_q.grad(), 1e-9, 1e-10);
    test::require_close(k.grad(), ref_k.grad(), 1e-9, 1e-10);
    test::require_close(v.grad(), ref_v.grad(), 1e-9, 1e-10);
  }
}

TEST_CASE("attention honours the padding mask and handles long sequences", "[attention]") {
  // Masked keys have no influence: changing them changes nothing.
  Tensor keep = from_vector<uint8_t>({1, 1, 0, 0}, {1, 4});
  Tensor q = randn({1, 2, 3, 4}), k = randn({1, 2, 4, 4}), v = randn({1, 2, 4, 4});
  Tensor k2 = k.clone(), v2 = v.clone();
  {
    NoGradGuard ng;
    k2.slice(2, 2, 4).fill_(100);
    v2.slice(2, 2, 4).fill_(-100);
  }
  test::require_close(scaled_dot_product_attention(q, k, v, keep),
                      scaled_dot_product_attention(q, k2, v2, keep), 1e-6, 1e-6);
  // every key masked: zeros, not NaN
  Tensor none = zeros({1, 4}, kU8);
  REQUIRE(sum(abs(scaled_dot_product_attention(q, k, v, none))).item() == 0);
  // more query rows than one block, f32 against f64
  Tensor ql = randn({1, 1, 150, 16}), kl = randn({1, 1, 130, 16}), vl = randn({1, 1, 130, 8});
  test::require_close(scaled_dot_product_attention(ql, kl, vl),
                      reference(ql.to(kF64), kl.to(kF64), vl.to(kF64), {}), 1e-4, 1e-5);
  REQUIRE(test::error_of([&] { scaled_dot_product_attention(q, k, randn({1, 2, 3, 4})); })
              .find("positions") != std::string::npos);
}

TEST_CASE("bf16 attention on the CPU equals f64's, native and widened", "[attention]") {
  // bf16 inputs run on the bf16 product kernel where the CPU has AVX512_BF16 (scores and sums
  // in f32, P and dS rounded to bf16 as operands) and on widened f32 copies with
  // LIBNN_CPU_GEMM=avx2's kernel; both against the f64 attention of the same bf16 values.
  // Three query blocks (150 rows), masked keys, E != D. Errors are measured against the
  // largest value of each result (about 2^-9 of it for one rounding to bf16; the native path
  // rounds twice), since an output near zero averages values far from it.
  using nn::cpu::F32Kernel;
  const F32Kernel before = nn::cpu::f32_kernel();
  std::vector<uint8_t> keep_v(2 * 130, 1);
  for (int j = 100; j < 130; ++j) keep_v[size_t(j)] = 0;       // padding at the end of row 0
  for (int j = 0; j < 130; j += 3) keep_v[size_t(130 + j)] = 0;  // scattered in row 1
  const Tensor keep = from_vector<uint8_t>(keep_v, {2, 130});
  for (F32Kernel kernel : {F32Kernel::avx512, F32Kernel::avx2}) {
    if (!nn::cpu::f32_kernel_supported(kernel)) continue;
    nn::cpu::set_f32_kernel(kernel);
    INFO("f32 kernel " << int(kernel) << ", native bf16 " << nn::cpu::bf16_gemm_native());
    Tensor q = (test::rnd({2, 3, 150, 16}, 11, false) * 2).to(kBF16).requires_grad_();
    Tensor k = (test::rnd({2, 3, 130, 16}, 12, false) * 2).to(kBF16).requires_grad_();
    Tensor v = test::rnd({2, 3, 130, 24}, 13, false).to(kBF16).requires_grad_();
    Tensor q64 = q.detach().to(kF64).requires_grad_(), k64 = k.detach().to(kF64).requires_grad_(),
           v64 = v.detach().to(kF64).requires_grad_();
    Tensor out = scaled_dot_product_attention(q, k, v, keep);
    Tensor ref = scaled_dot_product_attention(q64, k64, v64, keep);
    REQUIRE(out.dtype() == kBF16);
    auto largest = [](const Tensor& t) { return amax(abs(t)).item(); };
    test::require_close(out.to(kF64), ref, 1e-2, 1e-2 * largest(ref));
    Tensor w = test::rnd(out.shape(), 14, false).to(kBF16);
    sum(out * w).backward();
    sum(ref * w.to(kF64)).backward();
    for (auto [got, want] : {std::pair{&q, &q64}, std::pair{&k, &k64}, std::pair{&v, &v64}}) {
      REQUIRE(got->grad().dtype() == kBF16);
      test::require_close(got->grad().to(kF64), want->grad(), 2e-2, 1.5e-2 * largest(want->grad()));
    }
  }
  nn::cpu::set_f32_kernel(before);
}

TEST_CASE("attention with no value features or no queries has zero gradients", "[attention]") {
  // (E = 0: an empty output that depends on nothing; T = 0: no queries read the keys)
  for (Shape qs_vs : {Shape{3, 0}, Shape{0, 5}}) {
    const int64_t T = qs_vs[0] ? qs_vs[0] : 0, E = qs_vs[1];
    Tensor q = test::rnd({2, 2, T, 4}, 1), k = test::rnd({2, 2, 5, 4}, 2),
           v = test::rnd({2, 2, 5, E}, 3);
    // a freed block of NaNs of the size class the saved log-sum-exp comes from, so a read of
    // it where no forward wrote shows (the caching allocator hands out the last freed block)
    { Tensor junk = full({64}, NAN, kF64); }
    Tensor out = scaled_dot_product_attention(q, k, v);
    REQUIRE(out.shape() == Shape{2, 2, T, E});
    sum(out).backward();
    for (const Tensor* t : {&q, &k, &v}) {
      REQUIRE(t->grad().shape() == t->shape());
      if (t->numel() > 0) REQUIRE(sum(abs(t->grad())).item() == 0);
    }
  }
}

TEST_CASE("attention over an empty batch with a padding mask is empty", "[attention]") {
  Tensor q = zeros({0, 2, 3, 4}), k = zeros({0, 2, 5, 4}), v = zeros({0, 2, 5, 4});
  Tensor out = scaled_dot_product_attention(q, k, v, zeros({0, 5}, kU8));
  REQUIRE(out.shape() == Shape{0, 2, 3, 4});
}

TEST_CASE("gradcheck: attention", "[attention][gradcheck]") {
  Tensor keep = from_vector<uint8_t>({1, 0, 1, 1, 1, 1}, {2, 3});
  test::require_gradcheck([&](const std::vector<Tensor>& in) {
    return scaled_dot_product_attention(in[0], in[1], in[2], keep);
  }, {test::rnd({2, 2, 3, 4}, 5), test::rnd({2, 2, 3, 4}, 6), test::rnd({2, 2, 3, 5}, 7)});
}
