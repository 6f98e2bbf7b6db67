// Measures this CPU's ceilings through libnn itself: GEMM FLOP/s (nn::matmul on large
// square f32 matrices, and bf16 ones) and memory bandwidth (a large contiguous copy), at 1 and N threads,
// and with --shapes the f32 and bf16 GEMM rates of given (M, N, K) products. They are the
// yardsticks for the CPU performance notes in docs/. LIBNN_CPU_GEMM=eigen|avx2|avx512 picks
// the CPU's f32 kernel, LIBNN_CPU_AMX=0 turns the AMX bf16 kernel off, to compare them.
#include <nn/nn.h>

#include <cxxopts.hpp>

#include "common/cli.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

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

struct Mnk {
  int64_t m, n, k;
};
// "64x576x288,1024x3072x768" -> {M, N, K} triples
std::vector<Mnk> parse_shapes(const std::string& text) {
  std::vector<Mnk> out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, end - start);
    int64_t v[3] = {0, 0, 0};
    const char *p = item.data(), *last = item.data() + item.size();
    bool ok = true;
    for (int i = 0; i < 3 && ok; ++i) {  // (from_chars: an overflow is an error, not LLONG_MAX)
      auto [next, ec] = std::from_chars(p, last, v[i]);
      ok = ec == std::errc() && v[i] > 0 && (i == 2 ? next == last : next < last && *next == 'x');
      p = next + 1;
    }
    if (!ok) throw apps::UsageError("--shapes: expected MxNxK with positive sizes, got '" + item + "'");
    // each operand and the product at most 2^28 floats (1 GiB), checked before any timing
    const int64_t most = int64_t(1) << 28;
    if (v[0] > most / v[2] || v[2] > most / v[1] || v[0] > most / v[1])
      throw apps::UsageError("--shapes: '" + item + "' needs a matrix of more than 2^28 floats");
    out.push_back({v[0], v[1], v[2]});
    start = end + 1;
  }
  return out;
}

double gflops(const Mnk& s, double seconds) {
  return 2.0 * double(s.m) * double(s.n) * double(s.k) / seconds / 1e9;
}

int body(int argc, char** argv) {
  cxxopts::Options opts("cpu_ceiling", "GEMM FLOP/s and copy bandwidth of this CPU via libnn");
  opts.add_options()("n", "matrix size", cxxopts::value<int64_t>()->default_value("1536"))(
      "shapes", "also time these products, MxNxK[,MxNxK...] (A (M, K) times B (K, N))",
      cxxopts::value<std::string>())("h,help", "show this help");
  auto args = apps::parse(opts, argc, argv);
  if (!args) return 0;
  const auto& a = *args;
  const int64_t n = a["n"].as<int64_t>();
  if (n <= 0 || n > 16384) throw apps::UsageError("-n must be 1 to 16384, got " + std::to_string(n));
  const std::vector<Mnk> shapes =
      a.count("shapes") ? parse_shapes(a["shapes"].as<std::string>()) : std::vector<Mnk>{};
  for (const char* name : {"LIBNN_CPU_GEMM", "LIBNN_CPU_AMX"})
    if (const char* k = std::getenv(name)) std::printf("%s=%s\n", name, k);
  const int max_threads = nn::num_threads();
  nn::NoGradGuard ng;
  nn::Tensor x = nn::randn({n, n}), y = nn::randn({n, n});
  nn::Tensor big = nn::randn({64 << 20});  // 256 MB
  nn::Tensor dst = nn::empty_like(big);
  for (int threads : {1, max_threads}) {
    nn::set_num_threads(threads);
    nn::matmul(x, y);  // warm up
    double s = best_seconds(3, [&] { nn::matmul(x, y); });
    double gemm = gflops({n, n, n}, s);
    double c = best_seconds(3, [&] { dst.copy_(big); });
    double gbs = 2.0 * double(big.nbytes()) / c / 1e9;  // read + write
    std::printf("threads %d: f32 GEMM %dx%d %.1f GFLOP/s, copy %.1f GB/s\n", threads, int(n),
                int(n), gemm, gbs);
    // bf16 operands and result (f32 sums): the AMX or AVX512_BF16 kernel where the CPU has one
    nn::Tensor xb = x.to(nn::kBF16), yb = y.to(nn::kBF16);
    nn::matmul(xb, yb);
    const double sb = best_seconds(3, [&] { nn::matmul(xb, yb); });
    std::printf("threads %d: bf16 GEMM %dx%d %.1f GFLOP/s\n", threads, int(n), int(n),
                gflops({n, n, n}, sb));
    for (const Mnk& sh : shapes)
      for (nn::DType dt : {nn::kF32, nn::kBF16}) {
        nn::Tensor p = nn::randn({sh.m, sh.k}).to(dt), q = nn::randn({sh.k, sh.n}).to(dt);
        nn::matmul(p, q);
        // best of three windows of at least 0.2 s, so small products are timed over many calls
        double best = 1e30;
        for (int w = 0; w < 3; ++w) {
          nn::train::Stopwatch sw;
          int calls = 0;
          do {
            nn::matmul(p, q);
            ++calls;
          } while (sw.seconds() < 0.2);
          best = std::min(best, sw.seconds() / calls);
        }
        std::printf("threads %d: %s GEMM %lldx%lldx%lld (MxNxK) %.1f GFLOP/s\n", threads,
                    dt == nn::kF32 ? "f32" : "bf16", (long long)sh.m, (long long)sh.n,
                    (long long)sh.k, gflops(sh, best));
      }
    if (threads == max_threads) break;
  }
  return 0;
}

int main(int argc, char** argv) { return apps::guarded_main("cpu_ceiling", argc, argv, body); }
