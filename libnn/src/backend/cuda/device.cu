// Device setup, memory, transfers, and the helpers every family file uses.
#include <algorithm>
#include <cstring>

#include "backend/cuda/cuda_backend.h"
#include "core/allocator.h"
#include "core/geometry.h"
#include "core/util.h"
#include "kernels/elementwise.cuh"

namespace nn::backend {

int cuda_device_count_impl(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e == cudaSuccess) return n;
  cudaGetLastError();
  int driver = 0, runtime = 0;
  if (cudaDriverGetVersion(&driver) != cudaSuccess) driver = 0;
  if (cudaRuntimeGetVersion(&runtime) != cudaSuccess) runtime = 0;
  cudaGetLastError();
  const auto version = [](int v) { return detail::cat(v / 1000, ".", v % 1000 / 10); };
  std::string reason;
  // no device, or no driver at all (the runtime then reports an insufficient driver of
  // version 0): none, not an error
  if (e == cudaErrorNoDevice || (e == cudaErrorInsufficientDriver && driver == 0))
    reason.clear();
  else if (e == cudaErrorInsufficientDriver)
    reason = detail::cat("the NVIDIA driver supports CUDA up to ", version(driver),
                         ", older than the CUDA ", version(runtime), " runtime libnn was built "
                         "with: update the driver, or build libnn with a CUDA toolkit it supports");
  else
    reason = detail::cat("the CUDA runtime reported ", cudaGetErrorName(e), " (",
                         cudaGetErrorString(e), ")");
  if (why) *why = reason;
  return 0;
}

std::string cuda_device_name_impl(int index) {
  cudaDeviceProp p;
  NN_CUDA_CHECK(cudaGetDeviceProperties(&p, index));
  return p.name;
}

Backend* create_cuda_backend(int index) { return new CudaBackend(index); }

namespace {
// Makes `dev` current for the allocator's raw calls and restores the caller's device after:
// freeing a cuda:0 tensor in the middle of an op on cuda:1 must leave the thread on cuda:1.
struct OnDevice {
  int prev = -1;
  explicit OnDevice(int dev) {
    if (cudaGetDevice(&prev) != cudaSuccess) prev = -1;
    cudaSetDevice(dev);
  }
  ~OnDevice() {
    if (prev >= 0) cudaSetDevice(prev);
  }
  OnDevice(const OnDevice&) = delete;
  OnDevice& operator=(const OnDevice&) = delete;
};
}  // namespace

void CudaBackend::activate() const { NN_CUDA_CHECK(cudaSetDevice(index_)); }

CudaBackend::CudaBackend(int index) : index_(index) {
  activate();
  NN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  NN_CUBLAS_CHECK(cublasCreate(&cublas_));
  NN_CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
  // 16-bit GEMMs add split-K partial sums in FP32 too, not in their 16-bit output type
  // (cuBLAS's default allows that); no TF32 either (CUBLAS_DEFAULT_MATH underneath).
  NN_CUBLAS_CHECK(cublasSetMathMode(cublas_, CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION));
  NN_CUBLAS_CHECK(cublasLtCreate(&cublas_lt_));
  NN_CUDNN_CHECK(cudnnCreate(&cudnn_));
  NN_CUDNN_CHECK(cudnnSetStream(cudnn_, stream_));
  NN_CUDA_CHECK(cudaMalloc(&flags_, sizeof(int) * kNumFlags));
  // on our stream, then waited for: the legacy default stream does not order a non-blocking
  // stream's kernels after it
  NN_CUDA_CHECK(cudaMemsetAsync(flags_, 0, sizeof(int) * kNumFlags, stream_));
  NN_CUDA_CHECK(cudaStreamSynchronize(stream_));
  NN_CUDA_CHECK(cudaMallocHost(&host_flags_, sizeof(int) * kNumFlags));
  const int dev = index_;
  alloc_ = std::make_unique<CachingAllocator>(
      "cuda:" + std::to_string(index),
      [dev](size_t n) -> void* {
        void* p = nullptr;
        OnDevice on(dev);
        const cudaError_t err = cudaMalloc(&p, n);
        if (err == cudaErrorMemoryAllocation) {
          cudaGetLastError();  // clear the error; the allocator frees its cache and retries
          return nullptr;
        }
        // any other error is an earlier kernel's (a fault is sticky: every later call returns
        // it): named as it is, not as an out-of-memory
        NN_CUDA_CHECK(err);
        return p;
      },
      [dev](void* p) {
        OnDevice on(dev);
        cudaFree(p);
      },
      [dev]() -> std::string {
        size_t free = 0, total = 0;
        OnDevice on(dev);
        if (cudaMemGetInfo(&free, &total) != cudaSuccess) {
          cudaGetLastError();
          return "";
        }
        return format_mib(free) + " free of " + format_mib(total) +
               " on the device (what every process on it has left)";
      });
}

// Backends live until the process exits (tensors may outlive static destructors), so the
// handles are left to the driver's teardown.
CudaBackend::~CudaBackend() = default;

void* CudaBackend::allocate(size_t nbytes) { return alloc_->allocate(nbytes); }
void CudaBackend::deallocate(void* p, size_t nbytes) { alloc_->deallocate(p, nbytes); }
MemoryStats CudaBackend::memory_stats() const { return alloc_->stats(); }
void CudaBackend::reset_peak_memory_stats() { alloc_->reset_peak(); }
void CudaBackend::empty_cache() {
  synchronize();
  alloc_->empty_cache();
}

void CudaBackend::check_flags() {
  NN_CUDA_CHECK(cudaMemcpyAsync(host_flags_, flags_, sizeof(int) * kNumFlags,
                                cudaMemcpyDeviceToHost, stream_));
  NN_CUDA_CHECK(cudaStreamSynchronize(stream_));
  if (host_flags_[kBadIndex] || host_flags_[kBadTarget]) {
    const bool index = host_flags_[kBadIndex];
    NN_CUDA_CHECK(cudaMemsetAsync(flags_, 0, sizeof(int) * kNumFlags, stream_));
    NN_CUDA_CHECK(cudaStreamSynchronize(stream_));
    if (index)
      NN_ERROR("an index out of range was used on cuda:", index_, " (embedding / index_select "
               "since the last synchronisation); results computed since then are invalid");
    NN_ERROR("cross_entropy: a target out of range for the number of classes was used on cuda:",
             index_, " since the last synchronisation; the loss is NaN");
  }
}

// The flags' copy queues behind all the stream's work, so check_flags' one wait covers both.
void CudaBackend::synchronize() {
  activate();
  check_flags();
}

int64_t CudaBackend::mark() {
  activate();
  std::lock_guard<std::mutex> lock(marks_mu_);
  if (marks_used_ == marks_.size()) {
    cudaEvent_t e = nullptr;
    NN_CUDA_CHECK(cudaEventCreate(&e));
    marks_.push_back(e);
  }
  NN_CUDA_CHECK(cudaEventRecord(marks_[marks_used_], stream_));
  return int64_t(marks_used_++);
}

double CudaBackend::elapsed(int64_t a, int64_t b) {
  activate();
  cudaEvent_t ea = nullptr, eb = nullptr;
  {
    std::lock_guard<std::mutex> lock(marks_mu_);
    NN_CHECK(a >= 0 && b >= 0 && size_t(a) < marks_used_ && size_t(b) < marks_used_,
             "elapsed: marks ", a, " and ", b, " were not given out (", marks_used_, " are)");
    ea = marks_[size_t(a)];
    eb = marks_[size_t(b)];
  }
  NN_CUDA_CHECK(cudaEventSynchronize(eb));
  float ms = 0;
  NN_CUDA_CHECK(cudaEventElapsedTime(&ms, ea, eb));
  return double(ms) * 1e-3;
}

void CudaBackend::release_marks() {
  std::lock_guard<std::mutex> lock(marks_mu_);
  marks_used_ = 0;
}

// Uploads go through pinned staging buffers, kStageChunk bytes at a time, so each copy is
// truly asynchronous and the caller's memory is free on return without a stream sync (a
// copy from pageable memory waits for the whole stream first: an ImageNet batch of 256, 154
// MB, stalled every training step that way). The buffers stay for reuse, up to kStagingCap
// bytes in all; past that a chunk waits for a buffer's copy to complete (a data set of
// gigabytes uploaded once), not for the stream.
namespace {
constexpr size_t kStageChunk = size_t(64) << 20, kStagingCap = size_t(512) << 20;
}
void CudaBackend::upload(const void* host, Tensor& dst) {
  activate();
  const size_t n = dst.nbytes();
  const char* src = static_cast<const char*>(host);
  char* out = static_cast<char*>(dst.data_ptr());
  for (size_t off = 0; off < n; off += kStageChunk)
    stage(src + off, out + off, std::min(kStageChunk, n - off));
}

void CudaBackend::stage(const char* host, char* dst, size_t n) {
  std::lock_guard<std::mutex> lock(staging_mu_);
  Staging* slot = nullptr;
  size_t total = 0;
  for (auto& s : staging_) {
    total += s.bytes;
    if (slot || s.bytes < n) continue;
    const cudaError_t q = cudaEventQuery(s.done);
    if (q == cudaSuccess) {
      slot = &s;
      continue;
    }
    if (q != cudaErrorNotReady) NN_CUDA_CHECK(q);  // an earlier kernel's fault, named here
    cudaGetLastError();  // "not ready" is no error: not left for the next launch check
  }
  const size_t bytes = std::max<size_t>(n, 1 << 16);
  if (!slot && total + bytes > kStagingCap) {  // full: the first buffer that fits, once free
    for (auto& s : staging_)
      if (s.bytes >= n) {
        NN_CUDA_CHECK(cudaEventSynchronize(s.done));
        slot = &s;
        break;
      }
  }
  if (!slot) {
    Staging s;
    s.bytes = bytes;
    NN_CUDA_CHECK(cudaMallocHost(&s.host, s.bytes));
    NN_CUDA_CHECK(cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming));
    staging_.push_back(s);
    slot = &staging_.back();
  }
  std::memcpy(slot->host, host, n);
  NN_CUDA_CHECK(cudaMemcpyAsync(dst, slot->host, n, cudaMemcpyHostToDevice, stream_));
  NN_CUDA_CHECK(cudaEventRecord(slot->done, stream_));
}

void CudaBackend::download(const Tensor& src, void* host) {
  activate();
  NN_CUDA_CHECK(cudaMemcpyAsync(host, src.data_ptr(), src.nbytes(), cudaMemcpyDeviceToHost, stream_));
  synchronize();
}

Tensor CudaBackend::scratch(size_t bytes) {
  return empty({int64_t(std::max<size_t>(bytes, 1))}, TensorOptions(kU8).device(device()));
}

namespace cuda {

template <int N>
kernels::Geom<N> geom(const Tensor& out, std::initializer_list<const Tensor*> ins) {
  std::array<const Shape*, N> st;
  st[0] = &out.strides();
  int k = 1;
  for (const Tensor* t : ins) {
    NN_CHECK(k < N, "geom: more than ", N - 1, " inputs");
    st[k++] = &t->strides();
  }
  Geometry<N> g = coalesce<N>(out.shape(), st);
  NN_CHECK(int(g.shape.size()) <= kernels::kMaxDims, "CUDA elementwise ops support up to ",
           kernels::kMaxDims, " non-mergeable dims, got ", g.shape.size());
  kernels::Geom<N> r;
  r.ndim = int(g.shape.size());
  for (int d = 0; d < r.ndim; ++d) {
    r.shape[d] = g.shape[d];
    for (int j = 0; j < N; ++j) r.stride[j][d] = g.strides[j][d];
  }
  return r;
}
template kernels::Geom<1> geom<1>(const Tensor&, std::initializer_list<const Tensor*>);
template kernels::Geom<2> geom<2>(const Tensor&, std::initializer_list<const Tensor*>);
template kernels::Geom<3> geom<3>(const Tensor&, std::initializer_list<const Tensor*>);
template kernels::Geom<4> geom<4>(const Tensor&, std::initializer_list<const Tensor*>);

bool all_contiguous(const Tensor& out, std::initializer_list<const Tensor*> ins) {
  if (!out.is_contiguous()) return false;
  for (const Tensor* t : ins)
    if (!t->is_contiguous() || t->shape() != out.shape()) return false;
  return true;
}

Tensor as_i64(CudaBackend& be, const Tensor& idx) {
  if (idx.dtype() == kI64 && idx.is_contiguous()) return idx;
  Tensor out = empty(idx.shape(), TensorOptions(kI64).device(be.device()));
  be.copy(idx, out);
  return out;
}

Tensor as_dtype(Backend& be, const Tensor& t, DType to) {
  if (!t.defined() || t.dtype() == to) return t;
  Tensor c = empty(t.shape(), t.options().dtype(to), format_of(t));
  be.copy(t, c);
  return c;
}

void write_back(Backend& be, const Tensor& result, Tensor& dst) {
  if (dst.defined() && !result.is_same(dst)) be.copy(result, dst);
}

}  // namespace cuda
}  // namespace nn::backend
