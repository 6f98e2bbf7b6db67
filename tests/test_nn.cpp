#include "test_util.h"

using namespace nn;

TEST_CASE("Linear and Conv2d shapes and PyTorch-style init", "[nn]") {
  manual_seed(0);
  Linear fc(LinearOptions(100, 20));
  REQUIRE(fc.weight.shape() == Shape{20, 100});
  REQUIRE(fc.bias.shape() == Shape{20});
  REQUIRE(fc.weight.requires_grad());
  const double bound = 1.0 / std::sqrt(100.0);
  REQUIRE(amax(abs(fc.weight)).item() <= bound);
  REQUIRE(amax(abs(fc.weight)).item() > 0.9 * bound);  // fills the range
  REQUIRE(amax(abs(fc.bias)).item() <= bound);
  REQUIRE(Linear(LinearOptions(3, 2).bias(false)).named_parameters().size() == 1);
  Conv2d conv(Conv2dOptions(4, 8, 3).stride({2, 2}).padding({1, 1}).groups(2));
  REQUIRE(conv.weight.shape() == Shape{8, 2, 3, 3});
  REQUIRE(amax(abs(conv.weight)).item() <= 1.0 / std::sqrt(2.0 * 9.0));
  REQUIRE(conv.forward(ones({1, 4, 8, 8})).shape() == Shape{1, 8, 4, 4});
  REQUIRE(fc.str() == "Linear(in_features=100, out_features=20, bias=true)");
}

TEST_CASE("module trees: names, train/eval, counting, printing", "[nn]") {
  auto net = std::make_shared<Sequential>();
  net->push_back(std::make_shared<Conv2d>(Conv2dOptions(1, 2, 3)));
  net->push_back(std::make_shared<BatchNorm2d>(2));
  net->push_back(std::make_shared<ReLU>());
  net->push_back(std::make_shared<Flatten>());
  net->push_back(std::make_shared<Dropout>(0.5));
  net->push_back(std::make_shared<Linear>(2 * 4 * 4, 3));
  std::vector<std::string> names;
  for (auto& [n, t] : net->named_parameters()) names.push_back(n);
  REQUIRE(names == std::vector<std::string>{"0.weight", "0.bias", "1.weight", "1.bias",
                                            "5.weight", "5.bias"});
  REQUIRE(net->named_buffers().size() == 3);
  REQUIRE(net->num_parameters() == 2 * 9 + 2 + 2 + 2 + 32 * 3 + 3);
  net->eval();
  REQUIRE(!(*net)[4]->is_training());
  Tensor x = randn({2, 1, 6, 6});
  Tensor a = net->forward(x), b = net->forward(x);
  test::require_close(a, b);  // eval: dropout off (BatchNorm2d's eval: the next test)
  net->train();
  REQUIRE((*net)[1]->is_training());
  REQUIRE(net->str().find("(1): BatchNorm2d(2") != std::string::npos);
}

TEST_CASE("BatchNorm2d in eval mode normalises by its running statistics and leaves them",
          "[nn][norm]") {
  BatchNorm2d bn(2);
  auto per_channel = [](float a, float b) { return from_vector<float>({a, b}, {1, 2, 1, 1}); };
  {
    NoGradGuard ng;
    bn.running_mean.copy_(from_vector<float>({0.5f, -1.0f}, {2}));
    bn.running_var.copy_(from_vector<float>({4.0f, 0.25f}, {2}));
    bn.weight.copy_(from_vector<float>({2.0f, 0.5f}, {2}));
    bn.bias.copy_(from_vector<float>({0.1f, -0.3f}, {2}));
  }
  manual_seed(4);
  Tensor x = randn({3, 2, 4, 4});
  bn.eval();
  // by hand: (x - mean) / sqrt(var + eps) * weight + bias, channel by channel
  const Tensor want = (x - per_channel(0.5f, -1.0f)) / sqrt(per_channel(4.0f, 0.25f) + 1e-5) *
                          per_channel(2.0f, 0.5f) + per_channel(0.1f, -0.3f);
  test::require_close(bn.forward(x), want, 1e-5, 1e-6);
  test::require_close(bn.forward_relu(x), relu(want), 1e-5, 1e-6);
  test::require_values(bn.running_mean, {0.5, -1});
  test::require_values(bn.running_var, {4, 0.25});
  REQUIRE(bn.num_batches_tracked.item<int64_t>() == 0);
  // (in training mode the batch's statistics: another output, and the running ones move)
  bn.train();
  REQUIRE(test::first_far(bn.forward(x).to_vector<double>(), want.to_vector<double>(), 1e-2, 1e-2) >= 0);
  REQUIRE(bn.num_batches_tracked.item<int64_t>() == 1);
}

// A module used twice (or tied weights) is one parameter: listed once for optimizers, so it is
// stepped once by its accumulated gradient, and saved under each of its names.
TEST_CASE("ModuleList and Sequential indexing: a wrong index or type is an nn::Error", "[nn][errors]") {
  ModuleList list;
  list.push_back(std::make_shared<Linear>(LinearOptions(2, 3)));
  list.push_back(std::make_shared<ReLU>());
  REQUIRE(list.at<Linear>(0)->weight.shape() == Shape{3, 2});
  REQUIRE(list.at(1)->type_name() == "ReLU");
  // (the index threw std::out_of_range, and a wrong type was an unchecked cast)
  REQUIRE(test::error_of([&] { list.at(2); }).find("index 2 is out of range for size 2") != std::string::npos);
  REQUIRE(test::error_of([&] { list.at<Linear>(1); }).find("module 1 is a ReLU, not the type asked for") != std::string::npos);
  Sequential seq{std::make_shared<ReLU>()};
  REQUIRE(seq[0]->type_name() == "ReLU");
  REQUIRE(test::error_of([&] { seq[1]; }).find("index 1 is out of range for size 1") != std::string::npos);
}

TEST_CASE("a module used twice has its parameters listed and stepped once", "[nn]") {
  auto lin = std::make_shared<Linear>(LinearOptions(2, 2).bias(false));
  auto net = std::make_shared<Sequential>();
  net->push_back(lin);
  net->push_back(lin);
  REQUIRE(net->parameters().size() == 1);
  REQUIRE(net->named_parameters()[0].first == "0.weight");
  REQUIRE(net->num_parameters() == 4);
  REQUIRE(net->state_dict().size() == 2);
  {
    NoGradGuard ng;
    lin->weight.fill_(0.5);
  }
  optim::SGD opt(net->parameters(), optim::SGDOptions(0.1));
  sum(net->forward(ones({1, 2}))).backward();
  Tensor before = lin->weight.clone(), g = lin->weight.grad().clone();
  test::require_values(g, {2, 2, 2, 2});  // both uses: d/dW of sum(W (W x)) at W = 0.5
  opt.step();
  test::require_close(lin->weight, sub(before, mul(g, 0.1)));
  REQUIRE(test::error_of([&] {
            optim::AdamW twice({lin->weight, lin->weight}, optim::AdamWOptions());
          }).find("given twice") != std::string::npos);
  net->load_state_dict(net->state_dict());
}

// Weights tied by registering one module's parameter in another: one parameter (one
// gradient, stepped once, still shared after a cast), as a module used twice.
TEST_CASE("a parameter registered in two modules stays one parameter", "[nn]") {
  struct Tied : Module {
    std::shared_ptr<Linear> enc;
    Tensor dec_w;
    Tied() : Module("Tied") {
      enc = register_module("enc", std::make_shared<Linear>(LinearOptions(3, 3).bias(false)));
      dec_w = register_parameter("dec_w", enc->weight);
    }
    Tensor forward(const Tensor& x) override { return matmul(enc->forward(x), dec_w); }
  };
  auto m = std::make_shared<Tied>();
  REQUIRE(m->parameters().size() == 1);
  REQUIRE(m->state_dict().size() == 2);  // saved under both names
  sum(m->forward(ones({2, 3}))).backward();
  REQUIRE(m->dec_w.grad().defined());
  REQUIRE(m->dec_w.grad().impl() == m->enc->weight.grad().impl());
  m->to(kF64);
  REQUIRE(m->dec_w.dtype() == kF64);
  REQUIRE(m->dec_w.impl() == m->enc->weight.impl());
  // a computed tensor becomes a new leaf; requires_grad = false is honoured
  struct Frozen : Module {
    Tensor w, c;
    Frozen(const Tensor& src) : Module("Frozen") {
      w = register_parameter("w", src, false);
      c = register_parameter("c", mul(src, 2.0));
    }
  };
  Tensor src = ones({2}).requires_grad_(true);
  Frozen f(src);
  REQUIRE(!f.w.requires_grad());
  REQUIRE(f.c.is_leaf());
  REQUIRE(f.c.requires_grad());
}

// Two entries of one name would make a state dict the module cannot load back (or load the
// wrong tensor), so a name is used once among parameters, buffers and children, and is one
// path component.
TEST_CASE("module names are unique and free of dots", "[nn]") {
  struct M : Module {
    explicit M(int which) : Module("M") {
      register_parameter("w", ones({2}));
      if (which == 0) register_buffer("w", zeros({2}));
      if (which == 1) register_parameter("w", zeros({2}));
      if (which == 2) register_module("w", std::make_shared<Linear>(2, 2));
      if (which == 3) register_buffer("fc.weight", zeros({2}));
      if (which == 4) register_buffer("", zeros({2}));
      if (which == 5) {
        register_buffer("s", zeros({3}));
        register_buffer("s", zeros({2}));
      }
    }
  };
  for (int which = 0; which < 6; ++which) {
    INFO("case " << which);
    const std::string e = test::error_of([&] { M m(which); });
    REQUIRE(e.find(which < 3 || which == 5 ? "already registered" : "without '.'") !=
            std::string::npos);
  }
}

TEST_CASE("state_dict round trip and mismatch errors", "[nn]") {
  Linear a(4, 3), b(4, 3);
  b.load_state_dict(a.state_dict());
  test::require_close(a.weight, b.weight);
  Linear c(5, 3);
  std::string msg = test::error_of([&] { c.load_state_dict(a.state_dict()); });
  REQUIRE(msg.find("'weight' has shape [3, 4] in the checkpoint but [3, 5]") != std::string::npos);
  NamedTensors missing = {a.state_dict()[0]};
  REQUIRE(test::error_of([&] { b.load_state_dict(missing); }).find("'bias' is missing") !=
          std::string::npos);
  // a refused load changes nothing (the weight before the bad bias is not copied either)
  Linear d(4, 3);
  const Tensor w0 = d.weight.clone();
  NamedTensors bad = {{"weight", a.weight}, {"bias", zeros({7})}};
  REQUIRE(test::error_of([&] { d.load_state_dict(bad); }).find("'bias' has shape [7]") !=
          std::string::npos);
  test::require_close(d.weight, w0, 0, 0);
}

TEST_CASE("BatchNorm2d tracks batches, and Module::to casts in place", "[nn]") {
  BatchNorm2d bn(3);
  bn.forward(randn({4, 3, 2, 2}));
  bn.forward(randn({4, 3, 2, 2}));
  REQUIRE(bn.num_batches_tracked.item() == 2);
  Linear fc(2, 2);
  Tensor held = fc.weight;  // a handle kept elsewhere, like an optimizer's
  fc.to(kF64);
  REQUIRE(held.dtype() == kF64);
  REQUIRE(fc.forward(ones({1, 2}, kF64)).dtype() == kF64);
  REQUIRE(held.requires_grad());
}

// momentum nullopt (PyTorch's momentum=None): the running statistics are the plain average of
// every batch's (the unbiased variance), also across a state_dict round trip, on the plain
// and on the fused path
TEST_CASE("BatchNorm2d without a momentum keeps the cumulative average", "[nn]") {
  Generator g(11);
  std::vector<Tensor> xs;
  for (int i = 0; i < 5; ++i) xs.push_back(randn({4, 3, 2, 2}, kF64, &g) * double(i + 1) + double(i));
  for (bool fused : {false, true}) {
    INFO("fused " << fused);
    BatchNorm2d bn(BatchNormOptions(3).momentum(std::nullopt));
    bn.to(kF64);
    REQUIRE(bn.extra_repr().find("momentum=None") != std::string::npos);
    for (int i = 0; i < 5; ++i) {
      if (i == 3) {  // a resumed run: the counter and statistics come back from a state_dict
        BatchNorm2d again(BatchNormOptions(3).momentum(std::nullopt));
        again.to(kF64);
        again.load_state_dict(bn.state_dict());
        bn.load_state_dict(again.state_dict());
      }
      fused ? bn.forward_relu(xs[size_t(i)]) : bn.forward(xs[size_t(i)]);
    }
    Tensor want_mean = zeros({3}, kF64), want_var = zeros({3}, kF64);
    for (const Tensor& x : xs) {
      want_mean = want_mean + mean(x, {0, 2, 3}) / 5.0;
      want_var = want_var + var(x, {0, 2, 3}, /*correction=*/1) / 5.0;
    }
    test::require_close(bn.running_mean, want_mean, 1e-12, 1e-12);
    test::require_close(bn.running_var, want_var, 1e-12, 1e-12);
    REQUIRE(bn.num_batches_tracked.item() == 5);
  }
  // with a momentum it is the exponential average (not the plain one)
  BatchNorm2d ema(3);
  ema.to(kF64);
  for (const Tensor& x : xs) ema.forward(x);
  Tensor want = zeros({3}, kF64);
  for (const Tensor& x : xs) want = want * 0.9 + mean(x, {0, 2, 3}) * 0.1;
  test::require_close(ema.running_mean, want, 1e-12, 1e-12);
}

TEST_CASE("Embedding and LayerNorm modules", "[nn]") {
  Embedding emb(EmbeddingOptions(10, 4).padding_idx(0));
  test::require_values(emb.weight.select(0, 0), {0, 0, 0, 0});
  REQUIRE(emb.forward(from_vector<int64_t>({1, 2, 0}, {3})).shape() == Shape{3, 4});
  Embedding last(EmbeddingOptions(10, 4).padding_idx(-1));  // the last row, as in libtorch
  REQUIRE(last.options.padding_idx() == 9);
  test::require_values(last.weight.select(0, 9), {0, 0, 0, 0});
  LayerNorm ln(4);
  {
    NoGradGuard ng;
    ln.weight.copy_(from_vector<float>({1.0f, 2.0f, -1.0f, 0.5f}, {4}));
    ln.bias.fill_(0.25);
  }
  Tensor x = randn({2, 4});
  // by hand: each row less its mean, over its (biased) standard deviation, then the affine
  const Tensor centred = x - mean(x, {1}, true);
  const Tensor want = centred / sqrt(mean(centred * centred, {1}, true) + 1e-5) *
                          from_vector<float>({1.0f, 2.0f, -1.0f, 0.5f}, {4}) + 0.25;
  test::require_close(ln.forward(x), want, 1e-5, 1e-6);
}

// state_dict lists module by module, as PyTorch: each module's parameters, then its buffers,
// then its children's (parameters of the whole tree came before any buffer).
TEST_CASE("state_dict is in PyTorch's order", "[nn]") {
  Sequential net{std::make_shared<Conv2d>(Conv2dOptions(1, 2, 3)), std::make_shared<BatchNorm2d>(2),
                 std::make_shared<Linear>(2, 2)};
  std::vector<std::string> names;
  for (auto& [n, t] : net.state_dict()) names.push_back(n);
  const std::vector<std::string> want{"0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean",
                                      "1.running_var", "1.num_batches_tracked", "2.weight", "2.bias"};
  CHECK(names == want);
}

// Checkpoints from older PyTorch: batch norm without num_batches_tracked (before 0.4.1)
// loads strictly with the counter kept, as PyTorch 2 loads it; a scalar saved as [1] loads.
TEST_CASE("load_state_dict takes older PyTorch checkpoints", "[nn]") {
  BatchNorm2d a(3), b(3);
  a.forward(randn({4, 3, 2, 2}));
  b.forward(randn({4, 3, 2, 2}));
  b.forward(randn({4, 3, 2, 2}));
  NamedTensors old;
  for (auto& [n, t] : a.state_dict())
    if (n != "num_batches_tracked") old.emplace_back(n, t);
  b.load_state_dict(old);
  CHECK(b.num_batches_tracked.item() == 2);
  test::require_close(b.running_mean, a.running_mean, 0, 0);
  NamedTensors legacy = a.state_dict();
  for (auto& [n, t] : legacy)
    if (n == "num_batches_tracked") t = full({1}, 7.0, kI64);
  b.load_state_dict(legacy);
  CHECK(b.num_batches_tracked.item() == 7);
  CHECK(b.num_batches_tracked.dim() == 0);
  // another name that is missing is still an error
  NamedTensors no_var;
  for (auto& [n, t] : a.state_dict())
    if (n != "running_var") no_var.emplace_back(n, t);
  CHECK(test::error_of([&] { b.load_state_dict(no_var); }).find("'running_var' is missing") != std::string::npos);
}

TEST_CASE("a module cannot hold itself, a state names a tensor once, BatchNorm2d takes 4-d input", "[nn][errors]") {
  auto m = std::make_shared<Module>();
  test::require_error("child module 'self' is this module or holds it",
                      [&] { m->register_module("self", m); });
  auto a = std::make_shared<Sequential>(), b = std::make_shared<Sequential>();
  a->push_back(b);
  test::require_error("is this module or holds it", [&] { b->push_back(a); });
  auto shared = std::make_shared<Linear>(2, 2);  // the same child twice is no cycle
  a->push_back(shared);
  a->push_back(shared);
  REQUIRE(a->parameters().size() == 2);
  Linear l(2, 2);
  test::require_error("load_state_dict: 'weight' is given twice", [&] {
    l.load_state_dict({{"weight", ones({2, 2})}, {"bias", ones({2})}, {"weight", zeros({2, 2})}});
  });
  REQUIRE(l.weight.to_vector<float>() != std::vector<float>{1, 1, 1, 1});  // nothing loaded
  BatchNorm2d bn(3);
  test::require_error("BatchNorm2d: expected a 4-d (N, C, H, W) input, got [2, 3, 5]",
                      [&] { bn.forward(ones({2, 3, 5})); });
}
