// LSTM and GRU: against PyTorch's numbers (tests/fixtures/make_torch_ops.py, loaded through
// PyTorch's parameter names), finite differences, padding by lengths, errors, and a small
// task learnt.
#include <nn/rnn.h>

#include "test_util.h"

using namespace nn;

namespace {
Tensor get(const std::string& name, Device d = kCPU) {
  static const test::Fixture ops("torch/ops.safetensors");
  return ops.get(name).clone().to(d);
}

// The fixture's case `name` through module m (made with the same options) on device d:
// outputs, states, and the gradients of x, the initial states and every parameter.
void check_torch_case(const std::string& name, RNNBase& m, Device d, bool lengths, bool state) {
  INFO(name << " on " << d.str());
  m.to(kF64);
  NamedTensors params;
  for (auto& [k, p] : m.named_parameters()) params.emplace_back(k, get(name + "." + k));
  m.load_state_dict(params);  // strict: PyTorch's names, both ways
  m.to(d);
  m.zero_grad();
  const bool lstm = m.type_name() == "LSTM";
  Tensor x = get(name + ".x", d).requires_grad_();
  RNNState s;
  if (state) {
    s.h = get(name + ".h0", d).requires_grad_();
    if (lstm) s.c = get(name + ".c0", d).requires_grad_();
  }
  RNNOutput r = m.forward(x, s, lengths ? get(name + ".lengths") : Tensor());
  const double tol = 1e-10;
  test::require_close(r.output.cpu(), get(name + ".out"), tol, tol);
  test::require_close(r.state.h.cpu(), get(name + ".h_n"), tol, tol);
  Tensor loss = add(sum(mul(r.output, get(name + ".w_out", d))), sum(mul(r.state.h, get(name + ".w_h", d))));
  if (lstm) {
    test::require_close(r.state.c.cpu(), get(name + ".c_n"), tol, tol);
    loss = add(loss, sum(mul(r.state.c, get(name + ".w_c", d))));
  } else {
    REQUIRE_FALSE(r.state.c.defined());
  }
  loss.backward();
  test::require_close(x.grad().cpu(), get(name + ".grad_x"), tol, tol);
  if (state) {
    test::require_close(s.h.grad().cpu(), get(name + ".grad_h0"), tol, tol);
    if (lstm) test::require_close(s.c.grad().cpu(), get(name + ".grad_c0"), tol, tol);
  }
  for (auto& [k, p] : m.named_parameters()) {
    INFO("gradient of " << k);
    test::require_close(p.grad().cpu(), get(name + ".grad." + k), tol, tol);
  }
}
}  // namespace

TEST_CASE("LSTM, GRU and RNN agree with PyTorch's, padded sequences and initial states too", "[rnn][torch][cuda]") {
  for (Device d : test::devices()) {
    LSTM bi2(LSTMOptions(4, 3).num_layers(2).bidirectional(true));
    check_torch_case("lstm_bi2", bi2, d, true, true);
    GRU bf(GRUOptions(4, 3).num_layers(2).batch_first(true).bidirectional(true));
    check_torch_case("gru_bf", bf, d, true, false);
    GRU nobias(GRUOptions(3, 4).bias(false));
    check_torch_case("gru_nobias", nobias, d, false, true);
    LSTM plain(LSTMOptions(3, 5));
    check_torch_case("lstm_plain", plain, d, false, false);
    RNN rnn_bi2(RNNOptions(4, 3).num_layers(2).bidirectional(true));
    check_torch_case("rnn_tanh_bi2", rnn_bi2, d, true, true);
    RNN relu(RNNOptions(3, 5).nonlinearity("relu").bias(false).batch_first(true));
    check_torch_case("rnn_relu_bf", relu, d, false, false);
  }
}

TEST_CASE("LSTM, GRU and RNN in f32, f16 and bf16 agree with f64, padded and bidirectional, on each device", "[rnn][cuda]") {
  // Each step's cell is one backend call (the CPU's on its vectorised activations, f16 and
  // bf16 computed in f32): outputs, final states and every gradient against the same module
  // and inputs in f64 (the parameters and inputs rounded to the dtype first).
  for (Device d : test::devices())
    for (const char* kind : {"LSTM", "GRU", "RNN", "RNN relu"})
      for (DType dt : {kF32, kF16, kBF16}) {
        INFO(kind << " in " << dtype_name(dt) << " on " << d.str());
        manual_seed(11);
        const std::string k = kind;
        const bool lstm = k == "LSTM";
        const RNNOptions o = RNNOptions(5, 6).num_layers(2).bidirectional(true).nonlinearity(
            k == "RNN relu" ? "relu" : "tanh");
        std::shared_ptr<RNNBase> m;
        if (lstm) m = std::make_shared<LSTM>(o);
        else if (k == "GRU") m = std::make_shared<GRU>(o);
        else m = std::make_shared<RNN>(o);
        m->to(dt);  // the values every run shares
        const Tensor x = randn({7, 3, 5}).to(dt), h0 = randn({4, 3, 6}).to(dt),
                     c0 = randn({4, 3, 6}).to(dt), w_out = randn({7, 3, 12}), w_h = randn({4, 3, 6});
        const Tensor lengths = from_vector<int64_t>({7, 4, 1}, {3});
        struct Run {
          std::vector<Tensor> values;  // output, h_n (c_n), then the gradients
        };
        auto run = [&](DType t) {
          m->to(t);
          m->to(d);
          m->zero_grad();
          Tensor xi = x.to(t).to(d).requires_grad_();
          RNNState s{h0.to(t).to(d).requires_grad_(), lstm ? c0.to(t).to(d).requires_grad_() : Tensor()};
          const RNNOutput r = m->forward(xi, s, lengths);
          Tensor loss = add(sum(mul(r.output.to(kF64), w_out.to(kF64).to(d))),
                            sum(mul(r.state.h.to(kF64), w_h.to(kF64).to(d))));
          if (lstm) loss = add(loss, sum(r.state.c.to(kF64)));
          loss.backward();
          Run out;
          for (const Tensor& v : {r.output, r.state.h, xi.grad(), s.h.grad()}) out.values.push_back(v.cpu().to(kF64));
          if (lstm) for (const Tensor& v : {r.state.c, s.c.grad()}) out.values.push_back(v.cpu().to(kF64));
          for (auto& [k, p] : m->named_parameters()) out.values.push_back(p.grad().cpu().to(kF64));
          return out;
        };
        const Run want = run(kF64), got = run(dt);
        const double tol = dt == kF32 ? 1e-5 : dt == kF16 ? 1e-2 : 4e-2;
        for (size_t i = 0; i < want.values.size(); ++i) {
          INFO("value " << i);
          const double scale = amax(abs(want.values[i])).item<double>();
          test::require_close(got.values[i], want.values[i], tol, tol * scale);
        }
      }
}

TEST_CASE("gradcheck: LSTM, GRU and RNN in the input and initial states, with a zero length", "[rnn][gradcheck]") {
  for (int kind = 0; kind < 3; ++kind) {
    const bool lstm = kind == 0;
    INFO((lstm ? "LSTM" : kind == 1 ? "GRU" : "RNN"));
    manual_seed(3);
    std::unique_ptr<RNNBase> m;
    const auto o = RNNOptions(2, 3).num_layers(2).bidirectional(true);
    if (lstm) m = std::make_unique<LSTM>(o);
    else if (kind == 1) m = std::make_unique<GRU>(o);
    else m = std::make_unique<RNN>(o);
    m->to(kF64);
    const Tensor lengths = from_vector<int64_t>({4, 0, 2}, {3});
    std::vector<Tensor> in{test::rnd({4, 3, 2}, 1), test::rnd({4, 3, 3}, 2)};
    if (lstm) in.push_back(test::rnd({4, 3, 3}, 3));
    test::require_gradcheck(
        [&](const std::vector<Tensor>& v) {
          RNNOutput r = m->forward(v[0], {v[1], lstm ? v[2] : Tensor()}, lengths);
          std::vector<Tensor> parts{r.output.reshape({-1}), r.state.h.reshape({-1})};
          if (lstm) parts.push_back(r.state.c.reshape({-1}));
          return concat(parts, 0);
        },
        in);
  }
}

TEST_CASE("RNN lengths: a sequence keeps its state past its length, outputs zeros there, and full lengths change nothing", "[rnn]") {
  manual_seed(4);
  LSTM m(LSTMOptions(3, 4).bidirectional(true));
  m.to(kF64);
  Tensor x = test::rnd({5, 2, 3}, 5, false);
  const RNNState s0{test::rnd({2, 2, 4}, 6, false), test::rnd({2, 2, 4}, 7, false)};
  // full lengths: the unpadded run exactly
  RNNOutput all = m.forward(x, s0), full = m.forward(x, s0, from_vector<int64_t>({5, 5}, {2}));
  test::require_close(full.output, all.output, 0, 0);
  test::require_close(full.state.h, all.state.h, 0, 0);
  // sequence 1 of length 2: its steps 0..1 alone, then zeros; sequence 0 as before
  RNNOutput padded = m.forward(x, s0, from_vector<int32_t>({5, 2}, {2}));
  RNNOutput alone = m.forward(x.narrow(0, 0, 2).narrow(1, 1, 1),
                              {s0.h.narrow(1, 1, 1), s0.c.narrow(1, 1, 1)});
  test::require_close(padded.output.narrow(1, 0, 1), all.output.narrow(1, 0, 1), 0, 0);
  test::require_close(padded.output.narrow(1, 1, 1).narrow(0, 0, 2), alone.output, 1e-14, 1e-14);
  test::require_close(padded.output.narrow(1, 1, 1).narrow(0, 2, 3), zeros({3, 1, 8}, kF64), 0, 0);
  test::require_close(padded.state.h.narrow(1, 1, 1), alone.state.h, 1e-14, 1e-14);
  test::require_close(padded.state.c.narrow(1, 1, 1), alone.state.c, 1e-14, 1e-14);
  // length 0: the initial state, zero outputs
  RNNOutput none = m.forward(x, s0, from_vector<int64_t>({5, 0}, {2}));
  test::require_close(none.state.h.narrow(1, 1, 1), s0.h.narrow(1, 1, 1), 0, 0);
  test::require_close(none.state.c.narrow(1, 1, 1), s0.c.narrow(1, 1, 1), 0, 0);
  test::require_close(none.output.narrow(1, 1, 1), zeros({5, 1, 8}, kF64), 0, 0);
}

TEST_CASE("RNN dropout between layers only in training, the output alone for Sequential, repr", "[rnn]") {
  manual_seed(5);
  GRU m(GRUOptions(3, 4).num_layers(2).dropout(0.5));
  Tensor x = randn({6, 2, 3});
  m.eval();
  const Tensor a = m.forward(x), b = m.forward(x);
  test::require_close(a, b, 0, 0);
  GRU plain(GRUOptions(3, 4).num_layers(2));
  plain.load_state_dict(m.state_dict());
  test::require_close(plain.forward(x), a, 0, 0);  // eval: no dropout
  m.train();
  REQUIRE(amax(abs(sub(m.forward(x), a))).item<double>() > 1e-3);
  REQUIRE(m.forward(x).shape() == Shape{6, 2, 4});
  REQUIRE(m.extra_repr() == "3, 4, num_layers=2, dropout=0.5");
  REQUIRE(LSTM(LSTMOptions(2, 5).batch_first(true).bidirectional(true).bias(false)).extra_repr() ==
          "2, 5, bias=false, batch_first=true, bidirectional=true");
  REQUIRE(RNN(RNNOptions(2, 5).nonlinearity("relu")).extra_repr() == "2, 5, nonlinearity=relu");
  REQUIRE(RNN(RNNOptions(2, 5)).weights[0].w_hh.shape() == Shape{5, 5});  // one gate
  // PyTorch's names and shapes, and its init bound 1/sqrt(hidden_size)
  LSTM l(LSTMOptions(2, 5).num_layers(2).bidirectional(true));
  std::vector<std::string> names;
  for (auto& [k, p] : l.named_parameters()) names.push_back(k);
  REQUIRE(names.size() == 16);
  REQUIRE(names[0] == "weight_ih_l0");
  REQUIRE(names[4] == "weight_ih_l0_reverse");
  REQUIRE(names[15] == "bias_hh_l1_reverse");
  REQUIRE(l.weights[2].w_ih.shape() == Shape{20, 10});  // layer 1 reads both directions
  for (const Tensor& p : l.parameters()) REQUIRE(amax(abs(p)).item<double>() <= 1 / std::sqrt(5.0));
}

TEST_CASE("RNN errors say what was expected", "[rnn][errors]") {
  LSTM m(LSTMOptions(3, 4));
  GRU g(GRUOptions(3, 4));
  auto has = [](const std::string& e, const char* what) {
    INFO(e);
    return e.find(what) != std::string::npos;
  };
  REQUIRE(has(test::error_of([&] { m.forward(ones({5, 2, 2})); }), "LSTM: input must be (T, N, 3), got [5, 2, 2]"));
  REQUIRE(has(test::error_of([&] { m.forward(ones({5, 3})); }), "(T, N, 3)"));
  REQUIRE(has(test::error_of([&] { m.forward(ones({0, 2, 3})); }), "no steps"));
  REQUIRE(has(test::error_of([&] { m.forward(ones({5, 2, 3}), {ones({1, 3, 4}), Tensor()}); }),
              "initial state of shape [1, 3, 4], expected [1, 2, 4]"));
  REQUIRE(has(test::error_of([&] { g.forward(ones({5, 2, 3}), {Tensor(), ones({1, 2, 4})}); }),
              "GRU: has no cell state"));
  REQUIRE(has(test::error_of([&] { m.forward(ones({5, 2, 3}), {}, from_vector<int64_t>({5, 6}, {2})); }),
              "length 6 of sequence 1 is outside [0, 5]"));
  REQUIRE(has(test::error_of([&] { m.forward(ones({5, 2, 3}), {}, from_vector<int64_t>({5}, {1})); }),
              "lengths of shape [1] for a batch of 2"));
  REQUIRE(has(test::error_of([&] { m.forward(ones({5, 2, 3}), {}, ones({2})); }), "integers"));
  REQUIRE(has(test::error_of([] { LSTM(LSTMOptions(3, 0)); }), "must be positive"));
  REQUIRE(has(test::error_of([] { GRU(GRUOptions(3, 2).dropout(1.5)); }), "dropout must be in [0, 1]"));
  REQUIRE(has(test::error_of([] { RNN(RNNOptions(3, 2).nonlinearity("sigmoid")); }),
              "RNN: nonlinearity must be \"tanh\" or \"relu\", got \"sigmoid\""));
  REQUIRE(has(test::error_of([] { LSTM(LSTMOptions(3, 2).nonlinearity("relu")); }),
              "RNN's alone takes \"relu\""));
  REQUIRE(has(test::error_of([] { RNN(RNNOptions(3, 2)).forward(ones({5, 2, 3}), {Tensor(), ones({1, 2, 2})}); }),
              "RNN: has no cell state"));
}

TEST_CASE("an LSTM learns to carry its first input to the last step", "[rnn][train]") {
  // the sign of x[0] decides the class; 5 steps of smaller noise follow it
  manual_seed(6);
  LSTM lstm(LSTMOptions(1, 8));
  Linear head(8, 2);
  std::vector<Tensor> params = lstm.parameters();
  for (const Tensor& p : head.parameters()) params.push_back(p);
  optim::Adam opt(params, optim::AdamOptions(0.03));
  Generator g(7);
  auto batch = [&](int64_t n) {
    Tensor x = mul(randn({6, n, 1}, kF32, &g), from_vector<float>({1, .5, .5, .5, .5, .5}, {6, 1, 1}));
    Tensor y = gt(x.select(0, 0).reshape({n}), zeros({})).to(kI64);
    return std::make_pair(x, y);
  };
  for (int step = 0; step < 300; ++step) {
    auto [x, y] = batch(32);
    opt.zero_grad();
    cross_entropy(head.forward(lstm.forward(x, {}).state.h.select(0, 0)), y).backward();
    opt.step();
  }
  NoGradGuard ng;
  auto [x, y] = batch(512);
  Tensor pred = argmax(head.forward(lstm.forward(x, {}).state.h.select(0, 0)), 1);
  const double acc = mean(eq(pred, y).to(kF64)).item<double>();
  INFO("accuracy " << acc);
  REQUIRE(acc > 0.9);
}

TEST_CASE("RNN padding holding NaN or inf changes no value and no gradient", "[rnn]") {
  // PyTorch's packed sequences never read the padding; a NaN there made every gradient NaN
  for (bool lstm : {true, false}) {
    INFO((lstm ? "LSTM" : "GRU"));
    manual_seed(8);
    std::unique_ptr<RNNBase> m;
    const auto o = RNNOptions(3, 4).num_layers(2).bidirectional(true);
    if (lstm) m = std::make_unique<LSTM>(o);
    else m = std::make_unique<GRU>(o);
    m->to(kF64);
    const Tensor lengths = from_vector<int64_t>({5, 2, 0}, {3});
    Tensor clean = test::rnd({5, 3, 3}, 9, false);
    // sequence 1's steps 2.. and all of sequence 2 are padding
    Tensor pad_mask = zeros({5, 3, 1}, kF64);
    {
      NoGradGuard ng;
      pad_mask.narrow(0, 2, 3).narrow(1, 1, 1).fill_(1.0);
      pad_mask.narrow(1, 2, 1).fill_(1.0);
    }
    Tensor zeroed = where(pad_mask, zeros({}, kF64), clean);
    Tensor dirty = where(pad_mask, full({5, 3, 3}, NAN, kF64), clean);
    {
      NoGradGuard ng;
      dirty.select(0, 4).select(0, 2).fill_(INFINITY);
    }
    std::vector<std::vector<Tensor>> grads;
    std::vector<Tensor> outs;
    for (Tensor x : {zeroed, dirty}) {
      m->zero_grad();
      Tensor xi = x.detach().requires_grad_();
      RNNOutput r = m->forward(xi, {}, lengths);
      sum(r.output).backward();
      outs.push_back(r.output.detach());
      std::vector<Tensor> g{xi.grad()};
      for (const Tensor& p : m->parameters()) g.push_back(p.grad().clone());
      grads.push_back(g);
    }
    test::require_close(outs[1], outs[0], 0, 0);
    for (size_t i = 0; i < grads[0].size(); ++i) {
      INFO("gradient " << i);
      REQUIRE(std::isfinite(sum(abs(grads[1][i])).item<double>()));
      test::require_close(grads[1][i], grads[0][i], 0, 0);
    }
  }
}

TEST_CASE("RNN initial states are checked and guarded: dtype, device, changes in place", "[rnn][errors]") {
  LSTM m(LSTMOptions(3, 4));
  Tensor x = randn({5, 2, 3});
  REQUIRE(test::error_of([&] { m.forward(x, {zeros({1, 2, 4}, kF64), Tensor()}); })
              .find("LSTM: initial state (f64 on cpu) must have the input's dtype and device (f32 on cpu)") !=
          std::string::npos);
  // a state changed in place between forward and backward would give a wrong gradient: refused
  Tensor h0 = randn({1, 2, 4}).requires_grad_();
  RNNOutput r = m.forward(x, {h0, Tensor()});
  {
    NoGradGuard ng;
    h0.add_(1.0);
  }
  REQUIRE(test::error_of([&] { sum(r.output).backward(); }).find("changed in place") != std::string::npos);
}

TEST_CASE("LSTM under autocast: 16-bit products, f32 states and gradients, close to f32", "[rnn][amp]") {
  manual_seed(9);
  LSTM m(LSTMOptions(3, 8).num_layers(2));
  Tensor x = randn({6, 4, 3});
  const Tensor lengths = from_vector<int64_t>({6, 3, 6, 1}, {4});
  const Tensor w = randn({6, 4, 8});  // (weights every output in the gradients)
  // f32, the reference: outputs, final states and every parameter's gradient
  const RNNOutput want = m.forward(x, {}, lengths);
  sum(want.output * w).backward();
  std::vector<Tensor> want_grads;
  for (Tensor p : m.parameters()) {
    want_grads.push_back(p.grad());
    p.set_grad({});
  }
  RNNOutput got;
  {
    amp::AutocastGuard ac(kBF16);
    got = m.forward(x, {}, lengths);
  }
  REQUIRE(got.output.dtype() == kF32);  // the states' dtype, x's
  // within bf16's rounding, as a share of each tensor's largest value (bf16 keeps 8 bits;
  // 0.4% seen here at most, on an AVX2 CPU)
  auto near = [](const Tensor& g, const Tensor& r, double share) {
    REQUIRE(g.dtype() == kF32);
    test::require_close(g, r, 0, share * amax(abs(r)).item<double>());
  };
  near(got.output, want.output, 1e-2);
  near(got.state.h, want.state.h, 1e-2);
  near(got.state.c, want.state.c, 1e-2);
  sum(got.output * w).backward();
  const auto params = m.parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    INFO("parameter " << i);
    near(params[i].grad(), want_grads[i], 1.5e-2);
  }
}
