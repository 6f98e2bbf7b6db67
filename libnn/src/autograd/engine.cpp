// The backward pass: order the graph's nodes so each runs after every node that feeds it a
// gradient, then one reverse sweep that sums incoming gradients and hands them on.
#include <nn/autograd.h>
#include <nn/ops.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>

#include "core/util.h"

namespace nn {

namespace {
thread_local bool g_grad_enabled = true;

// Backward passes on two threads may share a leaf (one model, two batches): its .grad is
// taken and added under a lock of its own (a lock table keyed by the leaf), as in libtorch;
// unguarded, the two adds lost each other's contributions.
std::mutex& leaf_lock(const TensorImpl* leaf) {
  static std::mutex locks[64];
  return locks[(reinterpret_cast<uintptr_t>(leaf) / alignof(std::max_align_t)) % 64];
}

// First gradient for a leaf: take it when nothing else can see its storage and it is laid
// out as the leaf is (row-major, or channels-last for a channels-last leaf), else copy it
// into that layout; later ones are added in.
void accumulate_leaf(const std::shared_ptr<TensorImpl>& leaf_ptr, Tensor g) {
  TensorImpl& leaf = *leaf_ptr;
  if (g.dtype() != leaf.dtype) g = g.to(leaf.dtype);
  std::lock_guard<std::mutex> lock(leaf_lock(&leaf));
  if (!leaf.grad.defined()) {
    const MemoryFormat f = format_of(Tensor(leaf_ptr));
    // (and spans its whole buffer: a view would keep a larger gradient alive with it)
    const bool sole = g.impl_ptr().use_count() == 1 && g.storage().use_count() == 1 &&
                      g.is_contiguous(f) && g.offset() == 0 && g.storage()->nbytes() == g.nbytes();
    if (sole) {
      leaf.grad = g;
    } else {
      leaf.grad = empty(g.shape(), g.options(), f);
      leaf.grad.copy_(g);
    }
  } else {
    leaf.grad.add_(g);
  }
}
}  // namespace

bool grad_enabled() { return g_grad_enabled; }
void set_grad_enabled(bool on) { g_grad_enabled = on; }

bool any_requires_grad(std::initializer_list<const Tensor*> inputs) {
  if (!g_grad_enabled) return false;
  for (const Tensor* t : inputs)
    if (t->defined() && t->requires_grad()) return true;
  return false;
}
bool any_requires_grad(const std::vector<Tensor>& inputs) {
  if (!g_grad_enabled) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

void record(const char* name, const std::vector<Tensor>& inputs, Tensor& output,
            Node::BackwardFn fn) {
  record(name, inputs, output, {}, std::move(fn));
}

void record(const char* name, const std::vector<Tensor>& inputs, Tensor& output,
            const std::vector<Tensor>& saved, Node::BackwardFn fn) {
  if (!any_requires_grad(inputs)) return;
  std::vector<Edge> edges(inputs.size());
  std::vector<Shape> shapes(inputs.size());
  std::vector<DType> dtypes(inputs.size(), kF32);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    if (!t.defined()) continue;
    shapes[i] = t.shape();
    dtypes[i] = t.dtype();
    if (!t.requires_grad()) continue;
    if (t.grad_fn()) edges[i].node = t.grad_fn();
    else edges[i].leaf = t.impl_ptr();
  }
  auto node = std::make_shared<Node>(name, std::move(edges), std::move(shapes),
                                     std::move(dtypes), std::move(fn));
  node->set_saved(saved);
  output.impl()->grad_fn = std::move(node);
  output.impl()->requires_grad = true;
}

Node::~Node() {
  // Nodes only this one holds are taken off their edges before they die, so each dies with
  // no node left to free: the graph is freed from a work list, not on the call stack.
  std::vector<std::shared_ptr<Node>> dying;
  auto take_from = [&](std::vector<Edge>& edges) {
    for (Edge& e : edges)
      if (e.node && e.node.use_count() == 1) dying.push_back(std::move(e.node));
  };
  take_from(inputs_);
  while (!dying.empty()) {
    std::shared_ptr<Node> n = std::move(dying.back());
    dying.pop_back();
    take_from(n->inputs_);
  }
}

void Node::set_saved(const std::vector<Tensor>& saved) {
  saved_.clear();
  for (const Tensor& t : saved)
    if (t.defined()) saved_.push_back({t.storage(), t.storage()->version(), t.shape()});
}

std::vector<Tensor> Node::apply(const Tensor& grad) {
  NN_CHECK(fn_, "backward through '", name_, "' a second time: its saved tensors were freed "
           "by the first backward(); pass retain_graph=true to that one");
  for (const SavedVersion& s : saved_) {
    const uint64_t now = s.storage->version();
    NN_CHECK(now == s.version, "backward through '", name_, "': a tensor of shape ",
             shape_str(s.shape), " that it saved for the gradient was changed in place after "
             "the forward pass (its memory's version went from ", s.version, " to ", now,
             "), so the gradient would be wrong; change a clone() instead, or call backward() "
             "before the in-place change (an optimizer step is one)");
  }
  std::vector<bool> needs(inputs_.size());
  for (size_t i = 0; i < inputs_.size(); ++i) needs[i] = inputs_[i].active();
  std::vector<Tensor> grads = fn_(grad, needs);
  NN_CHECK(grads.size() == inputs_.size(), "backward of '", name_, "' returned ", grads.size(),
           " gradients for ", inputs_.size(), " inputs");
  for (size_t i = 0; i < grads.size(); ++i) {
    if (!needs[i] || !grads[i].defined()) continue;
    NN_CHECK(grads[i].shape() == input_shapes_[i], "backward of '", name_,
             "' returned a gradient of shape ", shape_str(grads[i].shape()), " for input ", i,
             " of shape ", shape_str(input_shapes_[i]));
    // Mixed precision: a gradient always travels in its input's dtype.
    if (grads[i].dtype() != input_dtypes_[i]) grads[i] = grads[i].to(input_dtypes_[i]);
  }
  return grads;
}

void run_backward(const Tensor& root, const Tensor& grad, bool retain_graph) {
  NN_CHECK(root.requires_grad(), "backward(): the tensor does not require grad (no input of "
           "its computation requires grad, or it was computed under NoGradGuard)");
  Tensor g = grad;
  if (!g.defined()) {
    NN_CHECK(root.numel() == 1, "backward(): a gradient must be passed for a non-scalar output "
             "of shape ", shape_str(root.shape()));
    g = ones_like(root);
  }
  NN_CHECK(g.shape() == root.shape(), "backward(): gradient of shape ", shape_str(g.shape()),
           " for an output of shape ", shape_str(root.shape()));
  NN_CHECK(g.device() == root.device(), "backward(): gradient on ", g.device().str(),
           " for an output on ", root.device().str());
  // in the output's dtype (an f32 gradient for an f16 output, as PyTorch casts it), which
  // every backward rule assumes
  if (g.dtype() != root.dtype()) g = g.detach().to(root.dtype());
  NoGradGuard no_grad;
  if (!root.grad_fn()) {
    accumulate_leaf(root.impl_ptr(), g.detach());
    return;
  }

  // Count, for each node, how many edges from other graph nodes lead into it.
  std::unordered_map<Node*, int> deps;
  std::vector<Node*> stack{root.grad_fn().get()};
  deps[root.grad_fn().get()] = 0;
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->inputs()) {
      if (!e.node) continue;
      auto [it, fresh] = deps.try_emplace(e.node.get(), 0);
      it->second++;
      if (fresh) stack.push_back(e.node.get());
    }
  }

  std::unordered_map<Node*, Tensor> pending;
  pending[root.grad_fn().get()] = g.detach();
  std::vector<std::shared_ptr<Node>> ready{root.grad_fn()};
  while (!ready.empty()) {
    std::shared_ptr<Node> node = std::move(ready.back());
    ready.pop_back();
    Tensor gin;
    if (auto it = pending.find(node.get()); it != pending.end()) {
      gin = std::move(it->second);
      pending.erase(it);
    }
    std::vector<Tensor> outs;
    if (gin.defined()) outs = node->apply(gin);
    gin = Tensor();
    if (!retain_graph) node->release();
    const auto& inputs = node->inputs();
    for (size_t i = 0; i < inputs.size(); ++i) {
      const Edge& e = inputs[i];
      Tensor gi = i < outs.size() ? std::move(outs[i]) : Tensor();
      // (a leaf whose requires_grad_ was turned off since the forward pass takes none, as
      // in libtorch)
      if (e.leaf && gi.defined() && e.leaf->requires_grad) accumulate_leaf(e.leaf, std::move(gi));
      if (!e.node) continue;
      if (gi.defined()) {
        Tensor& slot = pending[e.node.get()];
        slot = slot.defined() ? add(slot, gi) : std::move(gi);
      }
      if (--deps[e.node.get()] == 0) ready.push_back(e.node);
    }
  }
}

}  // namespace nn
