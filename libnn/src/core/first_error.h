// The first exception thrown by work running on OpenMP threads, rethrown on the calling thread
// once the parallel region has ended (internal). An exception that leaves an OpenMP region
// calls std::terminate, so every region whose work can throw (std::bad_alloc from a scratch
// buffer, an nn::Error from a callback) runs that work through FirstError::run.
#pragma once
#include <atomic>
#include <exception>
#include <mutex>
#include <utility>

namespace nn {

class FirstError {
 public:
  // Runs f(); an exception is kept (the first one only) instead of propagating.
  template <typename F>
  void run(F&& f) noexcept {
    if (failed_.load(std::memory_order_relaxed)) return;  // the result is lost anyway
    try {
      std::forward<F>(f)();
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!error_) error_ = std::current_exception();
      failed_.store(true, std::memory_order_relaxed);
    }
  }
  // Rethrows the kept exception, if any; call it after the parallel region.
  void rethrow() const {
    if (error_) std::rethrow_exception(error_);
  }

 private:
  std::mutex mu_;
  std::exception_ptr error_;
  std::atomic<bool> failed_{false};
};

}  // namespace nn
