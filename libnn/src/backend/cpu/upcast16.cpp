// f16 and bf16 math on the CPU: a Backend that wraps the CPU backend and, when a primitive
// gets 16-bit floating tensors, runs it in f32 on upcast copies and rounds the results back
// (the CUDA kernels likewise compute in f32 and round each result). Generated from the
// Backend interface by listing every primitive; copies, fills and row gathers handle 16-bit
// types natively and pass straight through, and so do the calls the CPU backend computes in
// one pass (CpuBackend::native16: maps, reductions, softmax; bf16 products, attention and batch norm).
#include "backend/cpu/upcast16.h"

#include <algorithm>
#include <initializer_list>

#include "backend/cpu/conv_nhwc.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/gemm.h"
#include "core/util.h"

namespace nn::backend {
namespace {

bool is16(const Tensor& t) {
  return t.defined() && (t.dtype() == DType::f16 || t.dtype() == DType::bf16);
}

class Upcast16Backend final : public Backend {
 public:
  explicit Upcast16Backend(Backend& inner) : inner_(inner) {}

  Device device() const override { return inner_.device(); }
  // 16-bit tensors go through f32 copies of the same layout, so they compute channels-last
  // wherever f32 does (and bf16 convolutions natively, below).
  bool channels_last_native(DType t) const override {
    return ((t == DType::f16 || t == DType::bf16) && inner_.channels_last_native(DType::f32)) ||
           inner_.channels_last_native(t);
  }
  void* allocate(size_t nbytes) override { return inner_.allocate(nbytes); }
  void deallocate(void* p, size_t nbytes) override { return inner_.deallocate(p, nbytes); }
  MemoryStats memory_stats() const override { return inner_.memory_stats(); }
  void empty_cache() override { return inner_.empty_cache(); }
  void reset_peak_memory_stats() override { return inner_.reset_peak_memory_stats(); }
  void synchronize() override { return inner_.synchronize(); }
  void upload(const void* host, Tensor& dst) override { return inner_.upload(host, dst); }
  void download(const Tensor& src, void* host) override { return inner_.download(src, host); }
  void copy(const Tensor& src, Tensor& dst) override { return inner_.copy(src, dst); }
  void fill(Tensor& dst, double value) override { return inner_.fill(dst, value); }
  void fill_random(Tensor& dst, RandomKind kind, double a, double b, uint64_t seed, uint64_t offset) override { return inner_.fill_random(dst, kind, a, b, seed, offset); }
  void unary(UnaryOp op, const Tensor& x, Tensor& out, double a, double b) override {
    if (!(is16(x) || is16(out))) return inner_.unary(op, x, out, a, b);
    if (same16({&x, &out}) && CpuBackend::native16(op, x, out)) return inner_.unary(op, x, out, a, b);
    Tensor x32 = up(x);
    Tensor out32 = up(out);
    inner_.unary(op, x32, out32, a, b);
    down(out32, out);
  }
  void unary_backward(UnaryOp op, const Tensor& grad, const Tensor& x, const Tensor& y, double a,
                      Tensor& grad_x) override {
    if (!(is16(grad) || is16(x) || is16(y) || is16(grad_x))) return inner_.unary_backward(op, grad, x, y, a, grad_x);
    if (same16({&grad, &x, &y, &grad_x}) && CpuBackend::native16(op, x, grad_x) &&
        (op != UnaryOp::gelu || grad.is_contiguous()))
      return inner_.unary_backward(op, grad, x, y, a, grad_x);
    Tensor grad32 = up(grad);
    Tensor x32 = up(x);
    Tensor y32 = up(y);
    Tensor grad_x32 = up(grad_x);
    inner_.unary_backward(op, grad32, x32, y32, a, grad_x32);
    down(grad_x32, grad_x);
  }
  void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) override {
    if (!(is16(a) || is16(b) || is16(out))) return inner_.binary(op, a, b, out);
    if (same16({&a, &b, &out})) return inner_.binary(op, a, b, out);
    Tensor a32 = up(a);
    Tensor b32 = up(b);
    Tensor out32 = up(out);
    inner_.binary(op, a32, b32, out32);
    down(out32, out);
  }
  void where(const Tensor& cond, const Tensor& a, const Tensor& b, Tensor& out) override {
    if (!(is16(cond) || is16(a) || is16(b) || is16(out))) return inner_.where(cond, a, b, out);
    Tensor cond32 = up(cond);
    Tensor a32 = up(a);
    Tensor b32 = up(b);
    Tensor out32 = up(out);
    inner_.where(cond32, a32, b32, out32);
    down(out32, out);
  }
  void reduce(ReduceOp op, const Tensor& x, const Shape& dims, Tensor& out) override {
    if (!(is16(x) || is16(out)) || same16({&x, &out})) return inner_.reduce(op, x, dims, out);
    Tensor x32 = up(x);
    Tensor out32 = up(out);
    inner_.reduce(op, x32, dims, out32);
    down(out32, out);
  }
  void argmax(const Tensor& x, int64_t dim, Tensor& out) override {
    if (!(is16(x) || is16(out))) return inner_.argmax(x, dim, out);
    Tensor x32 = up(x);
    Tensor out32 = up(out);
    inner_.argmax(x32, dim, out32);
    down(out32, out);
  }
  void gemm(const Tensor& a, const Tensor& b, Tensor& out, double alpha, double beta) override {
    if (!(is16(a) || is16(b) || is16(out))) return inner_.gemm(a, b, out, alpha, beta);
    if (native_bf16(a, b, out)) {
      Tensor out32 = f32_result(out, beta != 0);
      inner_.gemm(a, b, out32, alpha, beta);
      down(out32, out);
      return;
    }
    Tensor a32 = up(a);
    Tensor b32 = up(b);
    Tensor out32 = up(out);
    inner_.gemm(a32, b32, out32, alpha, beta);
    down(out32, out);
  }
  void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out, const Conv2dParams& p) override {
    if (!(is16(x) || is16(w) || is16(bias) || is16(out))) return inner_.conv2d_forward(x, w, bias, out, p);
    if (native_bf16(x, w, out)) {
      // a bf16 result straight from the channels-last bf16 tiles where they do the whole call
      Tensor bias32 = up(bias);
      if (out.dtype() == DType::bf16 && is_channels_last(x) && conv2d_forward_nhwc_bf16(x, w, bias32, out, p))
        return;
      Tensor out32 = f32_result(out, false);
      inner_.conv2d_forward(x, w, bias32, out32, p);
      return down(out32, out);
    }
    Tensor x32 = up(x);
    Tensor w32 = up(w);
    Tensor bias32 = up(bias);
    Tensor out32 = up(out);
    inner_.conv2d_forward(x32, w32, bias32, out32, p);
    down(out32, out);
  }
  void conv2d_backward_input(const Tensor& grad_out, const Tensor& w, Tensor& grad_x, const Conv2dParams& p) override {
    if (!(is16(grad_out) || is16(w) || is16(grad_x))) return inner_.conv2d_backward_input(grad_out, w, grad_x, p);
    if (native_bf16(grad_out, w, grad_x)) {
      if (grad_x.dtype() == DType::bf16 && is_channels_last(grad_x) &&
          conv2d_backward_input_nhwc_bf16(grad_out, w, grad_x, p))
        return;
      Tensor grad_x32 = f32_result(grad_x, false);
      inner_.conv2d_backward_input(grad_out, w, grad_x32, p);
      return down(grad_x32, grad_x);
    }
    Tensor grad_out32 = up(grad_out);
    Tensor w32 = up(w);
    Tensor grad_x32 = up(grad_x);
    inner_.conv2d_backward_input(grad_out32, w32, grad_x32, p);
    down(grad_x32, grad_x);
  }
  void conv2d_backward_weight(const Tensor& grad_out, const Tensor& x, Tensor& grad_w, const Conv2dParams& p) override {
    if (!(is16(grad_out) || is16(x) || is16(grad_w))) return inner_.conv2d_backward_weight(grad_out, x, grad_w, p);
    if (native_bf16(grad_out, x, grad_w)) {
      Tensor grad_w32 = f32_result(grad_w, false);
      inner_.conv2d_backward_weight(grad_out, x, grad_w32, p);
      return down(grad_w32, grad_w);
    }
    Tensor grad_out32 = up(grad_out);
    Tensor x32 = up(x);
    Tensor grad_w32 = up(grad_w);
    inner_.conv2d_backward_weight(grad_out32, x32, grad_w32, p);
    down(grad_w32, grad_w);
  }
  void max_pool2d_forward(const Tensor& x, Tensor& out, Tensor& indices, const Pool2dParams& p) override {
    if (!(is16(x) || is16(out) || is16(indices))) return inner_.max_pool2d_forward(x, out, indices, p);
    Tensor x32 = up(x);
    Tensor out32 = up(out);
    Tensor indices32 = up(indices);
    inner_.max_pool2d_forward(x32, out32, indices32, p);
    down(out32, out);
    down(indices32, indices);
  }
  void max_pool2d_backward(const Tensor& grad_out, const Tensor& indices, Tensor& grad_x, const Pool2dParams& p) override {
    if (!(is16(grad_out) || is16(indices) || is16(grad_x))) return inner_.max_pool2d_backward(grad_out, indices, grad_x, p);
    Tensor grad_out32 = up(grad_out);
    Tensor indices32 = up(indices);
    Tensor grad_x32 = up(grad_x);
    inner_.max_pool2d_backward(grad_out32, indices32, grad_x32, p);
    down(grad_x32, grad_x);
  }
  void avg_pool2d_forward(const Tensor& x, Tensor& out, const Pool2dParams& p) override {
    if (!(is16(x) || is16(out))) return inner_.avg_pool2d_forward(x, out, p);
    Tensor x32 = up(x);
    Tensor out32 = up(out);
    inner_.avg_pool2d_forward(x32, out32, p);
    down(out32, out);
  }
  void avg_pool2d_backward(const Tensor& grad_out, Tensor& grad_x, const Pool2dParams& p) override {
    if (!(is16(grad_out) || is16(grad_x))) return inner_.avg_pool2d_backward(grad_out, grad_x, p);
    Tensor grad_out32 = up(grad_out);
    Tensor grad_x32 = up(grad_x);
    inner_.avg_pool2d_backward(grad_out32, grad_x32, p);
    down(grad_x32, grad_x);
  }
  void adaptive_avg_pool2d_forward(const Tensor& x, Tensor& out) override {
    if (!(is16(x) || is16(out))) return inner_.adaptive_avg_pool2d_forward(x, out);
    Tensor x32 = up(x);
    Tensor out32 = up(out);
    inner_.adaptive_avg_pool2d_forward(x32, out32);
    down(out32, out);
  }
  void adaptive_avg_pool2d_backward(const Tensor& grad_out, Tensor& grad_x) override {
    if (!(is16(grad_out) || is16(grad_x))) return inner_.adaptive_avg_pool2d_backward(grad_out, grad_x);
    Tensor grad_out32 = up(grad_out);
    Tensor grad_x32 = up(grad_x);
    inner_.adaptive_avg_pool2d_backward(grad_out32, grad_x32);
    down(grad_x32, grad_x);
  }
  void softmax_forward(const Tensor& x, int64_t dim, bool log, Tensor& out) override {
    if (!(is16(x) || is16(out)) || (same16({&x, &out}) && CpuBackend::native16_softmax(x, dim)))
      return inner_.softmax_forward(x, dim, log, out);
    Tensor x32 = up(x);
    Tensor out32 = up(out);
    inner_.softmax_forward(x32, dim, log, out32);
    down(out32, out);
  }
  void softmax_backward(const Tensor& grad, const Tensor& y, int64_t dim, bool log, Tensor& grad_x) override {
    if (!(is16(grad) || is16(y) || is16(grad_x)) ||
        (same16({&grad, &y, &grad_x}) && CpuBackend::native16_softmax(y, dim)))
      return inner_.softmax_backward(grad, y, dim, log, grad_x);
    Tensor grad32 = up(grad);
    Tensor y32 = up(y);
    Tensor grad_x32 = up(grad_x);
    inner_.softmax_backward(grad32, y32, dim, log, grad_x32);
    down(grad_x32, grad_x);
  }
  void cross_entropy_forward(const Tensor& logits, const Tensor& target, double smoothing, int64_t ignore_index, Tensor& loss, Tensor& lse) override {
    if (!(is16(logits) || is16(target) || is16(loss) || is16(lse))) return inner_.cross_entropy_forward(logits, target, smoothing, ignore_index, loss, lse);
    Tensor logits32 = up(logits);
    Tensor target32 = up(target);
    Tensor loss32 = up(loss);
    Tensor lse32 = up(lse);
    inner_.cross_entropy_forward(logits32, target32, smoothing, ignore_index, loss32, lse32);
    down(loss32, loss);
    down(lse32, lse);
  }
  void cross_entropy_backward(const Tensor& grad_loss, const Tensor& logits, const Tensor& target, const Tensor& lse, double smoothing, int64_t ignore_index, Tensor& grad_logits) override {
    if (!(is16(grad_loss) || is16(logits) || is16(target) || is16(lse) || is16(grad_logits))) return inner_.cross_entropy_backward(grad_loss, logits, target, lse, smoothing, ignore_index, grad_logits);
    Tensor grad_loss32 = up(grad_loss);
    Tensor logits32 = up(logits);
    Tensor target32 = up(target);
    Tensor lse32 = up(lse);
    Tensor grad_logits32 = up(grad_logits);
    inner_.cross_entropy_backward(grad_loss32, logits32, target32, lse32, smoothing, ignore_index, grad_logits32);
    down(grad_logits32, grad_logits);
  }
  void dropout_forward(const Tensor& x, double p, uint64_t seed, uint64_t offset, Tensor& out, Tensor& mask) override {
    if (!(is16(x) || is16(out) || is16(mask)) || same16({&x, &out}))
      return inner_.dropout_forward(x, p, seed, offset, out, mask);
    Tensor x32 = up(x);
    Tensor out32 = up(out);
    Tensor mask32 = up(mask);
    inner_.dropout_forward(x32, p, seed, offset, out32, mask32);
    down(out32, out);
    down(mask32, mask);
  }
  void dropout_backward(const Tensor& grad, const Tensor& mask, double p, Tensor& grad_x) override {
    if (!(is16(grad) || is16(mask) || is16(grad_x)) || same16({&grad, &grad_x}))
      return inner_.dropout_backward(grad, mask, p, grad_x);
    Tensor grad32 = up(grad);
    Tensor mask32 = up(mask);
    Tensor grad_x32 = up(grad_x);
    inner_.dropout_backward(grad32, mask32, p, grad_x32);
    down(grad_x32, grad_x);
  }
  void batch_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& running_mean, Tensor& running_var, bool training, double momentum, double eps, Tensor& out, Tensor& save_mean, Tensor& save_invstd) override {
    if (!(is16(x) || is16(weight) || is16(bias) || is16(running_mean) || is16(running_var) || is16(out) || is16(save_mean) || is16(save_invstd))) return inner_.batch_norm_forward(x, weight, bias, running_mean, running_var, training, momentum, eps, out, save_mean, save_invstd);
    // bf16 activations with f32 parameters and statistics (autocast's mix): natively
    if (all_bf16({&x, &out}) && all_f32({&weight, &bias, &running_mean, &running_var, &save_mean, &save_invstd}))
      return inner_.batch_norm_forward(x, weight, bias, running_mean, running_var, training, momentum, eps, out, save_mean, save_invstd);
    Tensor x32 = up(x);
    Tensor weight32 = up(weight);
    Tensor bias32 = up(bias);
    Tensor running_mean32 = up(running_mean);
    Tensor running_var32 = up(running_var);
    Tensor out32 = up(out);
    Tensor save_mean32 = up(save_mean);
    Tensor save_invstd32 = up(save_invstd);
    inner_.batch_norm_forward(x32, weight32, bias32, running_mean32, running_var32, training, momentum, eps, out32, save_mean32, save_invstd32);
    down(running_mean32, running_mean);
    down(running_var32, running_var);
    down(out32, out);
    down(save_mean32, save_mean);
    down(save_invstd32, save_invstd);
  }
  void batch_norm_backward(const Tensor& grad, const Tensor& x, const Tensor& weight, const Tensor& save_mean, const Tensor& save_invstd, bool training, Tensor& grad_x, Tensor& grad_weight, Tensor& grad_bias) override {
    if (!(is16(grad) || is16(x) || is16(weight) || is16(save_mean) || is16(save_invstd) || is16(grad_x) || is16(grad_weight) || is16(grad_bias))) return inner_.batch_norm_backward(grad, x, weight, save_mean, save_invstd, training, grad_x, grad_weight, grad_bias);
    if (all_bf16({&grad, &x, &grad_x}) && all_f32({&weight, &save_mean, &save_invstd, &grad_weight, &grad_bias}))
      return inner_.batch_norm_backward(grad, x, weight, save_mean, save_invstd, training, grad_x, grad_weight, grad_bias);
    Tensor grad32 = up(grad);
    Tensor x32 = up(x);
    Tensor weight32 = up(weight);
    Tensor save_mean32 = up(save_mean);
    Tensor save_invstd32 = up(save_invstd);
    Tensor grad_x32 = up(grad_x);
    Tensor grad_weight32 = up(grad_weight);
    Tensor grad_bias32 = up(grad_bias);
    inner_.batch_norm_backward(grad32, x32, weight32, save_mean32, save_invstd32, training, grad_x32, grad_weight32, grad_bias32);
    down(grad_x32, grad_x);
    down(grad_weight32, grad_weight);
    down(grad_bias32, grad_bias);
  }
  void batch_norm_relu_forward(const Tensor& x, const Tensor& z, const Tensor& weight, const Tensor& bias, Tensor& running_mean, Tensor& running_var, bool training, double momentum, double eps, Tensor& out, Tensor& save_mean, Tensor& save_invstd, Tensor& reserve) override {
    if (!(is16(x) || is16(z) || is16(weight) || is16(bias) || is16(running_mean) || is16(running_var) || is16(out) || is16(save_mean) || is16(save_invstd)) ||
        (all_bf16({&x, &z, &out}) && all_f32({&weight, &bias, &running_mean, &running_var, &save_mean, &save_invstd})))
      return inner_.batch_norm_relu_forward(x, z, weight, bias, running_mean, running_var, training, momentum, eps, out, save_mean, save_invstd, reserve);
    Tensor x32 = up(x);
    Tensor z32 = up(z);
    Tensor weight32 = up(weight);
    Tensor bias32 = up(bias);
    Tensor running_mean32 = up(running_mean);
    Tensor running_var32 = up(running_var);
    Tensor out32 = up(out);
    Tensor save_mean32 = up(save_mean);
    Tensor save_invstd32 = up(save_invstd);
    inner_.batch_norm_relu_forward(x32, z32, weight32, bias32, running_mean32, running_var32, training, momentum, eps, out32, save_mean32, save_invstd32, reserve);
    down(running_mean32, running_mean);
    down(running_var32, running_var);
    down(out32, out);
    down(save_mean32, save_mean);
    down(save_invstd32, save_invstd);
  }
  void batch_norm_relu_backward(const Tensor& grad, const Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& save_mean, const Tensor& save_invstd, const Tensor& reserve, bool training, double eps, Tensor& grad_x, Tensor& grad_z, Tensor& grad_weight, Tensor& grad_bias) override {
    if (!(is16(grad) || is16(out) || is16(x) || is16(weight) || is16(bias) || is16(save_mean) || is16(save_invstd) || is16(grad_x) || is16(grad_z) || is16(grad_weight) || is16(grad_bias)) ||
        (all_bf16({&grad, &out, &x, &grad_x, &grad_z}) && all_f32({&weight, &bias, &save_mean, &save_invstd, &grad_weight, &grad_bias})))
      return inner_.batch_norm_relu_backward(grad, out, x, weight, bias, save_mean, save_invstd, reserve, training, eps, grad_x, grad_z, grad_weight, grad_bias);
    Tensor grad32 = up(grad);
    Tensor out32 = up(out);
    Tensor x32 = up(x);
    Tensor weight32 = up(weight);
    Tensor bias32 = up(bias);
    Tensor save_mean32 = up(save_mean);
    Tensor save_invstd32 = up(save_invstd);
    Tensor grad_x32 = up(grad_x);
    Tensor grad_z32 = up(grad_z);
    Tensor grad_weight32 = up(grad_weight);
    Tensor grad_bias32 = up(grad_bias);
    inner_.batch_norm_relu_backward(grad32, out32, x32, weight32, bias32, save_mean32, save_invstd32, reserve, training, eps, grad_x32, grad_z32, grad_weight32, grad_bias32);
    down(grad_x32, grad_x);
    down(grad_z32, grad_z);
    down(grad_weight32, grad_weight);
    down(grad_bias32, grad_bias);
  }
  void layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, Tensor& out, Tensor& mean, Tensor& rstd) override {
    // 16-bit rows with parameters of their type run natively, their statistics in f32
    if (!(is16(x) || is16(weight) || is16(bias) || is16(out) || is16(mean) || is16(rstd)) ||
        (same16({&x, &weight, &bias, &out}) && all_f32({&mean, &rstd})))
      return inner_.layer_norm_forward(x, weight, bias, eps, out, mean, rstd);
    Tensor x32 = up(x);
    Tensor weight32 = up(weight);
    Tensor bias32 = up(bias);
    Tensor out32 = up(out);
    Tensor mean32 = up(mean);
    Tensor rstd32 = up(rstd);
    inner_.layer_norm_forward(x32, weight32, bias32, eps, out32, mean32, rstd32);
    down(out32, out);
    down(mean32, mean);
    down(rstd32, rstd);
  }
  void layer_norm_backward(const Tensor& grad, const Tensor& x, const Tensor& weight, const Tensor& mean, const Tensor& rstd, Tensor& grad_x, Tensor& grad_weight, Tensor& grad_bias) override {
    if (!(is16(grad) || is16(x) || is16(weight) || is16(mean) || is16(rstd) || is16(grad_x) || is16(grad_weight) || is16(grad_bias)) ||
        (same16({&grad, &x, &weight, &grad_x, &grad_weight, &grad_bias}) && all_f32({&mean, &rstd})))
      return inner_.layer_norm_backward(grad, x, weight, mean, rstd, grad_x, grad_weight, grad_bias);
    Tensor grad32 = up(grad);
    Tensor x32 = up(x);
    Tensor weight32 = up(weight);
    Tensor mean32 = up(mean);
    Tensor rstd32 = up(rstd);
    Tensor grad_x32 = up(grad_x);
    Tensor grad_weight32 = up(grad_weight);
    Tensor grad_bias32 = up(grad_bias);
    inner_.layer_norm_backward(grad32, x32, weight32, mean32, rstd32, grad_x32, grad_weight32, grad_bias32);
    down(grad_x32, grad_x);
    down(grad_weight32, grad_weight);
    down(grad_bias32, grad_bias);
  }
  void gather_rows(const Tensor& src, const Tensor& index, Tensor& out) override { return inner_.gather_rows(src, index, out); }
  void scatter_add_rows(const Tensor& grad, const Tensor& index, int64_t skip_index, Tensor& out) override {
    if (!(is16(grad) || is16(index) || is16(out))) return inner_.scatter_add_rows(grad, index, skip_index, out);
    Tensor grad32 = up(grad);
    Tensor index32 = up(index);
    Tensor out32 = up(out);
    inner_.scatter_add_rows(grad32, index32, skip_index, out32);
    down(out32, out);
  }
  void embedding_bag_forward(const Tensor& table, const Tensor& index, const Tensor& weights,
                             Tensor& out) override {
    if (!(is16(table) || is16(out))) return inner_.embedding_bag_forward(table, index, weights, out);
    Tensor table32 = up(table), out32 = up(out);
    inner_.embedding_bag_forward(table32, index, weights, out32);
    down(out32, out);
  }
  void embedding_bag_backward(const Tensor& grad, const Tensor& index, const Tensor& weights,
                              Tensor& grad_table) override {
    if (!(is16(grad) || is16(grad_table)))
      return inner_.embedding_bag_backward(grad, index, weights, grad_table);
    Tensor grad32 = up(grad), grad_table32 = up(grad_table);
    inner_.embedding_bag_backward(grad32, index, weights, grad_table32);
    down(grad_table32, grad_table);
  }
  void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask,
                         double scale, const rng::DropoutDraw& drop,
                         Tensor& out, Tensor& lse) override {
    if (!(is16(q) || is16(k) || is16(v) || is16(out)) ||
        (all_bf16({&q, &k, &v, &out}) && cpu::bf16_gemm_native()))
      return inner_.attention_forward(q, k, v, key_mask, scale, drop, out, lse);
    Tensor q32 = up_rows(q), k32 = up_rows(k), v32 = up_rows(v), out32 = up_rows(out);
    inner_.attention_forward(q32, k32, v32, key_mask, scale, drop, out32, lse);
    down(out32, out);
  }
  void attention_backward(const Tensor& grad_out, const Tensor& q, const Tensor& k,
                          const Tensor& v, const Tensor& key_mask, const Tensor& out,
                          const Tensor& lse, double scale, const rng::DropoutDraw& drop,
                          Tensor& grad_q, Tensor& grad_k, Tensor& grad_v) override {
    if (!(is16(grad_out) || is16(q) || is16(k) || is16(v)) ||
        (all_bf16({&grad_out, &q, &k, &v, &out, &grad_q, &grad_k, &grad_v}) &&
         cpu::bf16_gemm_native()))
      return inner_.attention_backward(grad_out, q, k, v, key_mask, out, lse, scale, drop, grad_q,
                                       grad_k, grad_v);
    Tensor go32 = up_rows(grad_out), q32 = up_rows(q), k32 = up_rows(k), v32 = up_rows(v),
           o32 = up_rows(out);
    Tensor gq32 = up_rows(grad_q), gk32 = up_rows(grad_k), gv32 = up_rows(grad_v);
    inner_.attention_backward(go32, q32, k32, v32, key_mask, o32, lse, scale, drop, gq32, gk32, gv32);
    down(gq32, grad_q);
    down(gk32, grad_k);
    down(gv32, grad_v);
  }
  // Packed operands are the CPU's f32 ones (16-bit products go through gemm()).
  std::shared_ptr<const PackedOperand> pack_operand(const Tensor& b) override {
    return is16(b) ? nullptr : inner_.pack_operand(b);
  }
  void gemm_packed(const Tensor& a, const Tensor& b, const PackedOperand* packed, Tensor& out,
                   double alpha, double beta) override {
    if (is16(a) || is16(b) || is16(out) || !packed) return gemm(a, b, out, alpha, beta);
    inner_.gemm_packed(a, b, packed, out, alpha, beta);
  }
  // The recurrence's steps compute 16-bit tensors natively (in f32, each result rounded once).
  void recurrent_step_forward(const RecurrentStep& s) override { inner_.recurrent_step_forward(s); }
  void recurrent_step_backward(const RecurrentStepGrad& s) override { inner_.recurrent_step_backward(s); }
  // Optimizer steps keep their parameters' dtype (f32 master weights in mixed precision). A
  // batch of 16-bit parameters (a model cast with .to(kF16)) steps in f32 on widened copies of
  // parameter, gradient and state, each rounded back once.
  void sgd_step(std::vector<SgdSlot>& slots, double momentum, double dampening,
                bool nesterov) override {
    if (slots.empty() || !is16(slots[0].param))
      return inner_.sgd_step(slots, momentum, dampening, nesterov);
    std::vector<SgdSlot> wide = slots;
    for (SgdSlot& s : wide) s.param = up(s.param), s.grad = up(s.grad), s.momentum = up(s.momentum);
    inner_.sgd_step(wide, momentum, dampening, nesterov);
    for (size_t i = 0; i < slots.size(); ++i) {
      down(wide[i].param, slots[i].param);
      if (slots[i].momentum.defined()) down(wide[i].momentum, slots[i].momentum);
    }
  }
  void adamw_step(std::vector<AdamWSlot>& slots, double beta1, double beta2,
                  double eps) override {
    if (slots.empty() || !is16(slots[0].param))
      return inner_.adamw_step(slots, beta1, beta2, eps);
    std::vector<AdamWSlot> wide = slots;
    for (AdamWSlot& s : wide)
      s.param = up(s.param), s.grad = up(s.grad), s.exp_avg = up(s.exp_avg), s.exp_avg_sq = up(s.exp_avg_sq);
    inner_.adamw_step(wide, beta1, beta2, eps);
    for (size_t i = 0; i < slots.size(); ++i) {
      down(wide[i].param, slots[i].param);
      down(wide[i].exp_avg, slots[i].exp_avg);
      down(wide[i].exp_avg_sq, slots[i].exp_avg_sq);
    }
  }
  // These three handle 16-bit tensors themselves (scale_grads checks the rounded values).
  void scale_grads(std::vector<Tensor>& grads, double factor, Tensor& found_inf) override {
    inner_.scale_grads(grads, factor, found_inf);
  }
  void sum_squares(const std::vector<Tensor>& tensors, Tensor& out) override {
    inner_.sum_squares(tensors, out);
  }
  void clip_grads(std::vector<Tensor>& grads, const Tensor& sum_squares, double max_norm) override {
    inner_.clip_grads(grads, sum_squares, max_norm);
  }

 private:
  // Every defined tensor of the list is bf16 (undefined ones, an unused operand, are skipped).
  static bool all_bf16(std::initializer_list<const Tensor*> ts) {
    for (const Tensor* t : ts)
      if (t->defined() && t->dtype() != DType::bf16) return false;
    return true;
  }
  // Every defined tensor of the list has one and the same 16-bit type (f16 or bf16), and one
  // at least is defined.
  static bool same16(std::initializer_list<const Tensor*> ts) {
    const Tensor* const* first =
        std::find_if(ts.begin(), ts.end(), [](const Tensor* x) { return x->defined(); });
    if (first == ts.end() || !is16(**first)) return false;
    for (const Tensor* x : ts)
      if (x->defined() && x->dtype() != (*first)->dtype()) return false;
    return true;
  }
  // Every defined tensor of the list is f32.
  static bool all_f32(std::initializer_list<const Tensor*> ts) {
    for (const Tensor* t : ts)
      if (t->defined() && t->dtype() != DType::f32) return false;
    return true;
  }
  // Products whose two operands are bf16 run natively on CPUs with AVX512_BF16
  // (cpu::gemm_bf16), in either layout: only their result goes through f32.
  static bool native_bf16(const Tensor& a, const Tensor& b, const Tensor& result) {
    const DType r = result.dtype();
    return all_bf16({&a, &b}) && (r == DType::f32 || r == DType::bf16 || r == DType::f16) &&
           cpu::bf16_gemm_native();
  }
  // The f32 tensor a native bf16 product writes: `t` itself when it is f32, else a new one in
  // t's layout, holding t's values when `read` (a product with beta != 0 reads its result).
  Tensor f32_result(const Tensor& t, bool read) {
    if (read || t.dtype() == DType::f32) return up(t);
    return empty(t.shape(), TensorOptions(DType::f32).device(t.device()), format_of(t));
  }
  // An f32 copy of a 16-bit tensor, channels-last where t is (other tensors pass through).
  // (format_of only for a tensor that is there: undefined ones pass through too)
  Tensor up(const Tensor& t) { return is16(t) ? up(t, format_of(t)) : t; }
  Tensor up(const Tensor& t, MemoryFormat f) {
    if (!is16(t)) return t;
    Tensor w = empty(t.shape(), TensorOptions(DType::f32).device(t.device()), f);
    inner_.copy(t, w);
    return w;
  }
  // An attention operand in f32, row-major (its last dim contiguous, as attention needs).
  Tensor up_rows(const Tensor& t) { return up(t, MemoryFormat::contiguous); }
  // Writes the f32 result back into the 16-bit tensor, rounding.
  void down(const Tensor& f32, Tensor& t) {
    if (is16(t)) inner_.copy(f32, t);
  }
  Backend& inner_;
};

}  // namespace

Backend* upcast16(Backend* inner) { return new Upcast16Backend(*inner); }

}  // namespace nn::backend
