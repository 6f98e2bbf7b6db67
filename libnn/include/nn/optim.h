// Optimizers (SGD, Adam, AdamW) and learning-rate schedules, with PyTorch's update rules.
#pragma once
#include <nn/module.h>
#include <nn/tensor.h>

#include <optional>
#include <vector>

namespace nn::optim {

// Parameters that share settings. weight_decay, when set, overrides the optimizer's.
// lr_scale, when set, multiplies the optimizer's learning rate for this group (a pretrained
// body below a new head's rate, layer-wise decay): the group steps at lr() * lr_scale, so the
// schedules, which set lr(), move every group alike. A PyTorch group with its own "lr" is
// lr_scale = that lr / the optimizer's.
struct ParamGroup {
  std::vector<Tensor> params;
  std::optional<double> weight_decay;
  std::optional<double> lr_scale;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // Updates every parameter that has a gradient; parameters without one are skipped.
  virtual void step() = 0;
  // Drops the gradients (sets them undefined, as PyTorch's set_to_none=True).
  void zero_grad();
  double lr() const { return lr_; }
  // The rate group g steps at: lr() times its lr_scale.
  double group_lr(size_t g) const;
  // Refuses a learning rate that is negative or not finite, as the constructors do.
  void set_lr(double lr);
  // The lr schedules start from (PyTorch's initial_lr): set by the first LRScheduler made on
  // this optimizer to its lr then, and saved with the state, so a scheduler made after
  // load_state() or a second one starts from the same base, not from a decayed lr.
  std::optional<double> initial_lr() const { return initial_lr_; }
  void set_initial_lr(double lr) { initial_lr_ = lr; }
  int64_t steps() const { return steps_; }
  const std::vector<ParamGroup>& groups() const { return groups_; }
  // Everything step() depends on besides the parameters: buffers per parameter (named
  // "<group>.<index>.<buffer>") and scalars (step count, lr, initial_lr). Checkpoints save
  // this.
  virtual NamedTensors state() const = 0;
  virtual void load_state(const NamedTensors& state) = 0;

 protected:
  Optimizer(std::vector<ParamGroup> groups, double lr);
  // The scalars of state(), and load_state()'s check and read of them (before anything changes;
  // apply_scalars then sets them).
  NamedTensors scalar_entries() const;
  struct Scalars {
    int64_t steps;
    double lr;
    std::optional<double> initial_lr;
  };
  static Scalars read_scalars(const NamedTensors& s);
  void apply_scalars(const Scalars& v);
  std::vector<ParamGroup> groups_;
  double lr_;
  std::optional<double> initial_lr_;
  int64_t steps_ = 0;
};

struct SGDOptions {
  explicit SGDOptions(double lr = 0.01) : lr_(lr) {}
  NN_ARG(double, lr);
  NN_ARG(double, momentum) = 0.0;
  NN_ARG(double, dampening) = 0.0;
  NN_ARG(double, weight_decay) = 0.0;
  NN_ARG(bool, nesterov) = false;
};

class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, const SGDOptions& o);
  SGD(std::vector<ParamGroup> groups, const SGDOptions& o);
  void step() override;
  NamedTensors state() const override;
  void load_state(const NamedTensors& state) override;
  SGDOptions options;

 private:
  std::vector<std::vector<Tensor>> momentum_;  // per group, per parameter (lazy)
};

// What Adam and AdamW share: the moments, per-parameter step counts and their state, and
// PyTorch's update with weight decay either coupled (L2: added to the gradient, so it passes
// through the moments, torch.optim.Adam's) or decoupled (the parameter shrunk by lr * decay
// before the step, torch.optim.AdamW's).
class AdamBase : public Optimizer {
 public:
  void step() override;
  NamedTensors state() const override;
  void load_state(const NamedTensors& state) override;

 protected:
  struct Hyper {
    double beta1, beta2, eps, weight_decay;
    bool decoupled;
  };
  // kind names the optimizer in errors and in its state (a state loads only into its kind).
  AdamBase(std::vector<ParamGroup> groups, const char* kind, double lr, const Hyper& h);
  // The options as they are now (they may be changed between steps, as lr may).
  virtual Hyper hyper() const = 0;

 private:
  const char* kind_;
  std::vector<std::vector<Tensor>> exp_avg_, exp_avg_sq_;
  std::vector<std::vector<int64_t>> param_steps_;
};

struct AdamOptions {
  explicit AdamOptions(double lr = 1e-3) : lr_(lr) {}
  NN_ARG(double, lr);
  NN_ARG(double, beta1) = 0.9;
  NN_ARG(double, beta2) = 0.999;
  NN_ARG(double, eps) = 1e-8;
  NN_ARG(double, weight_decay) = 0;  // L2, through the moments (decoupled: AdamW's)
  NN_ARG(bool, decoupled_weight_decay) = false;
};
// torch.optim.Adam.
class Adam : public AdamBase {
 public:
  Adam(std::vector<Tensor> params, const AdamOptions& o);
  Adam(std::vector<ParamGroup> groups, const AdamOptions& o);
  AdamOptions options;

 protected:
  Hyper hyper() const override;
};

struct AdamWOptions {
  explicit AdamWOptions(double lr = 1e-3) : lr_(lr) {}
  NN_ARG(double, lr);
  NN_ARG(double, beta1) = 0.9;
  NN_ARG(double, beta2) = 0.999;
  NN_ARG(double, eps) = 1e-8;
  NN_ARG(double, weight_decay) = 1e-2;
};
// torch.optim.AdamW.
class AdamW : public AdamBase {
 public:
  AdamW(std::vector<Tensor> params, const AdamWOptions& o);
  AdamW(std::vector<ParamGroup> groups, const AdamWOptions& o);
  AdamWOptions options;

 protected:
  Hyper hyper() const override;
};

// ---- learning-rate schedules: call step() once per optimizer step (or per epoch) --------
class LRScheduler {
 public:
  explicit LRScheduler(Optimizer& opt) : opt_(opt), base_lr_(base_of(opt)) {}
  virtual ~LRScheduler() = default;
  virtual double lr_at(int64_t step) const = 0;
  // Advances one step and sets the optimizer's lr.
  void step() { opt_.set_lr(lr_at(++step_)); }
  int64_t last_step() const { return step_; }
  // Resumes at `step` (after loading a checkpoint) and sets the lr for it.
  void set_step(int64_t step) { step_ = step; opt_.set_lr(lr_at(step_)); }
  double base_lr() const { return base_lr_; }

 protected:
  static double base_of(Optimizer& opt) {
    if (!opt.initial_lr()) opt.set_initial_lr(opt.lr());
    return *opt.initial_lr();
  }
  Optimizer& opt_;
  double base_lr_;
  int64_t step_ = 0;
};

// lr * gamma^(floor(step / step_size))
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& opt, int64_t step_size, double gamma = 0.1);
  double lr_at(int64_t step) const override;

 private:
  int64_t step_size_;
  double gamma_;
};

// Linear warm-up over `warmup` steps (step s < warmup: lr * (s + 1) / (warmup + 1)), then cosine
// decay to min_lr at `total`.
class CosineLR : public LRScheduler {
 public:
  CosineLR(Optimizer& opt, int64_t warmup, int64_t total, double min_lr = 0.0);
  double lr_at(int64_t step) const override;

 private:
  int64_t warmup_, total_;
  double min_lr_;
};

// Linear warm-up as CosineLR's, then linear decay to 0 at `total` (the BERT schedule).
class LinearLR : public LRScheduler {
 public:
  LinearLR(Optimizer& opt, int64_t warmup, int64_t total);
  double lr_at(int64_t step) const override;

 private:
  int64_t warmup_, total_;
};

// Scales gradients so their global L2 norm is at most max_norm (by max_norm / (norm + 1e-6);
// left as they are when the norm is inf or NaN); returns the norm before, read on the host.
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm);
// The same clip, returning the norm as an f64 scalar tensor on the gradients' (first) device
// instead of reading it: on a GPU the host does not wait (PyTorch's clip_grad_norm_).
Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm);

}  // namespace nn::optim
