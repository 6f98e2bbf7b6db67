// ResNet-50's 53 convolutions one shape at a time: forward, input gradient and weight gradient
// of each distinct layer shape, timed by the profiler (best of --reps), with GFLOP/s, and the
// three passes' totals over a training step (each shape times how often the network has it).
// The yardstick for the convolution notes in docs/benchmarks.md: where a step's conv time
// goes, layer by layer.
#include <nn/nn.h>
#include <nn/profiler.h>

#include <cxxopts.hpp>

#include "common/cli.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

namespace {

// A convolution of ResNet-50 (torchvision's, stride on the 3 x 3): channels in and out,
// kernel size, stride, input height and width, and how many of it the network has.
struct Layer {
  int64_t cin, cout, k, s, hw, count;
};
const std::vector<Layer> kResNet50 = {
    {3, 64, 7, 2, 224, 1},                                                       // stem
    {64, 64, 1, 1, 56, 1},    {64, 64, 3, 1, 56, 3},    {64, 256, 1, 1, 56, 3},  // layer1
    {64, 256, 1, 1, 56, 1},   {256, 64, 1, 1, 56, 2},
    {256, 128, 1, 1, 56, 1},  {128, 128, 3, 2, 56, 1},  {128, 512, 1, 1, 28, 4},  // layer2
    {256, 512, 1, 2, 56, 1},  {512, 128, 1, 1, 28, 3},  {128, 128, 3, 1, 28, 3},
    {512, 256, 1, 1, 28, 1},  {256, 256, 3, 2, 28, 1},  {256, 1024, 1, 1, 14, 6},  // layer3
    {512, 1024, 1, 2, 28, 1}, {1024, 256, 1, 1, 14, 5}, {256, 256, 3, 1, 14, 5},
    {1024, 512, 1, 1, 14, 1}, {512, 512, 3, 2, 14, 1},  {512, 2048, 1, 1, 7, 3},  // layer4
    {1024, 2048, 1, 2, 14, 1}, {2048, 512, 1, 1, 7, 2}, {512, 512, 3, 1, 7, 2},
};

int body(int argc, char** argv) {
  cxxopts::Options opts("conv_bench",
                        "ResNet-50's convolution shapes one by one: forward, input and weight "
                        "gradients, ms and GFLOP/s");
  opts.add_options()("batch-size", "images", cxxopts::value<int64_t>()->default_value("32"))(
      "precision", "fp32, fp16 or bf16 (operands; sums are f32)",
      cxxopts::value<std::string>()->default_value("bf16"))(
      "layout", "nhwc (channels-last) or nchw", cxxopts::value<std::string>()->default_value("nhwc"))(
      "device", "cpu, cuda or cuda:N", cxxopts::value<std::string>()->default_value("cpu"))(
      "reps", "timed repetitions of each pass (the best counts)",
      cxxopts::value<int64_t>()->default_value("3"))(
      "threads", "CPU threads (default: OpenMP's)", cxxopts::value<int>())("h,help", "show this help");
  auto args = apps::parse(opts, argc, argv);
  if (!args) return 0;
  const auto& a = *args;
  const int64_t batch = apps::check_positive("batch-size", a["batch-size"].as<int64_t>());
  const int64_t reps = apps::check_positive("reps", a["reps"].as<int64_t>());
  const std::string precision = a["precision"].as<std::string>(), layout = a["layout"].as<std::string>();
  apps::check_choice("precision", precision, {"fp32", "fp16", "bf16"});
  apps::check_choice("layout", layout, {"nhwc", "nchw"});
  apps::set_threads(a);
  const nn::Device dev = apps::parse_device(a["device"].as<std::string>());
  nn::check_device(dev);  // (before the table starts)
  const nn::DType dt = precision == "bf16" ? nn::kBF16 : precision == "fp16" ? nn::kF16 : nn::kF32;
  const nn::MemoryFormat fmt =
      layout == "nhwc" ? nn::MemoryFormat::channels_last : nn::MemoryFormat::contiguous;
  std::printf("conv_bench: ResNet-50 convolutions, batch %lld, %s, %s, %s, %d threads\n",
              (long long)batch, precision.c_str(), layout.c_str(), dev.str().c_str(), nn::num_threads());
  std::printf("%-26s %6s %17s %17s %17s\n", "layer (in->out kK sS @HxW)", "count", "forward",
              "input grad", "weight grad");
  const char* names[3] = {"conv2d_forward", "conv2d_backward_input", "conv2d_backward_weight"};
  double step[3] = {0, 0, 0}, step_flops = 0;
  nn::Generator g(1);
  for (const Layer& l : kResNet50) {
    nn::Conv2dParams p;
    p.stride = {l.s, l.s};
    p.padding = {l.k / 2, l.k / 2};
    const bool image = l.cin == 3;  // the stem's input needs no gradient
    nn::Tensor x = nn::randn({batch, l.cin, l.hw, l.hw}, nn::kF32, &g).to(dt).contiguous(fmt).to(dev);
    x.requires_grad_(!image);
    nn::Tensor w = (nn::randn({l.cout, l.cin, l.k, l.k}, nn::kF32, &g) * 0.05).to(dt).to(dev);
    w.requires_grad_(true);
    nn::Tensor y = nn::conv2d(x, w, {}, p);
    nn::Tensor dy = nn::randn(y.shape(), nn::kF32, &g).to(dt).contiguous(fmt).to(dev);
    const double flops = 2.0 * double(y.numel()) * double(l.cin * l.k * l.k);
    double best[3] = {1e30, 1e30, 1e30};
    for (int64_t r = 0; r <= reps; ++r) {  // the first round warms up
      nn::profiler::reset();
      nn::profiler::enable(true);
      {
        nn::NoGradGuard ng;
        nn::conv2d(x, w, {}, p);
      }
      y.backward(dy, true);
      nn::profiler::enable(false);
      if (r == 0) continue;
      for (const auto& e : nn::profiler::entries())
        for (int i = 0; i < 3; ++i)
          if (e.name == names[i]) best[i] = std::min(best[i], e.seconds);
    }
    char label[64];
    std::snprintf(label, sizeof label, "%lld->%lld k%lld s%lld @%lld", (long long)l.cin,
                  (long long)l.cout, (long long)l.k, (long long)l.s, (long long)l.hw);
    std::printf("%-26s %6lld", label, (long long)l.count);
    for (int i = 0; i < 3; ++i) {
      if (i == 1 && image) {
        std::printf(" %17s", "-");
        continue;
      }
      std::printf(" %6.2f ms %4.0f GF/s", best[i] * 1e3, flops / best[i] / 1e9);
      step[i] += best[i] * double(l.count);
    }
    std::printf("\n");
    step_flops += flops * double(l.count);
  }
  std::printf("a training step (%.1f GFLOP a pass): forward %.3f s, input gradient %.3f s, "
              "weight gradient %.3f s, total %.3f s\n",
              step_flops / 1e9, step[0], step[1], step[2], step[0] + step[1] + step[2]);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return apps::guarded_main("conv_bench", argc, argv, body); }
