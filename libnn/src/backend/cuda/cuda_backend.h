// The CUDA backend: one stream per device, cuBLAS and cuDNN handles on it, memory from the
// caching allocator. Methods are defined in one .cu file per family; the kernels they launch
// live in kernels/.
#pragma once
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "backend/backend.h"
#include "core/env.h"
#include "kernels/common.cuh"

namespace nn {
class CachingAllocator;
}

#define NN_CUBLAS_CHECK(expr)                                                            \
  do {                                                                                   \
    cublasStatus_t nn_st_ = (expr);                                                      \
    if (nn_st_ != CUBLAS_STATUS_SUCCESS)                                                 \
      NN_ERROR("cuBLAS error at ", __FILE__, ":", __LINE__, ": ",                        \
               cublasGetStatusString(nn_st_), " (", #expr, ")");                         \
  } while (0)
#define NN_CUDNN_CHECK(expr)                                                             \
  do {                                                                                   \
    cudnnStatus_t nn_st_ = (expr);                                                       \
    if (nn_st_ != CUDNN_STATUS_SUCCESS)                                                  \
      NN_ERROR("cuDNN error at ", __FILE__, ":", __LINE__, ": ", cudnnGetErrorString(nn_st_), \
               " (", #expr, ")");                                                        \
  } while (0)

namespace nn::backend {

// cuDNN declining a call it could not run for these arguments (NOT_SUPPORTED, its cuDNN 9
// sub-codes, a pointer misaligned for the kernel), as opposed to an error: the caller may
// take another way (the composition of a fused call, the next algorithm of a convolution).
inline bool cudnn_refused(cudnnStatus_t st) {
#ifdef CUDNN_STATUS_CATEGORY
  return CUDNN_STATUS_CATEGORY(st) == CUDNN_STATUS_NOT_SUPPORTED ||
         st == CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER;
#else
  return st == CUDNN_STATUS_NOT_SUPPORTED;
#endif
}

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int index);
  ~CudaBackend() override;
  Device device() const override { return Device(DeviceType::cuda, index_); }

  void* allocate(size_t nbytes) override;
  void deallocate(void* p, size_t nbytes) override;
  MemoryStats memory_stats() const override;
  void empty_cache() override;
  void reset_peak_memory_stats() override;
  void synchronize() override;
  int64_t mark() override;
  double elapsed(int64_t a, int64_t b) override;
  void release_marks() override;
  void upload(const void* host, Tensor& dst) override;
  void download(const Tensor& src, void* host) override;

  void copy(const Tensor& src, Tensor& dst) override;
  void fill(Tensor& dst, double value) override;
  void fill_random(Tensor& dst, RandomKind kind, double a, double b, uint64_t seed,
                   uint64_t offset) override;
  void unary(UnaryOp op, const Tensor& x, Tensor& out, double a, double b) override;
  void unary_backward(UnaryOp op, const Tensor& grad, const Tensor& x, const Tensor& y,
                      double a, Tensor& grad_x) override;
  void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) override;
  void where(const Tensor& cond, const Tensor& a, const Tensor& b, Tensor& out) override;

  void reduce(ReduceOp op, const Tensor& x, const Shape& dims, Tensor& out) override;
  void argmax(const Tensor& x, int64_t dim, Tensor& out) override;

  void gemm(const Tensor& a, const Tensor& b, Tensor& out, double alpha, double beta) override;
  void gemm_bias(const Tensor& a, const Tensor& b, const Tensor& bias, Tensor& out) override;
  void gemm_bias_grad(const Tensor& a, const Tensor& b, Tensor& out, Tensor& grad_bias) override;

  // cuDNN's NHWC convolution and batch norm take no f64: those run on row-major copies.
  bool channels_last_native(DType t) const override { return t != kF64; }
  void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out,
                      const Conv2dParams& p) override;
  void conv2d_backward_input(const Tensor& grad_out, const Tensor& w, Tensor& grad_x,
                             const Conv2dParams& p) override;
  void conv2d_backward_weight(const Tensor& grad_out, const Tensor& x, Tensor& grad_w,
                              const Conv2dParams& p) override;

  void max_pool2d_forward(const Tensor& x, Tensor& out, Tensor& indices,
                          const Pool2dParams& p) override;
  void max_pool2d_backward(const Tensor& grad_out, const Tensor& indices, Tensor& grad_x,
                           const Pool2dParams& p) override;
  void avg_pool2d_forward(const Tensor& x, Tensor& out, const Pool2dParams& p) override;
  void avg_pool2d_backward(const Tensor& grad_out, Tensor& grad_x,
                           const Pool2dParams& p) override;
  void adaptive_avg_pool2d_forward(const Tensor& x, Tensor& out) override;
  void adaptive_avg_pool2d_backward(const Tensor& grad_out, Tensor& grad_x) override;

  void softmax_forward(const Tensor& x, int64_t dim, bool log, Tensor& out) override;
  void softmax_backward(const Tensor& grad, const Tensor& y, int64_t dim, bool log,
                        Tensor& grad_x) override;

  void cross_entropy_forward(const Tensor& logits, const Tensor& target, double smoothing,
                             int64_t ignore_index, Tensor& loss, Tensor& lse) override;
  void cross_entropy_backward(const Tensor& grad_loss, const Tensor& logits,
                              const Tensor& target, const Tensor& lse, double smoothing,
                              int64_t ignore_index, Tensor& grad_logits) override;

  void dropout_forward(const Tensor& x, double p, uint64_t seed, uint64_t offset, Tensor& out,
                       Tensor& mask) override;
  void dropout_backward(const Tensor& grad, const Tensor& mask, double p,
                        Tensor& grad_x) override;

  void batch_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                          Tensor& running_mean, Tensor& running_var, bool training,
                          double momentum, double eps, Tensor& out, Tensor& save_mean,
                          Tensor& save_invstd) override;
  void batch_norm_backward(const Tensor& grad, const Tensor& x, const Tensor& weight,
                           const Tensor& save_mean, const Tensor& save_invstd, bool training,
                           Tensor& grad_x, Tensor& grad_weight, Tensor& grad_bias) override;
  void batch_norm_relu_forward(const Tensor& x, const Tensor& z, const Tensor& weight,
                               const Tensor& bias, Tensor& running_mean, Tensor& running_var,
                               bool training, double momentum, double eps, Tensor& out,
                               Tensor& save_mean, Tensor& save_invstd, Tensor& reserve) override;
  void batch_norm_relu_backward(const Tensor& grad, const Tensor& out, const Tensor& x,
                                const Tensor& weight, const Tensor& bias, const Tensor& save_mean,
                                const Tensor& save_invstd, const Tensor& reserve, bool training,
                                double eps, Tensor& grad_x, Tensor& grad_z, Tensor& grad_weight,
                                Tensor& grad_bias) override;
  void layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                          double eps, Tensor& out, Tensor& mean, Tensor& rstd) override;
  void layer_norm_backward(const Tensor& grad, const Tensor& x, const Tensor& weight,
                           const Tensor& mean, const Tensor& rstd, Tensor& grad_x,
                           Tensor& grad_weight, Tensor& grad_bias) override;
  void dropout_add_layer_norm_forward(const Tensor& x, const Tensor& residual, double p,
                                      uint64_t seed, uint64_t offset, const Tensor& weight,
                                      const Tensor& bias, double eps, Tensor& sum, Tensor& mask,
                                      Tensor& out, Tensor& mean, Tensor& rstd) override;
  void dropout_add_layer_norm_backward(const Tensor& grad, const Tensor& sum,
                                       const Tensor& weight, const Tensor& mean,
                                       const Tensor& rstd, const Tensor& mask, double p,
                                       Tensor& grad_sum, Tensor& grad_x, Tensor& grad_weight,
                                       Tensor& grad_bias) override;

  void copy_many(const std::vector<Tensor>& src, std::vector<Tensor>& dst) override;
  void gather_rows(const Tensor& src, const Tensor& index, Tensor& out) override;
  void scatter_add_rows(const Tensor& grad, const Tensor& index, int64_t skip_index,
                        Tensor& out) override;
  void embedding_bag_forward(const Tensor& table, const Tensor& index, const Tensor& weights,
                             Tensor& out) override;
  void embedding_bag_backward(const Tensor& grad, const Tensor& index, const Tensor& weights,
                              Tensor& grad_table) override;

  void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                         const Tensor& key_mask, double scale, const rng::DropoutDraw& drop,
                         Tensor& out, Tensor& lse) override;
  void attention_backward(const Tensor& grad_out, const Tensor& q, const Tensor& k,
                          const Tensor& v, const Tensor& key_mask, const Tensor& out,
                          const Tensor& lse, double scale, const rng::DropoutDraw& drop,
                          Tensor& grad_q, Tensor& grad_k, Tensor& grad_v) override;

  void recurrent_step_forward(const RecurrentStep& s) override;
  void recurrent_step_backward(const RecurrentStepGrad& s) override;

  void sgd_step(std::vector<SgdSlot>& slots, double momentum, double dampening,
                bool nesterov) override;
  void adamw_step(std::vector<AdamWSlot>& slots, double beta1, double beta2,
                  double eps) override;
  void scale_grads(std::vector<Tensor>& grads, double factor, Tensor& found_inf) override;
  void sum_squares(const std::vector<Tensor>& tensors, Tensor& out) override;
  void clip_grads(std::vector<Tensor>& grads, const Tensor& sum_squares, double max_norm) override;

  // ---- helpers for the family files ----------------------------------------------------
  cudaStream_t stream() const { return stream_; }
  cublasHandle_t cublas() const { return cublas_; }
  cublasLtHandle_t cublas_lt() const { return cublas_lt_; }
  cudnnHandle_t cudnn() const { return cudnn_; }
  // A scratch buffer from the caching allocator; freed (back to the cache) with the tensor.
  Tensor scratch(size_t bytes);
  // Device flags that kernels raise for bad input (an index out of range): checked, and an
  // nn::Error thrown, at the next synchronisation, so no check costs a host sync.
  enum Flag { kBadIndex = 0, kBadTarget = 1, kNumFlags = 2 };
  int* flag(Flag f) const { return flags_ + f; }
  void check_flags();
  // Makes this device current on the calling thread.
  void activate() const;

 private:
  // Linear's GEMMs through cuBLASLt with an epilogue (matmul.cu).
  bool lt_matmul(const Tensor& a, const Tensor& b, Tensor& out, cublasLtEpilogue_t epi, void* bias);

  int index_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  cublasLtHandle_t cublas_lt_ = nullptr;
  cudnnHandle_t cudnn_ = nullptr;
  int* flags_ = nullptr;          // device
  int* host_flags_ = nullptr;     // pinned
  // Pinned staging buffers for uploads, each reusable once its copy has completed; they stop
  // growing at kStagingCap bytes in all (see upload).
  void stage(const char* host, char* dst, size_t n);
  struct Staging {
    void* host = nullptr;
    size_t bytes = 0;
    cudaEvent_t done = nullptr;
  };
  std::vector<Staging> staging_;
  std::mutex staging_mu_;
  // The profiler's marks: events recorded in the stream, reused after release_marks().
  std::vector<cudaEvent_t> marks_;
  size_t marks_used_ = 0;
  std::mutex marks_mu_;
  std::unique_ptr<CachingAllocator> alloc_;
};


namespace cuda {
// Shape and strides of (out, inputs...) for an elementwise launch, dims merged where every
// operand is contiguous across them. Inputs are already broadcast to out's shape.
template <int N>
kernels::Geom<N> geom(const Tensor& out, std::initializer_list<const Tensor*> ins);
// True when every operand is contiguous (the vectorised path applies).
bool all_contiguous(const Tensor& out, std::initializer_list<const Tensor*> ins);
// An i64 copy of an index tensor (i32 indices are widened), contiguous.
Tensor as_i64(CudaBackend& be, const Tensor& idx);
// t itself when undefined or already of dtype `to`, else a copy converted to `to` (in t's
// memory format).
Tensor as_dtype(Backend& be, const Tensor& t, DType to);
// Writes `result` back into `dst` when as_dtype made a copy.
void write_back(Backend& be, const Tensor& result, Tensor& dst);
template <typename T = void>
T* ptr(const Tensor& t) { return static_cast<T*>(t.data_ptr()); }
// ptr, or null for an undefined tensor (the kernels' optional arguments).
template <typename T = void>
T* ptr_or_null(const Tensor& t) { return t.defined() ? ptr<T>(t) : nullptr; }
// The largest power of two up to 256 dividing an address: cuDNN and cuBLASLt choose kernels
// for the buffer alignments they are given or find.
inline uint32_t address_alignment(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t k = 256;
  while (k > 1 && a % k != 0) k /= 2;
  return k;
}
// A path the environment can turn off for comparison or while it is being fixed
// (LIBNN_CUBLASLT=0, LIBNN_CUDNN_BN_FUSED=0, LIBNN_CUDNN_FIND=0, LIBNN_CUDA_LN_FUSED=0).
// Callers read it once a process (static), not per call.
inline bool env_switch_on(const char* name) { return env_switch(name, true); }
// cuDNN takes int dimensions and indexes its kernels in 32 bits: a tensor of 2^31 elements or
// more is refused with a message, never handed over truncated.
inline void check_cudnn_numel(const Shape& s, const char* op) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  NN_CHECK(n < INT32_MAX, op, " on CUDA (cuDNN): a tensor of ", n,
           " elements; at most 2^31 - 1 are supported (split the batch)");
}
}  // namespace cuda

}  // namespace nn::backend
