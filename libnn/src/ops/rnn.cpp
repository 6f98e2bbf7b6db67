// LSTM, GRU and RNN recurrences with their backward written out (back-propagation through time):
// each step is its product with W_hh and one backend call for the rest of the cell
// (Backend::recurrent_step_forward); the forward keeps each step's gate activations and
// states, the backward walks the steps in reverse (one backend call and one GEMM a step),
// writes the gates' gradients into one (T, N, G * H) tensor (the input projections'
// gradient) and ends with one GEMM for W_hh's gradient over every step.
#include "ops/rnn.h"

#include <nn/amp.h>
#include <nn/autograd.h>
#include <nn/ops.h>

#include <vector>

#include "ops/common.h"

namespace nn::ops {

Tensor recurrent_sequence(RecurrentCell cell, const Tensor& xg_in, const Tensor& h0,
                          const Tensor& c0, const Tensor& w_hh, const Tensor& b_hh,
                          const Tensor& mask, bool reverse) {
  const bool lstm = cell == RecurrentCell::lstm, gru = cell == RecurrentCell::gru;
  NN_CHECK(xg_in.dim() == 3 && h0.dim() == 2, "recurrent_sequence: xg must be 3-d, h0 2-d");
  const int64_t T = xg_in.shape()[0], N = xg_in.shape()[1], H = h0.shape()[1];
  const int64_t G = kernels::gates_of(cell), GH = G * H;
  const Shape state{N, H}, weight{GH, H};
  NN_CHECK(xg_in.shape()[2] == GH && h0.shape() == state && (!lstm || c0.shape() == state) &&
               w_hh.shape() == weight,
           "recurrent_sequence: inconsistent shapes");
  // The steps compute in the states' dtype (under autocast the input projections come in 16
  // bits: one cast for the whole sequence, with its gradient), on contiguous rows.
  const DType dt = h0.dtype();
  const Tensor xg = (xg_in.dtype() == dt ? xg_in : xg_in.to(dt)).contiguous();
  NN_CHECK(!mask.defined() || (mask.dtype() == dt && mask.numel() == T * N),
           "recurrent_sequence: the mask must be (T, N, 1) of the states' dtype");
  // under autocast, W_hh lowered once for every step's product (the backward's products take
  // the weight as it is: their operands are the gradients' dtype)
  const Tensor w_run = amp::autocast_lower(w_hh.detach());
  const Tensor b_run = b_hh.defined() ? b_hh.detach().to(dt) : Tensor();
  const Tensor steps_mask = mask.defined() ? mask.detach().reshape({T, N}) : Tensor();
  auto order = [T, reverse](int64_t s) { return reverse ? T - 1 - s : s; };
  // The states by step: slot `before(t)` holds the states step t starts from, `after(t)`
  // those it ends with (steps run down from T - 1 in reverse, so there slot T is h0).
  auto before = [reverse](int64_t t) { return reverse ? t + 1 : t; };
  auto after = [reverse](int64_t t) { return reverse ? t : t + 1; };
  const int64_t first = reverse ? T : 0, last = reverse ? 0 : T;
  // what the backward reads is kept only when there will be one (inference keeps one step's)
  const bool keep = any_requires_grad({&xg, &h0, &c0, &w_hh, &b_hh});
  const TensorOptions opt = h0.options();
  Tensor y = empty({T + (lstm ? 2 : 1), N, H}, opt);
  Tensor hs = empty({T + 1, N, H}, opt), cs = lstm ? empty({T + 1, N, H}, opt) : Tensor();
  Tensor acts = empty({keep ? T : 1, N, GH}, opt);
  Tensor aux = lstm || gru ? empty({keep ? T : 1, N, H}, opt) : Tensor();  // (RNN has none)
  backend::Backend& be = backend::of(h0);
  // Without autocast's lowering, each step's product is the backend's GEMM with W_hh^T packed
  // once for the whole sequence (where the backend packs operands: the CPU's f32 kernel);
  // under autocast, linear() with its 16-bit operands.
  const bool direct = w_run.dtype() == dt;
  const Tensor w_t = lift3(w_run.t());  // (1, H, G H), read in place
  const auto w_packed = direct ? be.pack_operand(w_t) : nullptr;
  {
    NoGradGuard ng;
    hs.select(0, first).copy_(h0.detach());
    if (lstm) cs.select(0, first).copy_(c0.detach());
    for (int64_t s = 0; s < T; ++s) {
      const int64_t t = order(s), k = keep ? t : 0;
      backend::Backend::RecurrentStep st;
      st.cell = cell;
      st.h = hs.select(0, before(t));
      if (direct) {
        st.hg = empty({N, GH}, opt);
        Tensor hg3 = lift3(st.hg);
        be.gemm_packed(lift3(st.h), w_t, w_packed.get(), hg3, 1.0, 0.0);
      } else {
        st.hg = linear(st.h, w_run).to(dt);  // (N, G H)
      }
      st.x = xg.select(0, t);
      st.b_hh = b_run;
      if (lstm) {
        st.c = cs.select(0, before(t));
        st.c_next = cs.select(0, after(t));
      }
      if (mask.defined()) st.mask = steps_mask.select(0, t);
      st.acts = acts.select(0, k);
      if (aux.defined()) st.aux = aux.select(0, k);
      st.y = y.select(0, t);
      st.h_next = hs.select(0, after(t));
      be.recurrent_step_forward(st);
    }
    y.select(0, T).copy_(hs.select(0, last));
    if (lstm) y.select(0, T + 1).copy_(cs.select(0, last));
  }
  // (the initial states are read as step 0's: a change in place is refused at backward)
  record(lstm ? "lstm" : gru ? "gru" : "rnn", {xg, h0, c0, w_hh, b_hh}, y, {w_hh, h0, c0},
         [=, w = w_hh.detach(), has_bias = b_hh.defined()](const Tensor& gy_in, auto& need) {
    const Tensor gy = gy_in.contiguous();
    backend::Backend& bg = backend::of(gy);
    const TensorOptions go = gy.options();
    // the gates' gradients: of the input projections (dx) and of h W_hh^T + b_hh (dhg); the
    // same tensor but for GRU (the others' gates add the two)
    Tensor dx = empty({T, N, GH}, go);
    Tensor dhg = gru ? empty({T, N, GH}, go) : dx;
    // the gradients into the states after each step, updated in place step by step
    Tensor dh = gy.select(0, T).clone(), dc = lstm ? gy.select(0, T + 1).clone() : Tensor();
    const Tensor wg = lift3(w.dtype() == gy.dtype() ? w : w.to(gy.dtype()));
    const auto wg_packed = bg.pack_operand(wg);
    Tensor dh3 = lift3(dh);
    for (int64_t s = T - 1; s >= 0; --s) {
      const int64_t t = order(s);
      backend::Backend::RecurrentStepGrad st;
      st.cell = cell;
      st.gy = gy.select(0, t);
      st.dh = st.dh_prev = dh;
      st.acts = acts.select(0, t);
      if (aux.defined()) st.aux = aux.select(0, t);
      st.h = hs.select(0, before(t));
      if (lstm) {
        st.dc = st.dc_prev = dc;
        st.c = cs.select(0, before(t));
      }
      if (mask.defined()) st.mask = steps_mask.select(0, t);
      st.dx = dx.select(0, t);
      if (gru) st.dhg = dhg.select(0, t);
      bg.recurrent_step_backward(st);
      bg.gemm_packed(lift3(dhg.select(0, t)), wg, wg_packed.get(), dh3, 1.0, 1.0);  // dh += dhg_t W_hh
    }
    std::vector<Tensor> g(5);
    g[0] = dx;
    if (need[1]) g[1] = dh;
    if (need[2]) g[2] = dc;
    if (need[3]) {  // sum over steps of dhg_t^T h_t (the states each step started from): one GEMM
      const Tensor hp = hs.narrow(0, before(0), T).reshape({T * N, H});
      g[3] = matmul(dhg.reshape({T * N, GH}).t(), hp).to(w.dtype());
    }
    if (need[4] && has_bias) g[4] = sum(dhg, {0, 1}).to(w.dtype());
    return g;
  });
  return y;
}

}  // namespace nn::ops
