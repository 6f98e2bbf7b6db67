#include "backend/cpu/cpu_backend.h"

#include <cstdlib>
#include <cstring>

#include "backend/cpu/parallel.h"
#include "backend/cpu/system_memory.h"
#include "core/allocator.h"

namespace nn::cpu {
void unsupported_dtype(const char* op, DType t) {
  NN_ERROR(op, ": not implemented for dtype ", dtype_name(t), " on the CPU",
           (t == DType::f16 || t == DType::bf16)
               ? " (f16/bf16 are storage types on the CPU; convert with .to(nn::kF32))"
               : "");
}
}  // namespace nn::cpu

namespace nn {
void set_num_threads(int n) {
  NN_CHECK(n >= 1, "set_num_threads: need at least one thread, got ", n);
  omp_set_num_threads(n);
}
int num_threads() { return omp_get_max_threads(); }
}  // namespace nn

namespace nn::backend {

namespace {
// Blocks from this size up are checked against the memory the process can still take: a
// request that cannot fit is refused (the allocator then reports it), where the system would
// hand it out and kill the process once its pages are touched. Smaller blocks skip the check
// (it reads a few /proc and cgroup files).
constexpr size_t kCheckedBlock = size_t(32) << 20;

void* cpu_alloc(size_t n) {
  if (n >= kCheckedBlock)
    if (auto room = cpu::memory_room(); room && n > room->bytes) return nullptr;
  return std::aligned_alloc(64, (n + 63) / 64 * 64);
}

std::string cpu_room() {
  auto room = cpu::memory_room();
  if (!room) return "";
  return detail::cat(double(room->bytes) / (1 << 20), " MiB left ", room->where);
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
