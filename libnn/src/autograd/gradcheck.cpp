// Finite-difference gradient check in double precision.
#include <nn/autograd.h>
#include <nn/ops.h>
#include <nn/random.h>

#include <cmath>

namespace nn {

GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                          const std::vector<Tensor>& inputs, GradcheckOptions opts) {
  for (const Tensor& x : inputs)
    NN_CHECK(!x.defined() || (x.dtype() == kF64 && x.device().is_cpu()),
             "gradcheck: inputs must be f64 CPU tensors");
  for (const Tensor& p : opts.params)
    NN_CHECK(p.defined() && p.dtype() == kF64 && p.device().is_cpu() && p.is_leaf() &&
                 p.requires_grad() && p.is_contiguous(),
             "gradcheck: params must be contiguous f64 CPU leaves that require grad");
  // Fresh leaves holding contiguous copies, so perturbing them touches nothing else.
  std::vector<Tensor> xs;
  for (const Tensor& x : inputs) {
    if (!x.defined()) { xs.emplace_back(); continue; }
    Tensor c = x.detach().clone();
    if (x.requires_grad()) c.requires_grad_(true);
    xs.push_back(c);
  }
  // The params' own gradients, put back on return.
  std::vector<Tensor> saved;
  for (Tensor& p : opts.params) {
    saved.push_back(p.grad());
    p.set_grad({});
  }
  struct Restore {
    std::vector<Tensor>& params;
    std::vector<Tensor>& grads;
    ~Restore() {
      for (size_t i = 0; i < params.size(); ++i) params[i].set_grad(grads[i]);
    }
  } restore{opts.params, saved};

  Tensor out = fn(xs);
  Generator gen(1234);
  Tensor r = randn(out.shape(), kF64, &gen);
  auto objective = [&] {
    NoGradGuard ng;
    return sum(mul(fn(xs).detach(), r)).item();
  };
  sum(mul(out, r)).backward();

  GradcheckResult res;
  // Every element of t (perturbed in place) against its analytic gradient.
  auto check = [&](const Tensor& t, const char* kind, size_t i) {
    Tensor analytic = t.grad().defined() ? t.grad().contiguous() : zeros_like(t);
    const double* a = analytic.data<double>();
    double* p = t.data<double>();
    for (int64_t j = 0; j < t.numel(); ++j) {
      double orig = p[j];
      p[j] = orig + opts.eps;
      double fp = objective();
      p[j] = orig - opts.eps;
      double fm = objective();
      p[j] = orig;
      double numeric = (fp - fm) / (2 * opts.eps);
      // (a numeric estimate that overflowed checks nothing: its tolerance would pass any
      // analytic value)
      if (!(std::isfinite(numeric) &&
            std::abs(a[j] - numeric) <= opts.atol + opts.rtol * std::abs(numeric))) {
        res.ok = false;
        res.message = detail::cat(kind, " ", i, " element ", j, ": analytic ", a[j],
                                  " vs numeric ", numeric);
        return false;
      }
    }
    return true;
  };
  for (size_t i = 0; i < xs.size(); ++i) {
    if (!xs[i].defined() || !xs[i].requires_grad()) continue;
    if (!check(xs[i], "input", i)) return res;
  }
  for (size_t i = 0; i < opts.params.size(); ++i)
    if (!check(opts.params[i], "param", i)) return res;
  return res;
}

}  // namespace nn
