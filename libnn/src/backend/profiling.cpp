// The profiling backend: forwards every primitive to the real backend and times it.
#include "backend/profiling.h"

#include <nn/profiler.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <exception>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>

namespace nn::backend {
namespace {

std::atomic<bool> g_enabled{false};

struct Totals {
  std::mutex mu;
  std::map<std::string, profiler::Entry> by_name;
};
Totals& totals() {
  static auto* t = new Totals;
  return *t;
}

std::string unary_name(UnaryOp op, bool backward = false) {
  static const char* names[] = {"neg", "exp", "log", "sqrt", "rsqrt", "abs", "square", "relu",
                                "gelu", "tanh", "sigmoid", "add_scalar", "mul_scalar",
                                "pow_scalar", "rsub_scalar", "rdiv_scalar", "clamp",
                                "div_scalar", "log1p", "silu", "softplus", "leaky_relu", "elu"};
  static_assert(std::size(names) == size_t(UnaryOp::elu) + 1, "a name for every op");
  return std::string(backward ? "unary_backward." : "unary.") + names[int(op)];
}
std::string binary_name(BinaryOp op) {
  static const char* names[] = {"add", "sub", "mul", "div", "pow", "maximum", "minimum",
                                "eq", "ne", "lt", "le", "gt", "ge"};
  return std::string("binary.") + names[int(op)];
}
std::string reduce_name(ReduceOp op) {
  static const char* names[] = {"sum", "mean", "max", "min"};
  return std::string("reduce.") + names[int(op)];
}

class ProfilingBackend final : public Backend {
 public:
  explicit ProfilingBackend(Backend& inner) : inner_(inner) {}

  // Times one call between two of the inner backend's marks: on a GPU, events in its stream,
  // so the time is the device's from the work queued before the call to the end of the call's
  // own, with no wait in between (a wait after each call would leave the device idle while
  // the host launches the next, and make short calls look long). Where the device keeps ahead
  // of the host, that is the call's kernels' time; where it waits for the host, the wait is
  // counted in. The times are read in batches (resolve), waiting for the device then. When
  // the call itself threw, nothing is recorded.
  struct Timer {
    Timer(ProfilingBackend& b, std::string name, const char* family)
        : b_(b), name_(std::move(name)), family_(family), unwinding_(std::uncaught_exceptions()) {
      std::lock_guard<std::mutex> lock(b_.mu_);
      start_ = b_.inner_.mark();
      ++b_.open_;
    }
    ~Timer() noexcept(false) {
      std::lock_guard<std::mutex> lock(b_.mu_);
      --b_.open_;
      if (std::uncaught_exceptions() > unwinding_) return;
      b_.pending_.push_back({std::move(name_), family_, start_, b_.inner_.mark()});
      // (read once no call is being timed, so the batch's marks can be freed: a call made
      // inside another, or on another thread, waits for the outermost to end)
      if (b_.pending_.size() >= kMaxPending && b_.open_ == 0) b_.resolve_locked();
    }
    ProfilingBackend& b_;
    std::string name_;
    const char* family_;
    int64_t start_ = 0;
    int unwinding_;
  };
  static constexpr size_t kMaxPending = 4096;  // calls whose times are read in one batch

  // Adds the pending calls' times to the totals and frees their marks (once no call is
  // being timed); `discard` drops them instead (profiler::reset).
  void resolve(bool discard = false) {
    std::lock_guard<std::mutex> lock(mu_);
    resolve_locked(discard);
  }

  Device device() const override { return inner_.device(); }
  bool channels_last_native(DType t) const override { return inner_.channels_last_native(t); }
  void* allocate(size_t nbytes) override { return inner_.allocate(nbytes); }
  void deallocate(void* p, size_t nbytes) override { return inner_.deallocate(p, nbytes); }
  MemoryStats memory_stats() const override { return inner_.memory_stats(); }
  void empty_cache() override { return inner_.empty_cache(); }
  void reset_peak_memory_stats() override { return inner_.reset_peak_memory_stats(); }
  void synchronize() override { return inner_.synchronize(); }
  void upload(const void* host, Tensor& dst) override {
    Timer t(*this, "upload", "memory");
    inner_.upload(host, dst);
  }
  void download(const Tensor& src, void* host) override {
    Timer t(*this, "download", "memory");
    inner_.download(src, host);
  }
  void copy(const Tensor& src, Tensor& dst) override {
    Timer t(*this, "copy", "elementwise");
    inner_.copy(src, dst);
  }
  void copy_many(const std::vector<Tensor>& src, std::vector<Tensor>& dst) override {
    Timer t(*this, "copy_many", "elementwise");
    inner_.copy_many(src, dst);
  }
  void fill(Tensor& dst, double value) override {
    Timer t(*this, "fill", "elementwise");
    inner_.fill(dst, value);
  }
  void fill_random(Tensor& dst, RandomKind kind, double a, double b, uint64_t seed, uint64_t offset) override {
    Timer t(*this, "fill_random", "elementwise");
    inner_.fill_random(dst, kind, a, b, seed, offset);
  }
  void unary(UnaryOp op, const Tensor& x, Tensor& out, double a, double b) override {
    Timer t(*this, unary_name(op), "elementwise");
    inner_.unary(op, x, out, a, b);
  }
  void unary_backward(UnaryOp op, const Tensor& grad, const Tensor& x, const Tensor& y, double a,
                      Tensor& grad_x) override {
    Timer t(*this, unary_name(op, true), "elementwise");
    inner_.unary_backward(op, grad, x, y, a, grad_x);
  }
  void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) override {
    Timer t(*this, binary_name(op), "elementwise");
    inner_.binary(op, a, b, out);
  }
  void where(const Tensor& cond, const Tensor& a, const Tensor& b, Tensor& out) override {
    Timer t(*this, "where", "elementwise");
    inner_.where(cond, a, b, out);
  }
  void reduce(ReduceOp op, const Tensor& x, const Shape& dims, Tensor& out) override {
    Timer t(*this, reduce_name(op), "reduce");
    inner_.reduce(op, x, dims, out);
  }
  void argmax(const Tensor& x, int64_t dim, Tensor& out) override {
    Timer t(*this, "argmax", "reduce");
    inner_.argmax(x, dim, out);
  }
  void gemm(const Tensor& a, const Tensor& b, Tensor& out, double alpha, double beta) override {
    Timer t(*this, "gemm", "matmul");
    inner_.gemm(a, b, out, alpha, beta);
  }
  void gemm_bias(const Tensor& a, const Tensor& b, const Tensor& bias, Tensor& out) override {
    Timer t(*this, "gemm_bias", "matmul");
    inner_.gemm_bias(a, b, bias, out);
  }
  void gemm_bias_grad(const Tensor& a, const Tensor& b, Tensor& out, Tensor& grad_bias) override {
    Timer t(*this, "gemm_bias_grad", "matmul");
    inner_.gemm_bias_grad(a, b, out, grad_bias);
  }
  void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out, const Conv2dParams& p) override {
    Timer t(*this, "conv2d_forward", "conv");
    inner_.conv2d_forward(x, w, bias, out, p);
  }
  void conv2d_backward_input(const Tensor& grad_out, const Tensor& w, Tensor& grad_x, const Conv2dParams& p) override {
    Timer t(*this, "conv2d_backward_input", "conv");
    inner_.conv2d_backward_input(grad_out, w, grad_x, p);
  }
  void conv2d_backward_weight(const Tensor& grad_out, const Tensor& x, Tensor& grad_w, const Conv2dParams& p) override {
    Timer t(*this, "conv2d_backward_weight", "conv");
    inner_.conv2d_backward_weight(grad_out, x, grad_w, p);
  }
  void max_pool2d_forward(const Tensor& x, Tensor& out, Tensor& indices, const Pool2dParams& p) override {
    Timer t(*this, "max_pool2d_forward", "pool");
    inner_.max_pool2d_forward(x, out, indices, p);
  }
  void max_pool2d_backward(const Tensor& grad_out, const Tensor& indices, Tensor& grad_x, const Pool2dParams& p) override {
    Timer t(*this, "max_pool2d_backward", "pool");
    inner_.max_pool2d_backward(grad_out, indices, grad_x, p);
  }
  void avg_pool2d_forward(const Tensor& x, Tensor& out, const Pool2dParams& p) override {
    Timer t(*this, "avg_pool2d_forward", "pool");
    inner_.avg_pool2d_forward(x, out, p);
  }
  void avg_pool2d_backward(const Tensor& grad_out, Tensor& grad_x, const Pool2dParams& p) override {
    Timer t(*this, "avg_pool2d_backward", "pool");
    inner_.avg_pool2d_backward(grad_out, grad_x, p);
  }
  void adaptive_avg_pool2d_forward(const Tensor& x, Tensor& out) override {
    Timer t(*this, "adaptive_avg_pool2d_forward", "pool");
    inner_.adaptive_avg_pool2d_forward(x, out);
  }
  void adaptive_avg_pool2d_backward(const Tensor& grad_out, Tensor& grad_x) override {
    Timer t(*this, "adaptive_avg_pool2d_backward", "pool");
    inner_.adaptive_avg_pool2d_backward(grad_out, grad_x);
  }
  void softmax_forward(const Tensor& x, int64_t dim, bool log, Tensor& out) override {
    Timer t(*this, "softmax_forward", "softmax");
    inner_.softmax_forward(x, dim, log, out);
  }
  void softmax_backward(const Tensor& grad, const Tensor& y, int64_t dim, bool log, Tensor& grad_x) override {
    Timer t(*this, "softmax_backward", "softmax");
    inner_.softmax_backward(grad, y, dim, log, grad_x);
  }
  void cross_entropy_forward(const Tensor& logits, const Tensor& target, double smoothing, int64_t ignore_index, Tensor& loss, Tensor& lse) override {
    Timer t(*this, "cross_entropy_forward", "loss");
    inner_.cross_entropy_forward(logits, target, smoothing, ignore_index, loss, lse);
  }
  void cross_entropy_backward(const Tensor& grad_loss, const Tensor& logits, const Tensor& target, const Tensor& lse, double smoothing, int64_t ignore_index, Tensor& grad_logits) override {
    Timer t(*this, "cross_entropy_backward", "loss");
    inner_.cross_entropy_backward(grad_loss, logits, target, lse, smoothing, ignore_index, grad_logits);
  }
  void dropout_forward(const Tensor& x, double p, uint64_t seed, uint64_t offset, Tensor& out, Tensor& mask) override {
    Timer t(*this, "dropout_forward", "dropout");
    inner_.dropout_forward(x, p, seed, offset, out, mask);
  }
  void dropout_backward(const Tensor& grad, const Tensor& mask, double p, Tensor& grad_x) override {
    Timer t(*this, "dropout_backward", "dropout");
    inner_.dropout_backward(grad, mask, p, grad_x);
  }
  void batch_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& running_mean, Tensor& running_var, bool training, double momentum, double eps, Tensor& out, Tensor& save_mean, Tensor& save_invstd) override {
    Timer t(*this, "batch_norm_forward", "norm");
    inner_.batch_norm_forward(x, weight, bias, running_mean, running_var, training, momentum, eps, out, save_mean, save_invstd);
  }
  void batch_norm_relu_forward(const Tensor& x, const Tensor& z, const Tensor& weight, const Tensor& bias, Tensor& running_mean, Tensor& running_var, bool training, double momentum, double eps, Tensor& out, Tensor& save_mean, Tensor& save_invstd, Tensor& reserve) override {
    Timer t(*this, "batch_norm_relu_forward", "norm");
    inner_.batch_norm_relu_forward(x, z, weight, bias, running_mean, running_var, training, momentum, eps, out, save_mean, save_invstd, reserve);
  }
  void batch_norm_relu_backward(const Tensor& grad, const Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& save_mean, const Tensor& save_invstd, const Tensor& reserve, bool training, double eps, Tensor& grad_x, Tensor& grad_z, Tensor& grad_weight, Tensor& grad_bias) override {
    Timer t(*this, "batch_norm_relu_backward", "norm");
    inner_.batch_norm_relu_backward(grad, out, x, weight, bias, save_mean, save_invstd, reserve, training, eps, grad_x, grad_z, grad_weight, grad_bias);
  }
  void batch_norm_backward(const Tensor& grad, const Tensor& x, const Tensor& weight, const Tensor& save_mean, const Tensor& save_invstd, bool training, Tensor& grad_x, Tensor& grad_weight, Tensor& grad_bias) override {
    Timer t(*this, "batch_norm_backward", "norm");
    inner_.batch_norm_backward(grad, x, weight, save_mean, save_invstd, training, grad_x, grad_weight, grad_bias);
  }
  void layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, Tensor& out, Tensor& mean, Tensor& rstd) override {
    Timer t(*this, "layer_norm_forward", "norm");
    inner_.layer_norm_forward(x, weight, bias, eps, out, mean, rstd);
  }
  void layer_norm_backward(const Tensor& grad, const Tensor& x, const Tensor& weight, const Tensor& mean, const Tensor& rstd, Tensor& grad_x, Tensor& grad_weight, Tensor& grad_bias) override {
    Timer t(*this, "layer_norm_backward", "norm");
    inner_.layer_norm_backward(grad, x, weight, mean, rstd, grad_x, grad_weight, grad_bias);
  }
  void dropout_add_layer_norm_forward(const Tensor& x, const Tensor& residual, double p,
                                      uint64_t seed, uint64_t offset, const Tensor& weight,
                                      const Tensor& bias, double eps, Tensor& sum, Tensor& mask,
                                      Tensor& out, Tensor& mean, Tensor& rstd) override {
    Timer t(*this, "dropout_add_layer_norm_forward", "norm");
    inner_.dropout_add_layer_norm_forward(x, residual, p, seed, offset, weight, bias, eps, sum,
                                          mask, out, mean, rstd);
  }
  void dropout_add_layer_norm_backward(const Tensor& grad, const Tensor& sum,
                                       const Tensor& weight, const Tensor& mean,
                                       const Tensor& rstd, const Tensor& mask, double p,
                                       Tensor& grad_sum, Tensor& grad_x, Tensor& grad_weight,
                                       Tensor& grad_bias) override {
    Timer t(*this, "dropout_add_layer_norm_backward", "norm");
    inner_.dropout_add_layer_norm_backward(grad, sum, weight, mean, rstd, mask, p, grad_sum,
                                           grad_x, grad_weight, grad_bias);
  }
  void gather_rows(const Tensor& src, const Tensor& index, Tensor& out) override {
    Timer t(*this, "gather_rows", "embedding");
    inner_.gather_rows(src, index, out);
  }
  void scatter_add_rows(const Tensor& grad, const Tensor& index, int64_t skip_index, Tensor& out) override {
    Timer t(*this, "scatter_add_rows", "embedding");
    inner_.scatter_add_rows(grad, index, skip_index, out);
  }
  void embedding_bag_forward(const Tensor& table, const Tensor& index, const Tensor& weights,
                             Tensor& out) override {
    Timer t(*this, "embedding_bag_forward", "embedding");
    inner_.embedding_bag_forward(table, index, weights, out);
  }
  void embedding_bag_backward(const Tensor& grad, const Tensor& index, const Tensor& weights,
                              Tensor& grad_table) override {
    Timer t(*this, "embedding_bag_backward", "embedding");
    inner_.embedding_bag_backward(grad, index, weights, grad_table);
  }
  void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask, double scale, const rng::DropoutDraw& drop, Tensor& out, Tensor& lse) override {
    Timer t(*this, "attention_forward", "attention");
    inner_.attention_forward(q, k, v, key_mask, scale, drop, out, lse);
  }
  void attention_backward(const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask, const Tensor& out, const Tensor& lse, double scale, const rng::DropoutDraw& drop, Tensor& grad_q, Tensor& grad_k, Tensor& grad_v) override {
    Timer t(*this, "attention_backward", "attention");
    inner_.attention_backward(grad_out, q, k, v, key_mask, out, lse, scale, drop, grad_q, grad_k, grad_v);
  }
  std::shared_ptr<const PackedOperand> pack_operand(const Tensor& b) override {
    Timer t(*this, "pack_operand", "matmul");
    return inner_.pack_operand(b);
  }
  void gemm_packed(const Tensor& a, const Tensor& b, const PackedOperand* packed, Tensor& out,
                   double alpha, double beta) override {
    Timer t(*this, "gemm_packed", "matmul");
    inner_.gemm_packed(a, b, packed, out, alpha, beta);
  }
  void recurrent_step_forward(const RecurrentStep& s) override {
    Timer t(*this, "recurrent_step_forward", "recurrence");
    inner_.recurrent_step_forward(s);
  }
  void recurrent_step_backward(const RecurrentStepGrad& s) override {
    Timer t(*this, "recurrent_step_backward", "recurrence");
    inner_.recurrent_step_backward(s);
  }
  void sgd_step(std::vector<SgdSlot>& slots, double momentum, double dampening,
                bool nesterov) override {
    Timer t(*this, "sgd_step", "optim");
    inner_.sgd_step(slots, momentum, dampening, nesterov);
  }
  void adamw_step(std::vector<AdamWSlot>& slots, double beta1, double beta2,
                  double eps) override {
    Timer t(*this, "adamw_step", "optim");
    inner_.adamw_step(slots, beta1, beta2, eps);
  }
  void scale_grads(std::vector<Tensor>& grads, double factor, Tensor& found_inf) override {
    Timer t(*this, "scale_grads", "optim");
    inner_.scale_grads(grads, factor, found_inf);
  }
  void sum_squares(const std::vector<Tensor>& tensors, Tensor& out) override {
    Timer t(*this, "sum_squares", "optim");
    inner_.sum_squares(tensors, out);
  }
  void clip_grads(std::vector<Tensor>& grads, const Tensor& sum_squares, double max_norm) override {
    Timer t(*this, "clip_grads", "optim");
    inner_.clip_grads(grads, sum_squares, max_norm);
  }

 private:
  struct Pending {
    std::string name;
    const char* family;
    int64_t start, end;
  };
  void resolve_locked(bool discard = false) {
    std::vector<Pending> batch;
    batch.swap(pending_);  // (a read that throws leaves none of the batch to read again)
    struct Release {  // the marks, once no call is being timed, also when a read throws
      ProfilingBackend& b;
      ~Release() {
        if (b.open_ == 0) b.inner_.release_marks();
      }
    } release{*this};
    if (discard) return;
    std::map<std::string, profiler::Entry> sums;  // read whole before any is counted
    for (const Pending& p : batch) {
      auto& e = sums[p.name];
      e.family = p.family;
      e.calls++;
      e.seconds += inner_.elapsed(p.start, p.end);
    }
    auto& t = totals();
    std::lock_guard<std::mutex> lock(t.mu);
    for (auto& [name, s] : sums) {
      auto& e = t.by_name[name];
      e.name = name;
      e.family = s.family;
      e.calls += s.calls;
      e.seconds += s.seconds;
    }
  }

  Backend& inner_;
  std::mutex mu_;  // the pending calls and the inner backend's marks
  std::vector<Pending> pending_;
  int open_ = 0;  // calls being timed (their marks stay until they end)
};

std::mutex& wrappers_mu() {
  static auto* mu = new std::mutex;
  return *mu;
}
std::map<Backend*, std::unique_ptr<ProfilingBackend>>& wrappers() {
  static auto* w = new std::map<Backend*, std::unique_ptr<ProfilingBackend>>;
  return *w;
}
// Every wrapper's pending calls into the totals (or dropped).
void resolve_all(bool discard) {
  std::lock_guard<std::mutex> lock(wrappers_mu());
  for (auto& [inner, w] : wrappers()) w->resolve(discard);
}

}  // namespace

Backend& profiled(Backend& inner) {
  std::lock_guard<std::mutex> lock(wrappers_mu());
  auto& w = wrappers()[&inner];
  if (!w) w = std::make_unique<ProfilingBackend>(inner);
  return *w;
}

bool profiling_enabled() { return g_enabled.load(std::memory_order_relaxed); }

}  // namespace nn::backend

namespace nn::profiler {

void enable(bool on) { backend::g_enabled = on; }
bool enabled() { return backend::g_enabled; }
void reset() {
  backend::resolve_all(true);
  auto& t = backend::totals();
  std::lock_guard<std::mutex> lock(t.mu);
  t.by_name.clear();
}

std::vector<Entry> entries() {
  backend::resolve_all(false);
  auto& t = backend::totals();
  std::lock_guard<std::mutex> lock(t.mu);
  std::vector<Entry> v;
  for (auto& [n, e] : t.by_name) v.push_back(e);
  std::sort(v.begin(), v.end(), [](auto& a, auto& b) { return a.seconds > b.seconds; });
  return v;
}

std::string report(double wall) {
  auto v = entries();
  std::map<std::string, double> fam;
  double total = 0;
  for (auto& e : v) {
    fam[e.family] += e.seconds;
    total += e.seconds;
  }
  std::vector<std::pair<std::string, double>> fams(fam.begin(), fam.end());
  std::sort(fams.begin(), fams.end(), [](auto& a, auto& b) { return a.second > b.second; });
  std::ostringstream os;
  char buf[160];
  auto pct = [&](double s) { return wall > 0 ? 100.0 * s / wall : 100.0 * s / std::max(total, 1e-12); };
  os << "family               seconds   share\n";
  for (auto& [f, s] : fams) {
    std::snprintf(buf, sizeof buf, "%-18s %9.3f  %5.1f%%\n", f.c_str(), s, pct(s));
    os << buf;
  }
  if (wall > 0) {
    std::snprintf(buf, sizeof buf, "%-18s %9.3f  %5.1f%%\n", "outside primitives",
                  std::max(0.0, wall - total), pct(std::max(0.0, wall - total)));
    os << buf;
  }
  os << "\nprimitive                          calls   seconds   share\n";
  for (auto& e : v) {
    std::snprintf(buf, sizeof buf, "%-32s %8lld %9.3f  %5.1f%%\n", e.name.c_str(),
                  (long long)e.calls, e.seconds, pct(e.seconds));
    os << buf;
  }
  return os.str();
}

}  // namespace nn::profiler
