// Ops and optimizers against PyTorch's own numbers (tests/fixtures/make_torch_ops.py writes
// them, from torch on PyPI): the conventions where a port from PyTorch could go silently
// wrong. f64, on the CPU and CUDA. And tests/fixtures/make_torch_special.py's: elementwise ops,
// reductions, softmax, the losses and max pooling at infinities, NaN, zeros and ties, in f64, f32, f16 and
// bf16.
#include "test_util.h"

#include <sstream>

using namespace nn;

namespace {

// A copy of tests/fixtures/torch/ops.safetensors' tensor NAME on device d.
Tensor get(const std::string& name, Device d = kCPU) {
  static const test::Fixture ops("torch/ops.safetensors");
  return ops.get(name).clone().to(d);
}

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

// fn on the case's inputs on d: its output, and the inputs' gradients of sum(out * w),
// against PyTorch's.
void check_case(const std::string& name, int inputs, Device d, const Fn& fn, double tol = 1e-10) {
  INFO(name << " on " << d.str());
  std::vector<Tensor> xs;
  for (int i = 0; i < inputs; ++i) xs.push_back(get(name + ".in" + std::to_string(i), d).requires_grad_());
  Tensor y = fn(xs);
  test::require_close(y.cpu(), get(name + ".out"), tol, tol);
  sum(mul(y, get(name + ".w", d))).backward();
  for (int i = 0; i < inputs; ++i) {
    INFO("gradient of input " << i);
    test::require_close(xs[i].grad().cpu(), get(name + ".grad" + std::to_string(i)), tol, tol);
  }
}

Pool2dParams pool(test::Pair k, test::Pair s, test::Pair p, test::Pair dil = {1, 1}, bool count_pad = true) {
  return test::pool_params(k, s, p, dil, count_pad);
}

// Five steps of the optimizer `make` builds, fed PyTorch's gradients: the parameter after
// each against torch.optim's.
template <typename Make>
void check_optimizer(const std::string& name, Device d, Make make) {
  INFO(name << " on " << d.str());
  Tensor p = get(name + ".p0", d).requires_grad_();
  auto opt = make(p);
  for (int k = 1; k <= 5; ++k) {
    INFO("step " << k);
    p.set_grad(get(name + ".g" + std::to_string(k), d));
    opt.step();
    test::require_close(p.cpu(), get(name + ".p" + std::to_string(k)), 1e-12, 1e-13);
  }
}

// Two parameters in two groups (their own lr and weight decay) under StepLR(2, 0.5), as
// make_torch_ops.py's grouped() steps them: the schedule halves every group's rate.
template <typename Make>
void check_groups(const std::string& name, Device d, Make make) {
  INFO(name << " on " << d.str());
  std::vector<Tensor> ps;
  for (int i = 0; i < 2; ++i) ps.push_back(get(name + ".p0_" + std::to_string(i), d).requires_grad_());
  auto opt = make(ps);
  optim::StepLR sched(opt, 2, 0.5);
  for (int k = 1; k <= 5; ++k) {
    for (int i = 0; i < 2; ++i) {
      INFO("step " << k << ", group " << i);
      ps[i].set_grad(get(name + ".g" + std::to_string(k) + "_" + std::to_string(i), d));
    }
    opt.step();
    sched.step();
    for (int i = 0; i < 2; ++i) {
      INFO("step " << k << ", group " << i);
      test::require_close(ps[i].cpu(), get(name + ".p" + std::to_string(k) + "_" + std::to_string(i)),
                          1e-12, 1e-13);
    }
  }
}

}  // namespace

TEST_CASE("ops agree with PyTorch's: cross entropy, pooling (ceil_mode too), convolution, attention, activations, binary cross entropy", "[torch][cuda]") {
  for (Device d : test::devices()) {
    const Tensor t1 = get("ce_smooth_ignore.extra0", d), t2 = get("ce_nd_sum.extra0", d);
    check_case("ce_smooth_ignore", 1, d, [&](auto& x) {
      CrossEntropyOptions o;
      o.label_smoothing = 0.1;
      o.ignore_index = 2;
      return cross_entropy(x[0], t1, o);
    });
    check_case("ce_nd_sum", 1, d, [&](auto& x) {
      CrossEntropyOptions o;
      o.label_smoothing = 0.2;
      o.reduction = Reduction::sum;
      return cross_entropy(x[0], t2, o);
    });
    check_case("avg_pool_no_pad_count", 1, d, [](auto& x) {
      return avg_pool2d(x[0], pool({3, 3}, {2, 2}, {1, 1}, {1, 1}, false));
    });
    check_case("avg_pool_pad_count", 1, d,
               [](auto& x) { return avg_pool2d(x[0], pool({3, 2}, {2, 1}, {1, 1})); });
    check_case("max_pool_dilated", 1, d,
               [](auto& x) { return max_pool2d(x[0], pool({3, 3}, {2, 2}, {1, 1}, {2, 2})); });
    auto ceil = [](Pool2dParams p) {
      p.ceil_mode = true;
      return p;
    };
    check_case("max_pool_ceil", 1, d, [&](auto& x) { return max_pool2d(x[0], ceil(pool({3, 3}, {2, 2}, {1, 1}))); });
    check_case("max_pool_ceil_dropped", 1, d,
               [&](auto& x) { return max_pool2d(x[0], ceil(pool({2, 2}, {2, 2}, {1, 1}))); });
    check_case("avg_pool_ceil_pad_count", 1, d,
               [&](auto& x) { return avg_pool2d(x[0], ceil(pool({3, 3}, {2, 2}, {1, 1}))); });
    check_case("avg_pool_ceil_no_pad_count", 1, d, [&](auto& x) {
      return avg_pool2d(x[0], ceil(pool({4, 3}, {3, 2}, {1, 1}, {1, 1}, false)));
    });
    check_case("silu", 1, d, [](auto& x) { return silu(x[0]); });
    check_case("softplus_beta", 1, d, [](auto& x) { return softplus(x[0], 2.0); });
    check_case("log1p", 1, d, [](auto& x) { return log1p(x[0]); });
    check_case("group_norm", 3, d, [](auto& x) { return group_norm(x[0], 3, x[1], x[2]); });
    check_case("leaky_relu", 1, d, [](auto& x) { return leaky_relu(x[0], 0.2); });
    check_case("elu", 1, d, [](auto& x) { return elu(x[0], 1.5); });
    check_case("bce_logits", 2, d, [&](auto& x) {
      BceWithLogitsOptions o;
      o.weight = get("bce_logits.extra0", d);
      o.pos_weight = get("bce_logits.extra1", d);
      return binary_cross_entropy_with_logits(x[0], x[1], o);
    });
    check_case("bce_logits_none", 2, d, [](auto& x) {
      BceWithLogitsOptions o;
      o.reduction = Reduction::none;
      return binary_cross_entropy_with_logits(x[0], x[1], o);
    });
    check_case("adaptive_down", 1, d, [](auto& x) { return adaptive_avg_pool2d(x[0], {4, 5}); });
    check_case("adaptive_up", 1, d, [](auto& x) { return adaptive_avg_pool2d(x[0], {13, 3}); });
    check_case("conv_groups_dilation", 3, d, [](auto& x) {
      return conv2d(x[0], x[1], x[2], test::conv_params({2, 1}, {1, 2}, {2, 1}, 2));
    });
    check_case("conv1d_groups_dilation", 3, d, [](auto& x) {
      return conv1d(x[0], x[1], x[2], {.stride = 2, .padding = 3, .dilation = 2, .groups = 2});
    });
    check_case("max_pool1d_ceil", 1, d, [](auto& x) {
      return max_pool1d(x[0], {.kernel = 3, .stride = 2, .padding = 1, .dilation = 2, .ceil_mode = true});
    });
    check_case("avg_pool1d_no_pad_count", 1, d, [](auto& x) {
      return avg_pool1d(x[0], {.kernel = 4, .stride = 3, .padding = 2, .count_include_pad = false,
                               .ceil_mode = true});
    });
    check_case("adaptive_avg_pool1d", 1, d, [](auto& x) { return adaptive_avg_pool1d(x[0], 4); });
    check_case("l1_loss", 2, d, [](auto& x) { return l1_loss(x[0], x[1]); });
    check_case("smooth_l1_none", 2, d,
               [](auto& x) { return smooth_l1_loss(x[0], x[1], Reduction::none, 0.5); });
    check_case("huber_sum", 2, d, [](auto& x) { return huber_loss(x[0], x[1], Reduction::sum, 2.0); });
    check_case("pad_mixed", 1, d, [](auto& x) { return pad(x[0], {2, -1, -1, 3}, 1.5); });
    check_case("pad_reflect", 1, d, [](auto& x) { return pad(x[0], {2, 1, 1, 2}, PadMode::reflect); });
    check_case("pad_replicate", 1, d, [](auto& x) { return pad(x[0], {3, 0, 2, 1}, PadMode::replicate); });
    check_case("pad_circular", 1, d, [](auto& x) { return pad(x[0], {2, 4}, PadMode::circular); });
    const Tensor nll_t = get("nll_weight_ignore.extra0", d), nll_w = get("nll_weight_ignore.extra1", d);
    check_case("nll_weight_ignore", 1, d, [&](auto& x) {
      NllLossOptions o;
      o.weight = nll_w;
      o.ignore_index = 2;
      return nll_loss(x[0], nll_t, o);
    });
    const Tensor nll_t2 = get("nll_nd_sum.extra0", d), nll_t3 = get("nll_none.extra0", d);
    check_case("nll_nd_sum", 1, d, [&](auto& x) {
      NllLossOptions o;
      o.reduction = Reduction::sum;
      return nll_loss(x[0], nll_t2, o);
    });
    check_case("nll_none", 1, d, [&](auto& x) {
      NllLossOptions o;
      o.reduction = Reduction::none;
      return nll_loss(x[0], nll_t3, o);
    });
    check_case("normalize_rows", 1, d, [](auto& x) { return normalize(x[0]); });
    check_case("normalize_p1_dim0", 1, d, [](auto& x) { return normalize(x[0], 1.0, 0, 1e-6); });
    check_case("cosine_similarity", 2, d, [](auto& x) { return cosine_similarity(x[0], x[1], -1); });
    const Tensor keep = get("sdpa_mask.extra0", d);
    check_case("sdpa_mask", 3, d,
               [&](auto& x) { return scaled_dot_product_attention(x[0], x[1], x[2], keep); });
    check_case("sdpa_scale", 3, d,
               [](auto& x) { return scaled_dot_product_attention(x[0], x[1], x[2], {}, 0.3); });
  }
}

TEST_CASE("optimizer steps agree with torch.optim's", "[torch][optim][cuda]") {
  for (Device d : test::devices()) {
    check_optimizer("sgd_momentum", d, [](Tensor& p) {
      return optim::SGD({p}, optim::SGDOptions(0.1).momentum(0.9).dampening(0.3).weight_decay(0.01));
    });
    check_optimizer("sgd_nesterov", d, [](Tensor& p) {
      return optim::SGD({p}, optim::SGDOptions(0.05).momentum(0.8).nesterov(true).weight_decay(0.02));
    });
    check_optimizer("adamw", d, [](Tensor& p) {
      return optim::AdamW({p}, optim::AdamWOptions(0.01).beta1(0.8).beta2(0.95).eps(1e-6).weight_decay(0.1));
    });
    check_optimizer("adam_l2", d, [](Tensor& p) {
      return optim::Adam({p}, optim::AdamOptions(0.01).beta1(0.8).beta2(0.95).eps(1e-6).weight_decay(0.1));
    });
    // Adam with decoupled weight decay is AdamW (torch's decoupled_weight_decay=True)
    check_optimizer("adamw", d, [](Tensor& p) {
      return optim::Adam({p}, optim::AdamOptions(0.01).beta1(0.8).beta2(0.95).eps(1e-6).weight_decay(0.1)
                                  .decoupled_weight_decay(true));
    });
    // torch's groups with lr 0.1 and 0.01 are lr_scale 0.1 and 0.01 of a rate of 1
    auto groups = [](std::vector<Tensor>& ps) {
      return std::vector<optim::ParamGroup>{{{ps[0]}, std::nullopt, 0.1}, {{ps[1]}, 0.0, 0.01}};
    };
    check_groups("groups_sgd", d, [&](std::vector<Tensor>& ps) {
      return optim::SGD(groups(ps), optim::SGDOptions(1.0).momentum(0.9).weight_decay(0.05));
    });
    check_groups("groups_adamw", d, [&](std::vector<Tensor>& ps) {
      return optim::AdamW(groups(ps), optim::AdamWOptions(1.0).weight_decay(0.1));
    });
    check_groups("groups_adam", d, [&](std::vector<Tensor>& ps) {
      return optim::Adam(groups(ps), optim::AdamOptions(1.0).weight_decay(0.1));
    });
  }
}

TEST_CASE("learning-rate schedules agree with torch's and Hugging Face's", "[torch][optim]") {
  // steps [from, to] of each schedule: torch's cosine past T_max turns back up where libnn's
  // stays at min_lr, and libnn's warm-up steps are (s + 1) / (w + 1) of the rate where Hugging
  // Face's are s / w (its step 0 trains at 0): compared from the end of the warm-up on
  Tensor p = zeros({1}, kF64).requires_grad_();
  auto check = [&](const std::string& name, auto make, int64_t from, int64_t to) {
    optim::SGD opt({p}, optim::SGDOptions(0.1));
    auto sched = make(opt);
    const std::vector<double> want = get(name + ".lr").to_vector<double>();
    REQUIRE(to < int64_t(want.size()));
    for (int64_t s = 0; s <= to; ++s) {
      INFO(name << " at step " << s);
      if (s >= from) CHECK(opt.lr() == Approx(want[s]).epsilon(1e-12).margin(1e-15));
      sched.step();
    }
  };
  check("cosine", [](optim::Optimizer& o) { return optim::CosineLR(o, 0, 10, 0.01); }, 0, 10);
  check("step", [](optim::Optimizer& o) { return optim::StepLR(o, 3, 0.5); }, 0, 10);
  check("hf_linear", [](optim::Optimizer& o) { return optim::LinearLR(o, 3, 10); }, 3, 12);
  check("hf_cosine", [](optim::Optimizer& o) { return optim::CosineLR(o, 3, 10); }, 3, 10);
}

namespace {

// tests/fixtures/torch/special.safetensors' tensor NAME (make_torch_special.py).
Tensor special(const std::string& name) {
  static const test::Fixture f("torch/special.safetensors");
  return f.get(name);
}

// Where got and want differ beyond tol * (1 + |want|) (test::first_far: NaN against NaN and
// equal infinities agree; an infinity or NaN against anything else does not): "element i: got
// g, expected w" for the first such element, or "" when they agree. Elements i where skip(i)
// holds are not compared.
std::string mismatch(const Tensor& got, const Tensor& want, double tol,
                     const std::function<bool(size_t)>& skip = {}) {
  if (got.shape() != want.shape()) return "shape " + shape_str(got.shape()) + " against " + shape_str(want.shape());
  const auto w = want.to_vector<double>();
  auto g = got.to_vector<double>();
  if (skip)
    for (size_t i = 0; i < g.size(); ++i)
      if (skip(i)) g[i] = w[i];
  const int64_t i = test::first_far(g, w, tol, tol);
  if (i < 0) return "";
  std::ostringstream s;
  s << "element " << i << ": got " << g[i] << ", expected " << w[i];
  return s.str();
}

// The special-value case NAME in f64, f32, f16 and bf16 on d: its output and the inputs' gradients of
// sum(out * w) against PyTorch's in the same dtype; every disagreement is reported. With
// nan_grad_span k, an input's gradient element i is not compared where output element i / k is
// NaN (1: an elementwise op; a reduction's row length: a row reduced to NaN). tol_scale widens
// the tolerances.
void check_special(const std::string& name, int inputs, Device d, const Fn& fn, bool grad = true,
                   size_t nan_grad_span = 0, double tol_scale = 1) {
  // (16-bit results may be a rounding step apart: each library rounds its own intermediates)
  for (const auto& [prefix, tol0] : {std::pair{"d.", 1e-12}, {"f.", 1e-5}, {"h.", 2e-3}, {"b.", 1.6e-2}}) {
    const std::string key = prefix + name;
    const double tol = tol0 * tol_scale;
    INFO(key << " on " << d.str());
    std::vector<Tensor> xs;
    for (int i = 0; i < inputs; ++i) {
      xs.push_back(special(key + ".in" + std::to_string(i)).clone().to(d));
      if (grad) xs.back().requires_grad_();
    }
    Tensor y = fn(xs);
    const Tensor want = special(key + ".out");
    const std::vector<double> want_values = want.to_vector<double>();
    const std::string out = mismatch(y.cpu(), want, tol);
    INFO("output: " << out);
    CHECK(out.empty());
    if (!grad) continue;
    sum(mul(y, special(key + ".w").to(d))).backward();
    for (int i = 0; i < inputs; ++i) {
      std::function<bool(size_t)> skip;
      if (nan_grad_span) skip = [&](size_t e) { return std::isnan(want_values[e / nan_grad_span]); };
      const std::string g = mismatch(xs[i].grad().cpu(), special(key + ".grad" + std::to_string(i)), tol, skip);
      INFO("gradient of input " << i << ": " << g);
      CHECK(g.empty());
    }
  }
}

}  // namespace

TEST_CASE("ops agree with PyTorch's at infinities, NaN, zeros and ties", "[torch][cuda]") {
  const std::vector<std::pair<std::string, std::function<Tensor(const Tensor&)>>> unary = {
      {"neg", [](const Tensor& x) { return neg(x); }},
      {"exp", [](const Tensor& x) { return exp(x); }},
      {"log", [](const Tensor& x) { return log(x); }},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }},
      {"rsqrt", [](const Tensor& x) { return rsqrt(x); }},
      {"abs", [](const Tensor& x) { return abs(x); }},
      {"square", [](const Tensor& x) { return square(x); }},
      {"relu", [](const Tensor& x) { return relu(x); }},
      {"gelu", [](const Tensor& x) { return gelu(x); }},
      {"tanh", [](const Tensor& x) { return tanh(x); }},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }},
      {"silu", [](const Tensor& x) { return silu(x); }},
      {"log1p", [](const Tensor& x) { return log1p(x); }},
      {"softplus", [](const Tensor& x) { return softplus(x); }},
      {"softplus_beta2", [](const Tensor& x) { return softplus(x, 2.0); }},
      {"leaky_relu", [](const Tensor& x) { return leaky_relu(x, 0.1); }},
      {"elu", [](const Tensor& x) { return elu(x, 1.5); }},
      {"clamp", [](const Tensor& x) { return clamp(x, -1.0, 3.0); }},
      {"pow_half", [](const Tensor& x) { return pow(x, 0.5); }},
      {"pow_2", [](const Tensor& x) { return pow(x, 2.0); }},
      {"pow_3", [](const Tensor& x) { return pow(x, 3.0); }},
      {"pow_m1", [](const Tensor& x) { return pow(x, -1.0); }},
      {"pow_0", [](const Tensor& x) { return pow(x, 0.0); }},
      {"pow_m2_5", [](const Tensor& x) { return pow(x, -2.5); }},
      {"pow_m_half", [](const Tensor& x) { return pow(x, -0.5); }},
      {"pow_m2", [](const Tensor& x) { return pow(x, -2.0); }},
      {"pow_1_5", [](const Tensor& x) { return pow(x, 1.5); }},
      {"rdiv", [](const Tensor& x) { return rdiv(x, 2.0); }},
      {"rsub", [](const Tensor& x) { return rsub(x, 2.0); }},
      {"div_scalar", [](const Tensor& x) { return x / 4.0; }},
      {"add_scalar", [](const Tensor& x) { return add(x, double(INFINITY)); }},
      {"mul_scalar", [](const Tensor& x) { return mul(x, 0.0); }},
  };
  const std::vector<std::pair<std::string, Tensor (*)(const Tensor&, const Tensor&)>> binary = {
      {"maximum", maximum}, {"minimum", minimum}, {"pow", pow}, {"div", div},
      {"mul", mul}, {"add", add}, {"sub", sub}};
  for (Device d : test::devices()) {
    for (const auto& [name, f] : unary) {
      const auto fn = f;  // (clang 14 captures no structured binding)
      check_special(name, 1, d, [fn](auto& x) { return fn(x[0]); });
    }
    // Where maximum or minimum is NaN, its gradient goes to the NaN input (to a when both
    // are); PyTorch's rule gives the whole gradient to each input there, twice the output's
    for (const auto& [name, f] : binary) {
      const auto fn = f;
      const bool extremum = name == "maximum" || name == "minimum";
      check_special(name, 2, d, [fn](auto& x) { return fn(x[0], x[1]); }, true, extremum ? 1 : 0);
    }
    check_special("amax", 1, d, [](auto& x) { return amax(x[0], {1}); });
    check_special("amin", 1, d, [](auto& x) { return amin(x[0], {1}); });
    check_special("amax_all", 1, d, [](auto& x) { return amax(x[0].narrow(0, 1, 1)); });
    check_special("sum", 1, d, [](auto& x) { return sum(x[0], {1}); });
    check_special("mean", 1, d, [](auto& x) { return mean(x[0], {0}); });
    // var of a row holding an infinity is NaN, its gradient NaN here (x - mean through
    // autograd, whose mean term is NaN) and inf at the finite entries in PyTorch (2 (x - mean)
    // / (n - 1), the mean term left out as zero)
    check_special("var", 1, d, [](auto& x) { return var(x[0], {1}); }, true, 4);
    check_special("var_one", 1, d, [](auto& x) { return var(x[0].narrow(1, 0, 1), {1}); });
    check_special("mean_empty", 1, d, [](auto& x) { return mean(x[0].narrow(1, 0, 0), {1}); });
    check_special("sum_empty", 1, d, [](auto& x) { return sum(x[0].narrow(1, 0, 0), {1}); });
    check_special("argmax", 1, d, [](auto& x) { return argmax(x[0], 1); }, false);
    check_special("softmax", 1, d, [](auto& x) { return softmax(x[0], 1); });
    check_special("log_softmax", 1, d, [](auto& x) { return log_softmax(x[0], 1); });
    const std::vector<std::pair<std::string, Tensor (*)(const Tensor&, const Tensor&)>> losses = {
        {"mse_loss", [](const Tensor& a, const Tensor& b) { return mse_loss(a, b, Reduction::none); }},
        {"l1_loss", [](const Tensor& a, const Tensor& b) { return l1_loss(a, b, Reduction::none); }},
        {"smooth_l1_loss", [](const Tensor& a, const Tensor& b) { return smooth_l1_loss(a, b, Reduction::none, 0.75); }},
        {"huber_loss", [](const Tensor& a, const Tensor& b) { return huber_loss(a, b, Reduction::none, 0.75); }},
        {"bce_logits", [](const Tensor& a, const Tensor& b) {
           BceWithLogitsOptions o;
           o.reduction = Reduction::none;
           return binary_cross_entropy_with_logits(a, b, o);
         }}};
    for (const auto& [name, f] : losses) {
      const auto fn = f;
      check_special(name, 2, d, [fn](auto& x) { return fn(x[0], x[1]); });
    }
    const Tensor target = tensor({2, 0, 1, 2, 1}, kI64).to(d);
    check_special("cross_entropy", 1, d, [&](auto& x) {
      CrossEntropyOptions o;
      o.reduction = Reduction::none;
      return cross_entropy(x[0], target, o);
    });
    check_special("cross_entropy_mean", 1, d, [&](auto& x) {
      return cross_entropy(index_select(x[0], tensor({0, 4}, kI64).to(d)),
                           index_select(target, tensor({0, 4}, kI64).to(d)));
    });
    check_special("cross_entropy_smooth", 1, d, [&](auto& x) {
      CrossEntropyOptions o;
      o.reduction = Reduction::none;
      o.label_smoothing = 0.1;
      const Tensor rows = tensor({0, 1, 4}, kI64).to(d);
      return cross_entropy(index_select(x[0], rows), index_select(target, rows), o);
    });
    check_special("layer_norm", 3, d, [](auto& x) { return layer_norm(x[0], {4}, x[1], x[2]); });
    check_special("where", 2, d, [&](auto& x) {
      return where(tensor({1, 0, 1, 0}, x[0].dtype()).to(d), x[0], x[1]);
    });
    // (a constant channel's 1 / sqrt(eps) = 316 magnifies each library's rounding: PyTorch's
    // f32 batch norm gives 0.0999756 for the bias 0.1 there, x w rstd + (b - mean w rstd))
    check_special("batch_norm", 3, d, [](auto& x) {
      return batch_norm(x[0], Tensor(), Tensor(), x[1], x[2], true);
    }, true, 0, 10);
    check_special("group_norm", 3, d, [](auto& x) { return group_norm(x[0], 3, x[1], x[2]); }, true, 0, 10);
    check_special("normalize", 1, d, [](auto& x) { return normalize(x[0]); });
    check_special("cosine_similarity", 2, d, [](auto& x) { return cosine_similarity(x[0], x[1]); });
    check_special("log_softmax_dim0", 1, d, [](auto& x) { return log_softmax(x[0], 0); });
    check_special("avg_pool2d", 1, d, [](auto& x) { return avg_pool2d(x[0], pool({2, 2}, {2, 2}, {1, 1})); });
    check_special("adaptive_avg_pool2d", 1, d, [](auto& x) { return adaptive_avg_pool2d(x[0], {3, 2}); });
    check_special("matmul", 2, d, [](auto& x) { return matmul(x[0], x[1]); });
    check_special("linear", 3, d, [](auto& x) { return linear(x[0], x[1], x[2]); });
    // (on the CPU only: on CUDA, cuDNN's algorithm search may pick a Winograd or FFT
    // convolution, whose transforms spread an infinity or NaN over a tile, as they do in
    // PyTorch on the GPU; the CUDA convolution tests compare finite values)
    if (d.is_cpu())
      check_special("conv2d", 3, d, [](auto& x) { return conv2d(x[0], x[1], x[2], test::conv_params({1, 1}, {1, 1})); });
    check_special("attention", 3, d, [](auto& x) { return scaled_dot_product_attention(x[0], x[1], x[2]); });
    check_special("max_pool2d", 1, d, [](auto& x) { return max_pool2d(x[0], pool({2, 2}, {2, 2}, {0, 0})); });
  }
}
