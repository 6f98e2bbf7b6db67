#include <nn/amp.h>
#include <nn/autograd.h>
#include <nn/ops.h>

#include <cfloat>
#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "core/util.h"
#include "optim/grad_batches.h"

namespace nn::amp {

namespace {
thread_local bool g_enabled = false;
thread_local DType g_dtype = kF16;
}  // namespace

AutocastGuard::AutocastGuard(DType dtype, bool enabled)
    : prev_enabled_(g_enabled), prev_dtype_(g_dtype) {
  NN_CHECK(dtype == kF16 || dtype == kBF16, "autocast: dtype must be f16 or bf16, got ",
           dtype_name(dtype));
  g_enabled = enabled;
  g_dtype = dtype;
}
AutocastGuard::~AutocastGuard() {
  g_enabled = prev_enabled_;
  g_dtype = prev_dtype_;
}

bool autocast_enabled() { return g_enabled; }
DType autocast_dtype() { return g_dtype; }

bool autocast_lowers(const Tensor& t) {
  if (!g_enabled || !t.defined() || t.dtype() == g_dtype) return false;
  return t.dtype() == kF32 || t.dtype() == kF16 || t.dtype() == kBF16;
}
Tensor autocast_lower(const Tensor& t) { return autocast_lowers(t) ? t.to(g_dtype) : t; }
Tensor autocast_f32(const Tensor& t) {
  if (!g_enabled || !t.defined() || !(t.dtype() == kF16 || t.dtype() == kBF16)) return t;
  return t.to(kF32);
}

namespace {
constexpr double kMaxScale = FLT_MAX;  // the loss is scaled in f32
}  // namespace

GradScaler::GradScaler(GradScalerOptions o) : opts_(o), scale_(o.init_scale) {
  NN_CHECK(o.init_scale > 0 && o.init_scale <= kMaxScale && o.growth_factor > 1 && o.backoff_factor > 0 &&
               o.backoff_factor < 1 && o.growth_interval > 0,
           "GradScaler: need 0 < init_scale <= FLT_MAX, growth_factor > 1, 0 < backoff_factor < 1 and "
           "growth_interval > 0");
}

Tensor GradScaler::scale(const Tensor& loss) const {
  return opts_.enabled ? mul(loss, scale_) : loss;
}

void GradScaler::unscale_(optim::Optimizer& opt) {
  if (!opts_.enabled || found_inf_.count(&opt)) return;
  NoGradGuard ng;
  // One fused backend call per (device, dtype) batch of gradients, each raising its device's
  // flag, then one host read per device.
  optim::GradBatches gb;
  for (auto& group : opt.groups())
    for (auto& p : group.params)
      if (p.grad().defined()) gb.add(p.grad());
  // (as PyTorch's GradScaler refuses it in step(): stepping would count a step that changed
  // nothing, and the scale would grow on it)
  NN_CHECK(!gb.batches.empty(), "GradScaler: none of the optimizer's parameters has a gradient "
           "(did backward() reach them?)");
  std::map<std::string, Tensor> flags;
  for (auto& [key, grads] : gb.batches) {
    Tensor& flag = flags[key.first];
    if (!flag.defined()) flag = zeros({}, TensorOptions(kF32).device(grads[0].device()));
    backend::of(grads[0]).scale_grads(grads, 1.0 / scale_, flag);
  }
  gb.write_back();
  bool inf = false;
  for (auto& [device, flag] : flags) inf = inf || flag.item() != 0;
  found_inf_[&opt] = inf;
}

bool GradScaler::found_inf() const {
  for (auto& [opt, inf] : found_inf_)
    if (inf) return true;
  return false;
}

bool GradScaler::step(optim::Optimizer& opt) {
  if (!opts_.enabled) {
    opt.step();
    return true;
  }
  // A second step would find the gradients already unscaled (unscale_ does nothing twice)
  // and step with gradients that are still scaled.
  NN_CHECK(stepped_.insert(&opt).second, "GradScaler::step: step() was already called for "
           "this optimizer since the last update()");
  try {
    unscale_(opt);
  } catch (...) {  // refused (no gradients): not stepped, so a later step() may try again
    stepped_.erase(&opt);
    throw;
  }
  if (found_inf_.at(&opt)) return false;
  opt.step();
  return true;
}

void GradScaler::update() {
  if (!opts_.enabled) return;
  NN_CHECK(!found_inf_.empty(), "GradScaler::update() called without step() (or unscale_()) "
           "since the last update");
  if (found_inf()) {
    scale_ *= opts_.backoff_factor;
    growth_tracker_ = 0;
  } else if (++growth_tracker_ >= opts_.growth_interval) {
    // the loss is scaled in f32: a scale past FLT_MAX would be inf, and stay inf
    if (scale_ * opts_.growth_factor <= kMaxScale) scale_ *= opts_.growth_factor;
    growth_tracker_ = 0;
  }
  found_inf_.clear();
  stepped_.clear();
}

NamedTensors GradScaler::state() const {
  return {{"scale", full({}, scale_, kF64)}, {"growth_tracker", full({}, double(growth_tracker_), kF64)}};
}

void GradScaler::load_state(const NamedTensors& s) {
  // read and checked before anything changes
  std::optional<double> scale, tracker;
  for (auto& [n, t] : s) {
    if (n != "scale" && n != "growth_tracker") continue;
    NN_CHECK(t.numel() == 1, "GradScaler state: '", n, "' has shape ", shape_str(t.shape()),
             ", expected one value");
    (n == "scale" ? scale : tracker) = t.item();
  }
  NN_CHECK(scale && tracker, "GradScaler state needs 'scale' and 'growth_tracker'");
  NN_CHECK(*scale > 0 && *scale <= kMaxScale, "GradScaler state: invalid scale ", *scale);
  NN_CHECK(is_count(*tracker), "GradScaler state: invalid growth_tracker ", *tracker);
  scale_ = *scale;
  growth_tracker_ = int64_t(*tracker);
}

}  // namespace nn::amp
