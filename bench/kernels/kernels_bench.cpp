// Microbenchmarks of libnn's memory-bound kernels on one device: achieved GB/s for
// elementwise ops, reductions, softmax, layer norm and the fused AdamW step, next to a plain
// copy through libnn. bench/peers/kernels_torch.py measures the same ops (and a
// device-to-device cudaMemcpy through torch) on the same GPU; bench/gpu_suite.sh runs both.
// Prints one JSON object per op. --attention times the fused attention instead (TFLOP/s at
// BERT-base head shapes, forward and forward + backward, each kernel path); --overhead the
// host cost per call of ops on tiny tensors.
#include <nn/nn.h>

#include <cxxopts.hpp>

#include "common/cli.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace {
double time_per_call(const nn::Device& d, int iters, const std::function<void()>& f) {
  for (int i = 0; i < 3; ++i) f();  // warm-up: allocator cache, cuDNN/cuBLAS setup
  nn::synchronize(d);
  nn::train::Stopwatch w;
  for (int i = 0; i < iters; ++i) f();
  nn::synchronize(d);
  return w.seconds() / iters;
}

// Fused attention at BERT-like shapes: (batch, heads, T = S, head dim 64), a padding mask
// keeping every key. FLOPs as usual for attention: 4 N H T S D for the forward (Q K^T and
// P V), 2.5 times that for the backward. Paths: the default (tensor cores for f16/bf16, and
// three TF32 products per product for f32), the plain kernel (LIBNN_CUDA_ATTENTION=simt) and
// the tensor cores with the one-pass backward (LIBNN_CUDA_ATTENTION=one-pass-backward). The training step is timed again with
// BERT's attention dropout (0.1), which draws its mask inside the kernels.
void bench_attention(const nn::Device& d, nn::DType t, int iters,
                     const std::vector<std::string>& paths) {
  struct Shape {
    int64_t n, h, len;
  };
  const std::string dev = d.str(), name = nn::device_name(d);
  for (const std::string& p : paths) {
    const char* path = p.c_str();
    if (p != "default") ::setenv("LIBNN_CUDA_ATTENTION", path, 1);
    else ::unsetenv("LIBNN_CUDA_ATTENTION");
    for (Shape sh : {Shape{32, 12, 128}, Shape{8, 12, 512}}) {
      const nn::TensorOptions o = nn::TensorOptions(nn::kF32).device(d);
      nn::Tensor q = nn::randn({sh.n, sh.h, sh.len, 64}, o).to(t).requires_grad_();
      nn::Tensor k = nn::randn({sh.n, sh.h, sh.len, 64}, o).to(t).requires_grad_();
      nn::Tensor v = nn::randn({sh.n, sh.h, sh.len, 64}, o).to(t).requires_grad_();
      nn::Tensor keep = nn::ones({sh.n, sh.len}, nn::TensorOptions(nn::kU8).device(d));
      nn::Tensor g = nn::randn({sh.n, sh.h, sh.len, 64}, o).to(t);
      const double fwd_flops = 4.0 * sh.n * sh.h * sh.len * sh.len * 64;
      const double fwd = time_per_call(d, iters, [&] {
        nn::NoGradGuard ng;
        nn::scaled_dot_product_attention(q, k, v, keep);
      });
      const double both = time_per_call(d, iters, [&] {
        nn::scaled_dot_product_attention(q, k, v, keep).backward(g);
      });
      const double dropped = time_per_call(d, iters, [&] {
        nn::scaled_dot_product_attention(q, k, v, keep, std::nullopt, 0.1).backward(g);
      });
      for (auto [phase, sec, flops] : {std::tuple{"forward", fwd, fwd_flops},
                                       std::tuple{"forward+backward", both, 3.5 * fwd_flops},
                                       std::tuple{"forward+backward, dropout 0.1", dropped, 3.5 * fwd_flops}})
        std::printf("{\"impl\": \"libnn-%s\", \"device\": \"%s\", \"device_name\": \"%s\", "
                    "\"dtype\": \"%s\", \"op\": \"attention %s\", \"shape\": \"%lldx%lldx%lldx64\", "
                    "\"us\": %.1f, \"tflops\": %.2f}\n",
                    path, dev.c_str(), name.c_str(), nn::dtype_name(t), phase, (long long)sh.n, (long long)sh.h,
                    (long long)sh.len, sec * 1e6, flops / sec / 1e12);
      std::fflush(stdout);
    }
  }
  ::unsetenv("LIBNN_CUDA_ATTENTION");
}

// Host cost per call: ops on 16-element tensors, so launching and bookkeeping (argument
// checks, allocation, recording the autograd graph) are all there is to time. On a GPU this is
// what bounds a small model such as the MNIST CNN, whose kernels take microseconds.
void bench_overhead(const nn::Device& d, nn::DType t, int iters) {
  const nn::TensorOptions o = nn::TensorOptions(nn::kF32).device(d);
  nn::Tensor x = nn::randn({4, 4}, o).to(t), y = nn::randn({4, 4}, o).to(t);
  nn::Tensor w = nn::randn({4, 4}, o).to(t).requires_grad_(), b = nn::randn({4}, o).to(t).requires_grad_();
  nn::Tensor xg = x.clone().requires_grad_();
  std::vector<nn::Tensor> params;
  for (int i = 0; i < 10; ++i) {
    params.push_back(nn::randn({4, 4}, o).requires_grad_());
    params.back().set_grad(nn::randn({4, 4}, o));
  }
  nn::optim::AdamW opt(params, nn::optim::AdamWOptions(1e-3));
  nn::Tensor out;
  struct Op {
    const char* name;
    bool grad;  // recording on (off: a NoGradGuard around the whole timed loop)
    std::function<void()> f;
  };
  const std::vector<Op> ops = {
      {"add, no grad", false, [&] { out = nn::add(xg, y); }},
      {"add, recorded", true, [&] { out = nn::add(xg, y); }},
      {"relu(x w + b) forward + backward", true,
       [&] { nn::relu(nn::add(nn::matmul(xg, w), b)).sum().backward(); }},
      {"adamw step, 10 parameters", true, [&] { opt.step(); }},
  };
  const std::string dev = d.str(), name = nn::device_name(d);
  for (const Op& op : ops) {
    std::optional<nn::NoGradGuard> ng;
    if (!op.grad) ng.emplace();
    const double s = time_per_call(d, iters, op.f);
    std::printf("{\"impl\": \"libnn\", \"device\": \"%s\", \"device_name\": \"%s\", "
                "\"dtype\": \"%s\", \"op\": \"overhead: %s\", \"us\": %.2f}\n",
                dev.c_str(), name.c_str(), nn::dtype_name(t), op.name, s * 1e6);
    std::fflush(stdout);
  }
}

int body(int argc, char** argv) {
  cxxopts::Options opts("kernels_bench", "GB/s of libnn's memory-bound kernels");
  opts.add_options()("device", "cpu or cuda[:N]", cxxopts::value<std::string>()->default_value("cuda"))(
      "n", "elements per tensor (default 64M on CUDA, 4M on CPU)", cxxopts::value<int64_t>())(
      "iters", "timed iterations", cxxopts::value<int>()->default_value("50"))(
      "dtype", "f32, f16 or bf16", cxxopts::value<std::string>()->default_value("f32"))(
      "attention", "time the fused attention (TFLOP/s) instead of the memory-bound kernels")(
      "attention-paths", "with --attention, comma-separated: default, simt (the plain kernel), "
      "one-pass-backward (LIBNN_CUDA_ATTENTION's values; the others only on CUDA in f16/bf16/f32)",
      cxxopts::value<std::string>()->default_value("default,simt,one-pass-backward"))(
      "overhead", "time the host cost per call (us) of ops on 16-element tensors instead")(
      "h,help", "show this help");
  auto args = apps::parse(opts, argc, argv);
  if (!args) return 0;
  const auto& a = *args;
  const std::string dtype = a["dtype"].as<std::string>();
  apps::check_choice("dtype", dtype, {"f32", "f16", "bf16"});
  const int iters = apps::check_positive("iters", a["iters"].as<int>());
  // The row ops view the tensor as rows of 1024.
  if (a.count("n") && (a["n"].as<int64_t>() <= 0 || a["n"].as<int64_t>() % 1024 != 0))
    throw apps::UsageError("-n must be a positive multiple of 1024, got " + std::to_string(a["n"].as<int64_t>()));
  const nn::Device d = apps::parse_device(a["device"].as<std::string>());
  nn::check_device(d);
  const nn::DType t = nn::dtype_from_name(dtype);
  const int64_t n = a.count("n") ? a["n"].as<int64_t>() : (d.is_cuda() ? (64 << 20) : (4 << 20));
  if (apps::flag(a, "attention") && apps::flag(a, "overhead"))
    throw apps::UsageError("--attention and --overhead are different runs: give one");
  if (a.count("n") && (apps::flag(a, "attention") || apps::flag(a, "overhead")))
    throw apps::UsageError("-n sets the memory-bound kernels' size; --attention and --overhead "
                           "have their own");
  if (a.count("attention-paths") && !apps::flag(a, "attention"))
    throw apps::UsageError("--attention-paths chooses --attention's paths: give --attention too");
  std::vector<std::string> paths = apps::check_choices(
      "attention-paths", a["attention-paths"].as<std::string>(), {"default", "simt", "one-pass-backward"});
  // Paths other than the default run only on CUDA in f16/bf16/f32: elsewhere the default is the
  // plain kernel, and more rows would compare it with itself.
  if (!(d.is_cuda() && (t == nn::kF16 || t == nn::kBF16 || t == nn::kF32))) {
    if (apps::flag(a, "attention") && std::find(paths.begin(), paths.end(), "default") == paths.end())
      throw apps::UsageError("--attention-paths: on " + d.str() + " in " + dtype +
                             " there is only the default path (the plain kernel)");
    paths = {"default"};
  }
  if (apps::flag(a, "attention")) {
    bench_attention(d, t, iters, paths);
    return 0;
  }
  if (apps::flag(a, "overhead")) {
    bench_overhead(d, t, iters);
    return 0;
  }
  const double es = double(nn::element_size(t));
  nn::NoGradGuard ng;
  nn::Tensor x = nn::randn({n}, nn::TensorOptions(nn::kF32).device(d)).to(t);
  nn::Tensor y = nn::randn({n}, nn::TensorOptions(nn::kF32).device(d)).to(t);
  nn::Tensor out = nn::empty_like(x);
  const int64_t rows = n / 1024;
  nn::Tensor x2 = x.view({rows, 1024});
  nn::Tensor ln_w = nn::ones({1024}, nn::TensorOptions(t).device(d));
  nn::Tensor ln_b = nn::zeros({1024}, nn::TensorOptions(t).device(d));
  // Batch norm in training over (n / 1024, 64, 4, 4) channels-last: the ResNet block's tail
  // fused (batch_norm_relu with a residual) and composed (batch_norm, add, relu). Both are
  // credited with the fused op's traffic (read x for the statistics, then x and z, write y),
  // so their GB/s compare as their speeds do.
  const nn::Shape bn_shape{rows, 64, 4, 4};
  nn::Tensor bx = x.view(bn_shape).contiguous(nn::MemoryFormat::channels_last);
  nn::Tensor bz = y.view(bn_shape).contiguous(nn::MemoryFormat::channels_last);
  const nn::TensorOptions po = nn::TensorOptions(nn::kF32).device(d);  // autocast's parameters
  nn::Tensor bn_w = nn::ones({64}, po), bn_b = nn::zeros({64}, po);
  nn::Tensor bn_rm = nn::zeros({64}, po), bn_rv = nn::ones({64}, po);
  struct Op {
    const char* name;
    double bytes;  // moved per call
    std::function<void()> f;
  };
  std::vector<Op> ops = {
      {"copy", 2 * es * n, [&] { out.copy_(x); }},
      {"add", 3 * es * n, [&] { out = nn::add(x, y); }},
      {"mul_scalar", 2 * es * n, [&] { out = nn::mul(x, 2.0); }},
      {"relu", 2 * es * n, [&] { out = nn::relu(x); }},
      {"gelu", 2 * es * n, [&] { out = nn::gelu(x); }},
      {"transpose", 2 * es * n, [&] { out = x2.t().contiguous(); }},  // (1024, n / 1024) copy
      {"sum_all", es * n, [&] { out = nn::sum(x); }},
      {"sum_rows", es * n, [&] { out = nn::sum(x2, {1}); }},
      {"sum_columns", es * n, [&] { out = nn::sum(x2, {0}); }},
      {"softmax_rows", 2 * es * n, [&] { out = nn::softmax(x2, 1); }},
      {"layer_norm_rows", 2 * es * n, [&] { out = nn::layer_norm(x2, {1024}, ln_w, ln_b); }},
      {"batch_norm_nhwc", 3 * es * n,
       [&] { out = nn::batch_norm(bx, bn_rm, bn_rv, bn_w, bn_b, true); }},
      {"batch_norm_add_relu_nhwc", 4 * es * n,
       [&] { out = nn::batch_norm_relu(bx, bz, bn_rm, bn_rv, bn_w, bn_b, true); }},
      {"batch_norm_add_relu_nhwc_composed", 4 * es * n,
       [&] { out = nn::relu(nn::add(nn::batch_norm(bx, bn_rm, bn_rv, bn_w, bn_b, true), bz)); }},
  };
  std::unique_ptr<nn::optim::AdamW> opt;  // outlives the loop that times it
  if (t == nn::kF32) {
    nn::Tensor p = x.clone().requires_grad_();
    p.set_grad(y.clone());
    opt = std::make_unique<nn::optim::AdamW>(std::vector<nn::Tensor>{p}, nn::optim::AdamWOptions(1e-3));
    // reads p, g, m, v and writes p, m, v
    ops.push_back({"adamw_step", 7 * es * n, [&] { opt->step(); }});
  }
  const std::string dev = d.str(), name = nn::device_name(d);
  for (auto& op : ops) {
    double s = time_per_call(d, iters, op.f);
    std::printf("{\"impl\": \"libnn\", \"device\": \"%s\", \"device_name\": \"%s\", "
                "\"dtype\": \"%s\", \"op\": \"%s\", \"n\": %lld, \"us\": %.2f, "
                "\"gb_per_s\": %.1f}\n",
                dev.c_str(), name.c_str(), nn::dtype_name(t), op.name, (long long)n, s * 1e6,
                op.bytes / s / 1e9);
    std::fflush(stdout);
  }
  return 0;
}
}  // namespace

int main(int argc, char** argv) { return apps::guarded_main("kernels_bench", argc, argv, body); }
