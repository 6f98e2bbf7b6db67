#include "backend/cpu/cpu_backend.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "backend/cpu/parallel.h"
#include "backend/cpu/system_memory.h"
#include "core/allocator.h"
#include "core/env.h"

namespace nn::cpu {
void unsupported_dtype(const char* op, DType t) {
  NN_ERROR(op, ": not implemented for dtype ", dtype_name(t), " on the CPU",
           (t == DType::f16 || t == DType::bf16)
               ? " (f16/bf16 are storage types on the CPU; convert with .to(nn::kF32))"
               : "");
}
}  // namespace nn::cpu

namespace nn {
namespace {
std::atomic<int> g_num_threads{0};  // set_num_threads's count; 0 until it is called
}
// An OMP_NUM_THREADS past kMaxThreads is taken down to it, as set_num_threads refuses more
// (OpenMP cannot create tens of thousands: it crashed in its first parallel region): set as
// the process-wide count, which follow_num_threads gives every thread.
[[maybe_unused]] static const bool g_clamped_at_load = [] {
  const int asked = omp_get_max_threads();
  if (asked <= kMaxThreads) return false;
  std::fprintf(stderr, "libnn: OpenMP asks for %d threads (OMP_NUM_THREADS): using %d\n", asked,
               kMaxThreads);
  set_num_threads(kMaxThreads);
  return true;
}();
void set_num_threads(int n) {
  NN_CHECK(n >= 1 && n <= kMaxThreads, "set_num_threads: 1 to ", kMaxThreads, " threads, got ", n);
  g_num_threads.store(n, std::memory_order_relaxed);
  omp_set_num_threads(n);
}
int num_threads() {
  const int n = g_num_threads.load(std::memory_order_relaxed);
  return n > 0 ? n : omp_get_max_threads();
}
}  // namespace nn

namespace nn::backend {
void follow_num_threads() {
  const int n = g_num_threads.load(std::memory_order_relaxed);
  if (n > 0 && !omp_in_parallel() && omp_get_max_threads() != n) omp_set_num_threads(n);
}
}  // namespace nn::backend

namespace nn::backend {

namespace {
// Blocks from this size up are checked against the memory the process can still take: a
// request that cannot fit is refused (the allocator then reports it), where the system would
// hand it out and kill the process once its pages are touched. Smaller blocks skip the check
// (it reads a few /proc and cgroup files). LIBNN_CPU_MEMORY_CHECK=0 turns it off, for a
// system whose free memory the check misjudges.
constexpr size_t kCheckedBlock = size_t(32) << 20;

bool memory_check_on() {
  static const bool on = env_switch("LIBNN_CPU_MEMORY_CHECK", true);
  return on;
}

bool fits(size_t n) {
  auto room = cpu::memory_room();
  return !room || n <= room->bytes;
}

void* cpu_alloc(size_t n) {
  if (n >= kCheckedBlock && memory_check_on() && !fits(n)) {
#ifdef __GLIBC__
    malloc_trim(0);  // freed blocks still held by malloc are room too, once given back
#endif
    if (!fits(n)) return nullptr;
  }
  return std::aligned_alloc(64, (n + 63) / 64 * 64);
}

std::string cpu_room() {
  auto room = cpu::memory_room();
  return room ? format_mib(room->bytes) + " left " + room->where : "";
}
}  // namespace

CpuBackend::CpuBackend()
    : alloc_(std::make_unique<CachingAllocator>("cpu", cpu_alloc, [](void* p) { std::free(p); },
                                                cpu_room)) {}

CpuBackend::~CpuBackend() = default;

void* CpuBackend::allocate(size_t nbytes) { return alloc_->allocate(nbytes); }
void CpuBackend::deallocate(void* p, size_t nbytes) { alloc_->deallocate(p, nbytes); }
MemoryStats CpuBackend::memory_stats() const { return alloc_->stats(); }
void CpuBackend::empty_cache() { alloc_->empty_cache(); }
void CpuBackend::reset_peak_memory_stats() { alloc_->reset_peak(); }

void CpuBackend::upload(const void* host, Tensor& dst) {
  std::memcpy(dst.data_ptr(), host, dst.nbytes());
}
void CpuBackend::download(const Tensor& src, void* host) {
  std::memcpy(host, src.data_ptr(), src.nbytes());
}

}  // namespace nn::backend
