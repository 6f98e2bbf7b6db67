// The primitives every device implements. The ops layer allocates outputs (contiguous unless
// said otherwise), checks shapes and dtypes, and calls one of these; a backend only computes.
// Inputs may be strided views (stride 0 where broadcast) unless a primitive says otherwise.
#pragma once
#include <nn/memory.h>
#include <nn/ops.h>
#include <nn/tensor.h>

#include <cstddef>
#include <memory>
#include <vector>

#include "kernels/attention_layout.h"
#include "kernels/ops.h"
#include "kernels/philox.h"
#include "kernels/rnn_cell.h"

namespace nn::backend {

using kernels::BinaryOp;
using kernels::ReduceOp;
using kernels::UnaryOp;
enum class RandomKind { uniform, normal };

using nn::MemoryStats;

// Where the rows of a call's 4-d attention operands lie and which key-mask row each slice
// reads (Backend::attention_forward); zeros for the operands it does not have.
inline kernels::AttnLayout attention_layout(const Tensor& key_mask, const Tensor& q,
                                            const Tensor& k, const Tensor& v, const Tensor& out,
                                            const Tensor& grad_out = {}, const Tensor& grad_q = {},
                                            const Tensor& grad_k = {}, const Tensor& grad_v = {}) {
  auto rows = [](const Tensor& t) {
    return t.defined() ? kernels::AttnRows{t.strides()[0], t.strides()[1], t.strides()[2]}
                       : kernels::AttnRows{};
  };
  const int64_t B = q.shape()[0] * q.shape()[1];
  const int64_t mask_rows = key_mask.defined() ? key_mask.shape()[0] : 0;
  return {q.shape()[1],   rows(q),      rows(k),      rows(v),      rows(out),
          rows(grad_out), rows(grad_q), rows(grad_k), rows(grad_v),
          mask_rows > 0 ? B / mask_rows : 1};
}

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;

  // ---- memory ---------------------------------------------------------------------------
  virtual void* allocate(size_t nbytes) = 0;
  virtual void deallocate(void* p, size_t nbytes) = 0;
  virtual MemoryStats memory_stats() const = 0;
  virtual void empty_cache() = 0;
  virtual void reset_peak_memory_stats() = 0;
  virtual void synchronize() = 0;
  // The profiler's clock, in the order of this device's work. mark() notes the point the work
  // queued so far will have reached (on a GPU an event in the stream: no wait) and returns its
  // handle; elapsed(a, b) is the time in seconds from mark a to mark b, waiting for b; release_marks()
  // frees every handle given out (none may be in use). The default, for devices that compute
  // as they are called, reads the host clock.
  virtual int64_t mark();
  virtual double elapsed(int64_t a, int64_t b);
  virtual void release_marks() {}
  // Host <-> device transfer of a contiguous tensor's bytes.
  virtual void upload(const void* host, Tensor& dst) = 0;
  virtual void download(const Tensor& src, void* host) = 0;

  // ---- elementwise (family: elementwise, cast) ---------------------------------------------
  // Strided copy with dtype conversion; src already broadcast to dst's shape. dst may be a view.
  virtual void copy(const Tensor& src, Tensor& dst) = 0;
  // dst[i] = src[i] for each i (each pair as copy() takes it): several copies in one call,
  // such as concat's parts or a layer's parameters lowered to 16 bits. The default runs
  // copy() for each; CUDA copies the contiguous pairs in one multi-tensor launch per pair of
  // dtypes (one dtype, or f32 to f16/bf16).
  virtual void copy_many(const std::vector<Tensor>& src, std::vector<Tensor>& dst);
  virtual void fill(Tensor& dst, double value) = 0;  // dst may be a view
  virtual void fill_random(Tensor& dst, RandomKind kind, double a, double b, uint64_t seed,
                           uint64_t offset) = 0;    // dst contiguous
  virtual void unary(UnaryOp op, const Tensor& x, Tensor& out, double a, double b) = 0;
  // grad_x = grad * d op(x)/dx, for relu, gelu, tanh, sigmoid, silu, softplus, leaky_relu and
  // elu (y = op(x) is passed for those that use it, a is the op's scalar).
  virtual void unary_backward(UnaryOp op, const Tensor& grad, const Tensor& x, const Tensor& y,
                              double a, Tensor& grad_x) = 0;
  virtual void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) = 0;
  // cond of a's dtype or u8 (the op turns another into u8).
  virtual void where(const Tensor& cond, const Tensor& a, const Tensor& b, Tensor& out) = 0;

  // ---- reduce ---------------------------------------------------------------------------
  // out has x's shape with `dims` (sorted, unique) set to 1.
  virtual void reduce(ReduceOp op, const Tensor& x, const Shape& dims, Tensor& out) = 0;
  virtual void argmax(const Tensor& x, int64_t dim, Tensor& out) = 0;  // out i64, dim size 1

  // ---- matmul ---------------------------------------------------------------------------
  // out (B, M, N) = alpha * a (B, M, K) @ b (B, K, N) + beta * out. a and b may be transposed
  // views or broadcast over B (stride 0); out is contiguous, of a's dtype or, for 16-bit a and
  // b, f32 (sums never rounded to 16 bits: a gradient for an f32 master weight).
  virtual void gemm(const Tensor& a, const Tensor& b, Tensor& out, double alpha, double beta) = 0;
  // out (1, M, N) = a (1, M, K) @ b (1, K, N) + bias (N), broadcast over the rows: Linear's
  // forward. The default copies the bias into every row and runs gemm with beta = 1; CUDA
  // adds it in cuBLASLt's epilogue instead.
  virtual void gemm_bias(const Tensor& a, const Tensor& b, const Tensor& bias, Tensor& out);
  // out (1, M, N) = a (1, M, K) @ b (1, K, N) and grad_bias (M, contiguous, out's dtype) =
  // the sums of a's rows: Linear's weight and bias gradients (a = grad_out^T, b = the input)
  // from one read of the output gradient; out as gemm's. The default runs gemm and a reduction; CUDA computes the sums in
  // cuBLASLt's bias-gradient epilogue.
  virtual void gemm_bias_grad(const Tensor& a, const Tensor& b, Tensor& out, Tensor& grad_bias);
  // A right operand packed once for many products with it (a recurrence's W_hh, multiplied
  // every step): pack_operand(b) is this backend's packed form of b (1, K, N) with its values
  // now, or null where it has none (the default); gemm_packed is gemm with b read from that
  // form (null: gemm itself). b must stay alive and unchanged while its packed form is used.
  struct PackedOperand {
    virtual ~PackedOperand() = default;
  };
  virtual std::shared_ptr<const PackedOperand> pack_operand(const Tensor& b) {
    (void)b;
    return nullptr;
  }
  virtual void gemm_packed(const Tensor& a, const Tensor& b, const PackedOperand* packed,
                           Tensor& out, double alpha, double beta) {
    (void)packed;
    gemm(a, b, out, alpha, beta);
  }

  // ---- conv, pool, batch norm: layouts ------------------------------------------------------
  // 4-d (N, C, H, W) arguments are all row-major, or, on a backend that is
  // channels_last_native() for their dtype, all channels-last: when the input-sized tensor (x,
  // or grad_x where the call has no x) is_channels_last(), every 4-d argument of the call,
  // weight and max-pool indices included, is stored NHWC (whatever strides its size-1 dims
  // have). Elsewhere the ops layer computes on row-major copies.
  virtual bool channels_last_native(DType) const { return false; }

  // ---- conv --------------------------------------------------------------------------------
  virtual void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out,
                              const Conv2dParams& p) = 0;
  virtual void conv2d_backward_input(const Tensor& grad_out, const Tensor& w, Tensor& grad_x,
                                     const Conv2dParams& p) = 0;
  virtual void conv2d_backward_weight(const Tensor& grad_out, const Tensor& x, Tensor& grad_w,
                                      const Conv2dParams& p) = 0;

  // ---- pool (stride already resolved) ------------------------------------------------------
  virtual void max_pool2d_forward(const Tensor& x, Tensor& out, Tensor& indices,
                                  const Pool2dParams& p) = 0;  // indices i64: h * W + w
  virtual void max_pool2d_backward(const Tensor& grad_out, const Tensor& indices,
                                   Tensor& grad_x, const Pool2dParams& p) = 0;
  virtual void avg_pool2d_forward(const Tensor& x, Tensor& out, const Pool2dParams& p) = 0;
  virtual void avg_pool2d_backward(const Tensor& grad_out, Tensor& grad_x,
                                   const Pool2dParams& p) = 0;
  virtual void adaptive_avg_pool2d_forward(const Tensor& x, Tensor& out) = 0;
  virtual void adaptive_avg_pool2d_backward(const Tensor& grad_out, Tensor& grad_x) = 0;

  // ---- softmax (x contiguous, over `dim`) ------------------------------------------------
  virtual void softmax_forward(const Tensor& x, int64_t dim, bool log, Tensor& out) = 0;
  virtual void softmax_backward(const Tensor& grad, const Tensor& y, int64_t dim, bool log,
                                Tensor& grad_x) = 0;

  // ---- loss: cross entropy fused with log_softmax --------------------------------------------
  // logits (N, C) contiguous, target (N) i64. loss (N) per sample (0 where ignored), lse (N)
  // log-sum-exp saved for backward.
  virtual void cross_entropy_forward(const Tensor& logits, const Tensor& target,
                                     double smoothing, int64_t ignore_index, Tensor& loss,
                                     Tensor& lse) = 0;
  // grad_loss (N): d(total)/d(loss_i).
  virtual void cross_entropy_backward(const Tensor& grad_loss, const Tensor& logits,
                                      const Tensor& target, const Tensor& lse, double smoothing,
                                      int64_t ignore_index, Tensor& grad_logits) = 0;

  // ---- dropout (counter-based RNG) -------------------------------------------------------
  virtual void dropout_forward(const Tensor& x, double p, uint64_t seed, uint64_t offset,
                               Tensor& out, Tensor& mask) = 0;  // mask u8
  virtual void dropout_backward(const Tensor& grad, const Tensor& mask, double p,
                                Tensor& grad_x) = 0;

  // ---- norm (x contiguous, or channels-last 4-d as for conv) ----------------------------------
  // x (N, C, S) with S = product of spatial dims. save_mean/save_invstd (C): the statistics
  // used (batch ones in training, running ones in eval). weight/bias may be undefined.
  virtual void batch_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                  Tensor& running_mean, Tensor& running_var, bool training,
                                  double momentum, double eps, Tensor& out, Tensor& save_mean,
                                  Tensor& save_invstd) = 0;
  virtual void batch_norm_backward(const Tensor& grad, const Tensor& x, const Tensor& weight,
                                   const Tensor& save_mean, const Tensor& save_invstd,
                                   bool training, Tensor& grad_x, Tensor& grad_weight,
                                   Tensor& grad_bias) = 0;  // undefined outputs are skipped
  // out = max(batch_norm(x) + z, 0): a ResNet block's batch norm, residual add and ReLU in
  // one call. z is undefined (no residual) or has x's shape, layout and dtype. reserve: what
  // the backend keeps for the backward besides out (cuDNN's fused kernels: their ReLU mask),
  // set by the call or left undefined. The default composes batch_norm_forward, binary and
  // unary; a backend overrides it to save the passes.
  virtual void batch_norm_relu_forward(const Tensor& x, const Tensor& z, const Tensor& weight,
                                       const Tensor& bias, Tensor& running_mean,
                                       Tensor& running_var, bool training, double momentum,
                                       double eps, Tensor& out, Tensor& save_mean,
                                       Tensor& save_invstd, Tensor& reserve);
  // Its backward from out (the forward's result) and reserve: grad where out > 0 is z's
  // gradient (grad_z: defined exactly when the forward had z) and batch norm's output
  // gradient; the rest as batch_norm_backward, eps the forward's.
  virtual void batch_norm_relu_backward(const Tensor& grad, const Tensor& out, const Tensor& x,
                                        const Tensor& weight, const Tensor& bias,
                                        const Tensor& save_mean, const Tensor& save_invstd,
                                        const Tensor& reserve, bool training, double eps, Tensor& grad_x,
                                        Tensor& grad_z, Tensor& grad_weight, Tensor& grad_bias);
  // x (R, D): normalise each row. mean/rstd (R).
  virtual void layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                  double eps, Tensor& out, Tensor& mean, Tensor& rstd) = 0;
  virtual void layer_norm_backward(const Tensor& grad, const Tensor& x, const Tensor& weight,
                                   const Tensor& mean, const Tensor& rstd, Tensor& grad_x,
                                   Tensor& grad_weight, Tensor& grad_bias) = 0;
  // A post-LN transformer's residual step in one call: sum = residual + dropout(x), out =
  // layer_norm(sum), rows of D as layer_norm_forward's. x (R, D) in its own dtype; residual,
  // sum and out (R, D) in the sum's dtype, x's or f32 for 16-bit x; all contiguous. With p > 0
  // mask (R, D) u8 is written and x dropped as dropout_forward drops it (its draws at seed,
  // offset; the kept value rounded to x's dtype before the add, as the two ops would); with
  // p == 0 nothing is dropped and mask is left alone. The default composes dropout_forward,
  // copy, binary and layer_norm_forward; CUDA makes one pass.
  virtual void dropout_add_layer_norm_forward(const Tensor& x, const Tensor& residual, double p,
                                              uint64_t seed, uint64_t offset,
                                              const Tensor& weight, const Tensor& bias,
                                              double eps, Tensor& sum, Tensor& mask, Tensor& out,
                                              Tensor& mean, Tensor& rstd);
  // Its backward: grad_sum = layer norm's input gradient (the residual's gradient, always
  // written), grad_x (x's dtype, undefined: skipped) = grad_sum rounded to x's dtype, then
  // dropout's backward through mask (p > 0); parameter gradients as layer_norm_backward's.
  virtual void dropout_add_layer_norm_backward(const Tensor& grad, const Tensor& sum,
                                               const Tensor& weight, const Tensor& mean,
                                               const Tensor& rstd, const Tensor& mask, double p,
                                               Tensor& grad_sum, Tensor& grad_x,
                                               Tensor& grad_weight, Tensor& grad_bias);

  // ---- embedding (row gather / scatter-add, any dtype) --------------------------------------
  // src (V, D) contiguous, index (M) i64/i32 -> out (M, D). Throws on an index out of range.
  virtual void gather_rows(const Tensor& src, const Tensor& index, Tensor& out) = 0;
  // out (V, D) += grad (M, D) rows at index; rows equal to skip_index are left out (-1: none).
  virtual void scatter_add_rows(const Tensor& grad, const Tensor& index, int64_t skip_index,
                                Tensor& out) = 0;
  // Weighted bags of rows, without the (N, L, D) gathered rows: out (N, D), row n = the sum
  // over l of weights[n, l] * table[index[n, l]]. table (V, D) contiguous, index (N, L)
  // i64/i32 contiguous, weights (N, L) contiguous, f64 for an f64 table, else f32. Entries
  // with weight 0 are left out (a padded token's row, even inf, adds nothing); every index is
  // checked and one out of range throws.
  virtual void embedding_bag_forward(const Tensor& table, const Tensor& index,
                                     const Tensor& weights, Tensor& out) = 0;
  // grad_table (V, D) += weights[n, l] * grad (N, D) row n at row index[n, l], weight-0
  // entries left out.
  virtual void embedding_bag_backward(const Tensor& grad, const Tensor& index,
                                      const Tensor& weights, Tensor& grad_table) = 0;

  // ---- attention: softmax(q k^T * scale, keys masked) v without the (T x S) matrix -------
  // q (N, H, T, D), k (N, H, S, D), v (N, H, S, E), out and grad_out (N, H, T, E), the
  // gradients shaped as q, k, v: each with its last dim contiguous and any strides in the
  // other three (kernels/attention_layout.h), so heads are read and written in place. B = N *
  // H slices, slice b = n * H + h; key_mask (M, S) u8 (nonzero = attend) or undefined,
  // contiguous, M dividing B: slice b takes row b / (B / M) (a sample's row for its heads);
  // lse (B, T) contiguous, the log-sum-exp of each row's scores (f64 for f64 inputs, else
  // f32), saved for backward. A row whose keys are all masked gives zeros. `drop` (when
  // active) drops probability j of row t of slice b as nn::dropout drops element
  // (b * T + t) * S + j of a (B, T, S) tensor, and scales the kept ones; lse stays the
  // statistic of the whole softmax, before dropout.
  virtual void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                 const Tensor& key_mask, double scale, const rng::DropoutDraw& drop,
                                 Tensor& out, Tensor& lse) = 0;
  virtual void attention_backward(const Tensor& grad_out, const Tensor& q, const Tensor& k,
                                  const Tensor& v, const Tensor& key_mask, const Tensor& out,
                                  const Tensor& lse, double scale, const rng::DropoutDraw& drop,
                                  Tensor& grad_q, Tensor& grad_k, Tensor& grad_v) = 0;

  // ---- recurrence: one LSTM, GRU or RNN step past its product with W_hh (ops/rnn.cpp) ----
  // Every tensor of one floating dtype and contiguous, (N, G H) or (N, H) (G =
  // kernels::gates_of(cell): 4 for LSTM's i, f, g, o, 3 for GRU's r, z, n, 1 for RNN's);
  // mask (N) of 0 and 1 or undefined (0: the row is past its sequence's length: it keeps its
  // states and outputs 0). Forward: x the step's input projection, hg = h W_hh^T (without
  // bias), b_hh (G H) or undefined, h and c the states before (c LSTM only); writes the
  // activations (acts: sigmoid of each gate, tanh of LSTM's g and GRU's n; RNN: its new
  // state before masking), aux (LSTM: tanh(c'); GRU: h W_hn^T + b_hn; RNN: none), the output
  // y and the states h_next, c_next. The cells' equations are kernels/rnn_cell.h's.
  struct RecurrentStep {
    kernels::RecurrentCell cell = kernels::RecurrentCell::lstm;
    Tensor x, hg, b_hh, h, c, mask;
    Tensor acts, aux, y, h_next, c_next;
  };
  virtual void recurrent_step_forward(const RecurrentStep& s) = 0;
  // Backward through the same step: gy the output's gradient, dh and dc the gradients into
  // h_next and c_next; acts, aux, h, c, mask as the forward had them. Writes dx (the gates'
  // pre-activation gradients, the input projection's), dhg (GRU: those of h W_hh^T + b_hh;
  // LSTM's and RNN's are dx), dh_prev (h's gradient except through W_hh: the caller adds
  // dhg W_hh) and dc_prev (LSTM). dh_prev and dc_prev may be dh and dc.
  struct RecurrentStepGrad {
    kernels::RecurrentCell cell = kernels::RecurrentCell::lstm;
    Tensor gy, dh, dc, acts, aux, h, c, mask;
    Tensor dx, dhg, dh_prev, dc_prev;
  };
  virtual void recurrent_step_backward(const RecurrentStepGrad& s) = 0;

  // ---- optim: fused multi-tensor update steps, in place ------------------------------------
  // One call updates every slot (all contiguous, one dtype, this device), as PyTorch's SGD,
  // Adam and AdamW define the step; per-slot learning rate and weight decay (parameter groups) and
  // step counts.
  struct SgdSlot {
    Tensor param, grad, momentum;  // momentum undefined when momentum == 0
    double lr = 0, weight_decay = 0;
    bool first_step = false;       // momentum buffer = d on a parameter's first step
  };
  virtual void sgd_step(std::vector<SgdSlot>& slots, double momentum, double dampening,
                        bool nesterov) = 0;
  // Adam's and AdamW's: weight_decay is decoupled (the parameter times 1 - lr weight_decay
  // before the step, AdamW's), l2 coupled (l2 p added to the gradient before the moments,
  // Adam's).
  struct AdamWSlot {
    Tensor param, grad, exp_avg, exp_avg_sq;
    double lr = 0, weight_decay = 0, l2 = 0;
    int64_t step = 1;  // this parameter's step count, for bias correction
  };
  virtual void adamw_step(std::vector<AdamWSlot>& slots, double beta1, double beta2,
                          double eps) = 0;
  // Fused over a list of gradients (contiguous, one dtype, this device), for mixed precision's
  // unscaling and gradient clipping. scale_grads: every tensor times `factor` in place,
  // rounded to its dtype; found_inf (an f32 scalar on this device) is set to 1 when any
  // rounded result is inf or NaN, and left as it was otherwise. sum_squares: the sum of x^2
  // over every element into `out`, an f64 scalar on this device, summed in double whatever
  // the dtype (f32 squares overflow from |x| = 1.8e19, where a diverging run needs clipping).
  // clip_grads: every tensor times kernels::clip_factor(sum_squares, max_norm) in place, the
  // factor computed on this device from `sum_squares` (an f64 scalar there), so the host
  // need not wait for the norm.
  virtual void scale_grads(std::vector<Tensor>& grads, double factor, Tensor& found_inf) = 0;
  virtual void sum_squares(const std::vector<Tensor>& tensors, Tensor& out) = 0;
  virtual void clip_grads(std::vector<Tensor>& grads, const Tensor& sum_squares, double max_norm) = 0;
};

// Backend::where's contract, checked by the backends that read the condition: a condition of
// the values' dtype or u8 (the op turns another into u8).
inline void check_where_condition(const Tensor& cond, const Tensor& a) {
  NN_CHECK(cond.dtype() == a.dtype() || cond.dtype() == DType::u8, "where: a condition of dtype ",
           dtype_name(cond.dtype()), " for values of ", dtype_name(a.dtype()),
           " (the op passes u8 or the values' dtype)");
}

// The backend for a device; throws nn::Error when the device cannot be used.
Backend& get(const Device& d);
inline Backend& of(const Tensor& t) { return get(t.device()); }

using CudaFactory = Backend* (*)(int index);
using CudaCount = int (*)(std::string* why);
using CudaName = std::string (*)(int index);
#ifdef LIBNN_HAVE_CUDA
// Defined by backend/cuda/ when libnn is built with CUDA.
Backend* create_cuda_backend(int index);
// 0 when no device can be used; then `why` (when given) is empty for plain absence (no
// driver, no device) and otherwise names what the runtime reported (a driver older than
// the runtime, ...).
int cuda_device_count_impl(std::string* why);
std::string cuda_device_name_impl(int index);
#endif

}  // namespace nn::backend
