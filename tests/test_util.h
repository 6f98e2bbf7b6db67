// Helpers for the tests: element-wise comparison with a readable failure, gradient checks,
// seeded random inputs.
#pragma once
#include <nn/nn.h>

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "backend/cpu/gemm.h"
#include "catch.h"

namespace test {

// Puts the CPU GEMM's kernel choices (the f32 kernel, AMX for bf16) back as they were when a
// test case that switches them ends, also when a failed REQUIRE ends it early.
struct CpuKernelGuard {
  nn::cpu::F32Kernel f32 = nn::cpu::f32_kernel();
  bool amx = nn::cpu::bf16_amx();
  CpuKernelGuard() = default;
  CpuKernelGuard(const CpuKernelGuard&) = delete;
  CpuKernelGuard& operator=(const CpuKernelGuard&) = delete;
  ~CpuKernelGuard() {
    nn::cpu::set_f32_kernel(f32);
    nn::cpu::set_bf16_amx(amx);
  }
};

using nn::Shape;
using nn::Tensor;

// A fresh folder under the system's temporary one, removed with everything in it.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    static int n = 0;
    path = std::filesystem::temp_directory_path() /
           ("libnn_test_" + std::to_string(getpid()) + "_" + std::to_string(n++));
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path / name).string(); }
  std::vector<std::string> names() const {  // the files in it, sorted
    std::vector<std::string> out;
    for (auto& e : std::filesystem::directory_iterator(path)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
};

// Runs f with files limited to `bytes` (a write past it fails with EFBIG, as on a full disk;
// SIGXFSZ ignored meanwhile), then lifts the limit.
template <typename F>
void with_file_size_limit(rlim_t bytes, F&& f) {
  struct rlimit old {};
  getrlimit(RLIMIT_FSIZE, &old);
  auto old_handler = signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old;
  small.rlim_cur = bytes;
  setrlimit(RLIMIT_FSIZE, &small);
  f();
  setrlimit(RLIMIT_FSIZE, &old);
  signal(SIGXFSZ, old_handler);
}

// The profiler on device d over `steps` steps of two primitives each (a product and a scaling):
// each call counted once, with a time; and reset() drops calls whose times are not read yet.
inline void check_profiler(const nn::Device& d, int steps) {
  nn::profiler::reset();
  Tensor a = nn::ones({32, 32}, nn::TensorOptions(nn::kF32).device(d));
  nn::profiler::enable(true);
  for (int i = 0; i < steps; ++i) a = nn::matmul(a, a) * (1.0 / 32);
  nn::profiler::enable(false);
  REQUIRE(a.cpu().data<float>()[0] == 1.0f);
  int found = 0;
  for (const auto& e : nn::profiler::entries()) {
    INFO(e.name);
    if (e.name != "gemm" && e.name != "unary.mul_scalar") continue;
    ++found;
    REQUIRE(e.calls == steps);
    REQUIRE(e.seconds > 0);
  }
  REQUIRE(found == 2);
  nn::profiler::enable(true);
  a = nn::matmul(a, a);
  nn::profiler::enable(false);
  nn::profiler::reset();
  REQUIRE(nn::profiler::entries().empty());
}

// t in the channels-last (NHWC) memory format.
inline Tensor channels_last(const Tensor& t) {
  return t.contiguous(nn::MemoryFormat::channels_last);
}

// Convolution and pooling parameters, (height, width) each.
using Pair = std::array<int64_t, 2>;
inline nn::Conv2dParams conv_params(Pair stride, Pair padding, Pair dilation = {1, 1},
                                    int64_t groups = 1) {
  nn::Conv2dParams c;
  c.stride = stride;
  c.padding = padding;
  c.dilation = dilation;
  c.groups = groups;
  return c;
}
inline nn::Pool2dParams pool_params(Pair kernel, Pair stride, Pair padding, Pair dilation = {1, 1},
                                    bool count_include_pad = true) {
  nn::Pool2dParams q;
  q.kernel = kernel;
  q.stride = stride;
  q.padding = padding;
  q.dilation = dilation;
  q.count_include_pad = count_include_pad;
  return q;
}

// The first element of g farther from w's than atol + rtol * |w| where w is finite, unequal
// where w is an infinity (its tolerance, rtol * inf, would pass any value), not NaN where w
// is NaN; -1 when there is none.
inline int64_t first_far(const std::vector<double>& g, const std::vector<double>& w,
                         double rtol, double atol) {
  for (size_t i = 0; i < g.size(); ++i) {
    bool ok = g[i] == w[i] ||  // equal infinities too
              (std::isfinite(w[i]) && std::abs(g[i] - w[i]) <= atol + rtol * std::abs(w[i])) ||
              (std::isnan(g[i]) && std::isnan(w[i]));
    if (!ok) return int64_t(i);
  }
  return -1;
}

// Every element close to the expected one, as first_far judges; on failure names the first
// bad element.
inline void require_close(const Tensor& got, const Tensor& want, double rtol = 1e-5,
                          double atol = 1e-6) {
  INFO("shapes " << nn::shape_str(got.shape()) << " vs " << nn::shape_str(want.shape()));
  REQUIRE(got.shape() == want.shape());
  auto g = got.to_vector<double>();
  auto w = want.to_vector<double>();
  if (const int64_t i = first_far(g, w, rtol, atol); i >= 0) {
    INFO("element " << i << ": got " << g[i] << ", expected " << w[i]);
    REQUIRE(i == -1);
  }
}

// The same dtype, shape and values bit for bit, compared as f32 (which tells -0 from +0 and
// NaN payloads apart): for 16-bit results that must equal a reference rounded once.
inline void require_same(const Tensor& got, const Tensor& want) {
  REQUIRE(got.dtype() == want.dtype());
  REQUIRE(got.shape() == want.shape());
  const auto g = got.to_vector<float>(), w = want.to_vector<float>();
  for (size_t i = 0; i < g.size(); ++i) {
    if (nn::float_to_bits(g[i]) == nn::float_to_bits(w[i])) continue;
    INFO("element " << i << ": got " << g[i] << ", expected " << w[i]);
    REQUIRE(nn::float_to_bits(g[i]) == nn::float_to_bits(w[i]));
  }
}

inline void require_values(const Tensor& got, const std::vector<double>& want,
                           double tol = 1e-6) {
  REQUIRE(got.numel() == int64_t(want.size()));
  require_close(got, nn::tensor(want, got.shape(), nn::kF64), tol, tol);
}

// tests/fixtures, the reference files: LIBNN_FIXTURES_DIR when set (a build carried to
// another machine and tree, as bench/gpu_suite.sh's prebuilt one), else this source tree's.
inline std::string fixtures_dir() {
  const char* d = std::getenv("LIBNN_FIXTURES_DIR");
  return d && *d ? std::string(d) : std::string(LIBNN_FIXTURES);
}

// A reference file of tests/fixtures (safetensors), its tensors by name.
class Fixture {
 public:
  explicit Fixture(const std::string& file) : file_(file) {
    for (auto& [k, t] : nn::io::load_safetensors(fixtures_dir() + "/" + file).tensors) tensors_[k] = t;
  }
  Tensor get(const std::string& name) const {
    auto it = tensors_.find(name);
    if (it == tensors_.end()) FAIL("no '" << name << "' in " << file_);
    return it->second;
  }

 private:
  std::string file_;
  std::map<std::string, Tensor> tensors_;
};

// True when a CUDA device can be used. Otherwise the case's CUDA part is skipped with a
// warning naming why, or fails where LIBNN_REQUIRE_CUDA is set (the GPU suite sets it: on a
// machine with a GPU that libnn cannot use, its driver older than the runtime say, the CUDA
// cases must not pass by skipping).
inline bool have_cuda() {
  if (nn::cuda_available()) return true;
  const std::string why = nn::cuda_unavailable_reason();
  const char* require = std::getenv("LIBNN_REQUIRE_CUDA");
  if (require && *require && std::string(require) != "0")
    FAIL("LIBNN_REQUIRE_CUDA is set, but CUDA cannot be used: " << why);
  WARN("CUDA part skipped: " << why);
  return false;
}

// The CPU, and CUDA when a device is present: for tests that hold on every backend.
inline std::vector<nn::Device> devices() {
  std::vector<nn::Device> d{nn::kCPU};
  if (have_cuda()) d.push_back(nn::kCUDA);
  return d;
}

// f64 CPU input with values in N(0,1) (seeded), requiring grad.
inline Tensor rnd(const Shape& shape, uint64_t seed, bool grad = true) {
  nn::Generator g(seed);
  Tensor t = nn::randn(shape, nn::kF64, &g);
  if (grad) t.requires_grad_(true);
  return t;
}

inline void require_gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                              const std::vector<Tensor>& inputs,
                              nn::GradcheckOptions opts = {}) {
  auto r = nn::gradcheck(fn, inputs, opts);
  INFO(r.message);
  REQUIRE(r.ok);
}

// The message of the nn::Error that `f` throws ("" if it throws none).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const nn::Error& e) {
    return e.what();
  }
  return "";
}

// Requires that `f` throws an nn::Error whose message contains `part`.
template <typename F>
void require_error(const std::string& part, F&& f) {
  const std::string message = error_of(f);
  INFO("message: " << message);
  INFO("expected to contain: " << part);
  REQUIRE(message.find(part) != std::string::npos);
}

}  // namespace test
