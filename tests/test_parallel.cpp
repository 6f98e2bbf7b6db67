// The CPU backend's OpenMP loops (white-box): an exception thrown on a worker thread must
// reach the caller, not std::terminate the process (scratch buffers are allocated inside the
// parallel regions, so std::bad_alloc can be thrown there).
#include <omp.h>

#include <atomic>
#include <new>
#include <stdexcept>

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
