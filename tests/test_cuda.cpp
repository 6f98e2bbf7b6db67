// The cross-backend test: every primitive run on the CPU and on CUDA from the same random
// inputs (odd sizes, non-contiguous views, broadcasting, empty tensors), outputs and input
// gradients compared with a tolerance per dtype. Skips, saying so, when no GPU is present.
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <tuple>

#include "test_util.h"

using namespace nn;

namespace {

bool have_gpu() { return test::have_cuda(); }

using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

struct Case {
  std::string name;
  std::vector<Shape> shapes;  // inputs, drawn N(0,1) in f32
  Fn fn;
  double tol = 1e-4;          // f32: cuDNN/cuBLAS sum in different orders than Eigen
  bool grads = true;
  DType dtype = kF32;
};

// Runs fn on `device` with copies of `inputs`; returns outputs then input gradients (CPU).
std::vector<Tensor> run(const Case& c, const std::vector<Tensor>& inputs, Device device) {
  std::vector<Tensor> xs;
  for (auto& x : inputs) {
    Tensor d = x.to(c.dtype).to(device).detach();
    if (c.grads && is_floating(d.dtype())) d.requires_grad_(true);
    xs.push_back(d);
  }
  std::vector<Tensor> outs = c.fn(xs);
  std::vector<Tensor> result;
  Tensor total;
  Generator g(99);
  for (auto& o : outs) {
    result.push_back(o.detach().cpu().to(is_floating(o.dtype()) ? kF32 : o.dtype()));
    if (c.grads && o.requires_grad()) {
      Tensor w = randn(o.shape(), kF32, &g).to(o.dtype()).to(device);
      Tensor s = sum(mul(o, w));
      total = total.defined() ? add(total, s) : s;
    }
  }
  if (total.defined()) {
    total.backward();
    for (auto& x : xs)
      if (x.requires_grad())
        result.push_back(x.grad().defined() ? x.grad().cpu().to(kF32) : zeros(x.shape()));
  }
  return result;
}

void check(const Case& c) {
  INFO("case: " << c.name);
  Generator g(7);
  std::vector<Tensor> inputs;
  for (auto& s : c.shapes) inputs.push_back(randn(s, kF32, &g));
  auto cpu = run(c, inputs, kCPU);
  auto gpu = run(c, inputs, kCUDA);
  REQUIRE(cpu.size() == gpu.size());
  for (size_t i = 0; i < cpu.size(); ++i) {
    INFO("result " << i << " (outputs first, then input gradients)");
    test::require_close(gpu[i], cpu[i], c.tol, c.tol);
  }
}

Tensor T(const Tensor& t) { return t.transpose(0, 1); }  // a non-contiguous view
using test::channels_last;

Conv2dParams conv(int64_t s, int64_t p, int64_t d = 1, int64_t g = 1) {
  return test::conv_params({s, s}, {p, p}, {d, d}, g);
}
Pool2dParams pool(int64_t k, int64_t s = 0, int64_t p = 0) {
  return test::pool_params({k, k}, {s, s}, {p, p});
}

// Zeros like t (shape, dtype, device) but for `value` at flat index i: a NaN or an infinity
// put into an input through an add, so that gradients still flow to the input.
Tensor one_at(const Tensor& t, int64_t i, float value) {
  Tensor h = zeros(t.shape());
  h.data<float>()[i] = value;
  return h.to(t.dtype()).to(t.device());
}

// A NaN in query 1 (its row NaN) and +inf in key 2 (NaN rows where a query's first element is
// positive), outputs and gradients: the NaNs where the CPU has them, never a masked row's
// zeros. (The second call's query gradient is left out: 0 x inf there is NaN or, where a
// product rounds 0 up to a tiny weight, an infinity, and which one is no contract.)
std::vector<Tensor> attention_with_nan(const std::vector<Tensor>& x) {
  return {scaled_dot_product_attention(add(x[0], one_at(x[0], x[0].size(-1), NAN)), x[1], x[2])
              .to(kF32),
          scaled_dot_product_attention(x[0].detach(),
                                       add(x[1], one_at(x[1], 2 * x[1].size(-1), INFINITY)), x[2])
              .to(kF32)};
}

// Attention on the tensor-core kernels (WMMA) where head dims are multiples of 16, and on the
// plain kernel otherwise: 16-bit data, and f32 (three TF32 products per product, held to f32's
// tolerance: one TF32 product fails it); lengths cross the 64-row tiles, with and without a
// padding mask (one sequence fully masked in the second call), outputs and gradients against
// the CPU.
constexpr double kF32TcTol = 2e-5;  // seen: 1.5e-6 (one TF32 product: 1.2e-3)
std::vector<Case> tc_attention_cases() {
  auto masked = [](int64_t N, int64_t S, const Tensor& like) {
    Tensor keep = ones({N, S}, TensorOptions(kU8).device(like.device()));
    NoGradGuard ng;
    keep.select(0, 0).slice(0, S / 3, S).zero_();
    if (N > 1) keep.select(0, N - 1).zero_();
    return keep;
  };
  std::vector<Case> v;
  v.push_back({"f16 attention", {{2, 2, 70, 64}, {2, 2, 45, 64}, {2, 2, 45, 64}}, [=](auto& x) {
                 return std::vector<Tensor>{
                     scaled_dot_product_attention(x[0], x[1], x[2]).to(kF32),
                     scaled_dot_product_attention(x[0], x[1], x[2], masked(2, 45, x[0])).to(kF32)};
               }, 5e-2, true, kF16});
  v.push_back({"bf16 attention, head dims 32 and 48", {{3, 1, 129, 32}, {3, 1, 66, 32}, {3, 1, 66, 48}},
               [=](auto& x) {
                 return std::vector<Tensor>{
                     scaled_dot_product_attention(x[0], x[1], x[2], masked(3, 66, x[0])).to(kF32)};
               }, 6e-2, true, kBF16});
  v.push_back({"f16 attention, head dim 128", {{1, 2, 20, 128}, {1, 2, 77, 128}, {1, 2, 77, 128}},
               [](auto& x) {
                 return std::vector<Tensor>{scaled_dot_product_attention(x[0], x[1], x[2]).to(kF32)};
               }, 5e-2, true, kF16});
  v.push_back({"f16 attention, head dim 40 (plain kernel)", {{1, 2, 19, 40}, {1, 2, 23, 40}, {1, 2, 23, 40}},
               [](auto& x) {
                 return std::vector<Tensor>{scaled_dot_product_attention(x[0], x[1], x[2]).to(kF32)};
               }, 5e-2, true, kF16});
  // dropout on the tensor-core kernels (f16, bf16) and the plain one (head dim 40)
  for (auto [name, dt, d] : {std::tuple{"f16", kF16, int64_t(64)}, std::tuple{"bf16", kBF16, int64_t(32)},
                             std::tuple{"f16", kF16, int64_t(40)}})
    v.push_back({std::string(name) + " attention with dropout, head dim " + std::to_string(d),
                 {{2, 2, 70, d}, {2, 2, 45, d}, {2, 2, 45, d}}, [=](auto& x) {
                   Generator g(8);
                   return std::vector<Tensor>{
                       scaled_dot_product_attention(x[0], x[1], x[2], masked(2, 45, x[0]), std::nullopt,
                                                    0.2, &g).to(kF32),
                       scaled_dot_product_attention(x[0], x[1], x[2], {}, std::nullopt, 0.5, &g).to(kF32)};
                 }, dt == kBF16 ? 6e-2 : 5e-2, true, dt});
  // heads read and written in place: a packed (N, T, 3, heads, D) projection, and heads split
  // from a (N, T, 3 * heads * D) one (rows 16-byte aligned: the tensor-core kernels take them)
  for (auto [name, dt, hd] : {std::tuple{"f16", kF16, int64_t(64)}, std::tuple{"bf16", kBF16, int64_t(32)}}) {
    const int64_t d = hd;  // (clang before 16 lets no lambda capture a structured binding)
    v.push_back({std::string(name) + " attention on packed heads, head dim " + std::to_string(d),
                 {{2, 70, 3, 2, d}, {2, 45, 3 * 2 * d}}, [=](auto& x) {
                   Generator g(4);
                   auto split = [&](int i) {
                     return x[1].reshape({2, 45, 3, 2, d}).select(2, i).permute({0, 2, 1, 3});
                   };
                   return std::vector<Tensor>{
                       scaled_dot_product_attention_packed(x[0], masked(2, 70, x[0]), std::nullopt, 0.2, &g)
                           .to(kF32),
                       scaled_dot_product_attention(split(0), split(1), split(2), masked(2, 45, x[0]))
                           .to(kF32)};
                 }, dt == kBF16 ? 6e-2 : 5e-2, true, dt});
  }
  v.push_back({"f16 attention with NaN and inf", {{1, 2, 20, 64}, {1, 2, 33, 64}, {1, 2, 33, 64}},
               attention_with_nan, 5e-2, true, kF16});
  v.push_back({"bf16 attention with NaN and inf, head dim 40", {{1, 2, 9, 40}, {1, 2, 12, 40}, {1, 2, 12, 40}},
               attention_with_nan, 6e-2, true, kBF16});
  // f32: masks, dropout, heads in place, NaN and inf (a cross term's 0 x inf is no NaN), and
  // head dims 128 (171 KB of shared memory in the backward)
  v.push_back({"f32 attention, head dim 64", {{2, 2, 70, 64}, {2, 2, 45, 64}, {2, 2, 45, 64}}, [=](auto& x) {
                 return std::vector<Tensor>{scaled_dot_product_attention(x[0], x[1], x[2]),
                                            scaled_dot_product_attention(x[0], x[1], x[2], masked(2, 45, x[0]))};
               }, kF32TcTol});
  v.push_back({"f32 attention with dropout, head dims 32 and 48", {{2, 2, 70, 32}, {2, 2, 45, 32}, {2, 2, 45, 48}},
               [=](auto& x) {
                 Generator g(8);
                 return std::vector<Tensor>{
                     scaled_dot_product_attention(x[0], x[1], x[2], masked(2, 45, x[0]), std::nullopt, 0.2, &g),
                     scaled_dot_product_attention(x[0], x[1], x[2], {}, std::nullopt, 0.5, &g)};
               }, kF32TcTol});
  v.push_back({"f32 attention on packed heads, head dim 32", {{2, 70, 3, 2, 32}, {2, 45, 3 * 2 * 32}}, [=](auto& x) {
                 Generator g(4);
                 auto split = [&](int i) {
                   return x[1].reshape({2, 45, 3, 2, 32}).select(2, i).permute({0, 2, 1, 3});
                 };
                 return std::vector<Tensor>{
                     scaled_dot_product_attention_packed(x[0], masked(2, 70, x[0]), std::nullopt, 0.2, &g),
                     scaled_dot_product_attention(split(0), split(1), split(2), masked(2, 45, x[0]))};
               }, kF32TcTol});
  v.push_back({"f32 attention with NaN and inf", {{1, 2, 20, 64}, {1, 2, 33, 64}, {1, 2, 33, 64}},
               attention_with_nan, kF32TcTol});
  // a value whose TF32 rounding would pass f32's largest (3.402e38 rounds up to infinity):
  // its high part is truncated, so the output stays finite as on the CPU
  v.push_back({"f32 attention with a value near f32's largest", {{1, 2, 20, 64}, {1, 2, 33, 64}, {1, 2, 33, 64}},
               [](auto& x) {
                 return std::vector<Tensor>{scaled_dot_product_attention(
                     x[0], x[1], add(x[2], one_at(x[2], 5, 3.402e38f)))};
               }, kF32TcTol, false});
  v.push_back({"f32 attention, head dim 128", {{1, 2, 20, 128}, {1, 2, 77, 128}, {1, 2, 77, 128}},
               [](auto& x) {
                 return std::vector<Tensor>{scaled_dot_product_attention(x[0], x[1], x[2])};
               }, kF32TcTol});
  return v;
}

std::vector<Case> cases() {
  std::vector<Case> v;
  auto unary = [&](const char* n, Tensor (*f)(const Tensor&)) {
    v.push_back({std::string(n), {{37, 5}}, [f](auto& x) { return std::vector<Tensor>{f(x[0])}; }});
    v.push_back({std::string(n) + " (transposed)", {{5, 37}},
                 [f](auto& x) { return std::vector<Tensor>{f(T(x[0]))}; }});
  };
  unary("exp", exp); unary("tanh", tanh); unary("sigmoid", sigmoid); unary("relu", relu);
  unary("gelu", gelu); unary("neg", neg); unary("abs", abs); unary("square", square);
  unary("silu", silu);
  v.push_back({"group norm", {{3, 8, 5, 4}, {8}, {8}}, [](auto& x) {
                 return std::vector<Tensor>{group_norm(x[0], 4, x[1], x[2]),
                                            group_norm(channels_last(x[0]), 2, x[1], x[2])};
               }});
  v.push_back({"leaky_relu and elu", {{7, 23}}, [](auto& x) {
                 return std::vector<Tensor>{leaky_relu(x[0], 0.2), elu(x[0], 1.5), leaky_relu(T(x[0]))};
               }});
  v.push_back({"top_k_correct", {{33, 9}, {33, 9}}, [](auto& x) {
                 Tensor t = argmax(x[1], 1);
                 return std::vector<Tensor>{top_k_correct(x[0], t, 1).to(kF32),
                                            top_k_correct(x[0], t, 5).to(kF32)};
               }, 0, false});
  v.push_back({"softplus and log1p", {{3, 41}}, [](auto& x) {
                 Tensor wide = x[0] * 12.0;  // past the threshold (20) and beyond -20 too
                 return std::vector<Tensor>{softplus(wide), softplus(x[0], 2.5), log1p(abs(x[0]))};
               }});
  v.push_back({"log/sqrt/rsqrt", {{41}}, [](auto& x) {
                 Tensor p = add(abs(x[0]), 0.5);
                 return std::vector<Tensor>{log(p), sqrt(p), rsqrt(p), pow(p, 1.7), 2.0 / p};
               }});
  v.push_back({"scalar ops and clamp", {{3, 50}}, [](auto& x) {
                 return std::vector<Tensor>{x[0] * 3.0 + 1.0, 2.0 - x[0], clamp(x[0], -0.5, 0.7)};
               }});
  v.push_back({"binary broadcast", {{4, 1, 33}, {7, 1}}, [](auto& x) {
                 return std::vector<Tensor>{x[0] + x[1], x[0] - x[1], x[0] * x[1],
                                            maximum(x[0], x[1]), minimum(x[0], x[1])};
               }});
  // rows of 32 or more run one warp per row (map_rows): bias broadcasts, permutes that keep
  // the last dim, a transposed last dim, rows of 70 (not a multiple of 32)
  v.push_back({"broadcast and permute over long rows", {{33, 70}, {70}, {3, 40, 50}}, [](auto& x) {
                 return std::vector<Tensor>{add(x[0], x[1]), mul(x[1], x[0]),
                                            x[2].permute({1, 0, 2}).contiguous(),
                                            add(x[2].transpose(0, 1), 1.0),
                                            x[2].transpose(1, 2).contiguous()};
               }});
  v.push_back({"few long rows and a broadcast scalar (thread per element)", {{3, 600}, {600}, {1}},
               [](auto& x) {
                 return std::vector<Tensor>{add(x[0], x[1]), mul(x[0], x[2]),
                                            x[0].slice(1, 0, 600, 2).contiguous()};
               }});
  Case rows16{"f16 bias broadcast over long rows", {{9, 130}, {130}}, [](auto& x) {
                return std::vector<Tensor>{add(x[0], x[1]).to(kF32)};
              }, 1e-2, true, kF16};
  v.push_back(rows16);
  v.push_back({"div and pow", {{9, 11}, {11}}, [](auto& x) {
                 Tensor b = add(abs(x[1]), 0.5);
                 return std::vector<Tensor>{x[0] / b, pow(add(abs(x[0]), 0.1), b)};
               }});
  v.push_back({"binary transposed", {{13, 6}, {6, 13}},
               [](auto& x) { return std::vector<Tensor>{T(x[0]) * x[1] + x[1]}; }});
  v.push_back({"comparisons and where", {{8, 9}, {9}}, [](auto& x) {
                 Tensor c = gt(x[0], x[1]);
                 return std::vector<Tensor>{c, le(x[0], x[1]), eq(x[0], x[0]), where(c, x[0], x[1])};
               }});
  v.push_back({"empty tensors", {{0, 3}, {3}}, [](auto& x) {
                 return std::vector<Tensor>{x[0] + x[1], sum(x[0], {0}), exp(x[0])};
               }});
  v.push_back({"large contiguous (vector path)", {{1 << 20}, {1 << 20}},
               [](auto& x) { return std::vector<Tensor>{x[0] * x[1] + 1.0, relu(x[0])}; }});
  v.push_back({"odd offset (unaligned path)", {{1001}},
               [](auto& x) { return std::vector<Tensor>{x[0].slice(0, 1, 1001) * 2.0}; }});
  // reductions
  v.push_back({"sum/mean over dims", {{5, 7, 9}}, [](auto& x) {
                 return std::vector<Tensor>{sum(x[0], {0}), sum(x[0], {1}), sum(x[0], {2}),
                                            mean(x[0], {0, 2}), sum(x[0]), mean(x[0], {1}, true)};
               }});
  v.push_back({"amax/amin/var", {{6, 33}}, [](auto& x) {
                 return std::vector<Tensor>{amax(x[0], {1}), amin(x[0], {0}), var(x[0], {1})};
               }});
  v.push_back({"reductions of views", {{33, 6}}, [](auto& x) {
                 return std::vector<Tensor>{sum(T(x[0]), {1}), amax(T(x[0]), {0})};
               }});
  v.push_back({"large reduction", {{3, 100000}}, [](auto& x) {
                 return std::vector<Tensor>{sum(x[0]), sum(x[0], {1}), sum(x[0], {0})};
               }, 1e-3});
  // many splits per output, columns over long rows, NaN through the split combine
  v.push_back({"large reductions: splits, columns, max with NaN", {{4100, 67}, {1 << 20}}, [](auto& x) {
                 Tensor withnan = x[1].clone();
                 {
                   NoGradGuard ng;
                   withnan.slice(0, 777777, 777778).fill_(NAN);
                 }
                 Tensor m = amax(withnan);
                 return std::vector<Tensor>{sum(x[0], {0}), mean(x[0], {0}), amax(x[0], {0}),
                                            sum(x[1]), amin(x[1]), ne(m, m).to(kF32)};
               }, 1e-3, false});
  // many outputs over short rows take a warp each (four-element loads where a row is aligned
  // to them: every row of the first, some of the second); softmax keeps rows of up to 1024
  // in registers
  v.push_back({"many short rows: a warp per row, vector loads where aligned", {{2000, 1024}, {1500, 37}},
               [](auto& x) {
                 return std::vector<Tensor>{sum(x[0], {1}), mean(x[1], {1}), amax(x[1], {1}),
                                            softmax(x[0], 1), log_softmax(x[1], 1)};
               }, 1e-3});
  v.push_back({"argmax", {{17, 23}}, [](auto& x) {
                 return std::vector<Tensor>{argmax(x[0], 1), argmax(x[0], 0)};
               }, 0, false});
  // matmul
  v.push_back({"matmul", {{33, 17}, {17, 9}},
               [](auto& x) { return std::vector<Tensor>{matmul(x[0], x[1])}; }});
  v.push_back({"matmul transposed", {{17, 33}, {9, 17}},
               [](auto& x) { return std::vector<Tensor>{matmul(T(x[0]), T(x[1]))}; }});
  v.push_back({"batched matmul, broadcast batch", {{3, 1, 5, 7}, {4, 7, 2}},
               [](auto& x) { return std::vector<Tensor>{matmul(x[0], x[1])}; }});
  v.push_back({"matmul vector", {{7}, {3, 7, 5}},
               [](auto& x) { return std::vector<Tensor>{matmul(x[0], x[1])}; }});
  v.push_back({"linear", {{6, 4, 12}, {10, 12}, {10}},
               [](auto& x) { return std::vector<Tensor>{linear(x[0], x[1], x[2])}; }});
  // the bias in cuBLASLt's epilogue: rows read with a stride (a column slice), odd sizes, an
  // unaligned bias (a slice one element in), and the same again in f16
  v.push_back({"linear with bias epilogue", {{37, 50}, {29, 40}, {30}}, [](auto& x) {
                 return std::vector<Tensor>{linear(x[0].slice(1, 3, 43), x[1], x[2].slice(0, 1, 30)),
                                            linear(x[0].slice(1, 0, 40), x[1], x[2].slice(0, 0, 29))};
               }});
  Case lin16{"f16 linear with bias epilogue", {{64, 96}, {72, 96}, {72}}, [](auto& x) {
               return std::vector<Tensor>{linear(x[0], x[1], x[2]).to(kF32)};
             }, 3e-2, true, kF16};
  v.push_back(lin16);
  // conv
  auto convc = [&](const char* n, Shape xs, Shape ws, Conv2dParams p) {
    v.push_back({n, {xs, ws, {ws[0]}}, [p](auto& x) {
                   return std::vector<Tensor>{conv2d(x[0], x[1], x[2], p)};
                 }, 1e-3});
  };
  convc("conv 3x3", {3, 4, 11, 9}, {5, 4, 3, 3}, conv(1, 0));
  convc("conv stride 2 pad 1", {2, 3, 13, 13}, {4, 3, 3, 3}, conv(2, 1));
  convc("conv dilation 2", {2, 2, 9, 10}, {3, 2, 3, 2}, conv(1, 2, 2));
  convc("conv groups", {2, 6, 7, 7}, {4, 3, 3, 3}, conv(1, 1, 1, 2));
  convc("conv depthwise", {2, 4, 8, 8}, {4, 1, 3, 3}, conv(1, 1, 1, 4));
  convc("conv 1x1", {3, 8, 5, 5}, {6, 8, 1, 1}, conv(1, 0));
  convc("conv of an empty batch (zero gradients)", {0, 3, 8, 8}, {4, 3, 3, 3}, conv(1, 1));
  // pool
  v.push_back({"max pool", {{2, 3, 9, 8}, {1, 2, 11, 10}}, [](auto& x) {
                 Pool2dParams d = pool(3, 2, 1);  // dilated taps with a stride: windows skip rows
                 d.dilation = {2, 2};
                 return std::vector<Tensor>{max_pool2d(x[0], pool(2)), max_pool2d(x[0], pool(3, 2, 1)),
                                            max_pool2d(x[1], d)};
               }});
  v.push_back({"avg pool", {{2, 3, 9, 8}}, [](auto& x) {
                 Pool2dParams q = pool(3, 2, 1);
                 q.count_include_pad = false;
                 return std::vector<Tensor>{avg_pool2d(x[0], pool(2)), avg_pool2d(x[0], pool(3, 2, 1)),
                                            avg_pool2d(x[0], q)};
               }});
  v.push_back({"pools with ceil_mode", {{2, 3, 9, 8}}, [](auto& x) {
                 Pool2dParams a = pool(2), b = pool(3, 2, 1), c = pool(4, 3, 1);
                 a.ceil_mode = b.ceil_mode = c.ceil_mode = true;
                 Pool2dParams bn = b;
                 bn.count_include_pad = false;
                 std::vector<Tensor> r;
                 for (const Tensor& in : {x[0], channels_last(x[0])})
                   for (Tensor t : {max_pool2d(in, a), max_pool2d(in, c), avg_pool2d(in, b),
                                    avg_pool2d(in, bn), avg_pool2d(in, c)})
                     r.push_back(t.contiguous());
                 return r;
               }});
  v.push_back({"adaptive avg pool", {{2, 3, 9, 7}}, [](auto& x) {
                 return std::vector<Tensor>{adaptive_avg_pool2d(x[0], {1, 1}),
                                            adaptive_avg_pool2d(x[0], {4, 3})};
               }});
  // channels-last (NHWC): cuDNN's NHWC convolution and batch norm, our NHWC pool kernels, and
  // layout-keeping elementwise ops, against the CPU (which computes them row-major)
  auto convcl = [&](const char* n, Shape xs, Shape ws, Conv2dParams p, DType t = kF32) {
    const bool half = t == kF16 || t == kBF16;
    Case c{n, {xs, ws, {ws[0]}}, [p, half](auto& x) {
             Tensor y = conv2d(channels_last(x[0]), x[1], x[2], p);
             REQUIRE(y.is_contiguous(MemoryFormat::channels_last));
             return std::vector<Tensor>{half ? y.to(kF32) : y};
           }, half ? 5e-2 : 1e-3, true, t};  // 16-bit: tensor-core backward passes too
    v.push_back(c);
  };
  convcl("conv 3x3 channels-last", {3, 4, 11, 9}, {5, 4, 3, 3}, conv(1, 0));
  convcl("conv stride 2 pad 1 channels-last", {2, 8, 13, 13}, {16, 8, 3, 3}, conv(2, 1));
  convcl("conv groups channels-last", {2, 6, 7, 7}, {4, 3, 3, 3}, conv(1, 1, 1, 2));
  convcl("conv 1x1 channels-last", {3, 8, 5, 5}, {6, 8, 1, 1}, conv(1, 0));
  convcl("f16 conv channels-last (tensor cores)", {4, 32, 14, 14}, {64, 32, 3, 3}, conv(1, 1), kF16);
  convcl("bf16 conv channels-last", {4, 16, 9, 9}, {32, 16, 1, 1}, conv(2, 0), kBF16);
  convcl("conv dilation 2 channels-last", {2, 8, 11, 10}, {8, 8, 3, 3}, conv(1, 2, 2));
  convcl("f64 conv channels-last (row-major on cuDNN)", {2, 4, 7, 6}, {5, 4, 3, 3}, conv(1, 1),
         kF64);
  v.push_back({"pools channels-last", {{2, 5, 9, 8}}, [](auto& x) {
                 Tensor c = channels_last(x[0]);
                 Pool2dParams q = pool(3, 2, 1);
                 q.count_include_pad = false;
                 Pool2dParams dil = pool(2, 1, 1);
                 dil.dilation = {2, 2};
                 std::vector<Tensor> r{max_pool2d(c, pool(3, 2, 1)), max_pool2d(c, dil),
                                       avg_pool2d(c, pool(2)),
                                       avg_pool2d(c, q), adaptive_avg_pool2d(c, {4, 3}),
                                       adaptive_avg_pool2d(c, {1, 1})};
                 for (auto& t : r) REQUIRE(t.is_contiguous(MemoryFormat::channels_last));
                 return r;
               }});
  v.push_back({"batch norm channels-last", {{8, 6, 5, 4}, {6}, {6}}, [](auto& x) {
                 Tensor rm = zeros({6}, x[0].device()), rv = ones({6}, x[0].device());
                 Tensor c = channels_last(x[0]);
                 Tensor y = batch_norm(c, rm, rv, x[1], x[2], true, 0.1, 1e-5);
                 Tensor e = batch_norm(c, rm, rv, x[1], x[2], false, 0.1, 1e-5);
                 REQUIRE(y.is_contiguous(MemoryFormat::channels_last));
                 return std::vector<Tensor>{y, e, rm, rv};
               }, 1e-3});
  // our channels-last kernels: many row splits, four-channel vectors (C % 4 == 0), the
  // running statistics, and 16-bit data (statistics in f32)
  v.push_back({"batch norm channels-last, row splits and vectors", {{16, 8, 20, 20}, {8}, {8}},
               [](auto& x) {
                 Tensor rm = zeros({8}, x[0].device()), rv = ones({8}, x[0].device());
                 Tensor c = channels_last(x[0] * 3.0 + 5.0);  // a mean far from 0
                 Tensor y = batch_norm(c, rm, rv, x[1], x[2], true, 0.1, 1e-5);
                 Tensor n = batch_norm(c, {}, {}, {}, {}, true, 0.1, 1e-5);
                 REQUIRE(y.is_contiguous(MemoryFormat::channels_last));
                 return std::vector<Tensor>{y, n, rm, rv};
               }, 1e-3});
  // two channel tiles (C > 32) and a mean far beside the spread (1e4 + N(0, 1): x - mean
  // must keep its bits)
  v.push_back({"batch norm channels-last, 40 channels, mean 1e4", {{16, 40, 10, 10}, {40}, {40}},
               [](auto& x) {
                 Tensor rm = zeros({40}, x[0].device()), rv = ones({40}, x[0].device());
                 Tensor y = batch_norm(channels_last(x[0] + 1e4), rm, rv, x[1], x[2], true, 0.1, 1e-5);
                 return std::vector<Tensor>{y, rm, rv};
               }, 1e-3});
  // more row splits (37) than a warp has lanes: the finish merges several a lane; the last
  // round of rows is partial
  v.push_back({"batch norm channels-last, 37 row splits", {{8, 4, 49, 49}, {4}, {4}},
               [](auto& x) {
                 Tensor rm = zeros({4}, x[0].device()), rv = ones({4}, x[0].device());
                 Tensor y = batch_norm(channels_last(x[0] - 2.0), rm, rv, x[1], x[2], true, 0.1, 1e-5);
                 return std::vector<Tensor>{y, rm, rv};
               }, 1e-3});
  // an infinity (channel 0) and a NaN (channel 1): NaN outputs and running variances in
  // those channels, as on the CPU, and running means that are not finite (the CPU's is NaN
  // where an infinity's mean is +inf on CUDA)
  v.push_back({"batch norm channels-last with inf and NaN", {{4, 8, 3, 3}}, [](auto& x) {
                 Tensor c = x[0].clone();
                 {
                   NoGradGuard ng;
                   c.select(0, 1).select(0, 0).select(0, 1).select(0, 1).fill_(INFINITY);
                   c.select(0, 0).select(0, 1).select(0, 2).select(0, 2).fill_(NAN);
                 }
                 Tensor rm = zeros({8}, x[0].device()), rv = ones({8}, x[0].device());
                 Tensor y = batch_norm(channels_last(c), rm, rv, {}, {}, true, 0.1, 1e-5);
                 Tensor finite = lt(abs(rm), full({8}, INFINITY, rm.options())).to(kF32);
                 return std::vector<Tensor>{y, rv, finite};
               }, 1e-4, false});
  // 16-bit data without four-channel vectors (C = 6: the scalar pass)
  v.push_back({"f16 batch norm channels-last, 6 channels", {{8, 6, 10, 10}, {6}, {6}},
               [](auto& x) {
                 Tensor rm = zeros({6}, TensorOptions(kF32).device(x[0].device()));
                 Tensor rv = ones({6}, TensorOptions(kF32).device(x[0].device()));
                 return std::vector<Tensor>{
                     batch_norm(channels_last(x[0]), rm, rv, x[1], x[2], true, 0.1, 1e-5), rm, rv};
               }, 5e-2, true, kF16});
  // 16-bit data: 4096 rows in 8 splits, each thread's loop eight rows a step
  for (DType dt : {kF16, kBF16})
    v.push_back({std::string(dtype_name(dt)) + " batch norm channels-last", {{16, 12, 16, 16}, {12}, {12}},
                 [](auto& x) {
                   Tensor rm = zeros({12}, TensorOptions(kF32).device(x[0].device()));
                   Tensor rv = ones({12}, TensorOptions(kF32).device(x[0].device()));
                   return std::vector<Tensor>{
                       batch_norm(channels_last(x[0]), rm, rv, x[1], x[2], true, 0.1, 1e-5), rm, rv};
                 }, dt == kBF16 ? 6e-2 : 5e-2, true, dt});
  Case bn64{"f64 batch norm channels-last (row-major on cuDNN)", {{4, 6, 5, 4}, {6}, {6}},
             [](auto& x) {
               Tensor rm = zeros({6}, TensorOptions(kF64).device(x[0].device()));
               Tensor rv = ones({6}, TensorOptions(kF64).device(x[0].device()));
               return std::vector<Tensor>{
                   batch_norm(channels_last(x[0]), rm, rv, x[1], x[2], true, 0.1, 1e-5), rm, rv};
             }, 1e-6, true, kF64};
  v.push_back(bn64);
  v.push_back({"batch norm + residual + relu, both layouts", {{8, 6, 5, 4}, {6}, {6}, {8, 6, 5, 4}},
               [](auto& x) {
                 Tensor rm = zeros({6}, x[0].device()), rv = ones({6}, x[0].device());
                 Tensor c = channels_last(x[0]), z = channels_last(x[3]);
                 Tensor y = batch_norm_relu(c, z, rm, rv, x[1], x[2], true, 0.1, 1e-5);
                 Tensor r = batch_norm_relu(x[0], x[3], rm, rv, x[1], x[2], true, 0.1, 1e-5);
                 Tensor e = batch_norm_relu(c, {}, rm, rv, x[1], x[2], false, 0.1, 1e-5);
                 REQUIRE(y.is_contiguous(MemoryFormat::channels_last));
                 return std::vector<Tensor>{y, r, e, rm, rv};
               }, 1e-3});
  v.push_back({"bottleneck-like block channels-last", {{2, 8, 10, 10}, {8, 8, 3, 3}, {8}, {8}},
               [](auto& x) {
                 Tensor c = channels_last(x[0]);
                 Tensor rm = zeros({8}, x[0].device()), rv = ones({8}, x[0].device());
                 Tensor h = relu(batch_norm(conv2d(c, x[1], {}, conv(1, 1)), rm, rv, x[2], x[3],
                                            true, 0.1, 1e-5));
                 Tensor y = max_pool2d(relu(add(h, c)), pool(3, 2, 1));
                 REQUIRE(y.is_contiguous(MemoryFormat::channels_last));
                 return std::vector<Tensor>{y};
               }, 1e-3});
  // softmax, losses
  v.push_back({"softmax/log_softmax", {{7, 13, 5}}, [](auto& x) {
                 return std::vector<Tensor>{softmax(x[0], -1), log_softmax(x[0], -1), softmax(x[0], 1),
                                            log_softmax(x[0], 0)};
               }});
  v.push_back({"softmax long rows", {{3, 3000}},
               [](auto& x) { return std::vector<Tensor>{softmax(x[0], 1)}; }});
  v.push_back({"cross entropy", {{37, 10}}, [](auto& x) {
                 Tensor t = from_vector<int64_t>(std::vector<int64_t>{3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9,
                                                                      7, 9, 3, 2, 3, 8, 4, 6, 2, 6, 4, 3,
                                                                      3, 8, 3, 2, 7, 9, 5, 0, 2, 8, 8, 4},
                                                 {37}).to(x[0].device());
                 CrossEntropyOptions s;
                 s.label_smoothing = 0.1;
                 CrossEntropyOptions ig;
                 ig.ignore_index = 3;
                 return std::vector<Tensor>{cross_entropy(x[0], t), cross_entropy(x[0], t, s),
                                            cross_entropy(x[0], t, ig)};
               }});
  v.push_back({"cross entropy with masked (-inf) logits", {{6, 9}}, [](auto& x) {
                 // columns 2 and 5 masked; finite loss without label smoothing
                 Tensor mask = from_vector<float>(std::vector<float>{0, 0, 1, 0, 0, 1, 0, 0, 0}, {1, 9})
                                   .to(x[0].device()).to(x[0].dtype());
                 Tensor masked = where(gt(mask, full({1, 9}, 0.5, mask.options())),
                                       full(x[0].shape(), -INFINITY, x[0].options()), x[0]);
                 Tensor t = from_vector<int64_t>(std::vector<int64_t>{0, 1, 3, 4, 6, 8}, {6}).to(x[0].device());
                 return std::vector<Tensor>{cross_entropy(masked, t), softmax(masked, 1)};
               }});
  v.push_back({"mse", {{5, 6}, {5, 6}},
               [](auto& x) { return std::vector<Tensor>{mse_loss(x[0], x[1])}; }});
  // dropout: the same Philox stream on both devices
  // (f64 too: its 1/(1-p) in double on both devices, so the results are equal to the last bit)
  for (DType dt : {kF32, kF64})
    v.push_back({std::string(dtype_name(dt)) + " dropout", {{33, 31}}, [](auto& x) {
                   Generator g(5);
                   // quads as vectors, a tail of 3, and a view starting one element in (unaligned)
                   return std::vector<Tensor>{dropout(x[0], 0.3, true, &g),
                                              dropout(x[0].reshape({-1}).slice(0, 1, 1000), 0.1, true, &g)};
                 }, dt == kF64 ? 0.0 : 1e-4, true, dt});
  Case drop16{"f16 dropout", {{5, 129}}, [](auto& x) {
                Generator g(6);
                return std::vector<Tensor>{dropout(x[0], 0.2, true, &g).to(kF32)};
              }, 1e-2, true, kF16};
  v.push_back(drop16);
  // norms
  v.push_back({"batch norm train", {{8, 3, 5, 4}, {3}, {3}}, [](auto& x) {
                 Tensor rm = zeros({3}, x[0].device()), rv = ones({3}, x[0].device());
                 Tensor y = batch_norm(x[0], rm, rv, x[1], x[2], true, 0.1, 1e-5);
                 return std::vector<Tensor>{y, rm, rv};
               }, 1e-3});
  v.push_back({"batch norm eval", {{8, 3, 5, 4}, {3}, {3}}, [](auto& x) {
                 Tensor rm = full({3}, 0.2, x[0].device()), rv = full({3}, 1.5, x[0].device());
                 return std::vector<Tensor>{batch_norm(x[0], rm, rv, x[1], x[2], false, 0.1, 1e-5)};
               }, 1e-3});
  // more samples than cuDNN's inference kernel takes (65535): run in chunks; (N, C) and
  // channels-last
  v.push_back({"batch norm eval, 70000 and 66000 samples", {{70000, 2}, {66000, 2, 2, 1}, {2}, {2}},
               [](auto& x) {
                 Tensor rm = full({2}, 0.2, x[0].device()), rv = full({2}, 1.5, x[0].device());
                 return std::vector<Tensor>{
                     batch_norm(x[0], rm, rv, x[2], x[3], false, 0.1, 1e-5),
                     batch_norm(channels_last(x[1]), rm, rv, x[2], x[3], false, 0.1, 1e-5)};
               }, 1e-3});
  v.push_back({"layer norm", {{4, 5, 33}, {33}, {33}}, [](auto& x) {
                 return std::vector<Tensor>{layer_norm(x[0], {33}, x[1], x[2])};
               }, 1e-3});
  // rows of each width the warp kernels hold in registers (up to 256, 768), and past them
  // (1100, the block kernels); without affine parameters too
  v.push_back({"layer norm, wide rows", {{7, 200}, {5, 768}, {3, 1100}, {768}, {768}}, [](auto& x) {
                 return std::vector<Tensor>{layer_norm(x[0], {200}), layer_norm(x[1], {768}, x[3], x[4]),
                                            layer_norm(x[2], {1100})};
               }, 1e-3});
  // a post-LN block's dropout + residual add + layer norm: one warp per row in quads (rows of
  // 64, BERT-base's 768, 1024); the composition where rows are not whole quads (30), too long
  // (1100) or start off a quad's alignment (one element into a buffer); without dropout
  v.push_back({"dropout + residual add + layer norm",
               {{6, 7, 64}, {6, 7, 64}, {64}, {64}, {5, 768}, {5, 768}, {2, 1024}, {2, 1024},
                {3, 30}, {3, 30}, {2, 1100}, {2, 1100}},
               [](auto& x) {
                 Generator g(8);
                 auto off_by_one = [](const Tensor& t) {
                   return t.reshape({-1}).slice(0, 1, 1 + 4 * 764).reshape({4, 764});
                 };
                 return std::vector<Tensor>{
                     dropout_add_layer_norm(x[0], x[1], {64}, x[2], x[3], 0.1, true, 1e-5, &g),
                     dropout_add_layer_norm(x[4], x[5], {768}, {}, {}, 0.2, true, 1e-5, &g),
                     dropout_add_layer_norm(x[4], x[5], {768}, {}, {}, 0.2, false),
                     dropout_add_layer_norm(x[6], x[7], {1024}, {}, {}, 0.1, true, 1e-5, &g),
                     dropout_add_layer_norm(x[8], x[9], {30}, {}, {}, 0.1, true, 1e-5, &g),
                     dropout_add_layer_norm(x[10], x[11], {1100}, {}, {}, 0.1, true, 1e-5, &g),
                     dropout_add_layer_norm(off_by_one(x[4]), x[5].reshape({-1}).slice(0, 0, 4 * 764).reshape({4, 764}),
                                            {764}, {}, {}, 0.1, true, 1e-5, &g)};
               }, 1e-4});
  // embedding and row gathers
  v.push_back({"embedding", {{11, 6}}, [](auto& x) {
                 Tensor idx = from_vector<int64_t>({3, 0, 3, 10, 7}, {5}).to(x[0].device());
                 return std::vector<Tensor>{embedding(x[0], idx), embedding(x[0], idx.to(kI32), 3),
                                            index_select(x[0], idx)};
               }});
  v.push_back({"embedding bag", {{13, 40}}, [](auto& x) {
                 const Device d = x[0].device();
                 Tensor ids = from_vector<int64_t>({3, 0, 3, 12, 7, 1, 1, 1, 5, 2, 9, 9}, {3, 4}).to(d);
                 Tensor keep = from_vector<uint8_t>({1, 1, 1, 0, 1, 1, 1, 1, 0, 0, 0, 0}, {3, 4}).to(d);
                 return std::vector<Tensor>{embedding_bag(x[0], ids, keep),
                                            embedding_bag(x[0], ids.to(kI32))};
               }});
  // attention, with and without a padding mask, head dims 64 and up to 128
  v.push_back({"attention", {{2, 3, 37, 64}, {2, 3, 41, 64}, {2, 3, 41, 64}}, [](auto& x) {
                 Tensor keep = ones({2, 41}, TensorOptions(kU8).device(x[0].device()));
                 {
                   NoGradGuard ng;
                   keep.select(0, 1).slice(0, 30, 41).zero_();
                 }
                 return std::vector<Tensor>{scaled_dot_product_attention(x[0], x[1], x[2]),
                                            scaled_dot_product_attention(x[0], x[1], x[2], keep)};
               }, 1e-3});
  // heads in place on the plain kernels: a packed projection (70 queries, a padding mask,
  // dropout), and heads split from a (N, T, heads * D) projection with a head dim whose rows
  // are not 16-byte aligned
  v.push_back({"attention on packed and split heads", {{2, 70, 3, 3, 24}, {2, 9, 3 * 2 * 13}}, [](auto& x) {
                 Tensor keep = ones({2, 70}, TensorOptions(kU8).device(x[0].device()));
                 {
                   NoGradGuard ng;
                   keep.select(0, 1).slice(0, 40, 70).zero_();
                 }
                 Generator g(6);
                 auto split = [&](int i) {
                   return x[1].reshape({2, 9, 3, 2, 13}).select(2, i).permute({0, 2, 1, 3});
                 };
                 return std::vector<Tensor>{
                     scaled_dot_product_attention_packed(x[0], keep, std::nullopt, 0.3, &g),
                     scaled_dot_product_attention(split(0), split(1), split(2))};
               }, 1e-3});
  v.push_back({"attention wide heads", {{1, 2, 9, 96}, {1, 2, 7, 96}, {1, 2, 7, 80}}, [](auto& x) {
                 return std::vector<Tensor>{scaled_dot_product_attention(x[0], x[1], x[2])};
               }, 1e-3});
  v.push_back({"attention with NaN and inf", {{2, 1, 9, 32}, {2, 1, 12, 32}, {2, 1, 12, 32}},
               attention_with_nan, 1e-3});
  // attention dropout: both devices draw the same Philox stream, so the same probabilities
  // drop (f32 and f64 on the plain kernels; rows cross their 128-row blocks, keys their 32-key
  // tiles; a padding mask; head dims apart)
  for (DType dt : {kF32, kF64})
    v.push_back({std::string(dtype_name(dt)) + " attention with dropout",
                 {{2, 2, 130, 24}, {2, 2, 45, 24}, {2, 2, 45, 16}}, [](auto& x) {
                   Tensor keep = ones({2, 45}, TensorOptions(kU8).device(x[0].device()));
                   {
                     NoGradGuard ng;
                     keep.select(0, 1).slice(0, 33, 45).zero_();
                   }
                   Generator g(21);
                   return std::vector<Tensor>{
                       scaled_dot_product_attention(x[0], x[1], x[2], keep, std::nullopt, 0.3, &g),
                       scaled_dot_product_attention(x[0], x[1], x[2], {}, std::nullopt, 0.6, &g)};
                 }, dt == kF64 ? 1e-9 : 1e-4, true, dt});
  // f64 attention (the plain kernels) whose staged tiles come to just under and just over the
  // 48 KB a kernel gets without opting in: head dims 96 + 96 (forward 49,184 bytes) and
  // 96 + 95 (forward 48,928, dK/dV 49,408)
  for (int64_t e : {96, 95})
    v.push_back({"f64 attention, head dims 96 and " + std::to_string(e),
                 {{1, 2, 9, 96}, {1, 2, 7, 96}, {1, 2, 7, e}}, [](auto& x) {
                   return std::vector<Tensor>{scaled_dot_product_attention(x[0], x[1], x[2])};
                 }, 1e-6, true, kF64});
  // relu and batch norm + ReLU keep a NaN (the batch norm's whole channel 2 NaN)
  v.push_back({"relu and batch_norm_relu with NaN", {{3, 4, 5, 6}}, [](auto& x) {
                 Tensor xn = add(x[0], one_at(x[0], 2 * 30 + 7, NAN));
                 const TensorOptions o = TensorOptions(kF32).device(x[0].device());
                 return std::vector<Tensor>{
                     relu(xn), batch_norm_relu(xn, {}, zeros({4}, o), ones({4}, o), {}, {}, true),
                     batch_norm_relu(channels_last(xn), {}, zeros({4}, o), ones({4}, o), {}, {},
                                     true)};
               }, 1e-4, false});
  // shape ops
  v.push_back({"concat/stack/slice/contiguous", {{3, 4}, {3, 2}}, [](auto& x) {
                 return std::vector<Tensor>{concat({x[0], x[1]}, 1), stack({x[0], x[0]}, 0),
                                            x[0].slice(1, 1, 4, 2).contiguous(), T(x[0]).contiguous()};
               }});
  // concat's parts in one call: leaves (one of them twice) get fresh gradients made in one
  // call too; a transposed view and a computed input go through the per-pair copy and slices
  v.push_back({"concat of leaves, views and computed inputs", {{5, 4}, {2, 4}, {4, 3}}, [](auto& x) {
                 return std::vector<Tensor>{concat({x[0], x[1], x[0], T(x[2]), x[1] * 2.0}, 0),
                                            concat({x[1].to(kF16), x[0].to(kF16)}, 0).to(kF32)};
               }});
  // 16-bit types against the f32 CPU reference
  Case h{"f16 matmul", {{64, 48}, {48, 32}}, [](auto& x) {
           return std::vector<Tensor>{matmul(x[0], x[1]).to(kF32)};
         }, 3e-2, false, kF16};
  v.push_back(h);
  Case bf{"bf16 elementwise", {{257}, {257}}, [](auto& x) {
            return std::vector<Tensor>{(x[0] * x[1] + x[0]).to(kF32), relu(x[0]).to(kF32)};
          }, 3e-2, false, kBF16};
  v.push_back(bf);
  Case bfm{"bf16 matmul, batched and transposed", {{2, 40, 24}, {24, 33}}, [](auto& x) {
             return std::vector<Tensor>{matmul(x[0], x[1]), matmul(T(x[1]), x[0].transpose(1, 2))};
           }, 3e-2, true, kBF16};
  v.push_back(bfm);
  // f64 on CUDA: the double overloads of the device math, softmax's double warp reductions,
  // cuBLAS's f64 GEMM
  Case f64{"f64 elementwise, softmax, matmul", {{9, 37}, {37, 5}}, [](auto& x) {
             Tensor p = add(abs(x[0]), 0.5);
             return std::vector<Tensor>{exp(x[0]), tanh(x[0]), gelu(x[0]), log(p), sqrt(p),
                                        rsqrt(p), pow(p, 1.7), abs(x[0]), log_softmax(x[0], 1),
                                        softmax(x[0], 0), matmul(x[0], x[1])};
           }, 1e-9, true, kF64};
  v.push_back(f64);
  v.push_back({"matmul: an empty inner dim, a view cuBLAS cannot read", {{5, 0}, {0, 4}, {34, 18}, {18, 7}},
               [](auto& x) {
                 // every other row and column: neither row- nor column-major, so copied
                 Tensor a = x[2].slice(0, 0, 34, 2).slice(1, 0, 18, 2);
                 return std::vector<Tensor>{matmul(x[0], x[1]), matmul(a, x[3].slice(0, 0, 9))};
               }});
  Case i64r{"i64 reductions", {{6, 35}}, [](auto& x) {
              Tensor y = x[0] * 1000;  // integers of both signs, several in a row equal
              return std::vector<Tensor>{amax(y, {1}), amin(y, {0}), sum(y, {1}), amax(y),
                                         argmax(y, 1)};
            }, 0, false, kI64};
  v.push_back(i64r);
  for (const Case& c : tc_attention_cases()) v.push_back(c);
  // mixed precision: 16-bit data with f32 parameters (kernels templated on the parameter
  // type; cuDNN's batch norm reads f32 parameters), and 16-bit parameters (a model cast with
  // .to(kF16)), which cuDNN gets as f32 copies
  Case ln16{"f16 layer norm, f32 parameters", {{4, 5, 33}, {33}, {33}}, [](auto& x) {
              return std::vector<Tensor>{
                  layer_norm(x[0], {33}, x[1].to(kF32), x[2].to(kF32)).to(kF32)};
            }, 5e-2, true, kF16};
  v.push_back(ln16);
  // autocast's residual step: a 16-bit Linear output onto the f32 residual stream; and a model
  // cast to 16 bits, with 16-bit and with f32 parameters
  for (DType h : {kF16, kBF16}) {
    Case daln{std::string(dtype_name(h)) + " dropout + residual add + layer norm",
              {{6, 7, 64}, {6, 7, 64}, {64}, {64}}, [](auto& x) {
                Generator g(9);
                return std::vector<Tensor>{
                    dropout_add_layer_norm(x[0], x[1].to(kF32), {64}, x[2].to(kF32),
                                           x[3].to(kF32), 0.1, true, 1e-5, &g),
                    dropout_add_layer_norm(x[0], x[1], {64}, x[2], x[3], 0.1, true, 1e-5, &g).to(kF32),
                    dropout_add_layer_norm(x[0], x[1], {64}, x[2].to(kF32), x[3].to(kF32), 0.1,
                                           true, 1e-5, &g).to(kF32)};
              }, h == kF16 ? 5e-2 : 6e-2, true, h};
    v.push_back(daln);
  }
  Case bn16e{"f16 batch norm eval, f32 parameters", {{8, 3, 5, 4}, {3}, {3}}, [](auto& x) {
               Tensor rm = full({3}, 0.2, x[0].device()), rv = full({3}, 1.5, x[0].device());
               return std::vector<Tensor>{
                   batch_norm(x[0], rm, rv, x[1].to(kF32), x[2].to(kF32), false, 0.1, 1e-5)
                       .to(kF32)};
             }, 5e-2, true, kF16};
  v.push_back(bn16e);
  // f16 channels-last with channels a multiple of 4: cuDNN's fused kernels (the ReLU's mask
  // carried in their reserve space); 6 channels, and bf16 (not documented for them): the
  // composition
  auto bn_relu16 = [](const char* name, int64_t C, DType dt) {
    return Case{name, {{8, C, 5, 4}, {C}, {C}, {8, C, 5, 4}}, [C](auto& x) {
                  Tensor rm = zeros({C}, x[0].device()), rv = ones({C}, x[0].device());
                  Tensor w = x[1].to(kF32), b = x[2].to(kF32);
                  Tensor y = batch_norm_relu(channels_last(x[0]), channels_last(x[3]), rm, rv, w,
                                             b, true, 0.1, 1e-5);
                  Tensor n = batch_norm_relu(channels_last(x[0]), {}, rm, rv, w, b, true, 0.1,
                                             1e-5);
                  return std::vector<Tensor>{y.to(kF32), n.to(kF32), rm, rv};
                }, dt == kF16 ? 5e-2 : 6e-2, true, dt};
  };
  v.push_back(bn_relu16("f16 batch norm + residual + relu channels-last, f32 parameters", 8, kF16));
  v.push_back(bn_relu16("f16 batch norm + residual + relu, 6 channels", 6, kF16));
  v.push_back(bn_relu16("bf16 batch norm + residual + relu channels-last", 8, kBF16));
  Case bn16p{"f16 batch norm, f16 parameters and running stats", {{8, 3, 5, 4}, {3}, {3}},
             [](auto& x) {
               const TensorOptions o = TensorOptions(kF16).device(x[0].device());
               Tensor rm = zeros({3}, o), rv = ones({3}, o);
               Tensor y = batch_norm(x[0], rm, rv, x[1], x[2], true, 0.1, 1e-5);
               Tensor e = batch_norm(x[0], rm, rv, x[1], x[2], false, 0.1, 1e-5);
               return std::vector<Tensor>{y.to(kF32), e.to(kF32), rm.to(kF32), rv.to(kF32)};
             }, 5e-2, true, kF16};
  v.push_back(bn16p);
  v.push_back({"where with a condition of another dtype", {{6}}, [](auto& x) {
                 const Device d = x[0].device();
                 Tensor cf = from_vector<float>({0.5f, 0.f, NAN, -1e-8f, 0.f, 2.f}, {6}).to(d);
                 Tensor ci = from_vector<int64_t>({256, 0, -1, 512, 0, 1}, {6}).to(d);
                 Tensor a = from_vector<int32_t>({1, 2, 3, 4, 5, 6}, {6}).to(d);
                 Tensor b = from_vector<int32_t>({-1, -2, -3, -4, -5, -6}, {6}).to(d);
                 Tensor au = a.to(kU8), bu = zeros({6}, TensorOptions(kU8).device(d));
                 return std::vector<Tensor>{where(cf, a, b), where(ci, au, bu),
                                            where(cf, x[0].to(kF16), zeros_like(x[0]).to(kF16))
                                                .to(kF32)};
               }, 0, false});
  // heights and widths apart: a transposed stride, padding or dilation shows as a difference
  auto hw = [](test::Pair k, test::Pair s, test::Pair p, test::Pair d) { return test::pool_params(k, s, p, d); };
  for (bool cl : {false, true})
    v.push_back({std::string("conv and pools with height and width apart") + (cl ? ", channels-last" : ""),
                 {{2, 4, 11, 9}, {5, 4, 3, 2}, {5}}, [cl, hw](auto& x) {
                   const Tensor in = cl ? channels_last(x[0]) : x[0];
                   Pool2dParams q = hw({3, 2}, {2, 1}, {1, 0}, {1, 1});
                   q.count_include_pad = false;
                   return std::vector<Tensor>{
                       conv2d(in, x[1], x[2], test::conv_params({2, 1}, {1, 0}, {1, 2})),
                       conv2d(in, x[1], {}, test::conv_params({1, 3}, {0, 2}, {2, 1})),
                       max_pool2d(in, hw({3, 2}, {2, 1}, {1, 0}, {1, 2})),
                       max_pool2d(in, hw({2, 3}, {1, 2}, {0, 1}, {1, 1})), avg_pool2d(in, q),
                       avg_pool2d(in, hw({2, 3}, {1, 2}, {0, 1}, {1, 1}))};
                 }, 1e-3});
  // adaptive pooling that grows a dim (windows overlap) as well as shrinking it
  v.push_back({"adaptive avg pool to larger outputs", {{2, 3, 9, 7}}, [](auto& x) {
                 return std::vector<Tensor>{adaptive_avg_pool2d(x[0], {13, 3}),
                                            adaptive_avg_pool2d(x[0], {9, 8}),
                                            adaptive_avg_pool2d(channels_last(x[0]), {11, 10})};
               }});
  // 16-bit data on both devices (the CPU's 16-bit paths are tested against f32 rounded once)
  for (DType h : {kF16, kBF16}) {
    const std::string n = dtype_name(h);
    const double tol = h == kF16 ? 1e-2 : 3e-2;
    v.push_back({n + " unary ops", {{37, 5}}, [](auto& x) {
                   Tensor p = add(abs(x[0]), 0.5);
                   return std::vector<Tensor>{exp(x[0]), tanh(x[0]), sigmoid(x[0]), gelu(x[0]),
                                              silu(x[0]), softplus(x[0]), log1p(p),
                                              leaky_relu(x[0], 0.2), elu(x[0]),
                                              log(p), sqrt(p), rsqrt(p), T(x[0]) * 3.0 + 1.0};
                 }, tol, true, h});
    v.push_back({n + " softmax and reductions", {{7, 13, 5}}, [](auto& x) {
                   return std::vector<Tensor>{softmax(x[0], -1), log_softmax(x[0], 1),
                                              sum(x[0], {0, 2}), mean(x[0], {1}), amax(x[0], {2}),
                                              amin(x[0], {0}), var(x[0], {1}), argmax(x[0], 1)};
                 }, tol, true, h});
    v.push_back({n + " pools and row-major conv", {{2, 3, 9, 8}, {4, 3, 3, 3}, {4}}, [](auto& x) {
                   return std::vector<Tensor>{max_pool2d(x[0], pool(3, 2, 1)), avg_pool2d(x[0], pool(2)),
                                              adaptive_avg_pool2d(x[0], {4, 3}),
                                              conv2d(x[0], x[1], x[2], conv(1, 1))};
                 }, 5e-2, true, h});
    v.push_back({n + " cross entropy and layer norm with " + n + " parameters", {{9, 6}, {4, 33}, {33}, {33}},
                 [](auto& x) {
                   Tensor t = from_vector<int64_t>({0, 5, 2, 2, 1, 3, 4, 0, 5}, {9}).to(x[0].device());
                   CrossEntropyOptions s;
                   s.label_smoothing = 0.1;
                   s.ignore_index = 2;
                   return std::vector<Tensor>{cross_entropy(x[0], t), cross_entropy(x[0], t, s),
                                              layer_norm(x[1], {33}, x[2], x[3])};
                 }, 5e-2, true, h});
  }
  // the losses' other forms: i32 targets, (N, C, d) logits, each reduction, smoothing with an
  // ignored class; comparisons the table has no other case for; layer norm over two dims and
  // of a strided input
  v.push_back({"losses' reductions and target forms, comparisons, layer norm over two dims",
               {{6, 4, 3}, {6, 4, 3}, {5, 4, 6}}, [](auto& x) {
                 const Device d = x[0].device();
                 Tensor t = from_vector<int32_t>({0, 1, 2, 3, 1, 0, 3, 3, 2, 2, 1, 0, 0, 3, 1, 2, 2, 1},
                                                 {6, 3}).to(d);
                 CrossEntropyOptions none, sum_, both;
                 none.reduction = Reduction::none;
                 sum_.reduction = Reduction::sum;
                 both.label_smoothing = 0.2;
                 both.ignore_index = 3;
                 return std::vector<Tensor>{
                     cross_entropy(x[0], t), cross_entropy(x[0], t.to(kI64), none),
                     cross_entropy(x[0], t, sum_), cross_entropy(x[0], t, both),
                     mse_loss(x[0], x[1], Reduction::none), mse_loss(x[0], x[1], Reduction::sum),
                     ne(x[0], x[1]), lt(x[0], x[1]), ge(x[0], x[0]),
                     layer_norm(x[2], {4, 6}), layer_norm(x[2].transpose(1, 2), {4})};
               }});
  // empty inputs and degenerate reductions: NaN where libtorch has it (a mean over nothing, a
  // variance of one value, a mean over only ignored targets, softmax over a row of -inf)
  v.push_back({"empty inputs and degenerate reductions", {{0, 4}, {1, 5}, {3, 5}, {0, 3, 6, 6}}, [](auto& x) {
                 const Device d = x[0].device();
                 Tensor ignored = full({3}, -100, TensorOptions(kI64).device(d));
                 Tensor row_inf = where(from_vector<uint8_t>({1, 0, 0}, {3, 1}).to(d),
                                        full({3, 5}, -INFINITY, x[2].options()), x[2]);
                 return std::vector<Tensor>{
                     mean(x[0], {0}), sum(x[0], {0}), amax(x[0], {1}), var(x[1], {0}),
                     var(x[1], {1}, 0), softmax(x[0], 1), log_softmax(x[0], 0),
                     cross_entropy(x[2], ignored), layer_norm(x[0], {4}),
                     softmax(row_inf, 1), log_softmax(row_inf, 1),
                     max_pool2d(x[3], pool(2)), avg_pool2d(x[3], pool(3, 1, 1)),
                     adaptive_avg_pool2d(x[3], {2, 2}),
                     embedding(x[1].reshape({5, 1}),
                               zeros({0}, TensorOptions(kI64).device(d)))};
               }});
  return v;
}

}  // namespace

TEST_CASE("every primitive agrees between CPU and CUDA", "[cuda]") {
  if (!have_gpu()) return;
  for (const Case& c : cases()) check(c);
}

TEST_CASE("attention on the plain kernel and with the one-pass backward agrees with the CPU too, and another LIBNN_CUDA_ATTENTION value is said", "[cuda]") {
  if (!have_gpu()) return;
  const char* before = std::getenv("LIBNN_CUDA_ATTENTION");
  struct Restore {
    std::string value;
    bool had;
    ~Restore() {
      if (had) ::setenv("LIBNN_CUDA_ATTENTION", value.c_str(), 1);
      else ::unsetenv("LIBNN_CUDA_ATTENTION");
    }
  } restore{before ? before : "", before != nullptr};
  for (const char* path : {"simt", "one-pass-backward"}) {
    INFO("LIBNN_CUDA_ATTENTION=" << path);
    ::setenv("LIBNN_CUDA_ATTENTION", path, 1);
    for (const Case& c : tc_attention_cases()) check(c);
  }
  // another value is said on stderr (once), and the cases still agree
  ::setenv("LIBNN_CUDA_ATTENTION", "tensor-cores", 1);
  test::TempDir d;
  const std::string log = d.file("stderr.txt");
  {
    struct StderrTo {  // stderr into a file for the scope (restored on a failed check too)
      int saved = -1;
      explicit StderrTo(const std::string& path) {
        std::fflush(stderr);
        saved = dup(2);
        const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        REQUIRE((saved >= 0 && fd >= 0));
        dup2(fd, 2);
        close(fd);
      }
      ~StderrTo() {
        std::fflush(stderr);
        dup2(saved, 2);
        close(saved);
      }
    } to(log);
    check(tc_attention_cases().front());
  }
  std::ifstream in(log);
  const std::string said((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  REQUIRE(said.find("LIBNN_CUDA_ATTENTION=tensor-cores ignored (simt, one-pass-backward, or "
                    "unset)") != std::string::npos);
}

// 4096 gradients of 0.1 into one row: added one at a time in f16 the sum stalls at 256 (an
// addend below half the spacing rounds away), in bf16 at 32; summed in f32 and rounded once
// it is 409.5 (410 in bf16). Both backends, both ops.
TEST_CASE("16-bit embedding gradients are summed in f32 and rounded once", "[cuda][embedding]") {
  std::vector<Device> devices{kCPU};
  if (test::have_cuda()) devices.push_back(kCUDA);
  for (Device d : devices) {
    for (DType t : {kF16, kBF16}) {
      INFO(d.str() << " " << dtype_name(t));
      const TensorOptions o = TensorOptions(t).device(d);
      const float tenth = full({1}, 0.1, TensorOptions(t)).to(kF32).item<float>();
      const float want = full({1}, 4096.0 * double(tenth), TensorOptions(t)).to(kF32).item<float>();
      Tensor ids = full({4096, 1}, 1, TensorOptions(kI64).device(d));
      Tensor w = zeros({4, 8}, o).requires_grad_();
      Tensor y = embedding(w, ids.reshape({4096}));
      y.backward(full(y.shape(), 0.1, o));
      CHECK(w.grad().cpu().to(kF32).select(0, 1).select(0, 3).item<float>() == want);
      Tensor wb = zeros({4, 8}, o).requires_grad_();
      Tensor yb = embedding_bag(wb, ids);  // 4096 bags of one token each
      yb.backward(full(yb.shape(), 0.1, o));
      CHECK(wb.grad().cpu().to(kF32).select(0, 1).select(0, 5).item<float>() == want);
      CHECK(wb.grad().cpu().to(kF32).select(0, 2).select(0, 5).item<float>() == 0.f);
    }
  }
}

TEST_CASE("CUDA random draws equal the CPU's (same Philox stream)", "[cuda]") {
  if (!have_gpu()) return;
  Generator a(3), b(3);
  test::require_close(randn({1001}, kCUDA, &a).cpu(), randn({1001}, kCPU, &b), 1e-5, 1e-5);
  test::require_close(rand({77}, kCUDA, &a).cpu(), rand({77}, kCPU, &b), 1e-6, 1e-6);
  for (DType t : {kF16, kBF16}) {  // (the 16-bit uniforms keep the type's significand bits)
    INFO(dtype_name(t));
    test::require_close(rand({333}, TensorOptions(t).device(kCUDA), &a).cpu().to(kF32),
                        rand({333}, t, &b).to(kF32), 0, 0);
    Tensor u = empty({333}, TensorOptions(t).device(kCUDA)), v = empty({333}, t);
    u.uniform_(0.5, 1, &a);  // (draws that round up to 1 become 0.5 on both)
    v.uniform_(0.5, 1, &b);
    test::require_close(u.cpu().to(kF32), v.to(kF32), 0, 0);
  }
  // f64 ranges beyond f32's range or precision (they were worked out in f32 on CUDA: zeros,
  // NaN, one value repeated)
  struct Range { bool normal; double a, b; };
  for (Range r : {Range{false, 0, 1e-50}, Range{true, 0, 1e-50}, Range{false, 1e10, 1e10 + 1},
                  Range{false, -1e300, 1e300}, Range{true, 0.1, 0.02}}) {
    INFO((r.normal ? "normal_(" : "uniform_(") << r.a << ", " << r.b << ")");
    auto draw = [&](Device d) {
      NoGradGuard ng;
      Generator g(5);
      Tensor t = empty({9}, TensorOptions(kF64).device(d));
      if (r.normal) t.normal_(r.a, r.b, &g);
      else t.uniform_(r.a, r.b, &g);
      return t.cpu();
    };
    Tensor c = draw(kCUDA), h = draw(kCPU);
    // (an FMA on one side, or the device's logf/sinf in normal draws, may move a value by an
    // f64 or an f32 ulp; the old zeros, NaN and repeated values are far outside)
    const double tol = r.normal ? 1e-6 : 1e-12, scale = std::max(std::abs(r.a), std::abs(r.b));
    test::require_close(c, h, tol, tol * scale);
    REQUIRE(amax(h).item() > amin(h).item());  // (distinct values: a range kept)
  }
}

TEST_CASE("CUDA integer division wraps INT64_MIN / -1 as the CPU does", "[cuda]") {
  if (!have_gpu()) return;
  Tensor a = from_vector<int64_t>({INT64_MIN, 5}, {2});
  Tensor b = from_vector<int64_t>({-1, -1}, {2});
  for (Device d : {Device(kCPU), Device(kCUDA)}) {
    INFO(d);
    REQUIRE((a.to(d) / -1.0).cpu().to_vector<int64_t>() == std::vector<int64_t>{INT64_MIN, -5});
    REQUIRE((a.to(d) / b.to(d)).cpu().to_vector<int64_t>() == std::vector<int64_t>{INT64_MIN, -5});
  }
}

TEST_CASE("CUDA elementwise ops and copies take a view of many unmergeable dims", "[cuda]") {
  if (!have_gpu()) return;
  Generator g(8);
  Tensor x = randn({2, 3, 2, 3, 2, 3, 2, 3, 2, 3}, kF32, &g);
  const std::vector<int64_t> perm{1, 0, 3, 2, 5, 4, 7, 6, 9, 8};  // no two dims merge
  Tensor y = x.to(kCUDA).permute(perm), h = x.permute(perm);
  test::require_close((y * 2.0).cpu(), h * 2.0, 1e-6, 0);
  test::require_close(y.cpu(), h, 0, 0);
  test::require_close(y.contiguous().cpu(), h.contiguous(), 0, 0);
}

TEST_CASE("transposed and permuted copies on CUDA (shared-memory tiles) equal the CPU's", "[cuda]") {
  if (!have_gpu()) return;
  Generator g(6);
  // extents off the 32-wide tiles, batches of tiles, both directions (input or output
  // running along the other dim), conversions on the way, integers
  Tensor a = randn({70, 45}, kF32, &g), b = randn({3, 40, 50}, kF32, &g);
  Tensor c = randn({2, 16, 9, 11}, kF32, &g), big = randn({257, 1031}, kF32, &g);
  Tensor ad = a.to(kCUDA), bd = b.to(kCUDA), cd = c.to(kCUDA), bigd = big.to(kCUDA);
  test::require_close(ad.t().contiguous().cpu(), a.t().contiguous(), 0, 0);
  test::require_close(bigd.t().contiguous().cpu(), big.t().contiguous(), 0, 0);
  test::require_close(bd.permute({2, 0, 1}).contiguous().cpu(), b.permute({2, 0, 1}).contiguous(), 0, 0);
  test::require_close(bd.permute({1, 2, 0}).contiguous().cpu(), b.permute({1, 2, 0}).contiguous(), 0, 0);
  test::require_close(channels_last(cd).cpu(), channels_last(c), 0, 0);
  test::require_close(channels_last(cd).contiguous().cpu(), c, 0, 0);
  for (DType t : {kF16, kBF16, kF64, kI64}) {
    INFO(dtype_name(t));
    test::require_close(ad.t().to(t).cpu().to(kF64), a.t().to(t).to(kF64), 0, 0);
    test::require_close(ad.to(t).t().contiguous().cpu().to(kF64), a.to(t).t().contiguous().to(kF64), 0, 0);
  }
  // into a transposed destination: the input contiguous, the output along the other dim
  Tensor dst = zeros({45, 70}).to(kCUDA).t();
  {
    NoGradGuard ng;
    dst.copy_(ad);
  }
  test::require_close(dst.cpu(), a, 0, 0);
  // a unary op reading a transposed view
  test::require_close(exp(bigd.t()).cpu(), exp(big.t()), 1e-6, 1e-6);
}

// A row whose logits are all -inf: its loss is NaN on both devices, and its gradient takes
// p = 0 at every -inf logit on both (CUDA had NaN there), with and without smoothing.
TEST_CASE("cross entropy of a row of -inf logits has the CPU's gradient on CUDA", "[cuda]") {
  if (!have_gpu()) return;
  const float inf = INFINITY;
  Tensor x = from_vector<float>({-inf, 1, 2, 3, -inf, -inf, -inf, -inf, 1, 2, inf, 0, 5, 5, 5, 5}, {4, 4});
  Tensor t = from_vector<int64_t>({1, 2, 3, 0}, {4});
  for (double smoothing : {0.0, 0.2}) {
    INFO("smoothing " << smoothing);
    CrossEntropyOptions o;
    o.label_smoothing = smoothing;
    o.reduction = Reduction::none;
    std::vector<Tensor> grads;
    for (Device d : {Device(kCPU), Device(kCUDA)}) {
      Tensor xd = x.to(d).detach().requires_grad_(true);
      sum(cross_entropy(xd, t.to(d), o)).backward();
      grads.push_back(xd.grad().cpu());
    }
    REQUIRE(std::isfinite(grads[0].select(0, 1).sum().item()));
    test::require_close(grads[1], grads[0], 1e-6, 1e-6);
  }
}

TEST_CASE("casts between dtypes on CUDA match the CPU", "[cuda]") {
  if (!have_gpu()) return;
  Generator g(4);
  Tensor x = randn({999}, kF32, &g) * 1000.0;
  {  // non-finite and out-of-range values: NaN to 0, infinities and 1e20 saturate through
     // int64 then wrap, 1e20 to f16 is inf
    NoGradGuard ng;
    x.slice(0, 0, 7).copy_(from_vector<float>({NAN, INFINITY, -INFINITY, 1e20f, -1e20f, 3e9f, -300.5f}, {7}));
  }
  for (DType t : {kF16, kBF16, kF64, kI32, kI64, kU8}) {
    INFO(dtype_name(t));
    test::require_close(x.to(kCUDA).to(t).cpu().to(kF64), x.to(t).to(kF64), 0, 0);
  }
}

TEST_CASE("gradients flow back across devices", "[cuda]") {
  if (!have_gpu()) return;
  // a CPU leaf moved to CUDA and back (channels-last on the way), against the same graph on
  // the CPU alone: each leaf's gradient lands on its own device
  Generator g(12);
  const Tensor x0 = randn({2, 3, 4, 5}, kF32, &g), w0 = randn({5, 6}, kF32, &g);
  auto run = [&](Device d) {
    Tensor x = x0.clone().requires_grad_(), w = w0.to(d).requires_grad_();
    Tensor h = matmul(test::channels_last(x).to(d).relu(), w);  // on d
    Tensor y = sum(square(h.cpu()));                              // back on the CPU
    y.backward();
    REQUIRE(x.grad().device() == kCPU);
    REQUIRE(w.grad().device() == d);
    return std::pair{x.grad(), w.grad().cpu()};
  };
  auto [gx, gw] = run(kCUDA);
  auto [rx, rw] = run(kCPU);
  test::require_close(gx, rx, 1e-5, 1e-5);
  test::require_close(gw, rw, 1e-5, 1e-5);
}

TEST_CASE("optimizer steps on CUDA match the CPU", "[cuda][optim]") {
  if (!have_gpu()) return;
  for (int which = 0; which < 3; ++which) {
    std::vector<Tensor> results;
    for (Device d : {kCPU, kCUDA}) {
      Generator g(12);
      Tensor p = randn({1000}, kF32, &g).to(d).requires_grad_();
      Tensor q = randn({3, 7}, kF32, &g).to(d).requires_grad_();
      std::unique_ptr<optim::Optimizer> opt;
      if (which == 0) opt = std::make_unique<optim::SGD>(std::vector<Tensor>{p, q},
                                                         optim::SGDOptions(0.1).momentum(0.9).weight_decay(0.01));
      else if (which == 1) opt = std::make_unique<optim::AdamW>(std::vector<Tensor>{p, q}, optim::AdamWOptions(0.01));
      else opt = std::make_unique<optim::Adam>(std::vector<Tensor>{p, q}, optim::AdamOptions(0.01).weight_decay(0.1));
      for (int step = 0; step < 3; ++step) {
        opt->zero_grad();
        (sum(p * p) + sum(q * 3.0)).backward();
        opt->step();
      }
      results.push_back(p.cpu());
      results.push_back(q.cpu());
    }
    test::require_close(results[2], results[0], 1e-5, 1e-6);
    test::require_close(results[3], results[1], 1e-5, 1e-6);
  }
}

TEST_CASE("the Keras CNN's gradients on CUDA equal the CPU's", "[cuda][train]") {
  if (!have_gpu()) return;
  std::vector<std::vector<Tensor>> grads;
  for (Device d : {kCPU, kCUDA}) {
    manual_seed(1);
    Sequential net{std::make_shared<Conv2d>(Conv2dOptions(1, 8, 3)), std::make_shared<ReLU>(),
                   std::make_shared<Conv2d>(Conv2dOptions(8, 16, 3)), std::make_shared<ReLU>(),
                   std::make_shared<MaxPool2d>(2), std::make_shared<Flatten>(),
                   std::make_shared<Linear>(16 * 12 * 12, 32), std::make_shared<ReLU>(),
                   std::make_shared<Linear>(32, 10)};
    net.to(d);
    Generator g(2);
    Tensor x = randn({16, 1, 28, 28}, kF32, &g).to(d);
    Tensor y = randint(0, 10, {16}, kI64, &g).to(d);
    cross_entropy(net.forward(x), y).backward();
    std::vector<Tensor> gs;
    for (auto& p : net.parameters()) gs.push_back(p.grad().cpu());
    grads.push_back(gs);
  }
  for (size_t i = 0; i < grads[0].size(); ++i) test::require_close(grads[1][i], grads[0][i], 1e-3, 1e-4);
}

TEST_CASE("a small ResNet in channels-last on CUDA matches the CPU, FP32 and FP16", "[cuda][train]") {
  if (!have_gpu()) return;
  std::vector<std::vector<Tensor>> results;
  for (Device d : {kCPU, kCUDA}) {
    manual_seed(3);
    models::ResNet net(models::ResNetOptions().layers({1, 1, 1, 1}).num_classes(10));
    net.to(d);
    // ReLU and max pooling make the gradients step where an input crosses a threshold: with
    // the input of Generator(4), scaling it by 1 + 1e-7 randn moved the stem's weight
    // gradient by 3% on the CPU. Generator(5)'s input is away from such steps: f32 gradients
    // under input changes up to 5e-7 stayed within 2% of this test's tolerance of f64's.
    Generator g(5);
    // 48 px: every stage above 1 x 1, so layer4 runs NHWC too
    Tensor x = randn({8, 3, 48, 48}, kF32, &g).to(d).contiguous(MemoryFormat::channels_last);
    Tensor y = randint(0, 10, {8}, kI64, &g).to(d);
    Tensor logits = net.forward(x);
    cross_entropy(logits, y).backward();
    std::vector<Tensor> r{logits.detach().cpu()};
    for (auto& p : net.parameters()) r.push_back(p.grad().cpu());
    if (d.is_cuda()) {  // FP16 autocast on the same weights: logits within FP16 tolerance
      NoGradGuard ng;
      amp::AutocastGuard ac(kF16);
      r.push_back(net.forward(x).to(kF32).cpu());
    }
    results.push_back(r);
  }
  test::require_close(results[1][0], results[0][0], 1e-3, 1e-4);
  for (size_t i = 1; i < results[0].size(); ++i) {
    INFO("parameter gradient " << i - 1);
    test::require_close(results[1][i], results[0][i], 1e-2, 1e-4);
  }
  test::require_close(results[1].back(), results[0][0], 5e-2, 5e-2);
}

TEST_CASE("channels-last tensors keep their format and values across devices", "[cuda]") {
  if (!have_gpu()) return;
  Generator g(6);
  Tensor x = randn({2, 5, 4, 3}, kF32, &g);
  Tensor c = channels_last(x);
  Tensor d = c.to(kCUDA);
  REQUIRE(d.is_contiguous(MemoryFormat::channels_last));
  REQUIRE_FALSE(d.is_contiguous());
  Tensor back = d.to(kF16).to(kCPU);
  REQUIRE(back.is_contiguous(MemoryFormat::channels_last));
  test::require_close(d.cpu(), x, 0, 0);
  test::require_close(back.to(kF32), x.to(kF16).to(kF32), 0, 0);
}

TEST_CASE("checkpoints move between CPU and CUDA bit for bit", "[cuda][checkpoint]") {
  if (!have_gpu()) return;
  // A net with buffers (batch norm's running stats and i64 count) and AdamW state.
  auto make = [] {
    manual_seed(7);
    return std::make_shared<Sequential>(std::initializer_list<std::shared_ptr<Module>>{
        // no conv bias: batch norm cancels its gradient, leaving AdamW to amplify rounding
        std::make_shared<Conv2d>(Conv2dOptions(2, 4, 3).padding({1, 1}).bias(false)),
        std::make_shared<BatchNorm2d>(4), std::make_shared<ReLU>(), std::make_shared<Flatten>(),
        std::make_shared<Linear>(LinearOptions(36, 3))});
  };
  Generator g(8);
  Tensor x = randn({16, 2, 3, 3}, kF32, &g), y = randint(0, 3, {16}, kI64, &g);
  auto train = [&](Module& net, optim::Optimizer& opt, Device d, int steps) {
    for (int i = 0; i < steps; ++i) {
      opt.zero_grad();
      cross_entropy(net.forward(x.to(d)), y.to(d)).backward();
      opt.step();
    }
  };
  auto require_same = [](const NamedTensors& a, const NamedTensors& b) {
    REQUIRE(a.size() == b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      INFO(a[i].first);
      REQUIRE(a[i].first == b[i].first);
      REQUIRE(b[i].second.dtype() == a[i].second.dtype());
      test::require_close(b[i].second, a[i].second.cpu(), 0, 0);
    }
  };
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("libnn_xdev_" + std::to_string(getpid()) + ".safetensors")).string();
  for (Device from : {kCPU, kCUDA}) {
    const Device to = from.is_cpu() ? kCUDA : kCPU;
    INFO("from " << from.str() << " to " << to.str());
    auto a = make();
    a->to(from);
    optim::AdamW opt_a(a->parameters(), optim::AdamWOptions(1e-2));
    train(*a, opt_a, from, 3);
    io::Checkpoint c;
    c.step = 3;
    c.model = a->state_dict();
    c.optimizer = opt_a.state();
    io::save_checkpoint(path, c);

    auto b = make();
    b->to(to);
    optim::AdamW opt_b(b->parameters(), optim::AdamWOptions(1e-2));
    io::Checkpoint r = io::load_checkpoint(path);
    b->load_state_dict(r.model);
    opt_b.load_state(r.optimizer);
    for (auto& p : b->parameters()) REQUIRE(p.device() == to);
    NamedTensors sa = a->state_dict(), sb = b->state_dict(), oa = opt_a.state(), ob = opt_b.state();
    // loaded state lives where the module does: every buffer, and each parameter's two AdamW
    // moments (the optimizer's scalars may stay on the CPU)
    for (auto& [name, t] : sb) {
      INFO(name);
      REQUIRE(t.device() == to);
    }
    int64_t on_to = 0;
    for (auto& [name, t] : ob) on_to += t.device() == to;
    REQUIRE(on_to >= 2 * int64_t(b->parameters().size()));
    for (auto* s : {&sb, &ob})  // compared on the CPU
      for (auto& [name, t] : *s) t = t.cpu();
    require_same(sa, sb);
    require_same(oa, ob);
    // and both take the same next steps, each on its own device
    train(*a, opt_a, from, 2);
    train(*b, opt_b, to, 2);
    sa = a->state_dict();
    sb = b->state_dict();
    for (size_t i = 0; i < sa.size(); ++i) {
      INFO(sa[i].first);
      test::require_close(sb[i].second.cpu(), sa[i].second.cpu(), 1e-4, 1e-5);
    }
  }
  std::filesystem::remove(path);
}

TEST_CASE("bad indices and targets on CUDA are reported, not ignored", "[cuda][errors]") {
  if (!have_gpu()) return;
  Tensor w = ones({4, 3}, kCUDA);
  std::string e = test::error_of([&] {
    Tensor r = index_select(w, from_vector<int64_t>({1, 4}, {2}).to(kCUDA));
    r.cpu();
  });
  REQUIRE(e.find("index out of range") != std::string::npos);
  e = test::error_of([&] {
    Tensor r = embedding_bag(w, from_vector<int64_t>({1, 4}, {1, 2}).to(kCUDA));
    r.cpu();
  });
  REQUIRE(e.find("index out of range") != std::string::npos);
  e = test::error_of([&] {
    Tensor l = cross_entropy(ones({2, 3}, kCUDA), from_vector<int64_t>({0, 3}, {2}).to(kCUDA));
    l.item();
  });
  REQUIRE(e.find("target out of range") != std::string::npos);
  e = test::error_of([&] {  // nll_loss's target index past its rows
    Tensor l = nll_loss(zeros({2, 3}, kCUDA), from_vector<int64_t>({0, 3}, {2}).to(kCUDA));
    l.item();
  });
  REQUIRE(e.find("index out of range") != std::string::npos);
  // With the profiler on (its events around each call), the fault still surfaces as an
  // error the caller can catch, not the end of the process.
  nn::profiler::enable(true);
  e = test::error_of([&] {
    Tensor r = index_select(w, from_vector<int64_t>({1, 4}, {2}).to(kCUDA));
    r.cpu();
  });
  nn::profiler::enable(false);
  nn::profiler::reset();
  REQUIRE(e.find("index out of range") != std::string::npos);
  // the device is usable afterwards
  REQUIRE(sum(w).item() == 12);
}

TEST_CASE("the profiler times CUDA calls between stream events", "[cuda]") {
  if (!have_gpu()) return;
  test::check_profiler(kCUDA, 2100);  // (4200 calls: events read in a batch, then reused)
}

TEST_CASE("the CUDA caching allocator reuses blocks and reports out-of-memory", "[cuda][memory][oom]") {
  if (!have_gpu()) return;
  { Tensor warm = empty({1 << 22}, kCUDA); }
  MemoryStats before = memory_stats(kCUDA);
  for (int i = 0; i < 20; ++i) Tensor t = empty({1 << 22}, kCUDA);
  MemoryStats after = memory_stats(kCUDA);
  REQUIRE(after.num_system_allocs == before.num_system_allocs);
  REQUIRE(after.num_allocs == before.num_allocs + 20);
  std::string e = test::error_of([] { Tensor t = empty({int64_t(1) << 50}, kCUDA); });
  REQUIRE(e.find("out of memory on cuda:0") != std::string::npos);
  REQUIRE(e.find("tried to allocate") != std::string::npos);
  REQUIRE(sum(ones({10}, kCUDA)).item() == 10);
}

// On a GPU, host code cannot dereference device memory; the emulator keeps its device memory
// inaccessible outside kernels, copies and library calls so that such code fails in CI too.
// (The hardware's behaviour is its own: the case runs on the emulator only.)
TEST_CASE("host code reading device memory faults on the emulated device", "[cuda][emulator]") {
  if (!have_gpu()) return;
  if (device_name(kCUDA).find("emulator") == std::string::npos) {
    WARN("not the CUDA emulator: case skipped");
    return;
  }
  if (const char* e = std::getenv("LIBNN_CUDA_EMU_PROTECT"); e && std::string(e) == "0") {
    WARN("LIBNN_CUDA_EMU_PROTECT=0: device memory is left open, case skipped");
    return;
  }
  Tensor t = ones({64}, kCUDA);  // a kernel wrote it; the access ended with the launch
  const volatile float* p = static_cast<const float*>(t.data_ptr());
  int out[2];
  REQUIRE(pipe(out) == 0);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {  // the child reports through the pipe alone, whatever Catch2 prints
    dup2(out[1], 1);
    dup2(out[1], 2);
    const float v = p[0];
    _exit(v == 1.0f ? 0 : 1);
  }
  close(out[1]);
  std::string said;
  char buf[4096];
  for (ssize_t n; (n = read(out[0], buf, sizeof buf)) > 0;) said.append(buf, size_t(n));
  close(out[0]);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  INFO("the child said: " << said);
  REQUIRE(WIFSIGNALED(status));
  REQUIRE(WTERMSIG(status) == SIGSEGV);
  REQUIRE(said.find("host code touched device memory") != std::string::npos);
  // and the same memory is the device's again: a copy reads it
  REQUIRE(t.to(kCPU).data<float>()[0] == 1.0f);
}

// The emulator counts the calls that make the host wait for the device, and the kernels it
// launched; null elsewhere.
using HostWaits = unsigned long long (*)();
HostWaits emulator_host_waits() {
  return reinterpret_cast<HostWaits>(dlsym(RTLD_DEFAULT, "libnn_cuda_emu_host_waits"));
}
// The emulator's count of kernel launches (libnn_cuda_emu_kernel_launches): how the cases
// below see that a fused path ran, where its values equal the composition's. Elsewhere it is
// false, having said that the case is skipped.
struct LaunchCounter {
  using Read = unsigned long long (*)();
  Read read = nullptr;
  explicit operator bool() const { return read != nullptr; }
  unsigned long long operator()() const { return read(); }
  unsigned long long in(const std::function<void()>& f) const {  // the launches f makes
    const unsigned long long before = read();
    f();
    return read() - before;
  }
};
LaunchCounter launch_counter() {
  const LaunchCounter c{reinterpret_cast<LaunchCounter::Read>(
      dlsym(RTLD_DEFAULT, "libnn_cuda_emu_kernel_launches"))};
  if (!c) WARN("not the CUDA emulator (it counts kernel launches): case skipped");
  return c;
}

// A training step is all launches: the host runs ahead of the device and never waits for it
// (the GPU's time is the step's time), except where a value is read: GradScaler's inf check,
// once a step, as one item() waits. Tagged [memory]: with the caching allocator, which a
// cudaFree per tensor (LIBNN_NO_MEMORY_CACHING=1) would turn into a wait each.
TEST_CASE("a training step on CUDA never waits for the device", "[cuda][emulator][memory]") {
  if (!have_gpu()) return;
  HostWaits waits = emulator_host_waits();
  if (!waits) {
    WARN("not the CUDA emulator (it counts the host's waits): case skipped");
    return;
  }
  if (const char* e = std::getenv("LIBNN_NO_MEMORY_CACHING"); e && std::string(e) == "1") {
    WARN("LIBNN_NO_MEMORY_CACHING=1: every free waits, case skipped");
    return;
  }
  manual_seed(3);
  // The waits of 3 steps after 2 (which allocate, pick cuDNN's algorithms, create the
  // optimizer's state), and those of reading the last loss.
  auto count = [&](const std::function<Tensor()>& step, unsigned long long& per_read) {
    step();
    step();
    const unsigned long long before = waits();
    Tensor loss;
    for (int i = 0; i < 3; ++i) loss = step();
    const unsigned long long during = waits() - before, read_start = waits();
    CHECK(std::isfinite(loss.item()));
    per_read = waits() - read_start;
    CHECK(per_read > 0);
    return during;
  };
  // one step of an image classifier as the apps take it: autocast, the scaled loss, the
  // scaler's step and update (the scaler disabled in FP32)
  auto scaled_step = [](Module& model, optim::Optimizer& opt, amp::GradScaler& scaler, bool fp16,
                        const Tensor& x, const Tensor& y, const CrossEntropyOptions& ce) {
    Tensor loss;
    {
      amp::AutocastGuard ac(kF16, fp16);
      loss = cross_entropy(model.forward(x), y, ce);
    }
    opt.zero_grad();
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
    return loss;
  };
  unsigned long long per_read = 0;
  SECTION("the MNIST CNN fed by a DataLoader from device memory, FP32 and FP16 with GradScaler") {
    auto model = models::keras_mnist_cnn();
    model->to(kCUDA);
    optim::AdamW opt(model->parameters(), optim::AdamWOptions(1e-3));
    // as mnist_train feeds it: the data set on the device, shuffled batches of it (their
    // indices uploaded, gathered there) prepared on the loader's thread, epoch after epoch
    data::DataLoaderOptions lo;
    lo.batch_size = 2;  // (the emulator's reference convolutions are slow)
    data::DataLoader loader(std::make_shared<data::TensorDataset>(
        randn({6, 1, 28, 28}, kCUDA), randint(0, 10, {6}, TensorOptions(kI64).device(kCUDA))), lo);
    std::optional<data::DataLoader::Iterator> it;
    auto next_batch = [&]() -> data::Batch {
      if (!it || !(*it != loader.end())) it.emplace(loader.begin());
      data::Batch b = **it;
      ++*it;
      return b;
    };
    for (const bool fp16 : {false, true}) {
      INFO((fp16 ? "FP16" : "FP32"));
      amp::GradScalerOptions so;
      so.enabled = fp16;
      amp::GradScaler scaler(so);
      const unsigned long long during = count([&] {
        data::Batch b = next_batch();
        return scaled_step(*model, opt, scaler, fp16, b.data, b.target, {});
      }, per_read);
      CHECK(during == (fp16 ? 3 * per_read : 0u));
    }
  }
  SECTION("a CIFAR ResNet in channels-last, FP16 with GradScaler and SGD with momentum") {
    // the ResNet-50 benchmark's step at a small size: cuDNN's convolutions and fused batch
    // norm + add + ReLU in NHWC, the scaler's one read
    auto model = models::cifar_resnet(models::CifarResNetOptions().depth(8).width(8).channels_last(true));
    model->to(kCUDA);
    optim::SGD opt(model->parameters(), optim::SGDOptions(0.1).momentum(0.9).weight_decay(1e-4));
    amp::GradScaler scaler;
    Tensor x = randn({4, 3, 16, 16}, kCUDA).contiguous(MemoryFormat::channels_last);
    Tensor y = randint(0, 10, {4}, TensorOptions(kI64).device(kCUDA));
    CrossEntropyOptions ce;
    ce.label_smoothing = 0.1;
    const unsigned long long during =
        count([&] { return scaled_step(*model, opt, scaler, true, x, y, ce); }, per_read);
    CHECK(during == 3 * per_read);
  }
  SECTION("a BERT-style encoder with padding, dropout and gradient clipping, FP32") {
    models::BertClassifier model(
        models::BertConfig::preset("tiny").vocab_size(64).max_len(16).num_classes(3));
    model.to(kCUDA);
    model.train();
    optim::AdamW opt(model.parameters(), optim::AdamWOptions(1e-3));
    Tensor ids = randint(1, 64, {3, 12});
    for (int64_t r = 0; r < 3; ++r)
      for (int64_t t = 9 - 3 * r; t < 12; ++t) ids.data<int64_t>()[r * 12 + t] = 0;  // [PAD]s
    ids = ids.to(kCUDA);
    Tensor keep = text::padding_mask(ids, 0);
    Tensor y = randint(0, 3, {3}, TensorOptions(kI64).device(kCUDA));
    const unsigned long long during = count([&] {
      Tensor loss = cross_entropy(model.forward(ids, keep), y);
      opt.zero_grad();
      loss.backward();
      optim::clip_grad_norm_(model.parameters(), 1.0);  // as transformer_train clips
      opt.step();
      return loss;
    }, per_read);
    CHECK(during == 0u);
  }
}

// cuDNN's refusals of the fused NHWC batch norm + ReLU, answered by the emulator on demand
// (LIBNN_CUDA_EMU_FUSED_BN_FORWARD / _BACKWARD): NOT_SUPPORTED and cuDNN 9's sub-codes of it
// (3002 a shape, 3010 shared memory) and a misaligned pointer (2003) run the composition, in
// the forward or only in the backward, with the fused run's values; any other error (2000,
// BAD_PARAM) is reported.
TEST_CASE("refusals of cuDNN's fused batch norm fall back to the composition", "[cuda][emulator]") {
  if (!have_gpu()) return;
  if (!emulator_host_waits()) {
    WARN("not the CUDA emulator (it answers as told): case skipped");
    return;
  }
  struct Env {  // sets a variable for the scope
    const char* name;
    Env(const char* n, int status) : name(n) { setenv(n, std::to_string(status).c_str(), 1); }
    ~Env() { unsetenv(name); }
  };
  manual_seed(5);
  const Tensor x0 = randn({4, 8, 3, 3}).to(kF16).contiguous(MemoryFormat::channels_last);
  const Tensor z0 = randn({4, 8, 3, 3}).to(kF16).contiguous(MemoryFormat::channels_last);
  const Tensor up = randn({4, 8, 3, 3});
  // output, running mean, input, residual and weight gradients: on CUDA, read back as f32
  auto run = [&] {
    Tensor x = x0.to(kCUDA).requires_grad_(), z = z0.to(kCUDA).requires_grad_();
    Tensor w = ones({8}, kCUDA).requires_grad_(), b = zeros({8}, kCUDA).requires_grad_();
    Tensor rm = zeros({8}, kCUDA), rv = ones({8}, kCUDA);
    Tensor y = batch_norm_relu(x, z, rm, rv, w, b, true, 0.1, 1e-5);
    sum(mul(y.to(kF32), up.to(kCUDA))).backward();
    return std::vector<Tensor>{y.to(kF32).cpu(), rm.cpu(), x.grad().to(kF32).cpu(),
                               z.grad().to(kF32).cpu(), w.grad().cpu()};
  };
  const std::vector<Tensor> fused = run();
  for (const char* var : {"LIBNN_CUDA_EMU_FUSED_BN_FORWARD", "LIBNN_CUDA_EMU_FUSED_BN_BACKWARD"})
    for (const int status : {3000, 3002, 3010, 2003}) {
      INFO(var << "=" << status);
      Env env(var, status);
      const std::vector<Tensor> composed = run();
      for (size_t i = 0; i < fused.size(); ++i) {
        INFO("result " << i);
        test::require_close(composed[i], fused[i], 2e-2, 2e-2);  // f16 data, two summation orders
      }
    }
  for (const char* var : {"LIBNN_CUDA_EMU_FUSED_BN_FORWARD", "LIBNN_CUDA_EMU_FUSED_BN_BACKWARD"}) {
    INFO(var);
    Env env(var, 2000);
    REQUIRE(test::error_of(run).find("CUDNN_STATUS_BAD_PARAM") != std::string::npos);
  }
}

// A post-LN block's residual step at BERT-base's width is one kernel forward and one backward
// (plus layer norm's two for the parameter sums), in f32 and in autocast's mix (a 16-bit
// Linear output onto the f32 residual stream). Its values equal the composition's (the
// cross-backend table), so only the count tells that the fused kernels ran.
TEST_CASE("dropout + residual add + layer norm is one kernel each way on CUDA", "[cuda][emulator]") {
  if (!have_gpu()) return;
  const LaunchCounter launches = launch_counter();
  if (!launches) return;
  if (const char* e = std::getenv("LIBNN_CUDA_LN_FUSED"); e && std::string(e) == "0") {
    WARN("LIBNN_CUDA_LN_FUSED=0: case skipped");
    return;
  }
  manual_seed(7);
  for (DType xt : {kF32, kF16, kBF16}) {
    INFO(dtype_name(xt));
    const Tensor x0 = randn({8, 768}).to(xt).to(kCUDA), r0 = randn({8, 768}).to(kCUDA);
    const Tensor up = randn({8, 768}).to(kCUDA);
    auto leaf = [](const Tensor& t) { return t.detach().requires_grad_(); };
    Tensor x = leaf(x0), r = leaf(r0), w = leaf(ones({768}, kCUDA)), b = leaf(zeros({768}, kCUDA));
    Tensor y;
    const auto fwd = launches.in([&] { y = dropout_add_layer_norm(x, r, {768}, w, b, 0.1, true); });
    const auto bwd = launches.in([&] { y.backward(up); });
    CHECK(fwd == 1);
    CHECK(bwd == 3);
    // and in eval, nothing dropped
    CHECK(launches.in([&] { dropout_add_layer_norm(x0, r0, {768}, w, b, 0.1, false); }) == 1);
    // the ops it stands for (dropout, the promotion of a 16-bit x, the add and the norm, and
    // their backwards) take more: 3 or 4 forward and 5 or 6 backward (2026-11-29)
    Tensor xc = leaf(x0), rc = leaf(r0), wc = leaf(ones({768}, kCUDA)), bc = leaf(zeros({768}, kCUDA));
    Tensor yc;
    const auto fwd_ops = launches.in([&] { yc = layer_norm(add(rc, dropout(xc, 0.1, true)), {768}, wc, bc); });
    const auto bwd_ops = launches.in([&] { yc.backward(up); });
    INFO("composed: " << fwd_ops << " forward, " << bwd_ops << " backward");
    CHECK(fwd_ops > fwd);
    CHECK(bwd_ops > bwd);
  }
}

// BERT's q, k and v weights, concatenated for one product each step: their three copies are
// one launch forward, and their three gradients one launch backward (each leaf adopting a
// fresh tensor instead of copying its slice of the gradient); and a Linear's input, weight and
// bias lowered to 16 bits under autocast, one launch, with the input's f32 gradient straight
// from the backward's GEMM (no cast back).
TEST_CASE("parameters concatenated or lowered to 16 bits take one launch on CUDA", "[cuda][emulator]") {
  if (!have_gpu()) return;
  const LaunchCounter launches = launch_counter();
  if (!launches) return;
  manual_seed(8);
  Tensor q = randn({64, 64}).to(kCUDA).requires_grad_(), k = randn({64, 64}).to(kCUDA).requires_grad_(),
         v = randn({64, 64}).to(kCUDA).requires_grad_();
  const Tensor up = randn({192, 64}).to(kCUDA);
  unsigned long long before = launches();
  Tensor w = concat({q, k, v}, 0);
  CHECK(launches() - before == 1);
  before = launches();
  w.backward(up);
  CHECK(launches() - before == 1);
  CHECK(q.grad().is_contiguous());
  test::require_same(v.grad().cpu(), up.cpu().slice(0, 128, 192).contiguous());
  // autocast's Linear lowers its f32 input, weight and bias in one launch (the product is
  // cuBLAS's, not counted)
  amp::AutocastGuard guard(kF16);
  const Tensor x = randn({8, 64}).to(kCUDA), b = randn({192}).to(kCUDA);
  before = launches();
  const Tensor y = linear(x, w.detach(), b);
  CHECK(launches() - before == 1);
  const Tensor xg = x.detach().requires_grad_();
  const Tensor yg = linear(xg, w.detach(), b);
  before = launches();
  yg.backward(randn({8, 192}).to(kF16).to(kCUDA));
  CHECK(launches() - before == 0);
  CHECK(xg.grad().dtype() == kF32);
  test::require_close(y.cpu().to(kF32),
                      linear(x.cpu().to(kF16), w.detach().cpu().to(kF16), b.cpu().to(kF16)).to(kF32),
                      1e-2, 1e-2);
  // lowered in quads (every operand whole aligned quads) or element by element (7 features),
  // in both 16-bit types: the same roundings as the CPU's casts
  for (DType half : {kF16, kBF16})
    for (int64_t in : {64, 7}) {
      INFO(dtype_name(half) << ", " << in << " features");
      amp::AutocastGuard g16(half);
      const Tensor xi = randn({5, in}), wi = randn({4, in}), bi = randn({4});
      const Tensor xd = xi.to(kCUDA), wd = wi.to(kCUDA), bd = bi.to(kCUDA);
      before = launches();
      const Tensor yi = linear(xd, wd, bd);
      CHECK(launches() - before == 1);
      test::require_close(yi.cpu().to(kF32),
                          linear(xi.to(half), wi.to(half), bi.to(half)).to(kF32), 1e-2, 1e-2);
    }
}

// Batch norm's step counter and a gradient added to another are one launch each (they were a
// fill, an add and a copy, and an add and a copy).
TEST_CASE("in-place adds take one launch each on CUDA", "[cuda][emulator]") {
  if (!have_gpu()) return;
  const LaunchCounter launches = launch_counter();
  if (!launches) return;
  NoGradGuard ng;
  Tensor n = zeros({}, TensorOptions(kI64).device(kCUDA));
  CHECK(launches.in([&] { n.add_(1); }) == 1);
  CHECK(n.item<int64_t>() == 1);
  manual_seed(9);
  const Tensor a0 = randn({64, 32}), b0 = randn({64, 32});
  Tensor a = a0.to(kCUDA);
  const Tensor b = b0.to(kCUDA);
  CHECK(launches.in([&] { a.add_(b); }) == 1);
  test::require_close(a.cpu(), add(a0, b0), 1e-6, 1e-6);
  // a BatchNorm2d's training forward counts its batch in that one launch (the norm itself is
  // cuDNN's, not counted)
  BatchNorm2d bn(BatchNormOptions(8));
  bn.to(kCUDA);
  const Tensor xb = randn({2, 8, 4, 4}).to(kCUDA);
  CHECK(launches.in([&] { bn.forward(xb); }) == 1);
  CHECK(bn.num_batches_tracked.item<int64_t>() == 1);

}

// Autocast's convolution lowers its f32 weight straight into channels-last FP16, and turns the
// gradient back into f32 row-major, in one launch each way (a cast and a relayout each way
// before); cuDNN's calls are not counted. Values as the CPU's from the same 16-bit operands.
TEST_CASE("autocast convolution lowers its weight into channels-last FP16 in one launch", "[cuda][emulator]") {
  if (!have_gpu()) return;
  const LaunchCounter launches = launch_counter();
  if (!launches) return;
  manual_seed(10);
  const Tensor x0 = randn({2, 8, 6, 6}).to(kF16), w0 = randn({16, 8, 3, 3}), up0 = randn({2, 16, 6, 6});
  const Tensor x = x0.to(kCUDA).contiguous(MemoryFormat::channels_last);
  Tensor w = w0.to(kCUDA).requires_grad_();
  Conv2dParams p;
  p.padding = {1, 1};
  Tensor y;
  unsigned long long before = launches();
  {
    amp::AutocastGuard ac(kF16);
    y = conv2d(x, w, {}, p);
  }
  CHECK(launches() - before == 1);  // the weight's lowering; the product is cuDNN's
  REQUIRE(y.dtype() == kF16);
  const Tensor up = up0.to(kF16).to(kCUDA).contiguous(MemoryFormat::channels_last);
  before = launches();
  y.backward(up);
  CHECK(launches() - before == 1);  // the weight gradient to f32 row-major
  REQUIRE(w.grad().dtype() == kF32);
  REQUIRE(w.grad().is_contiguous());
  // the same on the CPU, from the same 16-bit operands
  Tensor wc = w0.clone().requires_grad_();
  Tensor yc;
  {
    amp::AutocastGuard ac(kF16);
    yc = conv2d(x0, wc, {}, p);
  }
  yc.backward(up0.to(kF16));
  test::require_close(y.cpu().to(kF32), yc.to(kF32), 1e-2, 1e-2);
  test::require_close(w.grad().cpu(), wc.grad(), 1e-2, 1e-2);
  // a gradient on another device is refused, before any backward rule reads it
  Tensor y2 = mul(w, 2.0);
  CHECK(test::error_of([&] { y2.backward(randn({16, 8, 3, 3})); }).find("gradient on cpu") !=
        std::string::npos);
}

// A convolution's output and its input and weight gradients (of sum(y^2)) on CUDA and on the
// CPU, each pass's CUDA result against the CPU's.
static void require_conv_as_cpu(const Tensor& x, const Tensor& w, const Conv2dParams& p) {
  std::vector<Tensor> got, want;
  for (Device d : {kCUDA, kCPU}) {
    Tensor xd = x.to(d).detach().requires_grad_(), wd = w.to(d).detach().requires_grad_();
    Tensor y = conv2d(xd, wd, {}, p);
    sum(mul(y, y)).backward();
    std::vector<Tensor>& into = d == kCUDA ? got : want;
    for (const Tensor& t : {y, xd.grad(), wd.grad()}) into.push_back(t.cpu());
  }
  for (size_t i = 0; i < got.size(); ++i) test::require_close(got[i], want[i], 1e-4, 1e-4);
}

// LIBNN_CUDNN_FIND=0 (read once a process): cuDNN's heuristics choose the convolution
// algorithms, not its benchmark; the results are the same convolutions. The emulator counts
// the heuristics' calls; scripts/check_cuda_emu.sh runs this case with and without it.
TEST_CASE("convolutions on cuDNN's heuristics (LIBNN_CUDNN_FIND=0) or its benchmark", "[cuda][emulator]") {
  if (!have_gpu()) return;
  using Calls = unsigned long long (*)();
  const auto calls = reinterpret_cast<Calls>(dlsym(RTLD_DEFAULT, "libnn_cuda_emu_cudnn_heuristic_calls"));
  if (!calls) {
    WARN("not the CUDA emulator (it counts the heuristics' calls): case skipped");
    return;
  }
  const char* e = std::getenv("LIBNN_CUDNN_FIND");
  const bool heuristics = e && std::string(e) == "0";
  manual_seed(11);
  // a shape no other case of this process has planned: its three passes are chosen here
  Tensor x = randn({3, 5, 13, 11}), w = randn({7, 5, 3, 3});
  const unsigned long long before = calls();
  require_conv_as_cpu(x, w, Conv2dParams{{2, 1}, {1, 2}, {1, 1}, 1});
  CHECK(calls() - before == (heuristics ? 3u : 0u));
}

// An algorithm that cuDNN ranked first but declines when run (NOT_SUPPORTED: its heuristics
// run nothing to choose) gives way to the next it ranked, for good: each pass is refused once,
// the convolutions come out right, and later calls of the shape run the second algorithm at
// once. The emulator ranks and refuses one (LIBNN_CUDA_EMU_CONV_REFUSE_ALGO) and counts it.
TEST_CASE("a convolution algorithm cuDNN declines gives way to the next it ranked", "[cuda][emulator]") {
  if (!have_gpu()) return;
  using Count = unsigned long long (*)();
  const auto refusals = reinterpret_cast<Count>(dlsym(RTLD_DEFAULT, "libnn_cuda_emu_conv_refusals"));
  if (!refusals) {
    WARN("not the CUDA emulator (it refuses an algorithm on request): case skipped");
    return;
  }
  struct Env {  // set for this case only
    Env() { setenv("LIBNN_CUDA_EMU_CONV_REFUSE_ALGO", "1", 1); }
    ~Env() { unsetenv("LIBNN_CUDA_EMU_CONV_REFUSE_ALGO"); }
  } env;
  manual_seed(12);
  // a shape no other case of this process has planned
  Tensor x = randn({2, 3, 9, 14}), w = randn({4, 3, 2, 3});
  const unsigned long long before = refusals();
  for (int round = 0; round < 2; ++round) {
    INFO("call " << round);
    require_conv_as_cpu(x, w, Conv2dParams{{1, 2}, {1, 0}, {1, 1}, 1});
    CHECK(refusals() - before == 3u);  // forward, input and weight gradients: once each
  }
}

// Uploads larger than a staging buffer go through them in chunks, without waiting for the
// stream (a copy from pageable memory waits for all work queued before it: an ImageNet batch
// of 256, 154 MB, stalled every training step), and arrive whole.
TEST_CASE("a large upload is chunked through pinned staging without a wait", "[cuda][emulator]") {
  if (!have_gpu()) return;
  HostWaits waits = emulator_host_waits();
  const int64_t n = (int64_t(150) << 20) / 4;  // 150 MiB of f32: chunks of 64, 64 and 22 MiB
  std::vector<float> host(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) host[size_t(i)] = float(i % 1000003);
  Tensor t = from_vector(host, {n});
  synchronize(kCUDA);  // (the device's set-up waits once, when this case runs first)
  const unsigned long long before = waits ? waits() : 0;
  Tensor d = t.to(kCUDA);
  if (waits) CHECK(waits() == before);
  else WARN("not the CUDA emulator (it counts the host's waits): only the values are checked");
  t.fill_(-1.0);  // the source is free once the upload returns: the copies read the staging
  const std::vector<float> back = d.cpu().to_vector<float>();
  REQUIRE(back.size() == size_t(n));
  int64_t wrong = 0;
  for (int64_t i = 0; i < n; ++i) wrong += back[size_t(i)] != float(i % 1000003);
  CHECK(wrong == 0);
}
