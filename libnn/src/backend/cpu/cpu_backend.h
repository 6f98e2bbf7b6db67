// The CPU backend: Eigen for dense math, OpenMP for parallel loops. Its methods are defined in
// one file per family (elementwise.cpp, reduce.cpp, matmul.cpp, ...).
#pragma once
#include <memory>

#include "backend/backend.h"

namespace nn {
class CachingAllocator;
}

namespace nn::backend {

class CpuBackend final : public Backend {
 public:
  CpuBackend();
  ~CpuBackend() override;
  Device device() const override { return kCPU; }
  // conv (conv_nhwc.cpp), pool and batch norm compute f32 and f64 in channels-last too
  bool channels_last_native(DType t) const override { return t == DType::f32 || t == DType::f64; }

  void* allocate(size_t nbytes) override;
  void deallocate(void* p, size_t nbytes) override;
  MemoryStats memory_stats() const override;
  void empty_cache() override;
  void reset_peak_memory_stats() override;
  void synchronize() override {}
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
  // f16 and bf16 maps, their fused backwards, reductions and softmax are computed here in one
  // pass when all the call's floating tensors have one 16-bit type: f32 math on each widened
  // element, one rounding per result (the values the widened path gives). The upcast16 layer
  // passes those calls through and widens the rest. GELU is native on dense operands only
  // (its vectorised erf runs on widened blocks); native16 says whether a map call is.
  static bool native16(UnaryOp op, const Tensor& x, const Tensor& out);
  // y = tanh(x) or sigmoid(x) for n values (y not overlapping x), the values of unary():
  // vectorised for f32. For fused kernels (the recurrence's steps).
  static void activate(UnaryOp op, const float* x, float* y, int64_t n);
  static void activate(UnaryOp op, const double* x, double* y, int64_t n);
  // ... and softmax over a dim whose elements are adjacent (the last dim, say).
  static bool native16_softmax(const Tensor& x, int64_t dim);

  void reduce(ReduceOp op, const Tensor& x, const Shape& dims, Tensor& out) override;
  void argmax(const Tensor& x, int64_t dim, Tensor& out) override;

  void gemm(const Tensor& a, const Tensor& b, Tensor& out, double alpha, double beta) override;

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
                                const Tensor& save_invstd, const Tensor& reserve, bool training, double eps,
                                Tensor& grad_x, Tensor& grad_z, Tensor& grad_weight,
                                Tensor& grad_bias) override;
  void layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                          double eps, Tensor& out, Tensor& mean, Tensor& rstd) override;
  void layer_norm_backward(const Tensor& grad, const Tensor& x, const Tensor& weight,
                           const Tensor& mean, const Tensor& rstd, Tensor& grad_x,
                           Tensor& grad_weight, Tensor& grad_bias) override;

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

  std::shared_ptr<const PackedOperand> pack_operand(const Tensor& b) override;
  void gemm_packed(const Tensor& a, const Tensor& b, const PackedOperand* packed, Tensor& out,
                   double alpha, double beta) override;
  void recurrent_step_forward(const RecurrentStep& s) override;
  void recurrent_step_backward(const RecurrentStepGrad& s) override;

  void sgd_step(std::vector<SgdSlot>& slots, double momentum, double dampening,
                bool nesterov) override;
  void adamw_step(std::vector<AdamWSlot>& slots, double beta1, double beta2,
                  double eps) override;
  void scale_grads(std::vector<Tensor>& grads, double factor, Tensor& found_inf) override;
  void sum_squares(const std::vector<Tensor>& tensors, Tensor& out) override;
  void clip_grads(std::vector<Tensor>& grads, const Tensor& sum_squares, double max_norm) override;

 private:
  std::unique_ptr<CachingAllocator> alloc_;
};

// Applies nn::set_num_threads's count to the calling thread's OpenMP setting (a per-thread
// setting), so the count holds on every thread, as libtorch's does; called as CPU work is
// dispatched. Nothing before set_num_threads is called, or inside a parallel region.
void follow_num_threads();

}  // namespace nn::backend
