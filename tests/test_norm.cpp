#include "test_util.h"

using namespace nn;
using test::require_gradcheck;
using test::rnd;

TEST_CASE("batch_norm in training normalises per channel and updates running stats", "[norm]") {
  Tensor x = rnd({4, 3, 2, 2}, 1, false) * 3.0 + 1.0;
  Tensor rm = zeros({3}, kF64), rv = ones({3}, kF64);
  Tensor y = batch_norm(x, rm, rv, {}, {}, true, 0.1, 1e-5);
  Tensor m = mean(y, {0, 2, 3});
  Tensor v = var(y, {0, 2, 3}, 0);
  test::require_close(m, zeros({3}, kF64), 0, 1e-12);
  test::require_close(v, ones({3}, kF64), 1e-4, 1e-4);
  // running = 0.9 * old + 0.1 * batch (unbiased variance)
  test::require_close(rm, mean(x, {0, 2, 3}) * 0.1, 1e-12, 1e-12);
  test::require_close(rv, var(x, {0, 2, 3}, 1) * 0.1 + 0.9, 1e-12, 1e-12);
}

TEST_CASE("batch_norm in eval uses the running statistics", "[norm]") {
  Tensor x = rnd({2, 3, 4}, 2, false);
  Tensor rm = tensor({0.5, -1, 2}, kF64), rv = tensor({4, 1, 0.25}, kF64);
  Tensor w = tensor({1, 2, 3}, kF64), b = tensor({0, 1, -1}, kF64);
  Tensor y = batch_norm(x, rm, rv, w, b, false, 0.1, 0.0);
  Tensor want = (x - rm.reshape({1, 3, 1})) / sqrt(rv.reshape({1, 3, 1})) * w.reshape({1, 3, 1}) +
                b.reshape({1, 3, 1});
  test::require_close(y, want, 1e-12, 1e-12);
  test::require_values(rm, {0.5, -1, 2});  // untouched in eval
}

TEST_CASE("gradcheck: batch_norm", "[norm][gradcheck]") {
  Tensor rm = zeros({3}, kF64), rv = ones({3}, kF64);
  for (bool training : {true, false})
    require_gradcheck([&](const std::vector<Tensor>& in) {
      Tensor m = rm.clone(), v = rv.clone();
      return batch_norm(in[0], m, v, in[1], in[2], training, 0.1, 1e-5);
    }, {rnd({4, 3, 2, 2}, 3), rnd({3}, 4), rnd({3}, 5)});
  require_gradcheck([&](const std::vector<Tensor>& in) {
    return batch_norm(in[0], {}, {}, {}, {}, true, 0.1, 1e-5);
  }, {rnd({5, 2}, 6)});
}

TEST_CASE("norms take a bias alone and one dtype for weight and bias", "[norm]") {
  // gradcheck: a bias alone, with and without running statistics
  Tensor rm = zeros({3}, kF64), rv = ones({3}, kF64);
  require_gradcheck([&](const std::vector<Tensor>& in) {
    Tensor m = rm.clone(), v = rv.clone();
    return batch_norm(in[0], m, v, {}, in[1], true, 0.1, 1e-5);
  }, {rnd({4, 3, 2}, 20), rnd({3}, 21)});
  require_gradcheck([](const std::vector<Tensor>& in) { return layer_norm(in[0], {4}, {}, in[1]); },
                    {rnd({3, 4}, 22), rnd({4}, 23)});
  // 16-bit data may take f32 parameters, but weight and bias must agree
  Tensor x = rnd({4, 3}, 24, false).to(kF16);
  Tensor w16 = ones({3}, kF16), b32 = zeros({3}, kF32);
  REQUIRE(test::error_of([&] { batch_norm(x, {}, {}, w16, b32, true, 0.1, 1e-5); })
              .find("batch_norm: weight is f16, bias is f32; they must have one dtype") !=
          std::string::npos);
  REQUIRE(test::error_of([&] { layer_norm(x, {3}, w16, b32); })
              .find("layer_norm: weight is f16, bias is f32; they must have one dtype") !=
          std::string::npos);
}

// Per-channel tensors that are views: a strided weight and bias read as their values (their
// gradients reach the viewed tensors' elements), and running statistics that cannot be
// updated in place (a broadcast) are refused, not written past their storage.
TEST_CASE("batch_norm takes strided weight and bias and refuses broadcast running stats",
          "[norm]") {
  Tensor x = randn({4, 3, 2, 2});
  Tensor wb = tensor({1.0, 100.0, 2.0, 100.0, 3.0, 100.0}).requires_grad_();
  Tensor bb = tensor({0.5, -7.0, -0.5, -7.0, 0.25, -7.0}).requires_grad_();
  Tensor w = tensor({1.0, 2.0, 3.0}).requires_grad_();
  Tensor b = tensor({0.5, -0.5, 0.25}).requires_grad_();
  Tensor y = batch_norm(x, Tensor(), Tensor(), wb.slice(0, 0, 6, 2), bb.slice(0, 0, 6, 2), true);
  Tensor ref = batch_norm(x, Tensor(), Tensor(), w, b, true);
  test::require_close(y, ref, 1e-6, 1e-6);
  Tensor up = randn({4, 3, 2, 2});
  sum(mul(y, up)).backward();
  sum(mul(ref, up)).backward();
  test::require_close(wb.grad().slice(0, 0, 6, 2), w.grad(), 1e-5, 1e-6);
  test::require_close(bb.grad().slice(0, 0, 6, 2), b.grad(), 1e-5, 1e-6);
  test::require_values(wb.grad().slice(0, 1, 6, 2), {0, 0, 0});
  Tensor rm = zeros({1}).expand({3}), rv = ones({3});
  REQUIRE(test::error_of([&] { batch_norm(x, rm, rv, w, b, true); })
              .find("must be contiguous") != std::string::npos);
  // one running statistic without the other (cuDNN takes both or neither)
  for (const bool mean_only : {true, false})
    REQUIRE(test::error_of([&] {
              batch_norm(x, mean_only ? zeros({3}) : Tensor(), mean_only ? Tensor() : ones({3}), w, b, true);
            }).find("batch_norm: running_mean and running_var go together") != std::string::npos);
}

TEST_CASE("batch_norm of zero channels is empty in both formats", "[norm][layout]") {
  for (bool nhwc : {false, true}) {
    Tensor x = zeros({2, 0, 3, 3}, kF32);
    if (nhwc) x = x.contiguous(MemoryFormat::channels_last);
    Tensor rm = zeros({0}, kF32), rv = ones({0}, kF32);
    Tensor y = batch_norm(x.requires_grad_(), rm, rv, Tensor(), Tensor(), true, 0.1, 1e-5);
    REQUIRE(y.shape() == Shape{2, 0, 3, 3});
    sum(y).backward();
    REQUIRE(x.grad().shape() == x.shape());
  }
}

TEST_CASE("bf16 batch_norm with f32 parameters equals f32's, rounded once, in both formats",
          "[norm][layout]") {
  // Autocast's mix (bf16 activations, f32 weight, bias and statistics) runs natively: f32 math
  // on the bf16 values, each result rounded to bf16 once. So the results are the f32 batch
  // norm's of the same values, rounded: within one bf16 step (2^-8 relative). The gradients
  // of weight and bias, and the running statistics, are f32 sums of the same terms.
  for (MemoryFormat f : {MemoryFormat::contiguous, MemoryFormat::channels_last})
    for (bool training : {true, false}) {
      INFO("channels-last " << (f == MemoryFormat::channels_last) << " training " << training);
      const Tensor x0 = (rnd({6, 20, 5, 7}, 70, false) * 2.0 + 0.5).to(kBF16).contiguous(f);
      const Tensor w0 = rnd({20}, 71, false).to(kF32), b0 = rnd({20}, 72, false).to(kF32);
      const Tensor g0 = rnd(x0.shape(), 73, false).to(kBF16).contiguous(f);
      std::vector<Tensor> got;
      for (DType dt : {kBF16, kF32}) {
        Tensor x = x0.to(dt).detach().requires_grad_(true);
        Tensor w = w0.detach().requires_grad_(true), b = b0.detach().requires_grad_(true);
        Tensor rm = rnd({20}, 74, false).to(kF32) * 0.1, rv = ones({20}, kF32) * 1.5;
        Tensor y = batch_norm(x, rm, rv, w, b, training, 0.1, 1e-5);
        REQUIRE(y.dtype() == dt);
        REQUIRE(y.is_contiguous(f));
        y.backward(g0.to(dt));
        got.insert(got.end(), {y, x.grad(), w.grad(), b.grad(), rm, rv});
      }
      const char* names[] = {"y", "grad x", "grad weight", "grad bias", "running mean", "running var"};
      for (size_t i = 0; i < 6; ++i) {
        INFO(names[i]);
        const Tensor want = i < 2 ? got[6 + i].to(kBF16).to(kF64) : got[6 + i].to(kF64);
        const double rtol = i < 2 ? 1.0 / 256 : 1e-5;
        test::require_close(got[i].to(kF64), want, rtol, i < 2 ? 1e-6 : 1e-5);
      }
    }
}

TEST_CASE("channels-last batch_norm statistics stay accurate for values far from zero", "[norm][layout]") {
  // The channels-last sums run in f32 within blocks of rows; a mean taken in f32 alone would
  // leave its rounding error in the sum of squared deviations (1e4 + 0.01 randn: a variance
  // of 1e-4 next to a mean whose f32 ulp is 1e-3). Against the f64 statistics of the same
  // f32 values, and the f64 output; also values near f32's range (sums must not overflow).
  for (double offset : {1e4, -3e3})
    for (int64_t C : {16, 3}) {
      INFO("offset " << offset << ", channels " << C);
      const Tensor x32 = (rnd({64, C, 32, 32}, 81, false) * 0.01 + offset).to(kF32);
      const Tensor x = x32.contiguous(MemoryFormat::channels_last);
      Tensor rm = zeros({C}), rv = ones({C}), rm64 = zeros({C}, kF64), rv64 = ones({C}, kF64);
      const Tensor y = batch_norm(x, rm, rv, {}, {}, true, 1.0, 1e-8);
      const Tensor y64 = batch_norm(x32.to(kF64), rm64, rv64, {}, {}, true, 1.0, 1e-8);
      test::require_close(rv.to(kF64), rv64, 1e-4, 0);
      test::require_close(rm.to(kF64), rm64, 1e-7, 0);
      test::require_close(y.to(kF64), y64, 1e-3, 1e-3);
    }
  const Tensor big = (rnd({8, 16, 16, 16}, 82, false) * 1e37).to(kF32).contiguous(MemoryFormat::channels_last);
  Tensor rm = zeros({16}), rv = ones({16});
  const Tensor y = batch_norm(big, rm, rv, {}, {}, true, 1.0, 1e-5);
  for (float v : y.to_vector<float>()) REQUIRE(std::isfinite(v));
}

TEST_CASE("gradcheck: batch_norm_relu, with and without a residual, in both formats",
          "[norm][gradcheck]") {
  for (MemoryFormat f : {MemoryFormat::contiguous, MemoryFormat::channels_last})
    for (bool training : {true, false}) {
      INFO("channels-last " << (f == MemoryFormat::channels_last) << " training " << training);
      require_gradcheck([&](const std::vector<Tensor>& in) {
        Tensor m = full({3}, 0.1, kF64), v = full({3}, 1.3, kF64);
        return batch_norm_relu(in[0].contiguous(f), in[3].contiguous(f), m, v, in[1], in[2],
                               training, 0.1, 1e-5);
      }, {rnd({4, 3, 2, 3}, 90), rnd({3}, 91), rnd({3}, 92), rnd({4, 3, 2, 3}, 93)});
      require_gradcheck([&](const std::vector<Tensor>& in) {
        Tensor m = zeros({3}, kF64), v = ones({3}, kF64);
        return batch_norm_relu(in[0].contiguous(f), {}, m, v, in[1], {}, training, 0.1, 1e-5);
      }, {rnd({4, 3, 2, 3}, 94), rnd({3}, 95)});
    }
}

TEST_CASE("batch_norm_relu equals relu(batch_norm + residual): f32, and bf16 rounded once",
          "[norm][layout]") {
  // The reference is the composition in f32. f32 data: the fused pass computes the same f32
  // operations. bf16 data with f32 parameters (autocast's mix; natively) and f16 (through
  // f32 copies): f32 math on the 16-bit values, each result rounded once, so the data results
  // are the reference's rounded (within one step), and the ReLU's mask is the reference's (a
  // positive f32 of these sizes rounds to a positive 16-bit value); the f32 sums for weight
  // and bias equal the reference's.
  for (DType dt : {kF32, kBF16, kF16})
    for (MemoryFormat f : {MemoryFormat::contiguous, MemoryFormat::channels_last})
      for (bool residual : {true, false})
        for (bool training : {true, false}) {
          INFO(dtype_name(dt) << " channels-last " << (f == MemoryFormat::channels_last)
                              << " residual " << residual << " training " << training);
          const Tensor x0 = (rnd({5, 24, 6, 7}, 100, false) * 2.0 + 0.3).to(dt).contiguous(f);
          const Tensor z0 = rnd(x0.shape(), 101, false).to(dt).contiguous(f);
          const Tensor g0 = rnd(x0.shape(), 102, false).to(dt).contiguous(f);
          const Tensor w0 = rnd({24}, 103, false).to(kF32), b0 = rnd({24}, 104, false).to(kF32);
          std::vector<Tensor> got;
          for (bool fused : {true, false}) {
            const DType t = fused ? dt : kF32;
            Tensor x = x0.to(t).detach().requires_grad_(true);
            Tensor z = z0.to(t).detach().requires_grad_(true);
            Tensor w = w0.detach().requires_grad_(true), b = b0.detach().requires_grad_(true);
            Tensor rm = rnd({24}, 105, false).to(kF32) * 0.1, rv = ones({24}, kF32) * 1.5;
            Tensor y;
            if (fused) {
              y = batch_norm_relu(x, residual ? z : Tensor(), rm, rv, w, b, training, 0.1, 1e-5);
              REQUIRE(y.dtype() == dt);
              REQUIRE(y.is_contiguous(f));
            } else {
              y = batch_norm(x, rm, rv, w, b, training, 0.1, 1e-5);
              y = relu(residual ? add(y, z) : y);
            }
            y.backward(g0.to(t));
            got.insert(got.end(), {y, x.grad(), w.grad(), b.grad(), rm, rv,
                                   residual ? z.grad() : zeros({1})});
          }
          const char* names[] = {"y", "grad x", "grad weight", "grad bias", "running mean",
                                 "running var", "grad residual"};
          for (size_t i = 0; i < 7; ++i) {
            INFO(names[i]);
            const bool data = i < 2 || i == 6;
            const Tensor want = data ? got[7 + i].to(dt).to(kF64) : got[7 + i].to(kF64);
            const double rtol = dt == kF32 || !data ? 1e-5 : 1.0 / 256;
            test::require_close(got[i].to(kF64), want, rtol, 1e-5);
          }
        }
}

TEST_CASE("batch_norm_relu: 2-d and 3-d input, zero channels, a residual in the other layout",
          "[norm][layout]") {
  auto reference = [](const Tensor& x, const Tensor& z, bool training) {
    Tensor y = batch_norm(x, {}, {}, {}, {}, training, 0.1, 1e-5);
    return relu(z.defined() ? add(y, z) : y);
  };
  for (const Shape& s : {Shape{6, 3}, Shape{4, 3, 5}}) {
    INFO(shape_str(s));
    Tensor x = rnd(s, 120, false), z = rnd(s, 121, false);
    test::require_close(batch_norm_relu(x, z, {}, {}, {}, {}, true), reference(x, z, true), 1e-12,
                        1e-12);
  }
  // x channels-last, the residual row-major (and the other way): the result keeps x's layout
  for (bool x_last : {true, false}) {
    const MemoryFormat fx = x_last ? MemoryFormat::channels_last : MemoryFormat::contiguous;
    const MemoryFormat fz = x_last ? MemoryFormat::contiguous : MemoryFormat::channels_last;
    Tensor x = rnd({3, 4, 5, 2}, 122).contiguous(fx).detach().requires_grad_(true);
    Tensor z = rnd({3, 4, 5, 2}, 123).contiguous(fz).detach().requires_grad_(true);
    Tensor y = batch_norm_relu(x, z, {}, {}, {}, {}, true);
    REQUIRE(y.is_contiguous(fx));
    sum(mul(y, y)).backward();
    Tensor x2 = x.detach().requires_grad_(true), z2 = z.detach().requires_grad_(true);
    Tensor y2 = reference(x2, z2, true);
    sum(mul(y2, y2)).backward();
    test::require_close(y, y2, 1e-12, 1e-12);
    test::require_close(x.grad(), x2.grad(), 1e-10, 1e-12);
    test::require_close(z.grad(), z2.grad(), 1e-12, 1e-12);
  }
  for (bool nhwc : {false, true}) {  // zero channels: empty results and gradients
    Tensor x = zeros({2, 0, 3, 3}, kF32), z = zeros({2, 0, 3, 3}, kF32);
    if (nhwc) x = x.contiguous(MemoryFormat::channels_last);
    x.requires_grad_();
    z.requires_grad_();
    Tensor y = batch_norm_relu(x, z, zeros({0}), ones({0}), {}, {}, true);
    REQUIRE(y.shape() == Shape{2, 0, 3, 3});
    sum(y).backward();
    REQUIRE(x.grad().shape() == x.shape());
    REQUIRE(z.grad().shape() == z.shape());
  }
}

TEST_CASE("batch_norm_relu checks its residual", "[norm]") {
  Tensor x = rnd({2, 3, 4, 4}, 110, false);
  REQUIRE(test::error_of([&] {
            batch_norm_relu(x, rnd({2, 3, 4, 5}, 111, false), {}, {}, {}, {}, true);
          }).find("batch_norm_relu: residual of shape [2, 3, 4, 5], input of shape [2, 3, 4, 4]") !=
          std::string::npos);
  // another dtype: added with add's promotion, as the composition would
  Tensor z = rnd({2, 3, 4, 4}, 112, false).to(kF32);
  Tensor y = batch_norm_relu(x, z, {}, {}, {}, {}, true);
  REQUIRE(y.dtype() == kF64);
  test::require_close(y, relu(add(batch_norm(x, {}, {}, {}, {}, true), z)), 1e-12, 1e-12);
}

TEST_CASE("layer_norm matches the definition", "[norm]") {
  Tensor x = rnd({2, 3, 4}, 7, false);
  Tensor w = rnd({4}, 8, false), b = rnd({4}, 9, false);
  Tensor mu = mean(x, {-1}, true), v = var(x, {-1}, 0, true);
  test::require_close(layer_norm(x, {4}, w, b, 1e-5), (x - mu) / sqrt(v + 1e-5) * w + b, 1e-10,
                      1e-10);
  Tensor mu2 = mean(x, {1, 2}, true), v2 = var(x, {1, 2}, 0, true);
  test::require_close(layer_norm(x, {3, 4}), (x - mu2) / sqrt(v2 + 1e-5), 1e-10, 1e-10);
  REQUIRE(test::error_of([&] { layer_norm(x, {3}); }).find("does not end in") != std::string::npos);
}

TEST_CASE("gradcheck: layer_norm", "[norm][gradcheck]") {
  require_gradcheck([](const std::vector<Tensor>& in) { return layer_norm(in[0], {4}, in[1], in[2]); },
                    {rnd({3, 4}, 10), rnd({4}, 11), rnd({4}, 12)});
  require_gradcheck([](const std::vector<Tensor>& in) { return layer_norm(in[0], {2, 3}); },
                    {rnd({2, 2, 3}, 13)});
}

TEST_CASE("f16 and bf16 layer_norm: f32's of the widened values, rounded once", "[norm]") {
  // Computed in one pass on the CPU when data and parameters (if any) share one 16-bit type;
  // with f32 parameters the data is widened. The gradients read the rounded mean and
  // 1/std, so they are compared with f64's.
  for (DType h : {kBF16, kF16}) {
    INFO(dtype_name(h));
    Tensor x = (rnd({70, 3, 96}, 41, false) * 2.0 + 0.5).to(h);
    Tensor w = (rnd({96}, 42, false) * 0.5 + 1.0).to(h), b = rnd({96}, 43, false).to(h);
    Tensor g = rnd({70, 3, 96}, 44, false).to(h);
    test::require_same(layer_norm(x, {96}, w, b), layer_norm(x.to(kF32), {96}, w.to(kF32), b.to(kF32)).to(h));
    test::require_same(layer_norm(x, {3, 96}), layer_norm(x.to(kF32), {3, 96}).to(h));
    Tensor xh = x.detach().requires_grad_(true), wh = w.detach().requires_grad_(true),
           bh = b.detach().requires_grad_(true);
    Tensor x64 = x.to(kF64).requires_grad_(true), w64 = w.to(kF64).requires_grad_(true),
           b64 = b.to(kF64).requires_grad_(true);
    (layer_norm(xh, {96}, wh, bh) * g).sum().backward();
    (layer_norm(x64, {96}, w64, b64) * g.to(kF64)).sum().backward();
    REQUIRE(xh.grad().dtype() == h);
    REQUIRE(wh.grad().dtype() == h);
    test::require_close(xh.grad().to(kF64), x64.grad(), 3e-2, 3e-2);
    test::require_close(wh.grad().to(kF64), w64.grad(), 3e-2, 3e-1);  // sums of 210 rows
    test::require_close(bh.grad().to(kF64), b64.grad(), 3e-2, 3e-1);
    // 16-bit data with f32 parameters: the widened path, the same values
    Tensor x32 = x.to(kF32);
    test::require_same(layer_norm(x, {96}, w.to(kF32), b.to(kF32)),
                       layer_norm(x32, {96}, w.to(kF32), b.to(kF32)).to(h));
  }
}

namespace {
// dropout_add_layer_norm against the ops it stands for, with a generator of the same seed:
// output, input and parameter gradients, and the generator left where dropout leaves it.
void require_fused_as_composed(const Tensor& x0, const Tensor& r0, const Tensor& w0,
                               const Tensor& b0, double p, bool training) {
  const int64_t D = r0.shape().back();
  auto leaf = [](const Tensor& t) { return t.defined() ? t.detach().requires_grad_(true) : t; };
  Tensor x = leaf(x0), r = leaf(r0), w = leaf(w0), b = leaf(b0);
  Tensor xc = leaf(x0), rc = leaf(r0), wc = leaf(w0), bc = leaf(b0);
  Generator g(17), gc(17);
  Tensor y = dropout_add_layer_norm(x, r, {D}, w, b, p, training, 1e-5, &g);
  Tensor yc = layer_norm(add(rc, dropout(xc, p, training, &gc)), {D}, wc, bc, 1e-5);
  test::require_same(y, yc);
  Generator gw(5);
  Tensor up = randn(y.shape(), kF32, &gw).to(y.dtype());
  (y * up).sum().backward();
  (yc * up).sum().backward();
  test::require_same(x.grad(), xc.grad());
  test::require_same(r.grad(), rc.grad());
  if (w.defined()) test::require_same(w.grad(), wc.grad());
  if (b.defined()) test::require_same(b.grad(), bc.grad());
  REQUIRE(g.advance(1) == gc.advance(1));
}
}  // namespace

TEST_CASE("dropout_add_layer_norm is layer_norm(residual + dropout(x)): values, draws, gradients",
          "[norm][dropout]") {
  Tensor x = rnd({3, 5, 8}, 51, false), r = rnd({3, 5, 8}, 52, false);
  Tensor w = rnd({8}, 53, false), b = rnd({8}, 54, false);
  for (double p : {0.0, 0.25}) {
    INFO("p " << p);
    require_fused_as_composed(x, r, w, b, p, true);
    require_fused_as_composed(x, r, w, b, p, false);
    require_fused_as_composed(x, r, Tensor(), Tensor(), p, true);
    // 16-bit x with an f32 residual and parameters (autocast's Linear output and residual
    // stream): the sum in f32; and everything in one 16-bit type (a model cast with .to())
    for (DType h : {kF16, kBF16}) {
      INFO(dtype_name(h));
      require_fused_as_composed(x.to(h), r.to(kF32), w.to(kF32), b.to(kF32), p, true);
      require_fused_as_composed(x.to(h), r.to(h), w.to(h), b.to(h), p, true);
      require_fused_as_composed(x.to(h), r.to(h), w.to(kF32), b.to(kF32), p, true);
    }
    // a strided x; a residual broadcast over rows and one of a wider dtype than the sum's
    // partner (each the ops it stands for)
    require_fused_as_composed(rnd({8, 5, 3}, 55, false).permute({2, 1, 0}), r, w, b, p, true);
    require_fused_as_composed(x, rnd({5, 8}, 56, false), w, b, p, true);
    require_fused_as_composed(x, r.to(kF32), w, b, p, true);
  }
  require_fused_as_composed(x, r, w, b, 1.0, true);  // everything dropped
  REQUIRE(test::error_of([&] { dropout_add_layer_norm(x, r, {8}, w, b, 1.5, true); })
              .find("probability must be in [0, 1]") != std::string::npos);
  REQUIRE(test::error_of([&] { dropout_add_layer_norm(x, r, {5}, w, b, 0.1, true); })
              .find("does not end in") != std::string::npos);
  REQUIRE(test::error_of([&] { dropout_add_layer_norm(x, r, {8}, rnd({7}, 1, false), b, 0.1, true); })
              .find("weight has 7 elements") != std::string::npos);
}

TEST_CASE("dropout_add_layer_norm under autocast is the composition's f32 norm", "[norm][amp]") {
  Tensor x = rnd({4, 12}, 61, false).to(kF16), r = rnd({4, 12}, 62, false).to(kF32);
  Tensor w = rnd({12}, 63, false).to(kF32), b = rnd({12}, 64, false).to(kF32);
  amp::AutocastGuard guard(kF16);
  require_fused_as_composed(x, r, w, b, 0.2, true);
  // both 16-bit: add keeps f16, layer norm widens it (the composition)
  require_fused_as_composed(x, r.to(kF16), w, b, 0.2, true);
  REQUIRE(dropout_add_layer_norm(x, r.to(kF16), {12}, w, b, 0.2, true).dtype() == kF32);
}

TEST_CASE("gradcheck: dropout_add_layer_norm", "[norm][dropout][gradcheck]") {
  for (double p : {0.0, 0.3}) {
    INFO("p " << p);
    require_gradcheck(
        [p](const std::vector<Tensor>& in) {
          Generator g(3);  // the same mask at every evaluation
          return dropout_add_layer_norm(in[0], in[1], {6}, in[2], in[3], p, true, 1e-5, &g);
        },
        {rnd({4, 6}, 71), rnd({4, 6}, 72), rnd({6}, 73), rnd({6}, 74)});
  }
}

// Layer norm's mean and 1/std are saved in f32 for 16-bit rows, as batch norm's: the backward
// rebuilds the normalised rows from them, and a mean rounded to bf16 shifted every one (rows
// of mean 64: the weight gradient 4e-2 off, 25 times its own rounding). Compared with f64 on
// the same 16-bit values, with parameters of the data's type and in f32, on each device.
TEST_CASE("16-bit layer_norm gradients of rows far from zero", "[norm][cuda]") {
  auto rel = [](const Tensor& got, const Tensor& want) {
    return std::sqrt(sum(square(got.to(kF64) - want)).item() / sum(square(want)).item());
  };
  for (Device d : test::devices())
    for (DType h : {kBF16, kF16})
      for (bool f32_params : {false, true}) {
        INFO(d.str() << " " << dtype_name(h) << (f32_params ? ", f32 parameters" : ""));
        const DType pt = f32_params ? kF32 : h;
        const Tensor x = (rnd({256, 768}, 46, false) + 64.0).to(h);
        const Tensor w = (rnd({768}, 47, false) * 0.5 + 1.0).to(pt), b = rnd({768}, 48, false).to(pt);
        const Tensor g = rnd({256, 768}, 49, false).to(h);
        Tensor x64 = x.to(kF64).requires_grad_(true), w64 = w.to(kF64).requires_grad_(true);
        (layer_norm(x64, {768}, w64, b.to(kF64)) * g.to(kF64)).sum().backward();
        // (detached: on the CPU .to() is the tensor itself, and the gradients would add up)
        Tensor xd = x.to(d).detach().requires_grad_(true), wd = w.to(d).detach().requires_grad_(true);
        (layer_norm(xd, {768}, wd, b.to(d)) * g.to(d)).sum().backward();
        CHECK(rel(wd.grad().cpu(), w64.grad()) < 6e-3);
        CHECK(rel(xd.grad().cpu(), x64.grad()) < 6e-3);
        // and the fused post-LN block, its residual the same rows
        Tensor rd = x.to(d).detach().requires_grad_(true), wf = w.to(d).detach().requires_grad_(true);
        Tensor zero = zeros({256, 768}, TensorOptions(h).device(d));
        (dropout_add_layer_norm(zero, rd, {768}, wf, b.to(d), 0.0, true) * g.to(d)).sum().backward();
        CHECK(rel(wf.grad().cpu(), w64.grad()) < 6e-3);
        CHECK(rel(rd.grad().cpu(), x64.grad()) < 6e-3);
      }
}

TEST_CASE("group_norm normalises groups of channels, in both formats", "[norm][layout]") {
  Tensor x = rnd({3, 6, 4, 5}, 1, false) * 3.0 + 2.0;
  Tensor w = rnd({6}, 2, false), b = rnd({6}, 3, false);
  // the definition: each (sample, group) of 2 channels x 20 positions to mean 0, variance 1
  Tensor g = x.reshape({3, 3, 40});
  Tensor normed = (g - mean(g, {2}, true)) / sqrt(var(g, {2}, 0, true) + 1e-5);
  Tensor want = normed.reshape({3, 6, 4, 5}) * w.reshape({1, 6, 1, 1}) + b.reshape({1, 6, 1, 1});
  test::require_close(group_norm(x, 3, w, b), want, 1e-10, 1e-10);
  test::require_close(group_norm(test::channels_last(x), 3, w, b), want, 1e-10, 1e-10);
  // one group is layer norm over (C, H, W)
  test::require_close(group_norm(x, 1), layer_norm(x, {6, 4, 5}), 1e-12, 1e-12);
  // 16-bit data with f32 parameters stays 16-bit (f32 under autocast)
  REQUIRE(group_norm(x.to(kBF16), 3, w.to(kF32), b.to(kF32)).dtype() == kBF16);
  {
    amp::AutocastGuard ac(kBF16);
    REQUIRE(group_norm(x.to(kBF16), 3, w.to(kF32), b.to(kF32)).dtype() == kF32);
  }
  GroupNorm m(GroupNormOptions(2, 6).eps(1e-3));
  m.to(kF64);
  test::require_close(m.forward(x), group_norm(x, 2, ones({6}, kF64), zeros({6}, kF64), 1e-3), 0, 0);
  test::require_gradcheck([](const std::vector<Tensor>& in) { return group_norm(in[0], 2, in[1], in[2]); },
                          {rnd({2, 4, 3}, 4), rnd({4}, 5), rnd({4}, 6)});
  REQUIRE(test::error_of([&] { group_norm(x, 4); }).find("6 channels do not split into 4 groups") !=
          std::string::npos);
  REQUIRE(test::error_of([&] { group_norm(x, 3, ones({5}, kF64)); }).find("weight must have shape [6]") !=
          std::string::npos);
  REQUIRE(test::error_of([&] { GroupNorm(4, 6); }).find("do not split") != std::string::npos);
}
