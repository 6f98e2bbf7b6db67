// Recurrent layers: LSTM, GRU and the plain RNN with PyTorch's equations, gate order, parameter names
// (weight_ih_l0, weight_hh_l0, bias_ih_l0, bias_hh_l0, ..._reverse) and initialisation, so
// a PyTorch state dict loads as it is. Right-padded batches run with their lengths (what
// PyTorch's pack_padded_sequence gives), without packing.
#pragma once
#include <nn/module.h>
#include <nn/ops.h>

#include <string>

namespace nn {

struct RNNOptions {
  RNNOptions(int64_t input_size, int64_t hidden_size)
      : input_size_(input_size), hidden_size_(hidden_size) {}
  NN_ARG(int64_t, input_size);
  NN_ARG(int64_t, hidden_size);
  NN_ARG(int64_t, num_layers) = 1;
  NN_ARG(bool, bias) = true;
  NN_ARG(bool, batch_first) = false;  // x and output (N, T, ...) instead of (T, N, ...)
  NN_ARG(double, dropout) = 0.0;      // on each layer's output but the last, in training
  NN_ARG(bool, bidirectional) = false;
  NN_ARG(std::string, nonlinearity) = "tanh";  // RNN's: "tanh" or "relu" (LSTM, GRU: "tanh")
};
using LSTMOptions = RNNOptions;
using GRUOptions = RNNOptions;

// The states of every layer and direction: (num_layers * directions, N, hidden_size), layer
// l's forward direction at 2l (bidirectional) or l, as PyTorch's h_n and c_n. c is LSTM's
// only.
struct RNNState {
  Tensor h, c;
};
struct RNNOutput {
  Tensor output;  // (T, N, directions * hidden_size), or (N, T, ...) with batch_first
  RNNState state;  // after each sequence's last step (its length's, with lengths)
};

// What LSTM, GRU and RNN share: options, parameters per layer and direction, the layer loop. Each
// layer and direction is one GEMM for every step's input projection, then the recurrence as
// one op whose backward runs the steps back by hand.
class RNNBase : public Module {
 public:
  // x (T, N, input_size) or (N, T, input_size) with batch_first. state: the initial states
  // (undefined tensors: zeros). lengths: each sequence's number of valid steps, i64 or i32
  // (N) on the CPU (as PyTorch's pack_padded_sequence takes them), each in [0, T]: steps
  // past a sequence's length leave its state as it was and give zeros in the output (PyTorch's
  // pad_packed_sequence), and the reverse direction starts at the last valid step.
  RNNOutput forward(const Tensor& x, const RNNState& state, const Tensor& lengths = {});
  // The output alone, from zero states (for Sequential).
  Tensor forward(const Tensor& x) override { return forward(x, RNNState{}).output; }
  std::string extra_repr() const override;
  // U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)) for every weight and bias, as PyTorch's.
  void reset_parameters();
  RNNOptions options;
  // Per layer and direction (index layer * directions + direction): (gates * H, in),
  // (gates * H, H), (gates * H), (gates * H); biases undefined without bias.
  struct Weights {
    Tensor w_ih, w_hh, b_ih, b_hh;
  };
  std::vector<Weights> weights;

 protected:
  // gates: 4 for LSTM, 3 for GRU, 1 for RNN (only LSTM has a cell state).
  RNNBase(const char* type, const RNNOptions& o, int64_t gates);

 private:
  int64_t gates_;
};

// i, f, g, o = split(x W_ih^T + b_ih + h W_hh^T + b_hh); c' = sigmoid(f) c + sigmoid(i)
// tanh(g); h' = sigmoid(o) tanh(c').
class LSTM : public RNNBase {
 public:
  explicit LSTM(const LSTMOptions& o) : RNNBase("LSTM", o, 4) {}
};

// r, z, n: r = sigmoid(x_r + h_r), z = sigmoid(x_z + h_z), n = tanh(x_n + r h_n) (h_n with
// its bias b_hn, inside r's product, as PyTorch's), h' = (1 - z) n + z h.
class GRU : public RNNBase {
 public:
  explicit GRU(const GRUOptions& o) : RNNBase("GRU", o, 3) {}
};

// torch.nn.RNN: h' = tanh(x W_ih^T + b_ih + h W_hh^T + b_hh), or ReLU with
// options.nonlinearity("relu").
class RNN : public RNNBase {
 public:
  explicit RNN(const RNNOptions& o) : RNNBase("RNN", o, 1) {}
};

}  // namespace nn
