// LSTM, GRU and RNN layers: each layer's and direction's input projection for every step is one
// GEMM, then ops::recurrent_sequence runs the recurrence (and, backward, runs it back).
#include <nn/autograd.h>
#include <nn/init.h>
#include <nn/rnn.h>

#include <cmath>

#include "ops/rnn.h"

namespace nn {

namespace {
std::string suffix(int64_t layer, int64_t direction) {
  return detail::cat("_l", layer, direction ? "_reverse" : "");
}
// (T, N, 1) of x's dtype and device: 1 where step t is within sequence n's length, else 0;
// undefined when every sequence has all T steps. lengths: (N) integers on the CPU in [0, T].
Tensor step_mask(const Tensor& lengths, int64_t T, int64_t N, const Tensor& x, const char* op) {
  if (!lengths.defined()) return {};
  NN_CHECK(lengths.device() == kCPU, op, ": lengths must be on the CPU (as PyTorch's "
           "pack_padded_sequence), got ", lengths.device().str());
  NN_CHECK(lengths.dtype() == kI64 || lengths.dtype() == kI32, op,
           ": lengths must be integers (i64 or i32), got ", dtype_name(lengths.dtype()));
  NN_CHECK(lengths.shape() == Shape{N}, op, ": lengths of shape ", shape_str(lengths.shape()),
           " for a batch of ", N, " sequences (expected [", N, "])");
  const std::vector<int64_t> len = lengths.to(kI64).to_vector<int64_t>();
  bool all = true;
  std::vector<float> m(size_t(T * N));
  for (int64_t n = 0; n < N; ++n) {
    NN_CHECK(len[n] >= 0 && len[n] <= T, op, ": length ", len[n], " of sequence ", n,
             " is outside [0, ", T, "] (the input has ", T, " steps)");
    all = all && len[n] == T;
    for (int64_t t = 0; t < T; ++t) m[size_t(t * N + n)] = t < len[n] ? 1.0f : 0.0f;
  }
  if (all) return {};
  return from_vector(m, {T, N, 1}).to(x.dtype()).to(x.device());
}
}  // namespace

RNNBase::RNNBase(const char* type, const RNNOptions& o, int64_t gates)
    : Module(type), options(o), gates_(gates) {
  NN_CHECK(o.input_size() > 0 && o.hidden_size() > 0 && o.num_layers() > 0, type,
           ": input_size, hidden_size and num_layers must be positive, got ", o.input_size(),
           ", ", o.hidden_size(), ", ", o.num_layers());
  NN_CHECK(o.dropout() >= 0 && o.dropout() <= 1, type, ": dropout must be in [0, 1], got ",
           o.dropout());
  NN_CHECK(o.nonlinearity() == "tanh" || (gates == 1 && o.nonlinearity() == "relu"), type,
           ": nonlinearity must be ", gates == 1 ? "\"tanh\" or \"relu\"" : "\"tanh\" (RNN's alone takes \"relu\")",
           ", got \"", o.nonlinearity(), "\"");
  const int64_t H = o.hidden_size(), D = o.bidirectional() ? 2 : 1;
  for (int64_t l = 0; l < o.num_layers(); ++l)
    for (int64_t d = 0; d < D; ++d) {
      const std::string s = suffix(l, d);
      const int64_t in = l == 0 ? o.input_size() : D * H;
      Weights w;
      w.w_ih = register_parameter("weight_ih" + s, empty({gates * H, in}));
      w.w_hh = register_parameter("weight_hh" + s, empty({gates * H, H}));
      if (o.bias()) {
        w.b_ih = register_parameter("bias_ih" + s, empty({gates * H}));
        w.b_hh = register_parameter("bias_hh" + s, empty({gates * H}));
      }
      weights.push_back(w);
    }
  reset_parameters();
}

void RNNBase::reset_parameters() {
  const double bound = 1.0 / std::sqrt(double(options.hidden_size()));
  for (Tensor& p : parameters()) init::uniform_(p, -bound, bound);
}

std::string RNNBase::extra_repr() const {
  std::string s = detail::cat(options.input_size(), ", ", options.hidden_size());
  if (options.num_layers() != 1) s += detail::cat(", num_layers=", options.num_layers());
  if (!options.bias()) s += ", bias=false";
  if (options.batch_first()) s += ", batch_first=true";
  if (options.dropout() != 0) s += detail::cat(", dropout=", options.dropout());
  if (options.bidirectional()) s += ", bidirectional=true";
  if (options.nonlinearity() != "tanh") s += ", nonlinearity=" + options.nonlinearity();
  return s;
}

RNNOutput RNNBase::forward(const Tensor& x_in, const RNNState& state, const Tensor& lengths) {
  const std::string name = type_name();
  const char* op = name.c_str();
  NN_CHECK(x_in.defined(), op, ": the input is an undefined tensor");
  NN_CHECK(is_floating(x_in.dtype()), op, ": needs a floating input, got ", dtype_name(x_in.dtype()));
  NN_CHECK(x_in.dim() == 3 && x_in.shape()[2] == options.input_size(), op, ": input must be ",
           options.batch_first() ? "(N, T, " : "(T, N, ", options.input_size(), "), got ",
           shape_str(x_in.shape()));
  const Tensor x = options.batch_first() ? x_in.transpose(0, 1) : x_in;  // (T, N, in)
  const int64_t T = x.shape()[0], N = x.shape()[1], H = options.hidden_size();
  const int64_t D = options.bidirectional() ? 2 : 1, L = options.num_layers();
  NN_CHECK(T > 0, op, ": the input has no steps: ", shape_str(x_in.shape()));
  const Shape state_shape{L * D, N, H};
  for (const Tensor* s : {&state.h, &state.c})
    if (s->defined()) {
      NN_CHECK(s->shape() == state_shape, op, ": initial state of shape ", shape_str(s->shape()),
               ", expected ", shape_str(state_shape), " (layers * directions, N, hidden_size)");
      // (as PyTorch's: under autocast too, a state of another dtype than the input's would
      // mix dtypes across the steps)
      NN_CHECK(s->device() == x.device() && s->dtype() == x.dtype(), op, ": initial state (",
               dtype_name(s->dtype()), " on ", s->device().str(), ") must have the input's "
               "dtype and device (", dtype_name(x.dtype()), " on ", x.device().str(), ")");
    }
  const bool lstm = gates_ == 4;
  NN_CHECK(lstm || !state.c.defined(), op, ": has no cell state (c)");
  const Tensor mask = step_mask(lengths, T, N, x, op);

  const ops::RecurrentCell kind = lstm            ? ops::RecurrentCell::lstm
                                  : gates_ == 3   ? ops::RecurrentCell::gru
                                  : options.nonlinearity() == "relu" ? ops::RecurrentCell::rnn_relu
                                                                     : ops::RecurrentCell::rnn_tanh;
  // Padding is computed through and its outputs masked, so its values must be finite: zeros
  // in its place (a NaN there made every gradient NaN; where() passes no gradient to it).
  Tensor layer_in = mask.defined() ? where(mask, x, zeros({}, x.options())) : x;
  std::vector<Tensor> h_n, c_n;
  for (int64_t l = 0; l < L; ++l) {
    std::vector<Tensor> directions;
    for (int64_t d = 0; d < D; ++d) {
      const int64_t k = l * D + d;
      const Weights& w = weights[size_t(k)];
      const Tensor xg = linear(layer_in, w.w_ih, w.b_ih);  // (T, N, gates * H), every step at once
      const Tensor h0 = state.h.defined() ? state.h.select(0, k) : zeros({N, H}, x.options());
      Tensor c0;
      if (lstm) c0 = state.c.defined() ? state.c.select(0, k) : zeros({N, H}, x.options());
      const Tensor y = ops::recurrent_sequence(kind, xg, h0, c0, w.w_hh, w.b_hh, mask, d == 1);
      directions.push_back(y.narrow(0, 0, T));  // (T, N, H)
      h_n.push_back(y.select(0, T));
      if (lstm) c_n.push_back(y.select(0, T + 1));
    }
    layer_in = D == 1 ? directions[0] : concat(directions, 2);
    if (l + 1 < L && options.dropout() > 0 && is_training())
      layer_in = dropout(layer_in, options.dropout(), true);
  }
  RNNOutput r;
  r.output = options.batch_first() ? layer_in.transpose(0, 1) : layer_in;
  r.state.h = stack(h_n, 0);
  if (lstm) r.state.c = stack(c_n, 0);
  return r;
}

}  // namespace nn
