// LSTM, GRU and RNN speed: a stack of recurrent layers over a batch of sequences, forward alone
// (inference) and forward + backward (a training step without the optimizer), best of --reps
// after a warm-up. One JSON line per cell and phase; bench/peers/rnn_torch.py prints the same
// for torch.nn.LSTM / GRU / RNN, and bench/rnn_vs_torch.py runs both and prints the ratio.
#include <nn/nn.h>

#include <cxxopts.hpp>

#include "common/cli.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace {

int body(int argc, char** argv) {
  cxxopts::Options opts("rnn_bench",
                        "LSTM, GRU and RNN forward and forward + backward times, one JSON line each");
  opts.add_options()("cells", "comma-separated: lstm, gru, rnn (tanh)", cxxopts::value<std::string>()->default_value("lstm,gru"))(
      "seq-len", "steps per sequence", cxxopts::value<int64_t>()->default_value("256"))(
      "batch-size", "sequences", cxxopts::value<int64_t>()->default_value("32"))(
      "input-size", "features per step", cxxopts::value<int64_t>()->default_value("128"))(
      "hidden-size", "state size", cxxopts::value<int64_t>()->default_value("256"))(
      "layers", "stacked layers", cxxopts::value<int64_t>()->default_value("1"))(
      "bidirectional", "both directions")(
      "precision", "fp32, or fp16 / bf16 under autocast", cxxopts::value<std::string>()->default_value("fp32"))(
      "device", "cpu, cuda or cuda:N", cxxopts::value<std::string>()->default_value("cpu"))(
      "reps", "timed repetitions of each phase (the best counts)",
      cxxopts::value<int64_t>()->default_value("3"))(
      "threads", "CPU threads (default: OpenMP's)", cxxopts::value<int>())("h,help", "show this help");
  auto args = apps::parse(opts, argc, argv);
  if (!args) return 0;
  const auto& a = *args;
  const int64_t T = apps::check_positive("seq-len", a["seq-len"].as<int64_t>());
  const int64_t N = apps::check_positive("batch-size", a["batch-size"].as<int64_t>());
  const int64_t I = apps::check_positive("input-size", a["input-size"].as<int64_t>());
  const int64_t H = apps::check_positive("hidden-size", a["hidden-size"].as<int64_t>());
  const int64_t L = apps::check_count("layers", a["layers"].as<int64_t>(), apps::kMaxLayers);
  const int64_t reps = apps::check_positive("reps", a["reps"].as<int64_t>());
  const bool bidir = a.count("bidirectional") > 0;
  const std::string precision = a["precision"].as<std::string>();
  apps::check_choice("precision", precision, {"fp32", "fp16", "bf16"});
  const std::vector<std::string> cells = apps::check_choices("cells", a["cells"].as<std::string>(), {"lstm", "gru", "rnn"});
  apps::set_threads(a);
  const nn::Device dev = apps::parse_device(a["device"].as<std::string>());
  for (const std::string& cell : cells) {
    nn::manual_seed(1);
    const auto o = nn::RNNOptions(I, H).num_layers(L).bidirectional(bidir);
    std::unique_ptr<nn::RNNBase> m;
    if (cell == "lstm") m = std::make_unique<nn::LSTM>(o);
    else if (cell == "gru") m = std::make_unique<nn::GRU>(o);
    else m = std::make_unique<nn::RNN>(o);
    m->to(dev);
    nn::Generator g(2);
    const nn::Tensor x = nn::randn({T, N, I}, nn::kF32, &g).to(dev).requires_grad_();
    auto run = [&](bool train) {
      std::optional<nn::amp::AutocastGuard> ac;
      if (precision != "fp32") ac.emplace(precision == "bf16" ? nn::kBF16 : nn::kF16);
      if (!train) {
        nn::NoGradGuard ng;
        m->forward(x, {});
        return;
      }
      nn::RNNOutput r = m->forward(x, {});
      ac.reset();
      nn::sum(r.output.to(nn::kF32)).backward();
    };
    for (bool train : {false, true}) {
      run(train);  // warm-up: the allocator's blocks, the first calls' set-up
      nn::synchronize(dev);
      double best = 1e30;
      for (int64_t i = 0; i < reps; ++i) {
        nn::train::Stopwatch w;
        run(train);
        nn::synchronize(dev);
        best = std::min(best, w.seconds());
      }
      std::printf("{\"impl\": \"libnn\", \"cell\": \"%s\", \"phase\": \"%s\", \"device\": \"%s\", "
                  "\"precision\": \"%s\", \"seq_len\": %lld, \"batch\": %lld, \"input\": %lld, "
                  "\"hidden\": %lld, \"layers\": %lld, \"bidirectional\": %s, \"ms\": %.3f, "
                  "\"sequences_per_second\": %.1f}\n",
                  cell.c_str(), train ? "train" : "infer", dev.str().c_str(), precision.c_str(),
                  (long long)T, (long long)N, (long long)I, (long long)H, (long long)L,
                  bidir ? "true" : "false", best * 1e3, double(N) / best);
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return apps::guarded_main("rnn_bench", argc, argv, body); }
