// nn::Module: a tree of named parameters, buffers and child modules, in the style of
// libtorch. Parameters are tensor handles: Module::to() changes them in place, so handles
// kept by the module's own members (or by an optimizer) stay valid.
#pragma once
#include <nn/tensor.h>

#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

// Declares a chainable option: opts.name(value) sets it, opts.name() reads it.
#define NN_ARG(T, name)                                     \
 public:                                                    \
  auto& name(const T& new_##name) {                         \
    this->name##_ = new_##name;                             \
    return *this;                                           \
  }                                                         \
  const T& name() const { return this->name##_; }           \
                                                            \
 private:                                                   \
  T name##_

namespace nn {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class Module {
 public:
  explicit Module(std::string type_name = "Module") : type_name_(std::move(type_name)) {}
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  const std::string& type_name() const { return type_name_; }

  // Registration returns the handle to keep in a member.
  Tensor register_parameter(const std::string& name, Tensor t, bool requires_grad = true);
  Tensor register_buffer(const std::string& name, Tensor t);
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    add_child(name, m);
    return m;
  }

  std::vector<Tensor> parameters(bool recurse = true) const;
  NamedTensors named_parameters(bool recurse = true) const;   // "fc1.weight", ...
  NamedTensors named_buffers(bool recurse = true) const;
  // Parameters then buffers: everything a checkpoint of the model holds.
  NamedTensors state_dict() const;
  // Copies values from `state` into this module's tensors, each with the same shape (else
  // nn::Error naming the tensor). Strict: every name must match both ways. Not strict: names
  // on one side only are skipped and reported (e.g. a pretrained encoder without the new
  // classifier, or with a pre-training head this model lacks).
  struct LoadResult {
    std::vector<std::string> missing;     // in the module, not in `state`
    std::vector<std::string> unexpected;  // in `state`, not in the module
  };
  LoadResult load_state_dict(const NamedTensors& state, bool strict = true);
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const {
    return children_;
  }
  int64_t num_parameters() const;

  virtual void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  // Moves (or casts, for floating tensors) every parameter and buffer in place.
  void to(Device device);
  void to(DType dtype);
  void zero_grad();

  // Single-input forward; modules with other signatures define their own forward(...).
  virtual Tensor forward(const Tensor& x);
  Tensor operator()(const Tensor& x) { return forward(x); }

  // One line describing this module's own settings, e.g. "in_features=784, ...".
  virtual std::string extra_repr() const { return ""; }
  std::string str() const;  // the whole tree, indented

 protected:
  void add_child(const std::string& name, std::shared_ptr<Module> m);

 private:
  void check_name(const char* kind, const std::string& name) const;
  void collect(const std::string& prefix, bool recurse, bool params, NamedTensors& out) const;
  void collect_state(const std::string& prefix, NamedTensors& out) const;
  void print(std::ostream& os, int indent) const;
  std::string type_name_;
  NamedTensors params_, buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

std::ostream& operator<<(std::ostream& os, const Module& m);

// Runs modules in order; children are named "0", "1", ...
// Holds modules in order ("0", "1", ...) without a forward of its own: for stacks whose
// forward takes more than one tensor (transformer layers with a mask).
class ModuleList : public Module {
 public:
  ModuleList() : Module("ModuleList") {}
  void push_back(std::shared_ptr<Module> m) {
    add_child(std::to_string(items_.size()), m);
    items_.push_back(std::move(m));
  }
  size_t size() const { return items_.size(); }
  // Module i as an M; an index out of range or a module of another type is an nn::Error.
  template <typename M = Module>
  std::shared_ptr<M> at(size_t i) const {
    NN_CHECK(i < items_.size(), "ModuleList::at: index ", i, " is out of range for size ",
             items_.size());
    std::shared_ptr<M> m = std::dynamic_pointer_cast<M>(items_[i]);
    NN_CHECK(m, "ModuleList::at: module ", i, " is a ", items_[i]->type_name(),
             ", not the type asked for");
    return m;
  }

 private:
  std::vector<std::shared_ptr<Module>> items_;
};

class Sequential : public Module {
 public:
  Sequential() : Module("Sequential") {}
  Sequential(std::initializer_list<std::shared_ptr<Module>> mods);
  void push_back(std::shared_ptr<Module> m);
  void push_back(const std::string& name, std::shared_ptr<Module> m);
  size_t size() const { return layers_.size(); }
  std::shared_ptr<Module> operator[](size_t i) const {
    NN_CHECK(i < layers_.size(), "Sequential: index ", i, " is out of range for size ",
             layers_.size());
    return layers_[i];
  }
  Tensor forward(const Tensor& x) override;

 private:
  std::vector<std::shared_ptr<Module>> layers_;
};

}  // namespace nn
