// The CPU backend's OpenMP loops (white-box): an exception thrown on a worker thread must
// reach the caller, not std::terminate the process (scratch buffers are allocated inside the
// parallel regions, so std::bad_alloc can be thrown there).
#include <omp.h>

#include <atomic>
#include <new>
#include <stdexcept>
#include <thread>

#include "backend/cpu/conv_geom.h"
#include "backend/cpu/parallel.h"
#include "test_util.h"

namespace {
// Runs the test body with two OpenMP threads (and restores the count), so the loops take
// their parallel paths even where OMP_NUM_THREADS=1.
struct TwoThreads {
  int saved = omp_get_max_threads();
  TwoThreads() { omp_set_num_threads(2); }
  ~TwoThreads() { omp_set_num_threads(saved); }
};
}  // namespace

TEST_CASE("an exception on an OpenMP worker thread reaches the caller", "[parallel]") {
  TwoThreads two;
  const int64_t n = 4 * nn::cpu::kGrain;

  SECTION("parallel_for") {
    std::atomic<int> thrower{-1};
    REQUIRE_THROWS_AS(nn::cpu::parallel_for(0, n, nn::cpu::kGrain,
                                            [&](int64_t b, int64_t) {
                                              if (b == 0) return;
                                              thrower = omp_get_thread_num();
                                              throw std::bad_alloc();
                                            }),
                      std::bad_alloc);
    CHECK(thrower.load() == 1);  // it was thrown on the second thread, not the caller's
    // and the loop still works afterwards
    std::atomic<int64_t> total{0};
    nn::cpu::parallel_for(0, n, nn::cpu::kGrain, [&](int64_t b, int64_t e) { total += e - b; });
    CHECK(total.load() == n);
  }
  SECTION("for_row_blocks") {
    const int64_t R = 4096, C = 64;
    REQUIRE(nn::cpu::row_block_slots(R, C) == 2);
    REQUIRE_THROWS_WITH(nn::cpu::for_row_blocks(R, C,
                                                [](int64_t slot, int64_t, int64_t) {
                                                  if (slot == 1) throw std::runtime_error("slot 1");
                                                }),
                        "slot 1");
  }
  SECTION("the convolutions' per-image loop") {
    using nn::backend::conv_detail::for_each_item;
    using nn::backend::conv_detail::kParallelMacs;
    std::atomic<int> threads_seen{0};
    REQUIRE_THROWS_WITH(for_each_item(8, kParallelMacs,
                                      [&](int64_t, int t) {
                                        threads_seen |= 1 << t;
                                        if (t == 1) throw std::runtime_error("thread 1");
                                      }),
                        "thread 1");
    CHECK(threads_seen.load() & 2);
    // a convolution too small to be worth a parallel region runs its items on this thread
    threads_seen = 0;
    for_each_item(8, kParallelMacs / 2, [&](int64_t, int t) { threads_seen |= 1 << t; });
    CHECK(threads_seen.load() == 1);
  }
}

TEST_CASE("libnn called from the caller's own OpenMP threads computes as outside them", "[parallel]") {
  // Research code may run libnn single-threaded inside its own parallel loop: the loops then
  // run inline, and per-thread partial results must not be indexed by the caller's thread
  // number (reductions and layer norm's backward wrote past their partials: a crash).
  using namespace nn;
  const int saved = omp_get_max_threads();
  Tensor x = randn({100000, 2}), y = randn({64, 4096});
  Tensor w = randn({4096}).requires_grad_(), b = randn({4096}).requires_grad_();
  Tensor xin = y.detach().requires_grad_();
  sum(layer_norm(xin, {4096}, w, b) * y).backward();
  const Tensor want_max = amax(x, {0}), want_sum = sum(x, {0}), want_all = sum(y);
  const Tensor want_gw = w.grad().clone(), want_gx = xin.grad().clone();
  omp_set_num_threads(1);  // as nn::set_num_threads(1): libnn's loops inside get one thread
  std::vector<std::string> failures(2);
#pragma omp parallel num_threads(2)
  {
    const int t = omp_get_thread_num();
    try {
      Tensor wt = w.detach().requires_grad_(), bt = b.detach().requires_grad_();
      Tensor xt = y.detach().requires_grad_();
      sum(layer_norm(xt, {4096}, wt, bt) * y).backward();
      // (Catch2's assertions are not for other threads: the differences are checked here)
      auto off = [](const Tensor& a, const Tensor& b) { return amax(abs(a - b)).item(); };
      const double d[5] = {off(amax(x, {0}), want_max), off(sum(x, {0}), want_sum),
                           off(sum(y), want_all), off(wt.grad(), want_gw), off(xt.grad(), want_gx)};
      const double tol[5] = {0, 1e-2, 1e-1, 1e-2, 1e-5};
      for (int i = 0; i < 5; ++i)
        if (!(d[i] <= tol[i]))
          failures[t] += "value " + std::to_string(i) + " off by " + std::to_string(d[i]) + "; ";
    } catch (const std::exception& e) {
      failures[t] = e.what();
    }
  }
  omp_set_num_threads(saved);
  CHECK(failures[0].empty());
  CHECK(failures[1].empty());
}

TEST_CASE("libnn from several std::threads: thread count, default generator, shared leaves", "[parallel]") {
  using namespace nn;
  SECTION("set_num_threads holds on every thread, as libtorch's") {
    const int saved = num_threads();
    set_num_threads(1);
    int seen = 0, reported = 0;
    std::thread worker([&] {
      (void)sum(ones({4}));  // the worker's first op takes the count up
      seen = omp_get_max_threads();
      reported = num_threads();
    });
    worker.join();
    set_num_threads(saved);
    REQUIRE(seen == 1);  // (it was the worker's own default, all cores)
    REQUIRE(reported == 1);
    // counts OpenMP cannot create are refused (100000 crashed in the first parallel region)
    for (int n : {0, kMaxThreads + 1, 100000})
      REQUIRE(test::error_of([&] { set_num_threads(n); }).find("set_num_threads: 1 to 1024") !=
              std::string::npos);
    REQUIRE(num_threads() == saved);
  }
  SECTION("draws from the default generator on two threads get counters of their own") {
    const uint64_t start = default_generator().offset();
    constexpr int kDraws = 20000;
    auto draw = [] {
      for (int i = 0; i < kDraws; ++i) (void)rand({4});  // one Philox counter each
    };
    std::thread a(draw), b(draw);
    a.join();
    b.join();
    REQUIRE(default_generator().offset() - start == 2 * kDraws);  // (lost updates reused counters)
  }
  SECTION("backward passes on two threads that share a leaf both reach its gradient") {
    Tensor w = ones({1 << 20}).requires_grad_();
    for (int round = 0; round < 10; ++round) {
      w.set_grad(zeros({1 << 20}));
      auto pass = [&] { sum(w * 1.0).backward(); };
      std::thread a(pass), b(pass);
      a.join();
      b.join();
      INFO("round " << round);
      REQUIRE(amin(w.grad()).item() == 2.0);
      REQUIRE(amax(w.grad()).item() == 2.0);
    }
  }
}
