// The recurrence of one LSTM, GRU or RNN layer and direction as one differentiable op
// (internal: nn::LSTM, nn::GRU and nn::RNN call it). Its backward is the recurrence run back by hand, so a
// sequence's gradient costs what its forward does: the composition of per-step ops took a
// slice of the projected inputs per step, and each slice's gradient was a zero-filled tensor
// of the whole sequence (T^2 of memory traffic).
#pragma once
#include <nn/tensor.h>

#include "kernels/rnn_cell.h"

namespace nn::ops {

using kernels::RecurrentCell;

// xg (T, N, G * H): the input projections x W_ih^T + b_ih of every step (G =
// kernels::gates_of(cell): 4 for LSTM's i, f, g, o, 3 for GRU's r, z, n, 1 for RNN's); h0,
// c0 (N, H) the initial states (c0 LSTM's only);
// w_hh (G * H, H), b_hh (G * H) or undefined; mask (T, N, 1) of 0 and 1 (0: past the
// sequence's length: state kept, output 0) or undefined; reverse: from step T - 1 down.
// Returns (T + 2, N, H) for LSTM, (T + 1, N, H) for the others: the outputs by time, then the final
// h (and c), in the states' dtype (the gates' arithmetic promotes with it).
Tensor recurrent_sequence(RecurrentCell cell, const Tensor& xg, const Tensor& h0,
                          const Tensor& c0, const Tensor& w_hh, const Tensor& b_hh,
                          const Tensor& mask, bool reverse);

}  // namespace nn::ops
