// Reverse-mode autograd: each op output holds a Node with edges to its inputs' nodes (or to
// the leaf tensors that collect .grad) and a closure that maps d(out) to one gradient per input.
#pragma once
#include <nn/tensor.h>

#include <functional>
#include <string>
#include <vector>

namespace nn {

class Node;

// Where an input's gradient goes: into the node that produced it, or into a leaf's .grad.
struct Edge {
  std::shared_ptr<Node> node;
  std::shared_ptr<TensorImpl> leaf;
  bool active() const { return node || leaf; }
};

class Node {
 public:
  // grad: d(loss)/d(output); needs[i]: whether input i wants a gradient. Return one tensor per
  // input (undefined where not needed).
  using BackwardFn =
      std::function<std::vector<Tensor>(const Tensor& grad, const std::vector<bool>& needs)>;

  Node(std::string name, std::vector<Edge> inputs, std::vector<Shape> input_shapes,
       std::vector<DType> input_dtypes, BackwardFn fn)
      : name_(std::move(name)), inputs_(std::move(inputs)),
        input_shapes_(std::move(input_shapes)), input_dtypes_(std::move(input_dtypes)),
        fn_(std::move(fn)) {}
  // Frees the graph behind it without recursion (a chain of 10^5 ops, a running total of
  // losses say, overflowed the stack when its nodes freed one another recursively).
  ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  const std::string& name() const { return name_; }
  const std::vector<Edge>& inputs() const { return inputs_; }
  const std::vector<Shape>& input_shapes() const { return input_shapes_; }
  bool released() const { return !fn_; }
  // Remembers the version of each tensor's memory; apply() refuses to run if one has had an
  // in-place write since (the closure would compute with changed values).
  void set_saved(const std::vector<Tensor>& saved);
  std::vector<Tensor> apply(const Tensor& grad);
  void release() {  // frees what the closure saved
    fn_ = nullptr;
    saved_.clear();
  }

 private:
  struct SavedVersion {
    std::shared_ptr<Storage> storage;
    uint64_t version;
    Shape shape;  // for the error message
  };
  std::string name_;
  std::vector<Edge> inputs_;
  std::vector<Shape> input_shapes_;
  std::vector<DType> input_dtypes_;  // gradients are returned in these
  BackwardFn fn_;
  std::vector<SavedVersion> saved_;
};

// Gradient recording is on by default, per thread.
bool grad_enabled();
void set_grad_enabled(bool on);

class NoGradGuard {
 public:
  NoGradGuard() : prev_(grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

// True when grad mode is on and any of `inputs` requires grad.
bool any_requires_grad(std::initializer_list<const Tensor*> inputs);
bool any_requires_grad(const std::vector<Tensor>& inputs);

// Attaches a backward node to `output` (which must be fresh, with no history) when grad mode
// is on and an input requires grad. The closure should capture detached tensors, and `saved`
// should list them (undefined ones are skipped): backward then refuses, with an error naming
// the op, when one of them was changed in place after the forward pass (as libtorch does),
// where the closure would silently compute a wrong gradient. The form without `saved` checks
// nothing.
void record(const char* name, const std::vector<Tensor>& inputs, Tensor& output,
            const std::vector<Tensor>& saved, Node::BackwardFn fn);
void record(const char* name, const std::vector<Tensor>& inputs, Tensor& output,
            Node::BackwardFn fn);

// Runs the backward pass from `root` (see Tensor::backward).
void run_backward(const Tensor& root, const Tensor& grad, bool retain_graph);

// ---- finite-difference gradient check ----------------------------------------------------
struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-5;
  double rtol = 1e-3;
  // Tensors `fn` reads by itself, checked too: a module's parameters (f64 CPU leaves that
  // require grad, contiguous). Each is perturbed in place and restored; its grad() is left as
  // it was.
  std::vector<Tensor> params;
};
struct GradcheckResult {
  bool ok = true;
  std::string message;  // the first mismatch: input, element, analytic and numeric values
};
// `fn` maps the inputs (f64, CPU) to one output tensor. Compares d(sum(out * R))/d(input)
// from backward() with central differences for every element of every input that
// requires grad, and of every tensor in opts.params (R is a fixed random tensor, so every
// output element is exercised): each within atol + rtol * |numeric|. A central difference
// that is not finite (the function overflows within eps of the point) fails the check, as
// it cannot judge any value.
GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                          const std::vector<Tensor>& inputs, GradcheckOptions opts = {});

}  // namespace nn
