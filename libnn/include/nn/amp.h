// Mixed precision: autocast (which op families run in 16 bits) and GradScaler (dynamic loss
// scaling), in the style of torch.autocast and torch.cuda.amp.GradScaler.
//
// Inside an AutocastGuard(kF16) (or kBF16):
//   - matmul, linear, conv2d, conv1d cast f32 inputs to the 16-bit type (tensor cores on the GPU);
//   - softmax, log_softmax, layer_norm, group_norm, cross_entropy, mse_loss, l1_loss,
//     smooth_l1_loss, huber_loss,
//     binary_cross_entropy_with_logits, sum, mean, var, normalize, cosine_similarity, and
//     pow, 1 / x (rdiv), exp, log, log1p, rsqrt, softplus cast 16-bit inputs to f32
//     (accumulation and exp/log in f32; PyTorch's CUDA autocast lists these too);
//   - everything else runs in its inputs' dtype; mixed operands of binary ops promote to the
//     wider type, so a 16-bit branch added to an f32 residual gives f32;
//   - batch_norm and batch_norm_relu take 16-bit data with f32 weights and statistics (a
//     residual of another dtype than the data is added with add's promotion).
// Parameters stay f32 (master weights); their gradients arrive in f32 through the casts.
#pragma once
#include <map>
#include <set>

#include <nn/module.h>
#include <nn/optim.h>
#include <nn/tensor.h>

namespace nn::amp {

class AutocastGuard {
 public:
  explicit AutocastGuard(DType dtype = kF16, bool enabled = true);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool prev_enabled_;
  DType prev_dtype_;
};

bool autocast_enabled();
DType autocast_dtype();
// What the ops call: t in the autocast dtype (for matmul-like ops) or in f32 (for
// precision-sensitive ones) when autocast is on and t is floating; else t itself.
Tensor autocast_lower(const Tensor& t);
// Whether autocast_lower changes t: autocast is on and t is f32, f16 or bf16 of another dtype
// than autocast's (as PyTorch casts every floating tensor but f64: an f16 input in a bf16
// region too); integer and f64 tensors never.
bool autocast_lowers(const Tensor& t);
Tensor autocast_f32(const Tensor& t);

struct GradScalerOptions {
  double init_scale = 65536.0;   // 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;  // clean steps before the scale grows
  bool enabled = true;
};

// One scaler serves any number of optimizers (a GAN's two, say): each optimizer's gradients are
// unscaled and checked once between updates, and each is stepped or skipped on its own finding.
class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions o = {});
  // loss * scale (the loss itself when disabled).
  Tensor scale(const Tensor& loss) const;
  // Divides the optimizer's gradients by the scale and records whether any is inf/NaN
  // (one host sync). Called by step() when not called before for this optimizer since the
  // last update() (e.g. before clipping); a second call for it does nothing.
  void unscale_(optim::Optimizer& opt);
  // Steps the optimizer unless one of its gradients was inf/NaN; returns whether it stepped.
  // Once per optimizer between updates: a second call is an error.
  bool step(optim::Optimizer& opt);
  // After step(): halves the scale if any optimizer's gradients had an inf/NaN, doubles it
  // after growth_interval clean updates in a row (never past FLT_MAX: the loss is scaled in
  // f32).
  void update();
  double get_scale() const { return scale_; }
  int64_t growth_tracker() const { return growth_tracker_; }
  // Whether an optimizer unscaled since the last update() had an inf/NaN gradient.
  bool found_inf() const;
  // For checkpoints: "scale" and "growth_tracker" as f64 scalars.
  NamedTensors state() const;
  void load_state(const NamedTensors& s);
  const GradScalerOptions& options() const { return opts_; }

 private:
  GradScalerOptions opts_;
  double scale_;
  int64_t growth_tracker_ = 0;
  // The optimizers unscaled since the last update(), each with whether it found an inf/NaN.
  std::map<const optim::Optimizer*, bool> found_inf_;
  std::set<const optim::Optimizer*> stepped_;  // step() called since the last update()
};

}  // namespace nn::amp
