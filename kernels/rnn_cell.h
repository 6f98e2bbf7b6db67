// The recurrent cells' arithmetic around their activations, per element j of a batch row,
// shared by the CPU backend's step (backend/cpu/rnn.cpp) and the CUDA kernel (kernels/rnn.cu)
// so both compute the same thing; the activations (sigmoid, tanh) are each backend's own.
// PyTorch's equations and gate order: LSTM i, f, g, o; GRU r, z, n; the plain RNN's one.
#pragma once
#include <cstdint>

#include "kernels/hd.h"

namespace nn::kernels {

// The cell of a recurrence: torch.nn.LSTM's, GRU's, or RNN's with tanh or ReLU.
enum class RecurrentCell { lstm, gru, rnn_tanh, rnn_relu };
// Its gates: the width of the input projections and of h W_hh^T, in units of the state size.
NN_HD constexpr int64_t gates_of(RecurrentCell cell) {
  return cell == RecurrentCell::lstm ? 4 : cell == RecurrentCell::gru ? 3 : 1;
}

// The plain RNN: h' = relu(a) (or tanh(a)) of a = x + h W_hh^T + the biases; NaN stays NaN.
template <typename C>
NN_HD C rnn_relu(C a) {
  return a <= C(0) ? C(0) : a;
}
// The step back: dh the gradient into h', h' itself; the gradient of a (the input
// projection's and h W_hh^T's).
template <typename C>
NN_HD C rnn_backward(C dh, C h_next, bool relu) {
  return relu ? (h_next > C(0) ? dh : C(0)) : dh * (C(1) - h_next * h_next);
}

// LSTM: c' = f c + i g (then h' = o tanh(c')).
template <typename C>
NN_HD C lstm_cell(C i, C f, C g, C c) {
  return f * c + i * g;
}
// GRU: n's argument x_n + r (h W_hn^T + b_hn), and h' = (1 - z) n + z h.
template <typename C>
NN_HD C gru_candidate_input(C x_n, C r, C h_n) {
  return x_n + r * h_n;
}
template <typename C>
NN_HD C gru_state(C n, C z, C h) {
  return n + z * (h - n);
}

// The step back through an LSTM cell: dh and dc the gradients into h' and c'; i, f, g, o
// the activations (g = tanh of its gate, the others sigmoids), tc = tanh(c'), c the cell
// before. The gates' pre-activation gradients and the gradient into c.
template <typename C>
struct LstmGrads {
  C di, df, dg, d_o, dc_prev;
};
template <typename C>
NN_HD LstmGrads<C> lstm_backward(C dh, C dc, C i, C f, C g, C o, C tc, C c) {
  const C dcn = dc + dh * o * (C(1) - tc * tc);
  return {dcn * g * i * (C(1) - i), dcn * c * f * (C(1) - f), dcn * i * (C(1) - g * g),
          dh * tc * o * (C(1) - o), dcn * f};
}

// The step back through a GRU cell: dh the gradient into h'; r, z, n the activations; h_n =
// h W_hn^T + b_hn; h the state before. The pre-activation gradients of r, z and n (the input
// projections' and, with dhn for n's, h W_hh^T + b_hh's), and h's gradient through z (the
// product with W_hh is the caller's).
template <typename C>
struct GruGrads {
  C dr, dz, dn, dhn, dh_prev;
};
template <typename C>
NN_HD GruGrads<C> gru_backward(C dh, C r, C z, C n, C h_n, C h) {
  const C dn = dh * (C(1) - z) * (C(1) - n * n);
  return {dn * h_n * r * (C(1) - r), dh * (h - n) * z * (C(1) - z), dn, dn * r, dh * z};
}

}  // namespace nn::kernels
