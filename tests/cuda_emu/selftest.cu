// The CUDA emulator's own checks: that kernels with barriers and warp shuffles compute on it
// what they compute on a GPU, and that what a GPU leaves to chance or hangs on is caught: a
// missing barrier (a wrong value), threads waiting at different barriers, a deadlock, a lane
// reading outside a collective's mask, __trap(). Plain CUDA, rewritten by rewrite.py and
// built only with -DLIBNN_WITH_CUDA=EMULATOR; scripts/check_cuda_emu.sh runs it in both
// scheduling orders (LIBNN_CUDA_EMU_ORDER).
#include <cuda_runtime.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

constexpr int kThreads = 256;

// y[t] = x[(t + 32) % 256] through shared memory: each thread reads what a thread of another
// warp wrote, so without the barrier one warp reads before the other has written.
__global__ void rotate(const float* x, float* y, bool barrier) {
  __shared__ float s[kThreads];
  const int t = threadIdx.x;
  s[t] = x[t];
  if (barrier) __syncthreads();
  y[t] = s[(t + 32) % kThreads];
}

// The block's sum by a tree in shared memory, one block per 256 elements.
__global__ void block_sum(const float* x, float* out) {
  __shared__ float s[kThreads];
  const int t = threadIdx.x;
  s[t] = x[blockIdx.x * kThreads + t];
  __syncthreads();
  for (int h = kThreads / 2; h > 0; h /= 2) {
    if (t < h) s[t] += s[t + h];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = s[0];
}

// Each warp's sum: by __shfl_down_sync into lane 0, and by __shfl_xor_sync into every lane.
__global__ void warp_sums(const float* x, float* down, float* butterfly) {
  const int t = threadIdx.x;
  float v = x[t], w = x[t];
  for (int o = 16; o > 0; o /= 2) {
    v += __shfl_down_sync(0xffffffffu, v, o);
    w += __shfl_xor_sync(0xffffffffu, w, o);
  }
  if (t % 32 == 0) down[t / 32] = v;
  butterfly[t] = w;
}

__global__ void divergent_barriers() {
  if (threadIdx.x < 32) {
    __syncthreads();
  } else {
    __syncthreads();
  }
}

// Only the even lanes reach a collective that names all 32: they wait for ever.
__global__ void half_warp_collective() {
  if (threadIdx.x % 2 == 0) __syncwarp();
}

// Lanes 0-15 shuffle among themselves, but lanes 8-15 read 8 lanes down, outside the mask.
__global__ void read_outside_mask(float* out) {
  const int t = threadIdx.x;
  if (t < 16) out[t] = __shfl_down_sync(0x0000ffffu, float(t), 8);
}

__global__ void trap_in_one_thread(int* out) {
  if (threadIdx.x == 7) __trap();
  out[threadIdx.x] = 1;
}

namespace {

int failures = 0, checks = 0;
void check(bool ok, const std::string& what) {
  ++checks;
  if (!ok) {
    ++failures;
    std::printf("FAILED: %s\n", what.c_str());
  }
}

template <typename T>
T* device(const std::vector<T>& host) {
  T* p = nullptr;
  if (cudaMalloc(&p, host.size() * sizeof(T)) != cudaSuccess) std::abort();
  if (cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice) != cudaSuccess)
    std::abort();
  return p;
}
template <typename T>
std::vector<T> host(const T* p, size_t n) {
  std::vector<T> v(n);
  if (cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost) != cudaSuccess) std::abort();
  return v;
}

// Runs `launch`; the error it left, and what the emulator said on stderr meanwhile.
struct Outcome {
  cudaError_t error;
  std::string said;
};
Outcome run(const std::function<void()>& launch) {
  std::fflush(stderr);
  const int saved = dup(2);
  FILE* tmp = std::tmpfile();
  if (saved < 0 || !tmp) std::abort();
  dup2(fileno(tmp), 2);
  launch();
  Outcome o{cudaGetLastError(), ""};
  cudaDeviceSynchronize();
  std::fflush(stderr);
  dup2(saved, 2);
  close(saved);
  std::rewind(tmp);
  char buf[512];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, tmp)) > 0;) o.said.append(buf, n);
  std::fclose(tmp);
  return o;
}
void expect_failure(const char* kernel, const Outcome& o, const std::string& message) {
  check(o.error == cudaErrorLaunchFailure,
        std::string(kernel) + ": the launch fails (got " + cudaGetErrorString(o.error) + ")");
  check(o.said.find(message) != std::string::npos,
        std::string(kernel) + ": the emulator says \"" + message + "\" (it said: " + o.said + ")");
}

}  // namespace

int main() {
  const char* order = std::getenv("LIBNN_CUDA_EMU_ORDER");
  std::vector<float> xs(4 * kThreads);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = float(i % 97) - 40.0f;
  float* x = device(xs);
  float* y = device(std::vector<float>(kThreads, 0.0f));

  auto rotated = [&](bool barrier) {
    check(run([&] { rotate<<<1, kThreads>>>(x, y, barrier); }).error == cudaSuccess,
          "rotate runs");
    return host(y, kThreads);
  };
  std::vector<float> r = rotated(true);
  bool right = true;
  for (int t = 0; t < kThreads; ++t) right = right && r[t] == xs[(t + 32) % kThreads];
  check(right, "rotate with its barrier gives every thread another warp's value");
  r = rotated(false);
  int nan = 0;
  for (float v : r) nan += std::isnan(v);
  // each warp reads the next warp's 32 slots. First to last, 7 of the 8 warps read them
  // before that warp wrote them (shared memory starts as NaN bytes); last to first, warp 7
  // reads warp 0's.
  const bool reverse = order && std::string(order) == "reverse";
  const int unwritten = reverse ? 32 : 7 * 32;
  check(nan == unwritten, "rotate without its barrier reads " + std::to_string(unwritten) +
                              " unwritten (NaN) slots, got " + std::to_string(nan));

  float* sums = device(std::vector<float>(4, 0.0f));
  check(run([&] { block_sum<<<4, kThreads>>>(x, sums); }).error == cudaSuccess, "block_sum runs");
  std::vector<float> got = host(sums, 4);
  for (int b = 0; b < 4; ++b) {
    double want = 0;
    for (int i = 0; i < kThreads; ++i) want += xs[size_t(b * kThreads + i)];
    check(got[size_t(b)] == float(want), "block " + std::to_string(b) + " sums to " +
                                             std::to_string(want) + ", got " +
                                             std::to_string(got[size_t(b)]));
  }

  float* down = device(std::vector<float>(kThreads / 32, 0.0f));
  check(run([&] { warp_sums<<<1, kThreads>>>(x, down, y); }).error == cudaSuccess,
        "warp_sums runs");
  std::vector<float> d = host(down, kThreads / 32), butterfly = host(y, kThreads);
  for (int w = 0; w < kThreads / 32; ++w) {
    double want = 0;
    for (int l = 0; l < 32; ++l) want += xs[size_t(w * 32 + l)];
    check(d[size_t(w)] == float(want), "warp " + std::to_string(w) + "'s shuffle-down sum");
    bool all = true;
    for (int l = 0; l < 32; ++l) all = all && butterfly[size_t(w * 32 + l)] == float(want);
    check(all, "warp " + std::to_string(w) + "'s butterfly sum in every lane");
  }

  expect_failure("divergent_barriers", run([] { divergent_barriers<<<1, 64>>>(); }),
                 "threads of a block wait at different __syncthreads");
  expect_failure("half_warp_collective", run([] { half_warp_collective<<<1, 32>>>(); }),
                 "deadlock in block (0, 0, 0)");
  expect_failure("read_outside_mask", run([&] { read_outside_mask<<<1, 32>>>(y); }),
                 "which is not in the mask");
  int* ones = device(std::vector<int>(32, 0));
  expect_failure("trap_in_one_thread", run([&] { trap_in_one_thread<<<1, 32>>>(ones); }),
                 "__trap() called");
  // and the next launch runs as usual
  check(run([&] { block_sum<<<4, kThreads>>>(x, sums); }).error == cudaSuccess,
        "a launch after the failures runs");
  check(host(sums, 4) == got, "and computes what it computed before");

  for (void* p : {static_cast<void*>(x), static_cast<void*>(y), static_cast<void*>(sums),
                  static_cast<void*>(down), static_cast<void*>(ones)})
    cudaFree(p);
  std::printf("cuda_emu_selftest (%s order): %d of %d checks passed\n",
              order ? order : "forward", checks - failures, checks);
  return failures == 0 ? 0 : 1;
}
