// Measures this CPU's ceilings through libnn itself: GEMM FLOP/s (nn::matmul on large
// square f32 matrices) and memory bandwidth (a large contiguous copy), at 1 and N threads.
// They are the yardsticks for the CPU performance notes in docs/.
#include <nn/nn.h>

#include <cxxopts.hpp>

#include <algorithm>
#include <cstdio>

namespace {
template <typename F>
double best_seconds(int reps, F&& f) {
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    nn::train::Stopwatch w;
    f();
    best = std::min(best, w.seconds());
  }
  return best;
}
}  // namespace

int body(int argc, char** argv) {
  cxxopts::Options opts("cpu_ceiling", "GEMM FLOP/s and copy bandwidth of this CPU via libnn");
  opts.add_options()("n", "matrix size", cxxopts::value<int64_t>()->default_value("1536"))(
      "h,help", "show this help");
  auto a = opts.parse(argc, argv);
  if (a.count("help")) {
    std::printf("%s\n", opts.help().c_str());
    return 0;
  }
  const int64_t n = a["n"].as<int64_t>();
  const int max_threads = nn::num_threads();
  nn::NoGradGuard ng;
  nn::Tensor x = nn::randn({n, n}), y = nn::randn({n, n});
  nn::Tensor big = nn::randn({64 << 20});  // 256 MB
  nn::Tensor dst = nn::empty_like(big);
  for (int threads : {1, max_threads}) {
    nn::set_num_threads(threads);
    nn::matmul(x, y);  // warm up
    double s = best_seconds(3, [&] { nn::matmul(x, y); });
    double gemm = 2.0 * double(n) * double(n) * double(n) / s / 1e9;
    double c = best_seconds(3, [&] { dst.copy_(big); });
    double gbs = 2.0 * double(big.nbytes()) / c / 1e9;  // read + write
    std::printf("threads %d: f32 GEMM %dx%d %.1f GFLOP/s, copy %.1f GB/s\n", threads, int(n),
                int(n), gemm, gbs);
    if (threads == max_threads) break;
  }
  return 0;
}

int main(int argc, char** argv) {
  try {
    return body(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cpu_ceiling: error: %s\n", e.what());
    return 1;
  }
}
