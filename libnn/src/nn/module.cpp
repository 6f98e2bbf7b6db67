#include <nn/autograd.h>
#include <nn/module.h>

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

namespace nn {

// A name is one path component, used once among a module's parameters, buffers and
// children: "a.b" or a second "w" would make two state-dict entries one name.
void Module::check_name(const char* kind, const std::string& name) const {
  NN_CHECK(!name.empty() && name.find('.') == std::string::npos, type_name_, ": ", kind,
           " name '", name, "' must be non-empty and without '.'");
  auto taken = [&](const auto& list) {
    return std::any_of(list.begin(), list.end(), [&](const auto& e) { return e.first == name; });
  };
  NN_CHECK(!taken(params_) && !taken(buffers_) && !taken(children_), type_name_, ": ", kind, " '",
           name, "': the name is already registered");
}

// A leaf is registered as it is, so that one tensor registered twice (tied weights) stays one
// parameter; a computed tensor is detached into a new leaf.
Tensor Module::register_parameter(const std::string& name, Tensor t, bool requires_grad) {
  NN_CHECK(t.defined(), type_name_, ": parameter '", name, "' is undefined");
  check_name("parameter", name);
  if (t.grad_fn()) t = t.detach();
  t.requires_grad_(requires_grad);
  params_.emplace_back(name, t);
  return t;
}

Tensor Module::register_buffer(const std::string& name, Tensor t) {
  NN_CHECK(t.defined(), type_name_, ": buffer '", name, "' is undefined");
  check_name("buffer", name);
  buffers_.emplace_back(name, t);
  return t;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> m) {
  NN_CHECK(m, type_name_, ": child module '", name, "' is null");
  check_name("child module", name);
  // A module inside itself would make every walk over the tree endless.
  std::set<const Module*> seen;
  std::vector<const Module*> todo{m.get()};
  while (!todo.empty()) {
    const Module* x = todo.back();
    todo.pop_back();
    NN_CHECK(x != this, type_name_, ": child module '", name, "' is this module or holds it");
    if (seen.insert(x).second)
      for (auto& c : x->children_) todo.push_back(c.second.get());
  }
  children_.emplace_back(name, std::move(m));
}

void Module::collect(const std::string& prefix, bool recurse, bool params, NamedTensors& out) const {
  for (auto& [n, t] : params ? params_ : buffers_) out.emplace_back(prefix + n, t);
  if (!recurse) return;
  for (auto& [n, c] : children_) c->collect(prefix + n + ".", true, params, out);
}

namespace {
// A tensor registered under several names (a module used twice, tied weights) once, under its
// first name: an optimizer given it twice would step it twice.
NamedTensors unique_tensors(NamedTensors all) {
  std::set<const TensorImpl*> seen;
  NamedTensors out;
  for (auto& e : all)
    if (seen.insert(e.second.impl()).second) out.push_back(std::move(e));
  return out;
}
}  // namespace

NamedTensors Module::named_parameters(bool recurse) const {
  NamedTensors out;
  collect("", recurse, true, out);
  return unique_tensors(std::move(out));
}
NamedTensors Module::named_buffers(bool recurse) const {
  NamedTensors out;
  collect("", recurse, false, out);
  return unique_tensors(std::move(out));
}
std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_parameters(recurse)) out.push_back(t);
  return out;
}
// Every name, shared tensors under each of theirs (as libtorch's state_dict), so a checkpoint
// lists what a model with the same structure expects.
// Module by module, as PyTorch orders it: each one's parameters, then its buffers, then its
// children's (a file written here lists its tensors in torch's order).
NamedTensors Module::state_dict() const {
  NamedTensors s;
  collect_state("", s);
  return s;
}
void Module::collect_state(const std::string& prefix, NamedTensors& out) const {
  for (auto& [n, t] : params_) out.emplace_back(prefix + n, t);
  for (auto& [n, t] : buffers_) out.emplace_back(prefix + n, t);
  for (auto& [n, c] : children_) c->collect_state(prefix + n + ".", out);
}

Module::LoadResult Module::load_state_dict(const NamedTensors& state, bool strict) {
  // Every name and shape is checked before anything is copied: a refused load leaves the
  // model as it was (not half loaded).
  NamedTensors mine = state_dict();
  std::map<std::string, Tensor*> by_name;
  for (auto& [name, t] : mine) by_name.emplace(name, &t);
  std::set<std::string> seen;
  std::vector<std::pair<Tensor*, const Tensor*>> copies;  // (model tensor, source)
  LoadResult result;
  for (const auto& [name, src] : state) {
    auto it = by_name.find(name);
    if (it == by_name.end() && !strict) {
      result.unexpected.push_back(name);
      continue;
    }
    NN_CHECK(it != by_name.end(), "load_state_dict: '", name, "' is not a tensor of this ",
             type_name_);
    // (a one-element [1] for a scalar: how older PyTorch saved them)
    const bool scalar_as_1 = it->second->dim() == 0 && src.dim() == 1 && src.numel() == 1;
    NN_CHECK(it->second->shape() == src.shape() || scalar_as_1, "load_state_dict: '", name,
             "' has shape ", shape_str(src.shape()), " in the checkpoint but ",
             shape_str(it->second->shape()), " in the model");
    NN_CHECK(seen.insert(name).second, "load_state_dict: '", name, "' is given twice");
    copies.emplace_back(it->second, &src);
  }
  // batch norm's counter, which checkpoints from before PyTorch 0.4.1 lack, keeps its value
  // (as PyTorch 2 loads them: zeroing it would let a momentum=None layer's next batch replace
  // the running statistics); anything else missing is an error when strict
  for (auto& [name, t] : mine) {
    if (seen.count(name)) continue;
    if (name == "num_batches_tracked" || name.ends_with(".num_batches_tracked")) continue;
    NN_CHECK(!strict, "load_state_dict: '", name, "' is missing from the checkpoint");
    result.missing.push_back(name);
  }
  NoGradGuard ng;
  for (auto& [dst, src] : copies) dst->copy_(dst->dim() == 0 ? src->reshape({}) : *src);
  return result;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (auto& t : parameters()) n += t.numel();
  return n;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, c] : children_) c->train(on);
}

void Module::to(Device device) {
  NoGradGuard ng;
  for (auto& [n, t] : state_dict()) {
    t.set_data(t.to(device));
    if (t.grad().defined()) t.set_grad(t.grad().to(device));
  }
}

void Module::to(DType dtype) {
  NN_CHECK(is_floating(dtype), "Module::to: ", dtype_name(dtype), " is not a floating dtype");
  NoGradGuard ng;
  for (auto& [n, t] : state_dict()) {
    if (!is_floating(t.dtype())) continue;
    t.set_data(t.to(dtype));
    if (t.grad().defined()) t.set_grad(t.grad().to(dtype));
  }
}

void Module::zero_grad() {
  for (auto& t : parameters()) t.set_grad(Tensor());
}

Tensor Module::forward(const Tensor&) {
  NN_ERROR(type_name_, " has no single-tensor forward(); call its own forward(...)");
}

void Module::print(std::ostream& os, int indent) const {
  os << type_name_ << "(" << extra_repr();
  if (children_.empty()) {
    os << ")";
    return;
  }
  os << "\n";
  for (auto& [n, c] : children_) {
    os << std::string(indent + 2, ' ') << "(" << n << "): ";
    c->print(os, indent + 2);
    os << "\n";
  }
  os << std::string(indent, ' ') << ")";
}

std::string Module::str() const {
  std::ostringstream os;
  print(os, 0);
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Module& m) { return os << m.str(); }

Sequential::Sequential(std::initializer_list<std::shared_ptr<Module>> mods) : Sequential() {
  for (auto& m : mods) push_back(m);
}
void Sequential::push_back(std::shared_ptr<Module> m) {
  push_back(std::to_string(layers_.size()), std::move(m));
}
void Sequential::push_back(const std::string& name, std::shared_ptr<Module> m) {
  add_child(name, m);
  layers_.push_back(std::move(m));
}
Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  for (auto& m : layers_) h = m->forward(h);
  return h;
}

}  // namespace nn
