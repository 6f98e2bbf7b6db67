// All-reduce throughput of nn::dist's ring over TCP, the way nccl-tests reports it: for each
// size, seconds per call, algorithm bandwidth (bytes / time) and bus bandwidth (algbw x
// 2(n-1)/n, what each link carried). Start one copy per rank, e.g.
//   scripts/dist_launch.sh --nprocs 2 -- build/bin/allreduce_bench
// bench/peers/allreduce_torch.py measures torch.distributed (gloo) the same way.
#include <nn/nn.h>

#include <cxxopts.hpp>

#include "common/cli.h"

#include <cstdio>
#include <cstdlib>

namespace {

int body(int argc, char** argv) {
  cxxopts::Options opts("allreduce_bench", "All-reduce throughput of the data-parallel process group.");
  opts.add_options()
      ("sizes", "f32 elements per call, comma-separated",
       cxxopts::value<std::string>()->default_value("1024,65536,1048576,4194304,16777216"))
      ("iters", "timed calls per size", cxxopts::value<int>()->default_value("20"))
      ("warmup", "untimed calls per size", cxxopts::value<int>()->default_value("3"))
      ("device", "where the tensor lives: cpu or cuda[:N]", cxxopts::value<std::string>()->default_value("cpu"))
      ("json", "append one JSON object per size to FILE (rank 0)", cxxopts::value<std::string>())
      ("h,help", "show this help");
  auto args = apps::parse(opts, argc, argv);
  if (!args) return 0;
  const auto& a = *args;
  const int iters = apps::check_positive("iters", a["iters"].as<int>());
  const int warmup = apps::check_non_negative("warmup", a["warmup"].as<int>());
  const std::vector<int64_t> sizes = apps::check_positive_list("sizes", a["sizes"].as<std::string>());
  const nn::Device device = apps::parse_device(a["device"].as<std::string>());
  nn::check_device(device);
  nn::dist::ProcessGroup pg(nn::dist::options_from_env());
  if (a.count("json") && pg.rank() == 0) apps::check_output_file(a, "json");  // rank 0 writes it
  if (pg.rank() == 0)
    std::printf("allreduce_bench: %d ranks, f32 on %s, %d timed calls per size\n%12s %12s %12s %12s\n",
                pg.size(), device.str().c_str(), iters, "bytes", "us/call", "algbw GB/s", "busbw GB/s");
  for (int64_t n : sizes) {
    nn::Tensor t = nn::full({n}, 1.0, device);
    for (int i = 0; i < warmup; ++i) pg.all_reduce({t});
    pg.barrier();
    nn::train::Stopwatch clock;
    for (int i = 0; i < iters; ++i) pg.all_reduce({t});
    std::vector<double> sec{clock.seconds() / iters};
    pg.all_reduce(sec, nn::dist::ReduceOp::max);  // the slowest rank's time
    // Then one checked call: ones summed over the ranks.
    t = nn::full({n}, 1.0, device);
    pg.all_reduce({t});
    NN_CHECK(nn::amax(nn::abs(nn::add(t, -double(pg.size())))).item() == 0, "wrong all-reduce result");
    const double bytes = double(n) * 4, algbw = bytes / sec[0] / 1e9;
    const double busbw = algbw * 2.0 * (pg.size() - 1) / pg.size();
    if (pg.rank() != 0) continue;
    std::printf("%12.0f %12.1f %12.3f %12.3f\n", bytes, sec[0] * 1e6, algbw, busbw);
    if (a.count("json"))
      nn::train::append_line(a["json"].as<std::string>(),
                             nn::train::JsonLine()
                                 .add("impl", std::string("libnn"))
                                 .add("ranks", int64_t(pg.size()))
                                 .add("device", device.str())
                                 .add("device_name", nn::device_name(device))
                                 .add("bytes", int64_t(bytes))
                                 .add("seconds_per_call", sec[0])
                                 .add("algbw_GBps", algbw)
                                 .add("busbw_GBps", busbw)
                                 .str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return apps::guarded_main("allreduce_bench", argc, argv, body); }
