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
  // Fresh leaves holding contiguous copies, so perturbing them touches nothing else.
  std::vector<Tensor> xs;
  for (const Tensor& x : inputs) {
    if (!x.defined()) { xs.emplace_back(); continue; }
    Tensor c = x.detach().clone();
    if (x.requires_grad()) c.requires_grad_(true);
    xs.push_back(c);
  }
  Tensor out = fn(xs);
  Generator gen(1234);
  Tensor r = randn(out.shape(), kF64, &gen);
  auto objective = [&](const std::vector<Tensor>& in) {
    NoGradGuard ng;
    return sum(mul(fn(in).detach(), r)).item();
  };
  sum(mul(out, r)).backward();

  GradcheckResult res;
  for (size_t i = 0; i < xs.size(); ++i) {
    if (!xs[i].defined() || !xs[i].requires_grad()) continue;
    Tensor analytic = xs[i].grad().defined() ? xs[i].grad().contiguous() : zeros_like(xs[i]);
    const double* a = analytic.data<double>();
    double* p = xs[i].data<double>();
    for (int64_t j = 0; j < xs[i].numel(); ++j) {
      double orig = p[j];
      p[j] = orig + opts.eps;
      double fp = objective(xs);
      p[j] = orig - opts.eps;
      double fm = objective(xs);
      p[j] = orig;
      double numeric = (fp - fm) / (2 * opts.eps);
      if (!(std::abs(a[j] - numeric) <= opts.atol + opts.rtol * std::abs(numeric))) {
        res.ok = false;
        res.message = detail::cat("input ", i, " element ", j, ": analytic ", a[j],
                                  " vs numeric ", numeric);
        return res;
      }
    }
  }
  return res;
}

}  // namespace nn
