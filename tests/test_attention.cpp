#include "backend/cpu/gemm.h"
#include "test_util.h"

using namespace nn;

namespace {
// The unfused reference: softmax(q k^T * scale + mask) v with our basic ops, the
// probabilities through nn::dropout when p > 0.
Tensor reference(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& keep,
                 double p = 0, Generator* gen = nullptr) {
  const double scale = 1.0 / std::sqrt(double(q.size(-1)));
  Tensor s = matmul(q, k.transpose(-1, -2)) * scale;  // (N, H, T, S)
  if (keep.defined()) {
    Tensor m = keep.reshape({keep.size(0), 1, 1, keep.size(1)}).to(s.dtype());
    s = where(m, s, full({}, -1e30, s.options()));
  }
  Tensor probs = softmax(s, -1);
  return matmul(p > 0 ? dropout(probs, p, true, gen) : probs, v);
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

// Attention dropout against its definition: nn::dropout of the unfused softmax with the same
// generator (the same Philox stream, element (b, t, j) of the (..., T, S) probabilities), so
// the fused kernel must drop exactly the probabilities the dropout op drops. 70 queries cross
// the CPU's 64-row blocks; one key of sample 1 is masked.
TEST_CASE("attention dropout equals dropout on the unfused probabilities", "[attention]") {
  Tensor keep = from_vector<uint8_t>({1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1}, {2, 9});
  for (double p : {0.3, 0.75}) {
    INFO("p " << p);
    Tensor q = test::rnd({2, 3, 70, 8}, 1), k = test::rnd({2, 3, 9, 8}, 2), v = test::rnd({2, 3, 9, 5}, 3);
    Tensor rq = q.detach().requires_grad_(), rk = k.detach().requires_grad_(),
           rv = v.detach().requires_grad_();
    Generator g(77), rg(77);
    Tensor out = scaled_dot_product_attention(q, k, v, keep, std::nullopt, p, &g);
    Tensor ref = reference(rq, rk, rv, keep, p, &rg);
    REQUIRE(g.offset() == rg.offset());
    test::require_close(out, ref, 1e-10, 1e-10);
    // about p of the probabilities dropped (the same stream again), and the output changed
    Generator again(77);
    const double dropped = sum(eq(dropout(ones({2, 3, 70, 9}, kF64), p, true, &again),
                                  zeros({}, kF64)).to(kF64)).item() / (2 * 3 * 70 * 9);
    REQUIRE(std::abs(dropped - p) < 0.05);
    const Tensor plain = scaled_dot_product_attention(q.detach(), k.detach(), v.detach(), keep);
    REQUIRE(amax(abs(sub(out.detach(), plain))).item() > 0.1);
    Tensor w = test::rnd(out.shape(), 4, false);
    sum(out * w).backward();
    sum(ref * w).backward();
    test::require_close(q.grad(), rq.grad(), 1e-9, 1e-10);
    test::require_close(k.grad(), rk.grad(), 1e-9, 1e-10);
    test::require_close(v.grad(), rv.grad(), 1e-9, 1e-10);
  }
  // p = 1 drops everything: zeros and zero gradients; p = 0 is plain attention; others refused
  Tensor q = test::rnd({1, 2, 3, 4}, 5), k = test::rnd({1, 2, 6, 4}, 6), v = test::rnd({1, 2, 6, 4}, 7);
  Generator g1(1);
  Tensor all = scaled_dot_product_attention(q, k, v, {}, std::nullopt, 1.0, &g1);
  REQUIRE(sum(abs(all)).item() == 0);
  REQUIRE(g1.offset() == 0);  // as nn::dropout, p = 1 draws nothing
  sum(all * 3).backward();
  for (const Tensor* t : {&q, &k, &v}) REQUIRE(sum(abs(t->grad())).item() == 0);
  Generator g0(1);
  test::require_close(scaled_dot_product_attention(q, k, v, {}, std::nullopt, 0.0, &g0),
                      scaled_dot_product_attention(q, k, v), 0, 0);
  REQUIRE(g0.offset() == 0);
  // a call refused for its mask takes nothing from the generator
  REQUIRE_FALSE(test::error_of([&] {
    scaled_dot_product_attention(q, k, v, ones({1, 5}, kU8), std::nullopt, 0.5, &g0);
  }).empty());
  REQUIRE(g0.offset() == 0);
  for (double bad : {-0.1, 1.5, double(NAN)})
    REQUIRE(test::error_of([&] { scaled_dot_product_attention(q, k, v, {}, std::nullopt, bad); })
                .find("dropout probability must be in [0, 1]") != std::string::npos);
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
  // nonzero attends, whatever the value or dtype (bytes go in as they are, others compared
  // with 0); a non-contiguous byte mask too
  const Tensor want = scaled_dot_product_attention(q, k, v, keep);
  test::require_close(scaled_dot_product_attention(q, k, v, from_vector<uint8_t>({7, 255, 0, 0}, {1, 4})),
                      want, 0, 0);
  test::require_close(scaled_dot_product_attention(q, k, v, from_vector<int64_t>({-2, 3, 0, 0}, {1, 4})),
                      want, 0, 0);
  test::require_close(scaled_dot_product_attention(q, k, v, from_vector<float>({0.5f, 1, 0, 0}, {1, 4})),
                      want, 0, 0);
  test::require_close(
      scaled_dot_product_attention(q, k, v, from_vector<uint8_t>({1, 9, 1, 9, 0, 9, 0, 9}, {1, 8}).slice(1, 0, 8, 2)),
      want, 0, 0);
  // the backward reads the byte mask the forward did: changing it in between is an error
  {
    Tensor m = keep.clone(), qg = q.detach().requires_grad_();
    Tensor o = scaled_dot_product_attention(qg, k, v, m);
    {
      NoGradGuard ng;
      m.fill_(1);
    }
    REQUIRE(test::error_of([&] { sum(o).backward(); }).find("in place") != std::string::npos);
  }
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
  // bf16 inputs run on the bf16 product kernels where the CPU has AVX512_BF16 or AMX (scores
  // and sums in f32, P and dS rounded to bf16 as operands) and on widened f32 copies with
  // LIBNN_CPU_GEMM=avx2's kernel; each against the f64 attention of the same bf16 values.
  // Three query blocks (150 rows), masked keys, E != D. Errors are measured against the
  // largest value of each result (about 2^-9 of it for one rounding to bf16; the native path
  // rounds twice), since an output near zero averages values far from it.
  using nn::cpu::F32Kernel;
  const test::CpuKernelGuard restore;
  std::vector<uint8_t> keep_v(2 * 130, 1);
  for (int j = 100; j < 130; ++j) keep_v[size_t(j)] = 0;       // padding at the end of row 0
  for (int j = 0; j < 130; j += 3) keep_v[size_t(130 + j)] = 0;  // scattered in row 1
  const Tensor keep = from_vector<uint8_t>(keep_v, {2, 130});
  for (auto [kernel, amx] : {std::pair{F32Kernel::avx512, true}, std::pair{F32Kernel::avx512, false},
                              std::pair{F32Kernel::avx2, false}}) {
    if (!nn::cpu::f32_kernel_supported(kernel) || (amx && !nn::cpu::bf16_amx_supported())) continue;
    nn::cpu::set_f32_kernel(kernel);
    nn::cpu::set_bf16_amx(amx);
    INFO("f32 kernel " << int(kernel) << ", native bf16 " << nn::cpu::bf16_gemm_native() << ", AMX " << amx);
    Tensor q = (test::rnd({2, 3, 150, 16}, 11, false) * 2).to(kBF16).requires_grad_();
    Tensor k = (test::rnd({2, 3, 130, 16}, 12, false) * 2).to(kBF16).requires_grad_();
    Tensor v = test::rnd({2, 3, 130, 24}, 13, false).to(kBF16).requires_grad_();
    Tensor q64 = q.detach().to(kF64).requires_grad_(), k64 = k.detach().to(kF64).requires_grad_(),
           v64 = v.detach().to(kF64).requires_grad_();
    for (double p : {0.0, 0.25}) {  // with dropout: the same mask in both dtypes
      INFO("dropout " << p);
      for (Tensor* t : {&q, &k, &v, &q64, &k64, &v64}) t->set_grad({});
      Generator g(5), g64(5);
      Tensor out = scaled_dot_product_attention(q, k, v, keep, std::nullopt, p, &g);
      Tensor ref = scaled_dot_product_attention(q64, k64, v64, keep, std::nullopt, p, &g64);
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
  }
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

// q, k, v of a packed (N, T, 3, heads, D) projection as (N, heads, T, D) views, through
// autograd (select and permute): the separate-tensor form the packed op must equal.
std::vector<Tensor> unpack(const Tensor& qkv) {
  std::vector<Tensor> out;
  for (int i = 0; i < 3; ++i) out.push_back(qkv.select(2, i).permute({0, 2, 1, 3}));
  return out;
}

// The packed form against scaled_dot_product_attention of the same heads: the same values,
// the same dropout draws, and one gradient equal to the three; the output comes back (N, T,
// heads, D) as the projection laid them out. 70 queries cross the CPU's 64-row blocks.
TEST_CASE("packed attention equals attention on the separate heads", "[attention]") {
  Tensor keep = from_vector<uint8_t>(std::vector<uint8_t>(70, 1), {1, 70}).expand({2, 70}).contiguous();
  {
    NoGradGuard ng;
    keep.select(0, 1).slice(0, 50, 70).zero_();
  }
  for (double p : {0.0, 0.3}) {
    for (bool masked : {false, true}) {
      INFO("dropout " << p << ", masked " << masked);
      Tensor qkv = test::rnd({2, 70, 3, 3, 8}, 1), ref_qkv = qkv.detach().requires_grad_();
      const Tensor m = masked ? keep : Tensor();
      Generator g(9), rg(9);
      Tensor out = scaled_dot_product_attention_packed(qkv, m, std::nullopt, p, &g);
      auto h = unpack(ref_qkv);
      Tensor ref = scaled_dot_product_attention(h[0], h[1], h[2], m, std::nullopt, p, &rg);
      REQUIRE(g.offset() == rg.offset());
      REQUIRE(out.shape() == Shape{2, 70, 3, 8});
      REQUIRE(out.is_contiguous());
      test::require_close(out, ref.permute({0, 2, 1, 3}), 1e-10, 1e-10);
      Tensor w = test::rnd(out.shape(), 4, false);
      sum(out * w).backward();
      sum(ref.permute({0, 2, 1, 3}) * w).backward();
      test::require_close(qkv.grad(), ref_qkv.grad(), 1e-9, 1e-10);
    }
  }
  // a scale, and a packed tensor whose last dim is not contiguous (copied first)
  Tensor wide = test::rnd({2, 5, 3, 2, 8}, 2, false);
  Tensor strided = wide.transpose(3, 4).contiguous().transpose(3, 4).requires_grad_();
  auto h = unpack(strided);
  test::require_close(scaled_dot_product_attention_packed(strided, {}, 0.5),
                      scaled_dot_product_attention(h[0], h[1], h[2], {}, 0.5).permute({0, 2, 1, 3}),
                      1e-12, 1e-12);
  REQUIRE(test::error_of([] { scaled_dot_product_attention_packed(zeros({2, 5, 2, 2, 8})); })
              .find("(N, T, 3, heads, D)") != std::string::npos);
  REQUIRE(test::error_of([] { scaled_dot_product_attention_packed(zeros({2, 5, 3, 2, 8}), ones({2, 4}, kU8)); })
              .find("key_padding_mask must be (2, 5)") != std::string::npos);
}

// Heads split from a projection's (N, T, heads * D) output are read in place, and the output
// and the gradients keep that layout (so merging the heads back costs no copy); values as for
// row-major inputs.
TEST_CASE("attention keeps heads where a projection put them", "[attention]") {
  const Tensor keep = from_vector<uint8_t>({1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 0}, {2, 6});
  Tensor x = test::rnd({2, 6, 3 * 4 * 8}, 3);
  auto split = [](const Tensor& t, int i) {  // (N, T, 3 * heads * D) -> (N, heads, T, D)
    return t.reshape({2, 6, 3, 4, 8}).select(2, i).permute({0, 2, 1, 3});
  };
  Tensor q = split(x, 0), k = split(x, 1), v = split(x, 2);
  REQUIRE(!q.is_contiguous());
  Tensor out = scaled_dot_product_attention(q, k, v, keep);
  REQUIRE(out.permute({0, 2, 1, 3}).is_contiguous());  // (N, T, heads, D) in memory
  Tensor rq = q.contiguous().detach().requires_grad_(), rk = k.contiguous().detach().requires_grad_(),
         rv = v.contiguous().detach().requires_grad_();
  Tensor ref = scaled_dot_product_attention(rq, rk, rv, keep);
  REQUIRE(ref.is_contiguous());
  test::require_close(out, ref, 1e-12, 1e-12);
  Tensor w = test::rnd(out.shape(), 5, false);
  sum(out * w).backward();
  sum(ref * w).backward();
  Tensor gx = x.grad().reshape({2, 6, 3, 4, 8});
  test::require_close(gx.select(2, 0).permute({0, 2, 1, 3}), rq.grad(), 1e-12, 1e-12);
  test::require_close(gx.select(2, 1).permute({0, 2, 1, 3}), rk.grad(), 1e-12, 1e-12);
  test::require_close(gx.select(2, 2).permute({0, 2, 1, 3}), rv.grad(), 1e-12, 1e-12);
}

// bf16 heads in place: the native bf16 path (AVX512_BF16 or AMX) rounds its f32 rows into the
// strided output and gradients, the widened path copies them back; both against f64.
TEST_CASE("bf16 packed attention on the CPU equals f64's", "[attention]") {
  using nn::cpu::F32Kernel;
  const test::CpuKernelGuard restore;
  const Tensor keep = from_vector<uint8_t>(std::vector<uint8_t>(2 * 70, 1), {2, 70});
  for (auto [kernel, amx] : {std::pair{F32Kernel::avx512, true}, std::pair{F32Kernel::avx512, false},
                              std::pair{F32Kernel::avx2, false}}) {
    if (!nn::cpu::f32_kernel_supported(kernel) || (amx && !nn::cpu::bf16_amx_supported())) continue;
    nn::cpu::set_f32_kernel(kernel);
    nn::cpu::set_bf16_amx(amx);
    INFO("f32 kernel " << int(kernel) << ", native bf16 " << nn::cpu::bf16_gemm_native() << ", AMX " << amx);
    Tensor qkv = test::rnd({2, 70, 3, 2, 16}, 7, false).to(kBF16).requires_grad_();
    Tensor ref_qkv = qkv.detach().to(kF64).requires_grad_();
    Generator g(3), g64(3);
    Tensor out = scaled_dot_product_attention_packed(qkv, keep, std::nullopt, 0.2, &g);
    Tensor ref = scaled_dot_product_attention_packed(ref_qkv, keep, std::nullopt, 0.2, &g64);
    auto largest = [](const Tensor& t) { return amax(abs(t)).item(); };
    test::require_close(out.to(kF64), ref, 1e-2, 1e-2 * largest(ref));
    Tensor w = test::rnd(out.shape(), 8, false);
    sum(out * w.to(kBF16)).backward();
    sum(ref * w).backward();
    test::require_close(qkv.grad().to(kF64), ref_qkv.grad(), 2e-2, 1.5e-2 * largest(ref_qkv.grad()));
  }
}

TEST_CASE("gradcheck: packed attention", "[attention][gradcheck]") {
  Tensor keep = from_vector<uint8_t>({1, 0, 1, 1, 1, 1}, {2, 3});
  test::require_gradcheck([&](const std::vector<Tensor>& in) {
    return scaled_dot_product_attention_packed(in[0], keep);
  }, {test::rnd({2, 3, 3, 2, 4}, 5)});
  test::require_gradcheck([&](const std::vector<Tensor>& in) {
    Generator g(11);
    return scaled_dot_product_attention_packed(in[0], keep, std::nullopt, 0.4, &g);
  }, {test::rnd({2, 3, 3, 2, 4}, 6)});
}

TEST_CASE("gradcheck: attention", "[attention][gradcheck]") {
  Tensor keep = from_vector<uint8_t>({1, 0, 1, 1, 1, 1}, {2, 3});
  test::require_gradcheck([&](const std::vector<Tensor>& in) {
    return scaled_dot_product_attention(in[0], in[1], in[2], keep);
  }, {test::rnd({2, 2, 3, 4}, 5), test::rnd({2, 2, 3, 4}, 6), test::rnd({2, 2, 3, 5}, 7)});
  // with dropout: a fresh generator per call draws the same mask, so the function is fixed
  test::require_gradcheck([&](const std::vector<Tensor>& in) {
    Generator g(11);
    return scaled_dot_product_attention(in[0], in[1], in[2], keep, std::nullopt, 0.4, &g);
  }, {test::rnd({2, 2, 3, 4}, 5), test::rnd({2, 2, 3, 4}, 6), test::rnd({2, 2, 3, 5}, 7)});
}

// A NaN or infinite score makes its row NaN, as softmax does; only a row whose keys are all
// masked gets zeros. (Mistaking the first for the second would hide an overflow from
// GradScaler and a divergence from the loss.)
TEST_CASE("attention passes NaN and infinite scores on as NaN", "[attention]") {
  auto nan_rows = [](const Tensor& t) {  // per row of the last dim: 1 if all NaN, 0 if none
    const Tensor f = t.to(kF32).contiguous();
    const int64_t n = f.size(-1), rows = f.numel() / n;
    const std::vector<float> d = f.to_vector<float>();
    std::vector<int> out;
    for (int64_t r = 0; r < rows; ++r) {
      int nans = 0;
      for (int64_t c = 0; c < n; ++c) nans += std::isnan(d[size_t(r * n + c)]);
      INFO("row " << r << ": " << nans << " of " << n << " NaN");
      REQUIRE((nans == 0 || nans == n));
      out.push_back(nans == n);
    }
    return out;
  };
  // zeros of `shape` with `value` at flat index i, in dt
  auto one_at = [](const Shape& shape, int64_t i, float value, DType dt) {
    Tensor t = zeros(shape);
    t.data<float>()[i] = value;
    return t.to(dt);
  };
  for (DType dt : {kF64, kF32, kBF16}) {
    INFO(dtype_name(dt));
    const Tensor q0 = test::rnd({1, 1, 3, 4}, 1, false).to(dt),
                 k0 = test::rnd({1, 1, 5, 4}, 2, false).to(dt),
                 v0 = test::rnd({1, 1, 5, 4}, 3, false).to(dt);
    const Tensor clean = scaled_dot_product_attention(q0, k0, v0);
    auto leaf = [](const Tensor& t) { return t.detach().requires_grad_(true); };
    // NaN in query row 1: that row NaN, the others as before; every key's gradient NaN
    Tensor q = leaf(add(q0, one_at({1, 1, 3, 4}, 4, NAN, dt))), k = leaf(k0), v = leaf(v0);
    Tensor out = scaled_dot_product_attention(q, k, v);
    REQUIRE(nan_rows(out) == std::vector<int>{0, 1, 0});
    test::require_close(out.select(2, 0), clean.select(2, 0), 0, 0);
    test::require_close(out.select(2, 2), clean.select(2, 2), 0, 0);
    sum(out).backward();
    REQUIRE(nan_rows(q.grad()) == std::vector<int>{0, 1, 0});
    REQUIRE(nan_rows(k.grad()) == std::vector<int>(5, 1));
    REQUIRE(nan_rows(v.grad()) == std::vector<int>(5, 1));
    // +inf in key 2: a query's score against it is +inf where its first element is positive
    // (that row NaN), -inf where negative (the key then weighs nothing, as a masked one)...
    const Tensor k_inf = add(k0, one_at({1, 1, 5, 4}, 8, INFINITY, dt));
    std::vector<int> positive;
    for (int64_t t = 0; t < 3; ++t) positive.push_back(q0.to(kF64).data<double>()[t * 4] > 0);
    REQUIRE(positive != std::vector<int>(3, positive[0]));  // both kinds of row are tested
    REQUIRE(nan_rows(scaled_dot_product_attention(q0, k_inf, v0)) == positive);
    // ...unless the mask drops that key
    const Tensor keep = from_vector<uint8_t>({1, 1, 0, 1, 1}, {1, 5});
    test::require_close(scaled_dot_product_attention(q0, k_inf, v0, keep),
                        scaled_dot_product_attention(q0, k0, v0, keep), 0, 0);
    // a masked key gets no gradient at all (exactly 0, not exp(-inf)'s rounding)
    Tensor km = leaf(k0), vm = leaf(v0);
    sum(scaled_dot_product_attention(q0, km, vm, keep)).backward();
    for (const Tensor& g : {km.grad(), vm.grad()})
      for (float e : g.select(2, 2).to(kF32).to_vector<float>()) REQUIRE(e == 0.f);
    // every key masked: zeros, whatever the query holds
    Tensor none = zeros({1, 5}, kU8);
    REQUIRE(sum(abs(scaled_dot_product_attention(add(q0, one_at({1, 1, 3, 4}, 4, NAN, dt)), k0,
                                                 v0, none)).to(kF64)).item() == 0);
  }
}
