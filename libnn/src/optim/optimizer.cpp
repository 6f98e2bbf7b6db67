// Optimizers: bookkeeping here, the update arithmetic in each backend's optim family.
#include <nn/autograd.h>
#include <nn/ops.h>
#include <nn/optim.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include "backend/backend.h"
#include "core/util.h"
#include "optim/grad_batches.h"

namespace nn::optim {

namespace {
// As PyTorch: a negative decay would grow the weights, a NaN would poison them.
void check_weight_decay(double wd) {
  NN_CHECK(wd >= 0 && std::isfinite(wd), "optimizer: weight decay must be finite and >= 0, got ", wd);
}

std::vector<ParamGroup> one_group(std::vector<Tensor> params) {
  return {ParamGroup{std::move(params), std::nullopt, std::nullopt}};
}
std::string key(size_t g, size_t i, const char* what) {
  return detail::cat(g, ".", i, ".", what);
}
const Tensor* find(const NamedTensors& s, const std::string& name) {
  for (auto& [n, t] : s) if (n == name) return &t;
  return nullptr;
}
Tensor scalar_state(double v) { return full({}, v, kF64); }
// The gradient as the update kernels read it: contiguous, on the parameter's device and dtype.
// Before a step changes anything: each parameter with a gradient still a contiguous tensor of
// its gradient's shape, on its device, where its data was swapped (set_data) since the
// optimizer saw it. The fused updates walk both as flat arrays.
void check_grads(const std::vector<ParamGroup>& groups) {
  for (const ParamGroup& group : groups)
    for (const Tensor& p : group.params) {
      const Tensor& g = p.grad();
      if (!g.defined()) continue;
      NN_CHECK(g.device() == p.device(), "optimizer: gradient on ", g.device().str(),
               " for a parameter on ", p.device().str());
      NN_CHECK(g.shape() == p.shape(), "optimizer: a gradient of shape ", shape_str(g.shape()),
               " for a parameter of shape ", shape_str(p.shape()), " (its data changed shape "
               "after the backward pass?)");
      NN_CHECK(p.is_contiguous(), "optimizer: parameters must be contiguous (one's data became "
               "a non-contiguous tensor: set_data a contiguous one)");
    }
}
Tensor grad_for(const Tensor& p) {
  Tensor g = p.grad();
  if (g.dtype() != p.dtype()) g = g.to(p.dtype());
  return g.contiguous();
}
double read_scalar(const NamedTensors& s, const std::string& name) {
  const Tensor* t = find(s, name);
  NN_CHECK(t, "optimizer state: '", name, "' is missing");
  NN_CHECK(t->numel() == 1, "optimizer state: '", name, "' has shape ", shape_str(t->shape()),
           ", expected one value");
  const double v = t->item();
  NN_CHECK(std::isfinite(v) && v >= 0, "optimizer state: '", name, "' is ", v,
           ", expected a finite value >= 0");
  return v;
}
int64_t read_count(const NamedTensors& s, const std::string& name) {
  const double v = read_scalar(s, name);
  NN_CHECK(is_count(v), "optimizer state: '", name, "' is ", v, ", expected a whole number");
  return int64_t(v);
}

// What state() writes besides the per-parameter buffers: which optimizer, and how many
// groups and parameters, so that load_state refuses another optimizer's state or another
// model's (older files without these are checked by their buffers' names alone).
void describe(NamedTensors& s, const char* kind, const std::vector<ParamGroup>& groups) {
  s.emplace_back(detail::cat("optimizer.", kind), scalar_state(1));
  s.emplace_back("groups", scalar_state(double(groups.size())));
  for (size_t g = 0; g < groups.size(); ++g)
    s.emplace_back(detail::cat(g, ".params"), scalar_state(double(groups[g].params.size())));
}
// Refuses a state that describes another optimizer or other groups, and any name this
// optimizer would not write: `buffers` are its per-parameter names ("momentum", ...).
void check_state(const NamedTensors& s, const char* kind, const std::vector<ParamGroup>& groups,
                 std::initializer_list<const char*> buffers) {
  const std::string mine = detail::cat("optimizer.", kind);
  if (find(s, "groups")) {
    const int64_t n = read_count(s, "groups");
    NN_CHECK(size_t(n) == groups.size(), "optimizer state: saved for ", n,
             " parameter group(s), this optimizer has ", groups.size());
    for (size_t g = 0; g < groups.size(); ++g) {
      const int64_t p = read_count(s, detail::cat(g, ".params"));
      NN_CHECK(size_t(p) == groups[g].params.size(), "optimizer state: group ", g, " was saved "
               "with ", p, " parameter(s), this optimizer's has ", groups[g].params.size());
    }
  }
  for (auto& [name, t] : s) {
    if (name == "steps" || name == "lr" || name == "initial_lr" || name == "groups" || name == mine)
      continue;
    NN_CHECK(name.rfind("optimizer.", 0) != 0, "optimizer state: written by ",
             name.substr(10), ", not ", kind);
    size_t g = 0, i = 0;
    char what[32] = {0};
    int used = 0;
    bool known = false;
    if (std::sscanf(name.c_str(), "%zu.params%n", &g, &used) == 1 && size_t(used) == name.size())
      known = g < groups.size();
    else if (used = 0,
             std::sscanf(name.c_str(), "%zu.%zu.%31[a-z_]%n", &g, &i, what, &used) == 3 &&
             size_t(used) == name.size() && g < groups.size() && i < groups[g].params.size())
      for (const char* b : buffers) known = known || std::string(what) == b;
    NN_CHECK(known, "optimizer state: '", name, "' is not part of ", kind, "'s state for these ",
             "parameters (state of another optimizer or another model?)");
  }
}
// Restores a per-parameter buffer, checking its shape against the parameter.
Tensor restore(const NamedTensors& s, const std::string& name, const Tensor& param) {
  const Tensor* t = find(s, name);
  if (!t) return Tensor();
  NN_CHECK(t->shape() == param.shape(), "optimizer state: '", name, "' has shape ",
           shape_str(t->shape()), ", its parameter has ", shape_str(param.shape()));
  return t->to(param.device()).to(param.dtype()).clone();
}
}  // namespace

static void check_lr(double lr) {
  NN_CHECK(lr >= 0 && std::isfinite(lr), "optimizer: learning rate must be finite and >= 0, got ", lr);
}

NamedTensors Optimizer::scalar_entries() const {
  NamedTensors s{{"steps", scalar_state(double(steps_))}, {"lr", scalar_state(lr_)}};
  if (initial_lr_) s.emplace_back("initial_lr", scalar_state(*initial_lr_));
  return s;
}
Optimizer::Scalars Optimizer::read_scalars(const NamedTensors& s) {
  Scalars v{read_count(s, "steps"), read_scalar(s, "lr"), std::nullopt};
  if (find(s, "initial_lr")) v.initial_lr = read_scalar(s, "initial_lr");
  return v;
}
void Optimizer::apply_scalars(const Scalars& v) {
  steps_ = v.steps;
  lr_ = v.lr;
  if (v.initial_lr) initial_lr_ = v.initial_lr;  // (older files: the one set here stays)
}

double Optimizer::group_lr(size_t g) const {
  NN_CHECK(g < groups_.size(), "optimizer: group ", g, " of ", groups_.size());
  return lr_ * groups_[g].lr_scale.value_or(1.0);
}

void Optimizer::set_lr(double lr) {
  check_lr(lr);
  lr_ = lr;
}
Optimizer::Optimizer(std::vector<ParamGroup> groups, double lr) : groups_(std::move(groups)), lr_(lr) {
  check_lr(lr);
  std::set<const TensorImpl*> seen;
  for (auto& g : groups_) {
    if (g.weight_decay) check_weight_decay(*g.weight_decay);
    if (g.lr_scale)
      NN_CHECK(*g.lr_scale >= 0 && std::isfinite(*g.lr_scale),
               "optimizer: a group's lr_scale must be finite and >= 0, got ", *g.lr_scale);
    for (auto& p : g.params) {
      // (a frozen one, requires_grad off, is taken, as PyTorch takes it: it gets no gradient,
      // and step() skips a parameter without one; so parameters() of a partly frozen model)
      NN_CHECK(p.defined() && p.is_leaf(), "optimizer: every parameter must be a leaf tensor "
               "(a result of ops is not; optimize the leaf it came from)");
      NN_CHECK(p.is_contiguous(), "optimizer: parameters must be contiguous");
      NN_CHECK(seen.insert(p.impl()).second,
               "optimizer: a parameter is given twice (it would be stepped twice); pass each "
               "tensor once, as Module::parameters() does for shared ones");
    }
  }
}

void Optimizer::zero_grad() {
  for (auto& g : groups_)
    for (auto& p : g.params) p.set_grad(Tensor());
}

// ---- SGD ----------------------------------------------------------------------------------------
SGD::SGD(std::vector<Tensor> params, const SGDOptions& o) : SGD(one_group(std::move(params)), o) {}
SGD::SGD(std::vector<ParamGroup> groups, const SGDOptions& o)
    : Optimizer(std::move(groups), o.lr()), options(o) {
  NN_CHECK(o.momentum() >= 0 && std::isfinite(o.momentum()), "SGD: momentum must be finite and >= 0, got ",
           o.momentum());
  NN_CHECK(o.dampening() >= 0 && o.dampening() <= 1, "SGD: dampening must be in [0, 1], got ",
           o.dampening());
  check_weight_decay(o.weight_decay());
  NN_CHECK(!o.nesterov() || (o.momentum() > 0 && o.dampening() == 0),
           "SGD: Nesterov momentum needs momentum > 0 and dampening 0");
  for (auto& g : groups_) momentum_.emplace_back(g.params.size());
}

namespace {
// An optimizer's state buffer moved and cast after its parameter (Module::to changes
// parameters in place; the state made before must follow, or the fused step reads a buffer of
// another dtype or device).
void follow(Tensor& state, const Tensor& p) {
  NN_CHECK(!state.defined() || state.shape() == p.shape(), "optimizer: the state of a "
           "parameter now of shape ", shape_str(p.shape()), " has shape ",
           shape_str(state.shape()), ": its data changed shape after a step; make a new optimizer");
  if (state.defined() && (state.dtype() != p.dtype() || state.device() != p.device()))
    state = state.to(p.device()).to(p.dtype());
}
}  // namespace

void SGD::step() {
  NoGradGuard ng;
  check_grads(groups_);
  // One fused call per device and dtype.
  std::map<std::pair<std::string, DType>, std::vector<backend::Backend::SgdSlot>> batches;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const double lr = group_lr(gi), wd = groups_[gi].weight_decay.value_or(options.weight_decay());
    for (size_t i = 0; i < groups_[gi].params.size(); ++i) {
      Tensor& p = groups_[gi].params[i];
      if (!p.grad().defined()) continue;
      Tensor& buf = momentum_[gi][i];
      follow(buf, p);
      bool first = false;
      if (options.momentum() != 0 && !buf.defined()) {
        buf = empty_like(p);
        first = true;
      }
      p.storage()->bump_version();  // the fused step below writes it in place
      batches[{p.device().str(), p.dtype()}].push_back({p, grad_for(p), buf, lr, wd, first});
    }
  }
  for (auto& [key, slots] : batches)
    backend::of(slots[0].param).sgd_step(slots, options.momentum(), options.dampening(),
                                         options.nesterov());
  ++steps_;
}

NamedTensors SGD::state() const {
  NamedTensors s = scalar_entries();
  describe(s, "SGD", groups_);
  for (size_t g = 0; g < momentum_.size(); ++g)
    for (size_t i = 0; i < momentum_[g].size(); ++i)
      if (momentum_[g][i].defined()) s.emplace_back(key(g, i, "momentum"), momentum_[g][i]);
  return s;
}

void SGD::load_state(const NamedTensors& s) {
  // everything is read and checked before anything changes
  check_state(s, "SGD", groups_, {"momentum"});
  const Scalars scalars = read_scalars(s);
  auto momentum = momentum_;
  for (size_t g = 0; g < groups_.size(); ++g)
    for (size_t i = 0; i < groups_[g].params.size(); ++i)
      momentum[g][i] = restore(s, key(g, i, "momentum"), groups_[g].params[i]);
  apply_scalars(scalars);
  momentum_ = std::move(momentum);
}

// ---- Adam, AdamW ---------------------------------------------------------------------------------
AdamBase::AdamBase(std::vector<ParamGroup> groups, const char* kind, double lr, const Hyper& h)
    : Optimizer(std::move(groups), lr), kind_(kind) {
  NN_CHECK(h.beta1 >= 0 && h.beta1 < 1 && h.beta2 >= 0 && h.beta2 < 1, kind,
           ": betas must be in [0, 1), got ", h.beta1, ", ", h.beta2);
  NN_CHECK(h.eps >= 0 && std::isfinite(h.eps), kind, ": eps must be finite and >= 0, got ", h.eps);
  check_weight_decay(h.weight_decay);
  for (auto& g : groups_) {
    exp_avg_.emplace_back(g.params.size());
    exp_avg_sq_.emplace_back(g.params.size());
    param_steps_.emplace_back(g.params.size(), 0);
  }
}

void AdamBase::step() {
  NoGradGuard ng;
  check_grads(groups_);
  const Hyper h = hyper();
  std::map<std::pair<std::string, DType>, std::vector<backend::Backend::AdamWSlot>> batches;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const double lr = group_lr(gi), wd = groups_[gi].weight_decay.value_or(h.weight_decay);
    for (size_t i = 0; i < groups_[gi].params.size(); ++i) {
      Tensor& p = groups_[gi].params[i];
      if (!p.grad().defined()) continue;
      if (!exp_avg_[gi][i].defined()) {
        exp_avg_[gi][i] = zeros_like(p);
        exp_avg_sq_[gi][i] = zeros_like(p);
      }
      follow(exp_avg_[gi][i], p);
      follow(exp_avg_sq_[gi][i], p);
      int64_t t = ++param_steps_[gi][i];
      p.storage()->bump_version();  // the fused step below writes it in place
      batches[{p.device().str(), p.dtype()}].push_back({p, grad_for(p), exp_avg_[gi][i],
                                                        exp_avg_sq_[gi][i], lr,
                                                        h.decoupled ? wd : 0.0,
                                                        h.decoupled ? 0.0 : wd, t});
    }
  }
  for (auto& [key, slots] : batches)
    backend::of(slots[0].param).adamw_step(slots, h.beta1, h.beta2, h.eps);
  ++steps_;
}

NamedTensors AdamBase::state() const {
  NamedTensors s = scalar_entries();
  describe(s, kind_, groups_);
  for (size_t g = 0; g < exp_avg_.size(); ++g)
    for (size_t i = 0; i < exp_avg_[g].size(); ++i) {
      if (!exp_avg_[g][i].defined()) continue;
      s.emplace_back(key(g, i, "exp_avg"), exp_avg_[g][i]);
      s.emplace_back(key(g, i, "exp_avg_sq"), exp_avg_sq_[g][i]);
      s.emplace_back(key(g, i, "step"), scalar_state(double(param_steps_[g][i])));
    }
  return s;
}

void AdamBase::load_state(const NamedTensors& s) {
  // everything is read and checked before anything changes
  check_state(s, kind_, groups_, {"exp_avg", "exp_avg_sq", "step"});
  const Scalars scalars = read_scalars(s);
  auto exp_avg = exp_avg_, exp_avg_sq = exp_avg_sq_;
  auto param_steps = param_steps_;
  for (size_t g = 0; g < groups_.size(); ++g)
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      const Tensor& p = groups_[g].params[i];
      exp_avg[g][i] = restore(s, key(g, i, "exp_avg"), p);
      exp_avg_sq[g][i] = restore(s, key(g, i, "exp_avg_sq"), p);
      NN_CHECK(exp_avg[g][i].defined() == exp_avg_sq[g][i].defined(), "optimizer state: ",
               key(g, i, "exp_avg"), " and ", key(g, i, "exp_avg_sq"), " come together");
      param_steps[g][i] = exp_avg[g][i].defined() ? read_count(s, key(g, i, "step")) : 0;
    }
  apply_scalars(scalars);
  exp_avg_ = std::move(exp_avg);
  exp_avg_sq_ = std::move(exp_avg_sq);
  param_steps_ = std::move(param_steps);
}

Adam::Adam(std::vector<Tensor> params, const AdamOptions& o) : Adam(one_group(std::move(params)), o) {}
Adam::Adam(std::vector<ParamGroup> groups, const AdamOptions& o)
    : AdamBase(std::move(groups), "Adam", o.lr(),
               {o.beta1(), o.beta2(), o.eps(), o.weight_decay(), o.decoupled_weight_decay()}),
      options(o) {}
AdamBase::Hyper Adam::hyper() const {
  return {options.beta1(), options.beta2(), options.eps(), options.weight_decay(),
          options.decoupled_weight_decay()};
}

AdamW::AdamW(std::vector<Tensor> params, const AdamWOptions& o)
    : AdamW(one_group(std::move(params)), o) {}
AdamW::AdamW(std::vector<ParamGroup> groups, const AdamWOptions& o)
    : AdamBase(std::move(groups), "AdamW", o.lr(),
               {o.beta1(), o.beta2(), o.eps(), o.weight_decay(), true}),
      options(o) {}
AdamBase::Hyper AdamW::hyper() const {
  return {options.beta1(), options.beta2(), options.eps(), options.weight_decay(), true};
}

// ---- schedules ----------------------------------------------------------------------------------
StepLR::StepLR(Optimizer& opt, int64_t step_size, double gamma)
    : LRScheduler(opt), step_size_(step_size), gamma_(gamma) {
  NN_CHECK(step_size > 0, "StepLR: step_size must be positive");
  NN_CHECK(gamma >= 0 && std::isfinite(gamma), "StepLR: gamma must be finite and >= 0, got ", gamma);
}
double StepLR::lr_at(int64_t step) const {
  return base_lr_ * std::pow(gamma_, double(step / step_size_));
}

CosineLR::CosineLR(Optimizer& opt, int64_t warmup, int64_t total, double min_lr)
    : LRScheduler(opt), warmup_(warmup), total_(total), min_lr_(min_lr) {
  NN_CHECK(warmup >= 0 && total > 0 && warmup <= total,
           "CosineLR: need 0 <= warmup <= total, total > 0 (got warmup ", warmup, ", total ", total, ")");
  NN_CHECK(min_lr >= 0 && std::isfinite(min_lr), "CosineLR: min_lr must be finite and >= 0, got ", min_lr);
  opt.set_lr(lr_at(0));
}
double CosineLR::lr_at(int64_t step) const {
  if (step < warmup_) return base_lr_ * double(step + 1) / double(warmup_ + 1);
  if (step >= total_) return min_lr_;  // (warmup == total: no decay phase to be at the end of)
  double t = double(std::min(step, total_) - warmup_) / double(std::max<int64_t>(1, total_ - warmup_));
  return min_lr_ + 0.5 * (base_lr_ - min_lr_) * (1 + std::cos(M_PI * t));
}

LinearLR::LinearLR(Optimizer& opt, int64_t warmup, int64_t total)
    : LRScheduler(opt), warmup_(warmup), total_(total) {
  NN_CHECK(warmup >= 0 && total > 0 && warmup <= total,
           "LinearLR: need 0 <= warmup <= total, total > 0 (got warmup ", warmup, ", total ", total, ")");
  opt.set_lr(lr_at(0));
}
double LinearLR::lr_at(int64_t step) const {
  if (step < warmup_) return base_lr_ * double(step + 1) / double(warmup_ + 1);
  double left = double(total_ - std::min(step, total_)) / double(std::max<int64_t>(1, total_ - warmup_));
  return base_lr_ * left;
}

Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm) {
  NN_CHECK(max_norm >= 0 && std::isfinite(max_norm), "clip_grad_norm: max_norm must be finite and "
           ">= 0, got ", max_norm);
  NoGradGuard ng;
  // One fused sum of squares per (device, dtype) batch, added up on the first batch's device;
  // each batch is then scaled by a factor its kernel computes from that sum, so on one GPU
  // nothing here waits for it (gradients on several GPUs meet through the host).
  GradBatches gb;
  for (auto& p : params)
    if (p.grad().defined()) gb.add(p.grad());
  if (gb.batches.empty()) return zeros({}, kF64);
  Tensor total;
  for (auto& [key, grads] : gb.batches) {
    Tensor s = empty({}, TensorOptions(kF64).device(grads[0].device()));
    backend::of(grads[0]).sum_squares(grads, s);
    total = total.defined() ? total + s.to(total.device()) : s;
  }
  for (auto& [key, grads] : gb.batches)
    backend::of(grads[0]).clip_grads(grads, total.to(grads[0].device()), max_norm);
  gb.write_back();
  return sqrt(total);
}

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  return clip_grad_norm_(params, max_norm).item();
}

}  // namespace nn::optim
