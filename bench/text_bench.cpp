// Training and inference throughput of the text classifiers (the embedding-bag MLP and the
// BERT-style encoder) as the number of classes grows, per precision, on synthetic token ids:
// the shapes users measured on IMDB reviews. One JSON line per measurement on stdout (read by
// bench/text_vs_torch.py, which runs bench/peers/text_torch.py with the same flags); a table
// on stderr. --gemm also measures the device's square matrix-multiply rate per precision, the
// ceiling that model FLOP utilisation is judged against.
#include <nn/nn.h>

#include <cxxopts.hpp>

#include "common/cli.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdio>

namespace {

struct Shape {
  std::string model;  // mlp or bert
  int64_t classes, batch, seq_len, vocab;
  std::string preset;  // bert: tiny, mini, base
};

std::shared_ptr<nn::Module> make_model(const Shape& s) {
  if (s.model == "mlp")
    return std::make_shared<nn::models::TextMLP>(nn::models::TextMLPOptions(s.vocab, s.classes));
  auto c = nn::models::BertConfig::preset(s.preset).vocab_size(s.vocab).num_classes(s.classes);
  c.max_len(std::max<int64_t>(512, s.seq_len));
  return std::make_shared<nn::models::BertClassifier>(c);
}

nn::Tensor forward(const Shape& s, nn::Module& m, const nn::Tensor& ids, const nn::Tensor& keep) {
  if (s.model == "mlp") return static_cast<nn::models::TextMLP&>(m).forward(ids, keep);
  return static_cast<nn::models::BertClassifier&>(m).forward(ids, keep);
}

// Synthetic batches: lengths uniform in [seq_len/2, seq_len], ids uniform over the vocabulary
// past the 5 special tokens, padding (id 0, keep 0) after the length.
struct Batches {
  std::vector<nn::Tensor> ids, keep, target;
};
Batches make_batches(const Shape& s, int64_t pool, const nn::Device& dev, uint64_t seed) {
  nn::Generator g(seed);
  Batches b;
  for (int64_t i = 0; i < pool; ++i) {
    nn::Tensor ids = nn::randint(5, s.vocab, {s.batch, s.seq_len}, nn::kI64, &g);
    nn::Tensor len = nn::randint(s.seq_len / 2, s.seq_len + 1, {s.batch, 1}, nn::kI64, &g);
    nn::Tensor keep = nn::lt(nn::arange(s.seq_len, nn::kI64).reshape({1, s.seq_len}), len).to(nn::kU8);
    b.ids.push_back(nn::mul(ids, keep.to(nn::kI64)).to(dev));
    b.keep.push_back(keep.to(dev));
    b.target.push_back(nn::randint(0, s.classes, {s.batch}, nn::kI64, &g).to(dev));
  }
  return b;
}

struct Measured {
  double seconds = 0, samples_per_second = 0, peak_mb = 0, loss = NAN;
};

// What both phases measure: `warmup` untimed steps, then `steps` timed ones (profiled when
// asked). step(i) returns the step's loss, or an undefined tensor when there is none.
template <typename Step>
Measured measure(const Shape& s, const nn::Device& dev, int64_t warmup, int64_t steps,
                 bool profile, Step&& step) {
  for (int64_t i = 0; i < warmup; ++i) step(i);
  nn::synchronize(dev);
  nn::reset_peak_memory_stats(dev);
  nn::profiler::reset();
  nn::profiler::enable(profile);
  nn::train::Stopwatch w;
  nn::Tensor last;
  for (int64_t i = 0; i < steps; ++i) last = step(warmup + i);
  nn::synchronize(dev);
  nn::profiler::enable(false);
  Measured m;
  m.seconds = w.seconds();
  m.samples_per_second = double(s.batch * steps) / m.seconds;
  m.peak_mb = double(nn::memory_stats(dev).peak_allocated) / (1 << 20);
  if (last.defined()) m.loss = last.item();
  return m;
}

Measured train(const Shape& s, const std::string& precision, const nn::Device& dev, int64_t warmup,
               int64_t steps, uint64_t seed, bool profile) {
  nn::manual_seed(seed);
  auto model = make_model(s);
  model->to(dev);
  model->train();
  nn::optim::AdamW opt(model->parameters(), nn::optim::AdamWOptions(1e-4).weight_decay(0.01));
  nn::amp::GradScaler scaler(nn::amp::GradScalerOptions{.enabled = precision == "fp16"});
  const nn::DType half = precision == "bf16" ? nn::kBF16 : nn::kF16;
  const Batches data = make_batches(s, 2, dev, seed + 1);
  auto step = [&](int64_t i) {
    const size_t k = size_t(i % 2);
    nn::Tensor loss;
    {
      nn::amp::AutocastGuard ac(half, precision != "fp32");
      loss = nn::cross_entropy(forward(s, *model, data.ids[k], data.keep[k]), data.target[k]);
    }
    opt.zero_grad();
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
    return loss.detach();
  };
  return measure(s, dev, warmup, steps, profile, step);
}

Measured infer(const Shape& s, const std::string& precision, const nn::Device& dev, int64_t warmup,
               int64_t steps, uint64_t seed, bool profile) {
  nn::manual_seed(seed);
  auto model = make_model(s);
  model->to(dev);
  model->eval();
  const nn::DType half = precision == "bf16" ? nn::kBF16 : nn::kF16;
  const Batches data = make_batches(s, 2, dev, seed + 1);
  nn::NoGradGuard ng;
  auto step = [&](int64_t i) {
    nn::amp::AutocastGuard ac(half, precision != "fp32");
    nn::argmax(forward(s, *model, data.ids[size_t(i % 2)], data.keep[size_t(i % 2)]), 1);
    return nn::Tensor();  // no loss in inference
  };
  return measure(s, dev, warmup, steps, profile, step);
}

// Square matmul rate in TFLOP/s (inputs in the precision, as autocast would run them).
double gemm_tflops(const std::string& precision, const nn::Device& dev, int64_t n) {
  const nn::DType t = precision == "fp32" ? nn::kF32 : precision == "bf16" ? nn::kBF16 : nn::kF16;
  nn::Generator g(3);
  nn::Tensor a = nn::randn({n, n}, nn::kF32, &g).to(t).to(dev), b = nn::randn({n, n}, nn::kF32, &g).to(t).to(dev);
  nn::NoGradGuard ng;
  nn::matmul(a, b);
  nn::synchronize(dev);
  double best = 0;
  for (int window = 0; window < 3; ++window) {  // a ceiling: the best of three windows
    int64_t reps = 0;
    nn::train::Stopwatch w;
    while (reps < 3 || w.seconds() < 0.5) {
      nn::matmul(a, b);
      ++reps;
      if (reps % 8 == 0) nn::synchronize(dev);
    }
    nn::synchronize(dev);
    best = std::max(best, 2.0 * double(n) * double(n) * double(n) * double(reps) / w.seconds() / 1e12);
  }
  return best;
}

int body(int argc, char** argv) {
  cxxopts::Options opts("text_bench",
                        "Text classifier throughput (training and inference) against the class count.");
  opts.add_options()
      ("models", "comma-separated: mlp, bert", cxxopts::value<std::string>()->default_value("mlp,bert"))
      ("preset", "BERT shape: tiny, mini or base", cxxopts::value<std::string>()->default_value("base"))
      ("classes", "comma-separated class counts", cxxopts::value<std::string>()->default_value("2,10,1000,20000"))
      ("precisions", "comma-separated: fp32, fp16, bf16", cxxopts::value<std::string>()->default_value("fp32,fp16"))
      ("phases", "comma-separated: train, infer", cxxopts::value<std::string>()->default_value("train,infer"))
      ("device", "cpu, cuda or cuda:N", cxxopts::value<std::string>()->default_value("cpu"))
      ("mlp-batch", "MLP reviews per step", cxxopts::value<int64_t>()->default_value("256"))
      ("mlp-seq-len", "MLP tokens per review", cxxopts::value<int64_t>()->default_value("256"))
      ("bert-batch", "BERT reviews per step", cxxopts::value<int64_t>()->default_value("32"))
      ("bert-seq-len", "BERT tokens per review", cxxopts::value<int64_t>()->default_value("128"))
      ("vocab-size", "vocabulary size", cxxopts::value<int64_t>()->default_value("30522"))
      ("num-batches", "timed steps", cxxopts::value<int64_t>()->default_value("20"))
      ("num-warmup-batches", "untimed steps first", cxxopts::value<int64_t>()->default_value("3"))
      ("gemm", "also measure the square matmul rate of each precision (size N; 0: off)",
       cxxopts::value<int64_t>()->default_value("0"))
      ("profile", "time every backend primitive of the timed steps and print where each "
                  "measurement's time went (on CUDA, device time between events in the stream)")
      ("threads", "CPU threads", cxxopts::value<int>())
      ("seed", "random seed", cxxopts::value<uint64_t>()->default_value("0"))
      ("h,help", "show this help");
  auto args = apps::parse(opts, argc, argv);
  if (!args) return 0;
  const auto& a = *args;
  apps::set_threads(a);
  const std::string preset = a["preset"].as<std::string>();
  apps::check_choice("preset", preset, {"tiny", "mini", "base"});
  const int64_t steps = apps::check_positive("num-batches", a["num-batches"].as<int64_t>());
  const int64_t warmup = apps::check_non_negative("num-warmup-batches", a["num-warmup-batches"].as<int64_t>());
  const auto models = apps::check_choices("models", a["models"].as<std::string>(), {"mlp", "bert"});
  const auto precisions =
      apps::check_choices("precisions", a["precisions"].as<std::string>(), {"fp32", "fp16", "bf16"});
  const auto phases = apps::check_choices("phases", a["phases"].as<std::string>(), {"train", "infer"});
  const std::vector<int64_t> class_counts = apps::check_positive_list("classes", a["classes"].as<std::string>());
  for (const int64_t c : class_counts) apps::check_classes("classes", c);  // (1 class: loss 0)
  for (const char* f : {"mlp-batch", "bert-batch"}) apps::check_positive(f, a[f].as<int64_t>());
  for (const char* f : {"mlp-seq-len", "bert-seq-len"})
    if (a[f].as<int64_t>() < 2)
      throw apps::UsageError(std::string("--") + f + " must be at least 2, got " + std::to_string(a[f].as<int64_t>()));
  // The BERT vocabulary begins with its special tokens ([PAD], [UNK], [CLS], [SEP], [MASK]).
  if (const int64_t v = a["vocab-size"].as<int64_t>(); v <= 5)
    throw apps::UsageError("--vocab-size must be more than 5, got " + std::to_string(v));
  const int64_t gemm_n = apps::check_non_negative("gemm", a["gemm"].as<int64_t>());
  const nn::Device dev = apps::parse_device(a["device"].as<std::string>());
  nn::check_device(dev);
  const std::string device = dev.is_cpu() ? "cpu" : "cuda", device_name = nn::device_name(dev);
  const bool profile = a.count("profile") > 0;

  if (gemm_n > 0)
    for (auto& p : precisions) {
      const double tf = gemm_tflops(p, dev, gemm_n);
      std::fprintf(stderr, "matmul %lld^3 %s: %.1f GFLOP/s\n", (long long)gemm_n, p.c_str(), tf * 1e3);
      std::printf("%s\n", nn::train::JsonLine().add("impl", std::string("libnn")).add("kind", std::string("gemm"))
                              .add("device", device).add("device_name", device_name).add("precision", p).add("n", gemm_n).add("tflops", tf).str().c_str());
    }
  std::fprintf(stderr, "%-5s %7s %-5s %-6s %6s %4s %12s %10s %9s\n", "model", "classes", "prec", "phase",
               "batch", "T", "samples/s", "tokens/s", "peak MiB");
  for (auto& model : models) {
    for (const int64_t classes : class_counts) {
      Shape s{model, classes,
              a[model == "mlp" ? "mlp-batch" : "bert-batch"].as<int64_t>(),
              a[model == "mlp" ? "mlp-seq-len" : "bert-seq-len"].as<int64_t>(),
              a["vocab-size"].as<int64_t>(), preset};
      for (auto& p : precisions)
        for (auto& phase : phases) {
          const uint64_t seed = a["seed"].as<uint64_t>();
          Measured m = phase == "train" ? train(s, p, dev, warmup, steps, seed, profile)
                                        : infer(s, p, dev, warmup, steps, seed, profile);
          std::fprintf(stderr, "%-5s %7lld %-5s %-6s %6lld %4lld %12.1f %10.0f %9.0f\n", model.c_str(),
                       (long long)s.classes, p.c_str(), phase.c_str(), (long long)s.batch,
                       (long long)s.seq_len, m.samples_per_second, m.samples_per_second * double(s.seq_len),
                       m.peak_mb);
          if (profile)
            std::fprintf(stderr, "where the time of these %lld steps went (%.2f s):\n%s\n", (long long)steps,
                         m.seconds, nn::profiler::report(m.seconds).c_str());
          std::printf("%s\n", nn::train::JsonLine()
                                  .add("impl", std::string("libnn"))
                                  .add("kind", std::string("model"))
                                  .add("model", model)
                                  .add("shape", model == "bert" ? preset : std::string("default"))
                                  .add("classes", s.classes)
                                  .add("device", device)
                                  .add("device_name", device_name)
                                  .add("precision", p)
                                  .add("phase", phase)
                                  .add("batch", s.batch)
                                  .add("seq_len", s.seq_len)
                                  .add("steps", steps)
                                  .add("seconds", m.seconds)
                                  .add("samples_per_second", m.samples_per_second)
                                  .add("peak_memory_mb", m.peak_mb)
                                  .add("loss", m.loss)
                                  .str()
                                  .c_str());
          std::fflush(stdout);
        }
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return apps::guarded_main("text_bench", argc, argv, body); }
