#include "backend/cpu/gemm.h"
#include "test_util.h"

using namespace nn;
using test::require_gradcheck;
using test::rnd;

namespace {
// Direct convolution by the definition: out[n,o,y,x] = b[o] + sum w[o,c,i,j] * in[n, g*Cg+c,
// y*s - p + i*d, x*s - p + j*d].
Tensor naive_conv(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dParams& p) {
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t O = w.size(0), Cg = w.size(1), KH = w.size(2), KW = w.size(3);
  const int64_t G = p.groups, Og = O / G;
  const int64_t OH = (H + 2 * p.padding[0] - p.dilation[0] * (KH - 1) - 1) / p.stride[0] + 1;
  const int64_t OW = (W + 2 * p.padding[1] - p.dilation[1] * (KW - 1) - 1) / p.stride[1] + 1;
  auto vx = x.to_vector<double>(), vw = w.to_vector<double>();
  std::vector<double> vb = b.defined() ? b.to_vector<double>() : std::vector<double>(O, 0.0);
  std::vector<double> out(N * O * OH * OW);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t y = 0; y < OH; ++y)
        for (int64_t xx = 0; xx < OW; ++xx) {
          double s = vb[o];
          int64_t g = o / Og;
          for (int64_t c = 0; c < Cg; ++c)
            for (int64_t i = 0; i < KH; ++i)
              for (int64_t j = 0; j < KW; ++j) {
                int64_t iy = y * p.stride[0] - p.padding[0] + i * p.dilation[0];
                int64_t ix = xx * p.stride[1] - p.padding[1] + j * p.dilation[1];
                if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
                s += vw[((o * Cg + c) * KH + i) * KW + j] *
                     vx[((n * C + g * Cg + c) * H + iy) * W + ix];
              }
          out[((n * O + o) * OH + y) * OW + xx] = s;
        }
  return tensor(out, {N, O, OH, OW}, kF64);
}

// Stride 1, padding (ph, pw).
Conv2dParams same_width(int64_t ph, int64_t pw) {
  Conv2dParams c;
  c.padding = {ph, pw};
  return c;
}

Conv2dParams params(int64_t s, int64_t p, int64_t d = 1, int64_t g = 1) {
  Conv2dParams c;
  c.stride = {s, s};
  c.padding = {p, p};
  c.dilation = {d, d};
  c.groups = g;
  return c;
}
}  // namespace

TEST_CASE("conv2d matches a direct convolution", "[conv]") {
  struct Case { Shape x, w; Conv2dParams p; bool bias; };
  std::vector<Case> cases = {
      {{2, 3, 7, 6}, {4, 3, 3, 3}, params(1, 0), true},
      {{2, 3, 7, 6}, {4, 3, 3, 3}, params(2, 1), true},
      {{1, 2, 9, 9}, {3, 2, 3, 2}, params(1, 2, 2), false},
      {{2, 4, 5, 5}, {6, 2, 3, 3}, params(1, 1, 1, 2), true},     // groups
      {{2, 4, 5, 5}, {4, 1, 3, 3}, params(1, 1, 1, 4), true},     // depthwise
      {{3, 8, 4, 4}, {5, 8, 1, 1}, params(1, 0), true},           // pointwise fast path
      {{1, 1, 28, 28}, {2, 1, 5, 5}, params(3, 2), true},
      {{1, 2, 1, 3}, {2, 2, 5, 3}, params(1, 2), true},  // taps that see only padding
      // stride 1 and output as wide as the input: the copies of whole shifted planes
      {{1, 2, 6, 7}, {3, 2, 3, 3}, params(1, 2, 2), true},  // dilated
      {{1, 2, 1, 3}, {2, 2, 3, 3}, params(1, 1), false},    // rows that see only padding
      {{2, 3, 5, 6}, {2, 3, 3, 5}, same_width(1, 2), true}, // wider than tall
  };
  uint64_t seed = 1;
  for (auto& c : cases) {
    Tensor x = rnd(c.x, seed++, false), w = rnd(c.w, seed++, false);
    Tensor b = c.bias ? rnd({c.w[0]}, seed++, false) : Tensor();
    INFO("x " << shape_str(c.x) << " w " << shape_str(c.w));
    test::require_close(conv2d(x, w, b, c.p), naive_conv(x, w, b, c.p), 1e-10, 1e-10);
    test::require_close(conv2d(x.to(kF32), w.to(kF32), c.bias ? b.to(kF32) : Tensor(), c.p),
                        naive_conv(x, w, b, c.p), 1e-4, 1e-4);
  }
  // A batch large enough to spread images over threads.
  Tensor x = rnd({16, 3, 8, 8}, 50, false), w = rnd({4, 3, 3, 3}, 51, false);
  test::require_close(conv2d(x, w, {}, params(1, 1)), naive_conv(x, w, {}, params(1, 1)),
                      1e-10, 1e-10);
}

TEST_CASE("gradcheck: conv2d", "[conv][gradcheck]") {
  auto fn = [](Conv2dParams p) {
    return [p](const std::vector<Tensor>& in) { return conv2d(in[0], in[1], in[2], p); };
  };
  require_gradcheck(fn(params(1, 0)), {rnd({2, 2, 5, 4}, 1), rnd({3, 2, 3, 3}, 2), rnd({3}, 3)});
  require_gradcheck(fn(params(2, 1)), {rnd({1, 2, 6, 5}, 4), rnd({2, 2, 3, 2}, 5), rnd({2}, 6)});
  require_gradcheck(fn(params(1, 2, 2)), {rnd({1, 1, 6, 6}, 7), rnd({2, 1, 2, 3}, 8), rnd({2}, 9)});
  require_gradcheck(fn(params(1, 1, 1, 2)), {rnd({2, 4, 4, 4}, 10), rnd({2, 2, 3, 3}, 11), rnd({2}, 12)});
  require_gradcheck(fn(params(1, 0)), {rnd({2, 3, 3, 3}, 13), rnd({2, 3, 1, 1}, 14), rnd({2}, 15)});
  require_gradcheck(fn(params(1, 2)), {rnd({1, 2, 1, 3}, 16), rnd({2, 2, 5, 3}, 17), rnd({2}, 18)});
  require_gradcheck(fn(params(1, 2, 2)), {rnd({2, 2, 5, 6}, 19), rnd({2, 2, 3, 3}, 20), rnd({2}, 21)});
  require_gradcheck(fn(same_width(1, 2)), {rnd({1, 2, 4, 6}, 22), rnd({3, 2, 3, 5}, 23), rnd({3}, 24)});
  require_gradcheck(fn(params(1, 1)), {rnd({1, 2, 1, 3}, 25), rnd({2, 2, 3, 3}, 26), rnd({2}, 27)});
}

TEST_CASE("f32 conv2d forward and both gradients equal f64's on the packed CPU product's shapes", "[conv]") {
  // f32 runs the packed GEMM (f64 runs Eigen's): 16 channels of 32 x 32 make the column
  // matrix rows 4 KB long (the padded leading dimension), a 5 x 5 kernel wider than its 2 x 2
  // image, and a stride-2 convolution the general im2col.
  struct Case { Shape x, w; Conv2dParams p; };
  for (const Case& c : {Case{{2, 16, 32, 32}, {16, 16, 3, 3}, params(1, 1)},
                        Case{{1, 1, 2, 2}, {1, 1, 5, 5}, params(1, 2)},
                        Case{{2, 16, 17, 15}, {32, 16, 3, 3}, params(2, 1)}}) {
    INFO("x " << shape_str(c.x) << " w " << shape_str(c.w));
    Tensor x64 = rnd(c.x, 30), w64 = rnd(c.w, 31);
    Tensor x32 = x64.detach().to(kF32).requires_grad_(true), w32 = w64.detach().to(kF32).requires_grad_(true);
    Tensor y64 = conv2d(x64, w64, {}, c.p), y32 = conv2d(x32, w32, {}, c.p);
    Tensor g = rnd(y64.shape(), 32, false);
    y64.backward(g);
    y32.backward(g.to(kF32));
    test::require_close(y32.to(kF64), y64, 1e-4, 1e-4);
    test::require_close(x32.grad().to(kF64), x64.grad(), 1e-4, 1e-4);
    test::require_close(w32.grad().to(kF64), w64.grad(), 1e-4, 1e-3);
  }
}

TEST_CASE("bf16 conv2d and both gradients on the CPU equal f64's, native and widened", "[conv]") {
  // bf16 operands: on a CPU with AVX512_BF16 the three products run cpu::gemm_bf16 (f32
  // sums, one rounding of each result to bf16) or, channels-last, bf16 tile kernels; with AMX
  // both layouts run gemm_bf16's AMX tile; with LIBNN_CPU_GEMM=avx2's kernel they run in f32
  // on widened copies. Each against the f64 convolution of the same bf16 values, with the
  // input row-major and channels-last (conv_nhwc.cpp's paths). Nine images, so some thread
  // sums several into its weight gradient; three input channels make the forward's K (27) odd.
  using nn::cpu::F32Kernel;
  struct Case { Shape x, w; Conv2dParams p; };
  struct Variant { F32Kernel f32; bool amx; };
  const test::CpuKernelGuard restore;
  for (Variant v : {Variant{F32Kernel::avx512, true}, Variant{F32Kernel::avx512, false},
                    Variant{F32Kernel::avx2, false}})
  for (MemoryFormat format : {MemoryFormat::contiguous, MemoryFormat::channels_last}) {
    if (!nn::cpu::f32_kernel_supported(v.f32) || (v.amx && !nn::cpu::bf16_amx_supported())) continue;
    nn::cpu::set_f32_kernel(v.f32);
    nn::cpu::set_bf16_amx(v.amx);
    INFO("f32 kernel " << int(v.f32) << ", native bf16 " << nn::cpu::bf16_gemm_native()
         << ", AMX " << v.amx << ", channels-last " << (format == MemoryFormat::channels_last));
    for (const Case& c : {Case{{2, 16, 32, 32}, {16, 16, 3, 3}, params(1, 1)},
                          Case{{9, 16, 17, 15}, {32, 16, 3, 3}, params(2, 1)},
                          Case{{2, 3, 20, 20}, {32, 3, 3, 3}, params(1, 1)},
                          Case{{1, 8, 9, 9}, {8, 4, 3, 3}, params(1, 2, 2, 2)},
                          Case{{2, 8, 6, 6}, {40, 8, 1, 1}, params(1, 0)},
                          Case{{3, 5, 7, 6}, {6, 5, 3, 3}, params(1, 1)},
                          // channels-last bf16 tiles: 49 pixels (an odd pixel pair), 20
                          // output channels (partial rows and panels), K 144 (partial columns)
                          Case{{2, 16, 7, 7}, {20, 16, 3, 3}, params(1, 1)},
                          Case{{3, 32, 5, 5}, {16, 32, 3, 3}, params(1, 0)},
                          // 1x1 stride 2 (input gradient: the sampled pixels, zeros between)
                          Case{{2, 16, 9, 7}, {24, 16, 1, 1}, params(2, 0)}}) {
      INFO("x " << shape_str(c.x) << " w " << shape_str(c.w));
      Tensor xb = rnd(c.x, 40, false).to(kBF16).contiguous(format).requires_grad_(true);
      Tensor wb = rnd(c.w, 41, false).to(kBF16).requires_grad_(true);
      Tensor bb = rnd({c.w[0]}, 42, false).to(kBF16).requires_grad_(true);
      Tensor x64 = xb.detach().to(kF64).contiguous().requires_grad_(true);
      Tensor w64 = wb.detach().to(kF64).requires_grad_(true);
      Tensor b64 = bb.detach().to(kF64).requires_grad_(true);
      Tensor yb = conv2d(xb, wb, bb, c.p), y64 = conv2d(x64, w64, b64, c.p);
      REQUIRE(yb.dtype() == kBF16);
      REQUIRE(yb.is_contiguous(format));
      Tensor gb = rnd(yb.shape(), 43, false).to(kBF16).contiguous(format);
      yb.backward(gb);
      y64.backward(gb.to(kF64));
      REQUIRE(xb.grad().dtype() == kBF16);
      test::require_close(yb.to(kF64), y64, 1e-2, 2e-2);
      test::require_close(xb.grad().to(kF64), x64.grad(), 1e-2, 2e-2);
      test::require_close(wb.grad().to(kF64), w64.grad(), 1e-2, 5e-2);
      test::require_close(bb.grad().to(kF64), b64.grad(), 1e-2, 5e-2);
    }
  }
}

TEST_CASE("channels-last f32 conv2d and its gradients equal f64's with every CPU kernel", "[conv][layout]") {
  // Channels-last f32 runs conv_nhwc.cpp's tile kernels (AVX2 or AVX-512, whichever
  // set_f32_kernel names) where they apply and its column matrices elsewhere (eigen; groups;
  // the input gradient of strided convolutions; weight gradients with channels not a multiple
  // of the vector width). Each case against the row-major f64 result.
  struct Case { Shape x, w; Conv2dParams p; };
  Conv2dParams wide_pad = params(1, 0);
  wide_pad.padding = {2, 1};
  const std::vector<Case> cases = {
      {{2, 16, 8, 8}, {16, 16, 3, 3}, params(1, 1)},    // one-vector tiles
      {{3, 32, 7, 9}, {48, 32, 3, 3}, params(1, 1)},    // two-vector tiles, a partial panel
      {{2, 3, 11, 10}, {20, 3, 3, 3}, params(1, 1)},    // 3 channels: weight gradient by columns
      {{2, 16, 9, 9}, {24, 16, 3, 3}, params(2, 1)},    // stride 2: input gradient by columns
      {{1, 8, 6, 5}, {5, 8, 5, 3}, wide_pad},           // 5 output channels, 8 input channels
      {{2, 64, 5, 5}, {64, 64, 1, 1}, params(1, 0)},    // pointwise
      {{1, 16, 4, 4}, {16, 16, 1, 1}, params(1, 1)},    // pointwise, padded: a border of bias
      {{1, 16, 7, 7}, {32, 16, 3, 3}, params(1, 2, 2)}, // dilated
      {{1, 128, 4, 4}, {40, 128, 3, 3}, params(1, 1)},  // channels cut into slices
      {{2, 32, 3, 3}, {16, 32, 5, 5}, params(1, 1)},    // taps that see only padding
      {{2, 16, 5, 5}, {16, 8, 3, 3}, params(1, 1, 1, 2)},  // groups
      {{1, 16, 32, 32}, {16, 16, 3, 3}, params(1, 1)},  // several pixel chunks a forward image
      {{2, 16, 40, 40}, {16, 16, 3, 3}, params(1, 1)},  // ... and a weight-gradient image
      {{3, 16, 5, 5}, {16, 16, 3, 3}, params(3, 0)},    // stride 3, output 1 x 1
      {{2, 16, 9, 7}, {24, 16, 1, 1}, params(2, 0)},    // 1x1 stride 2: sampled input gradient
      {{1, 16, 10, 10}, {16, 16, 1, 1}, params(3, 0)},  // ... stride 3
  };
  using nn::cpu::F32Kernel;
  const test::CpuKernelGuard restore;
  for (F32Kernel kernel : {F32Kernel::eigen, F32Kernel::avx2, F32Kernel::avx512}) {
    if (!nn::cpu::f32_kernel_supported(kernel)) continue;
    nn::cpu::set_f32_kernel(kernel);
    uint64_t seed = 100;
    for (const Case& c : cases) {
      INFO("kernel " << int(kernel) << " x " << shape_str(c.x) << " w " << shape_str(c.w));
      Tensor x64 = rnd(c.x, seed++), w64 = rnd(c.w, seed++), b64 = rnd({c.w[0]}, seed++);
      Tensor y64 = conv2d(x64, w64, b64, c.p);
      Tensor g = rnd(y64.shape(), seed++, false);
      y64.backward(g);
      Tensor x32 = x64.detach().to(kF32).contiguous(MemoryFormat::channels_last).requires_grad_(true);
      Tensor w32 = w64.detach().to(kF32).requires_grad_(true), b32 = b64.detach().to(kF32).requires_grad_(true);
      Tensor y32 = conv2d(x32, w32, b32, c.p);
      REQUIRE(y32.is_contiguous(MemoryFormat::channels_last));
      y32.backward(g.to(kF32));
      test::require_close(y32.to(kF64), y64, 1e-4, 1e-4);
      test::require_close(x32.grad().to(kF64), x64.grad(), 1e-4, 1e-4);
      test::require_close(w32.grad().to(kF64), w64.grad(), 1e-4, 1e-3);
      test::require_close(b32.grad().to(kF64), b64.grad(), 1e-4, 1e-3);
    }
  }
}

TEST_CASE("conv2d of an empty batch has zero weight and bias gradients", "[conv]") {
  for (bool nhwc : {false, true}) {
    Tensor x = zeros({0, 3, 8, 8}).requires_grad_(), w = ones({4, 3, 3, 3}).requires_grad_(),
           b = ones({4}).requires_grad_();
    Tensor xin = nhwc ? x.contiguous(MemoryFormat::channels_last) : x;
    Tensor y = conv2d(xin, w, b, params(1, 1));
    REQUIRE(y.shape() == Shape{0, 4, 8, 8});
    sum(y).backward();
    REQUIRE(x.grad().shape() == x.shape());
    REQUIRE(w.grad().shape() == w.shape());
    REQUIRE(sum(abs(w.grad())).item() == 0);
    REQUIRE(sum(abs(b.grad())).item() == 0);
  }
}

TEST_CASE("conv2d of zero input channels is its bias, in both formats", "[conv][layout]") {
  for (DType t : {kF32, kF64})
    for (bool nhwc : {false, true}) {
      INFO("dtype " << t << " channels-last " << nhwc);
      Tensor x = zeros({2, 0, 5, 5}, t), w = ones({3, 0, 3, 3}, t).requires_grad_(),
             b = tensor({1.0, 2.0, 3.0}, {3}, t).requires_grad_();
      Tensor y = conv2d(nhwc ? x.contiguous(MemoryFormat::channels_last) : x, w, b, params(1, 1));
      REQUIRE(y.shape() == Shape{2, 3, 5, 5});
      test::require_close(sum(y, {0, 2, 3}), tensor({50.0, 100.0, 150.0}, {3}, kF64), 0, 0);
      sum(y).backward();
      test::require_close(b.grad(), full({3}, 50.0, kF64), 0, 0);
      REQUIRE(w.grad().shape() == w.shape());
    }
}

TEST_CASE("conv2d rejects bad shapes", "[conv][errors]") {
  Tensor x = ones({1, 3, 5, 5}), w = ones({4, 3, 3, 3});
  REQUIRE(test::error_of([&] { conv2d(ones({3, 5, 5}), w); }).find("4-d") != std::string::npos);
  REQUIRE(test::error_of([&] { conv2d(ones({1, 2, 5, 5}), w); }).find("input channels") !=
          std::string::npos);
  REQUIRE(test::error_of([&] { conv2d(ones({1, 3, 2, 2}), w); }).find("smaller than") !=
          std::string::npos);
  // an empty image is smaller than any window, even 1x1 at stride 2 (C++'s truncating
  // division made that one output pixel, whose input gradient then divided by zero)
  Conv2dParams s2;
  s2.stride = {2, 2};
  REQUIRE(test::error_of([&] { conv2d(ones({1, 3, 4, 0}), ones({4, 3, 1, 1}), {}, s2); })
              .find("smaller than") != std::string::npos);
  REQUIRE(test::error_of([&] {
            conv2d(ones({1, 3, 4, 0}).contiguous(MemoryFormat::channels_last), ones({4, 3, 1, 1}), {}, s2);
          }).find("smaller than") != std::string::npos);
  REQUIRE(test::error_of([&] { conv2d(x, w, ones({3})); }).find("bias") != std::string::npos);
  // an empty kernel (it divided by zero in the channels-last path), and an empty image that
  // padding alone would give windows
  for (MemoryFormat f : {MemoryFormat::contiguous, MemoryFormat::channels_last}) {
    REQUIRE(test::error_of([&] { conv2d(x.contiguous(f), ones({4, 3, 0, 3})); })
                .find("empty kernel") != std::string::npos);
    Conv2dParams pad;
    pad.padding = {1, 1};
    REQUIRE(test::error_of([&] { conv2d(ones({1, 3, 0, 4}).contiguous(f), ones({4, 3, 1, 1}), {}, pad); })
                .find("no rows or no columns") != std::string::npos);
  }
}

TEST_CASE("conv1d is the direct convolution along L, also of a transposed (N, L, C) input", "[conv][layout]") {
  // (x, w, stride, padding, dilation, groups)
  struct Case { Shape x, w; Conv1dParams p; };
  const std::vector<Case> cases = {
      {{2, 3, 9}, {4, 3, 3}, {}},
      {{2, 4, 11}, {6, 2, 3}, {.stride = 2, .padding = 3, .dilation = 2, .groups = 2}},
      {{1, 2, 2}, {3, 2, 5}, {.padding = 2}},  // taps that see only padding
      {{3, 5, 7}, {2, 5, 1}, {}},              // pointwise
  };
  uint64_t seed = 100;
  for (const auto& c : cases) {
    INFO("x " << shape_str(c.x) << " w " << shape_str(c.w));
    Tensor x = rnd(c.x, seed++, false), w = rnd(c.w, seed++, false), b = rnd({c.w[0]}, seed++, false);
    Conv2dParams p2;
    p2.stride = {1, c.p.stride};
    p2.padding = {0, c.p.padding};
    p2.dilation = {1, c.p.dilation};
    p2.groups = c.p.groups;
    const Tensor want = naive_conv(x.unsqueeze(2), w.unsqueeze(2), b, p2).squeeze(2);
    test::require_close(conv1d(x, w, b, c.p), want, 1e-10, 1e-10);
    test::require_close(conv1d(x.to(kF32), w.to(kF32), b.to(kF32), c.p), want, 1e-4, 1e-4);
    // (N, L, C) seen as (N, C, L): no copy, the output laid out alike (channels innermost)
    Tensor nlc = x.transpose(1, 2).contiguous().transpose(1, 2);
    REQUIRE(!nlc.is_contiguous());
    Tensor y = conv1d(nlc, w, b, c.p);
    test::require_close(y, want, 1e-10, 1e-10);
    if (c.w[0] > 1 && y.size(2) > 1) REQUIRE(y.strides()[1] == 1);
  }
}

TEST_CASE("gradcheck: conv1d, of row-major and transposed inputs", "[conv][gradcheck]") {
  auto fn = [](Conv1dParams p, bool transposed) {
    return [p, transposed](const std::vector<Tensor>& in) {
      return conv1d(transposed ? in[0].transpose(1, 2) : in[0], in[1], in[2], p);
    };
  };
  require_gradcheck(fn({}, false), {rnd({2, 3, 6}, 1), rnd({2, 3, 3}, 2), rnd({2}, 3)});
  require_gradcheck(fn({.stride = 2, .padding = 3, .dilation = 2, .groups = 2}, false),
                    {rnd({2, 4, 9}, 4), rnd({4, 2, 3}, 5), rnd({4}, 6)});
  require_gradcheck(fn({.padding = 1}, true), {rnd({2, 7, 3}, 7), rnd({4, 3, 3}, 8), rnd({4}, 9)});
}

TEST_CASE("conv1d's errors speak of the 1-d input", "[conv][errors]") {
  const Tensor w = ones({4, 3, 3});
  auto said = [](const std::string& e, const char* what) {
    INFO(e);
    return e.find("conv1d:") != std::string::npos && e.find(what) != std::string::npos &&
           e.find("conv2d") == std::string::npos;
  };
  REQUIRE(said(test::error_of([&] { conv1d(ones({1, 3, 5, 5}), w); }), "3-d"));
  REQUIRE(said(test::error_of([&] { conv1d(ones({1, 3, 5}), ones({4, 3, 3, 3})); }), "(O, C/groups, K)"));
  REQUIRE(said(test::error_of([&] { conv1d(ones({1, 2, 5}), w); }), "[1, 2, 5] has 2"));
  REQUIRE(said(test::error_of([&] { conv1d(ones({1, 3, 2}), w); }), "smaller than the 3 kernel"));
  REQUIRE(said(test::error_of([&] { conv1d(ones({1, 3, 0}), ones({4, 3, 1}), {}, {.padding = 1}); }), "has length 0"));
  REQUIRE(said(test::error_of([&] { conv1d(ones({1, 3, 5}), ones({4, 3, 0})); }), "empty kernel"));
  REQUIRE(said(test::error_of([&] { conv1d(ones({1, 3, 5}), w, {}, {.stride = 0}); }), "stride"));
  REQUIRE(said(test::error_of([&] { conv1d(ones({1, 3, 5}), w, ones({3})); }), "bias"));
  REQUIRE(said(test::error_of([&] { conv1d(ones({1, 3, 5}), ones({4, 1, 3}), {}, {.groups = 2}); }),
               "groups=2"));
}

TEST_CASE("Conv1d: parameters, PyTorch's init bounds and repr (Conv2d's too)", "[conv][layers]") {
  Conv1d c(Conv1dOptions(6, 4, 5).groups(2).padding(2));
  REQUIRE(c.weight.shape() == Shape{4, 3, 5});
  REQUIRE(c.bias.shape() == Shape{4});
  const double bound = 1.0 / std::sqrt(3.0 * 5.0);  // fan_in = C/groups * K
  REQUIRE(amax(abs(c.weight)).item<double>() <= bound);
  REQUIRE(amax(abs(c.bias)).item<double>() <= bound);
  REQUIRE(amax(abs(c.weight)).item<double>() > 0.5 * bound);
  REQUIRE(c.forward(ones({2, 6, 7})).shape() == Shape{2, 4, 7});
  REQUIRE(c.extra_repr() == "6, 4, kernel_size=(5,), stride=(1,), padding=(2,), groups=2");
  REQUIRE(Conv1d(Conv1dOptions(2, 2, 3).dilation(2).bias(false)).extra_repr() ==
          "2, 2, kernel_size=(3,), stride=(1,), dilation=(2,), bias=false");
  REQUIRE(Conv2d(Conv2dOptions(3, 8, 3).stride({2, 2}).padding({1, 1}).bias(false)).extra_repr() ==
          "3, 8, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1), bias=false");
  REQUIRE(test::error_of([] { Conv1d(Conv1dOptions(5, 4, 3).groups(2)); }).find("Conv1d: groups=2") !=
          std::string::npos);
}
