// Training throughput in FP32 and in mixed precision (FP16 with loss scaling, BF16), back to
// back on one device, the way tf_cnn_benchmarks reports it: synthetic images, images/s over
// --num-batches after --num-warmup-batches, plus peak memory and the loss after the last step
// (to show every precision trains). --loss-curve records every step's loss.
#include <nn/nn.h>

#include <cxxopts.hpp>

#include "common/cli.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <cstdio>
#include <sstream>

namespace {

struct Result {
  std::string layout;  // nhwc or nchw, what the ResNets ran in
  std::string precision;
  double seconds = 0, images_per_second = 0, peak_mb = 0, final_loss = 0;
  std::vector<double> losses;
};

std::shared_ptr<nn::Module> make_model(const std::string& name, int64_t classes, bool nhwc) {
  if (name == "resnet50")
    return nn::models::resnet50(
        nn::models::ResNetOptions().num_classes(classes).channels_last(nhwc));
  if (name == "resnet20")
    return nn::models::cifar_resnet(
        nn::models::CifarResNetOptions().num_classes(classes).channels_last(nhwc));
  return nn::models::keras_mnist_cnn();
}

// A SIGTERM/SIGINT/SIGHUP (StopSignal, installed before the runs) ends the benchmark between steps,
// never inside a result file's write; a second signal a second later ends it at once. The
// precisions finished before it stay in the result files.
void stop_if_requested() {
  if (!nn::train::StopSignal::requested()) return;
  const int sig = nn::train::StopSignal::signal_number();
  std::fprintf(stderr, "fp16_vs_fp32: stopped by signal %d; the result files keep the "
               "precisions finished before it\n", sig);
  throw apps::Stopped{sig};
}

Result run(const std::string& model_name, const std::string& precision, const nn::Device& dev,
           int64_t batch, int64_t image, int64_t warmup, int64_t batches, int64_t pool,
           uint64_t seed, bool nhwc) {
  nn::manual_seed(seed);
  const bool resnet = model_name == "resnet50", cifar = model_name == "resnet20";
  const int64_t classes = resnet ? 1000 : 10;
  auto model = make_model(model_name, classes, nhwc);
  model->to(dev);
  model->train();
  // lr 0.1 per 256 images (the linear scaling rule tf_cnn_benchmarks follows)
  nn::optim::SGD opt(model->parameters(),
                     nn::optim::SGDOptions((resnet || cifar ? 0.1 : 0.05) * double(batch) / 256.0)
                         .momentum(0.9)
                         .weight_decay(1e-4));
  nn::amp::GradScaler scaler(nn::amp::GradScalerOptions{.enabled = precision == "fp16"});
  const nn::DType half = precision == "bf16" ? nn::kBF16 : nn::kF16;
  // A fixed pool of synthetic batches, resident on the device (no input pipeline in the way),
  // drawn there: the same values as drawn on the CPU, without a host copy of each batch (a
  // batch too large for the device is then refused by the device, not by the host).
  nn::Generator g(seed + 1);
  std::vector<nn::Tensor> xs, ys;
  const nn::Shape shape = resnet ? nn::Shape{batch, 3, image, image}
                          : cifar ? nn::Shape{batch, 3, 32, 32}
                                  : nn::Shape{batch, 1, 28, 28};
  for (int64_t i = 0; i < pool; ++i) {
    xs.push_back(nn::randn(shape, nn::TensorOptions(nn::kF32).device(dev), &g));
    ys.push_back(nn::randint(0, classes, {batch}, nn::kI64, &g).to(dev));
  }
  nn::CrossEntropyOptions ce;
  ce.label_smoothing = resnet ? 0.1 : 0.0;
  Result r;
  r.precision = precision;
  nn::Tensor last;
  auto step = [&](int64_t i) {
    nn::Tensor loss;
    {
      nn::amp::AutocastGuard ac(half, precision != "fp32");
      loss = nn::cross_entropy(model->forward(xs[i % pool]), ys[i % pool], ce);
    }
    opt.zero_grad();
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
    return loss.detach();
  };
  for (int64_t i = 0; i < warmup; ++i) {
    r.losses.push_back(step(i).item());
    stop_if_requested();
  }
  nn::synchronize(dev);
  nn::reset_peak_memory_stats(dev);
  nn::train::Stopwatch w;
  std::vector<nn::Tensor> timed;  // read back after the clock stops: no sync inside the loop
  for (int64_t i = 0; i < batches; ++i) {
    timed.push_back(step(warmup + i));
    stop_if_requested();  // a flag read: no sync
  }
  nn::synchronize(dev);
  r.seconds = w.seconds();
  for (auto& l : timed) r.losses.push_back(l.item());
  r.images_per_second = double(batch * batches) / r.seconds;
  r.peak_mb = double(nn::memory_stats(dev).peak_allocated) / (1 << 20);
  r.final_loss = r.losses.empty() ? NAN : r.losses.back();
  return r;
}

std::string today() {
  std::time_t t = std::time(nullptr);
  char buf[16];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", std::gmtime(&t));
  return buf;
}

// The library's switches moved from their default in this run's environment, as the library
// reads them ("LIBNN_CUDNN_BN_FUSED=0"; LIBNN_CUBLASLT=1, the default, is none), so that a
// record of such a run is never taken for, or compared with, one of the default
// configuration. LIBNN_CPU_GEMM counts whenever it names a kernel (the default is per CPU;
// a kernel this CPU lacks is said and the default taken, a rare case recorded as named).
std::string variant() {
  struct Switch {
    const char* name;
    const char* changed;  // the value that moves it (nullptr: a GEMM kernel named)
  };
  std::string v;
  for (Switch s : {Switch{"LIBNN_CUBLASLT", "0"}, Switch{"LIBNN_CUDNN_BN_FUSED", "0"},
                   Switch{"LIBNN_CUDNN_FIND", "0"}, Switch{"LIBNN_CUDA_LN_FUSED", "0"},
                   Switch{"LIBNN_CUDA_ATTENTION", "simt"}, Switch{"LIBNN_NO_MEMORY_CACHING", "1"},
                   Switch{"LIBNN_CPU_AMX", "0"}, Switch{"LIBNN_CPU_GEMM", nullptr}}) {
    const char* value = std::getenv(s.name);
    const std::string set = value ? value : "";
    const bool moves = s.changed ? set == s.changed
                                 : (set == "eigen" || set == "avx2" || set == "avx512");  // (others: ignored)
    if (moves) v.append(v.empty() ? "" : " ").append(s.name).append("=").append(value);
  }
  return v;
}

int body(int argc, char** argv) {
  cxxopts::Options opts("fp16_vs_fp32",
                        "Training throughput in FP32 and mixed precision (FP16, BF16), back to back.");
  opts.add_options()
      ("model", "resnet50, resnet20 (the CIFAR ResNet, 32 x 32 images) or mnist_cnn",
       cxxopts::value<std::string>()->default_value("resnet50"))
      ("batch-size", "images per step", cxxopts::value<int64_t>()->default_value("128"))
      ("num-batches", "timed steps", cxxopts::value<int64_t>()->default_value("50"))
      ("num-warmup-batches", "untimed steps first", cxxopts::value<int64_t>()->default_value("10"))
      ("precisions", "comma-separated: fp32, fp16, bf16",
       cxxopts::value<std::string>()->default_value("fp32,fp16,bf16"))
      ("image-size", "ResNet-50 input height and width", cxxopts::value<int64_t>()->default_value("224"))
      ("synthetic-batches", "distinct synthetic batches cycled through",
       cxxopts::value<int64_t>()->default_value("4"))
      ("device", "cpu, cuda or cuda:N", cxxopts::value<std::string>()->default_value("cuda"))
      ("layout", "ResNet memory format: nhwc (channels-last), nchw, or auto (per precision, the one the device computes natively: nhwc, on CUDA and on the CPU)",
       cxxopts::value<std::string>()->default_value("auto"))
      ("seed", "random seed", cxxopts::value<uint64_t>()->default_value("0"))
      ("json", "write results (schema libnn-bench-1) to FILE", cxxopts::value<std::string>())
      ("machine", "machine kind for bench/report's price table", cxxopts::value<std::string>())
      ("loss-curve", "write step,precision,loss lines to FILE (CSV)", cxxopts::value<std::string>())
      ("h,help", "show this help");
  auto args = apps::parse(opts, argc, argv);
  if (!args) return 0;
  const auto& a = *args;
  const std::string model = a["model"].as<std::string>();
  apps::check_choice("model", model, {"resnet50", "resnet20", "mnist_cnn"});
  const int64_t batch = apps::check_count("batch-size", a["batch-size"].as<int64_t>(), apps::kMaxBatch);
  const int64_t batches = apps::check_count("num-batches", a["num-batches"].as<int64_t>(), apps::kMaxBatches);
  const int64_t warmup = apps::check_at_most(
      "num-warmup-batches",
      apps::check_non_negative("num-warmup-batches", a["num-warmup-batches"].as<int64_t>()),
      apps::kMaxBatches);
  // (distinct batches held in memory: more than the run uses, or than the default, is memory
  // for nothing)
  const int64_t pool = apps::check_count("synthetic-batches", a["synthetic-batches"].as<int64_t>(),
                                         std::max<int64_t>(4, warmup + batches));
  const int64_t image_size = apps::check_count("image-size", a["image-size"].as<int64_t>(), 4096);
  const std::string layout_arg = a["layout"].as<std::string>();
  apps::check_choice("layout", layout_arg, {"auto", "nhwc", "nchw"});
  const std::vector<std::string> precisions =
      apps::check_choices("precisions", a["precisions"].as<std::string>(), {"fp32", "fp16", "bf16"});
  // Files written after the runs: refused now, not after minutes of training.
  const std::string json_file = a.count("json") ? apps::check_output_file(a, "json") : "";
  const std::string curve_file = a.count("loss-curve") ? apps::check_output_file(a, "loss-curve") : "";
  const nn::Device dev = apps::parse_device(a["device"].as<std::string>());
  nn::check_device(dev);
  // auto: per precision, the format the device computes it in natively (channels-last on
  // CUDA and on the CPU)
  auto nhwc_for = [&](const std::string& p) {
    if (model == "mnist_cnn" || layout_arg != "auto") return model != "mnist_cnn" && layout_arg == "nhwc";
    const nn::DType compute = p == "fp32" ? nn::kF32 : p == "bf16" ? nn::kBF16 : nn::kF16;
    return nn::preferred_memory_format(dev, compute) == nn::MemoryFormat::channels_last;
  };
  std::printf("fp16_vs_fp32: %s, batch %lld, %lld+%lld steps on %s\n", model.c_str(),
              (long long)batch, (long long)warmup, (long long)batches, dev.str().c_str());
  std::vector<Result> results;
  std::string command;
  for (int i = 0; i < argc; ++i) command += (i ? " " : "") + std::string(argv[i]);
  const std::string machine = a.count("machine") ? a["machine"].as<std::string>()
                                                 : (dev.is_cpu() ? "cpu-" + std::to_string(nn::num_threads()) + "core" : "gpu");
  // The result files hold every precision measured so far: rewritten whole after each one,
  // so a run stopped or failing in a later precision keeps the earlier ones.
  auto save = [&] {
    if (!curve_file.empty()) {
      std::ostringstream f;
      f << "step,precision,loss\n";
      for (auto& r : results)
        for (size_t i = 0; i < r.losses.size(); ++i) f << i << "," << r.precision << "," << r.losses[i] << "\n";
      nn::train::write_file(curve_file, f.str());
    }
    if (json_file.empty()) return;
    // The header through JsonLine, which escapes the strings; the records follow it.
    std::string head = nn::train::JsonLine()
                           .add("schema", std::string("libnn-bench-1"))
                           .add("date", today())
                           .add("machine", machine)
                           .add("host", nn::device_name(dev))
                           .add("command", command)
                           .str();
    head.pop_back();  // the closing brace
    std::ostringstream os;
    os << head << ", \"records\": [";
    for (size_t i = 0; i < results.size(); ++i) {
      auto& r = results[i];
      os << (i ? ", " : "") << nn::train::JsonLine()
                                   .add("benchmark", std::string("fp16_vs_fp32"))
                                   .add("model", model)
                                   .add("impl", std::string("libnn"))
                                   .add("device", std::string(dev.is_cpu() ? "cpu" : "cuda"))
                                   .add("precision", r.precision)
                                   .add("layout", r.layout)
                                   .add("phase", std::string("train"))
                                   .add("seconds", r.seconds)
                                   .add("samples", batch * batches)
                                   .add("batch_size", batch)
                                   .add("variant", variant())
                                   .add("samples_per_second", r.images_per_second)
                                   .add("peak_memory_mb", r.peak_mb)
                                   .add("final_loss", r.final_loss)
                                   .str();
    }
    os << "]}\n";
    nn::train::write_file(json_file, os.str());
  };
  nn::train::StopSignal::install();
  for (auto& p : precisions) {
    const bool nhwc = nhwc_for(p);
    results.push_back(run(model, p, dev, batch, image_size, warmup, batches,
                          pool, a["seed"].as<uint64_t>(), nhwc));
    auto& r = results.back();
    r.layout = nhwc ? "nhwc" : "nchw";
    std::printf("  %-5s %9.1f images/s  peak %8.0f MiB  final loss %.4f  %s\n", p.c_str(),
                r.images_per_second, r.peak_mb, r.final_loss, r.layout.c_str());
    std::fflush(stdout);
    save();
    stop_if_requested();
  }
  // (fp32 wherever --precisions lists it)
  auto fp32 = std::find_if(results.begin(), results.end(), [](auto& r) { return r.precision == "fp32"; });
  for (auto& r : results)
    if (fp32 != results.end() && r.precision != "fp32")
      std::printf("  %s speedup over fp32: %.2fx\n", r.precision.c_str(),
                  r.images_per_second / fp32->images_per_second);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return apps::guarded_main("fp16_vs_fp32", argc, argv, body); }
