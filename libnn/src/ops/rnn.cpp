// LSTM and GRU recurrences with their backward written out (back-propagation through time):
// the forward keeps each step's gate activations, the backward walks the steps in reverse,
// writes the gates' gradients into one (T, N, G * H) tensor (the input projections'
// gradient) and ends with one GEMM for W_hh's gradient over every step.
#include "ops/rnn.h"

#include <nn/amp.h>
#include <nn/autograd.h>
#include <nn/ops.h>

#include <vector>

#include "ops/common.h"

namespace nn::ops {

namespace {
// What the backward reads of one step.
struct Step {
  Tensor h_prev;  // (N, H) the state before the step
  Tensor acts;    // LSTM: sigmoid of all four gates (i, f, o used); GRU: sigmoid of r, z
  Tensor cand;    // LSTM: tanh(g); GRU: n
  Tensor c_prev;  // LSTM: the cell before the step
  Tensor tanh_c;  // LSTM: tanh of the new cell
  Tensor hg_n;    // GRU: h W_hn^T + b_hn, which r multiplies
};

int64_t gates_of(RecurrentCell cell) { return cell == RecurrentCell::lstm ? 4 : 3; }

// 1 - t^2 and s (1 - s): the derivatives of tanh and sigmoid from their values.
Tensor dtanh(const Tensor& t) { return rsub(square(t), 1.0); }
Tensor dsigmoid(const Tensor& s) { return mul(s, rsub(s, 1.0)); }
}  // namespace

Tensor recurrent_sequence(RecurrentCell cell, const Tensor& xg, const Tensor& h0,
                          const Tensor& c0, const Tensor& w_hh, const Tensor& b_hh,
                          const Tensor& mask, bool reverse) {
  const bool lstm = cell == RecurrentCell::lstm;
  NN_CHECK(xg.dim() == 3 && h0.dim() == 2, "recurrent_sequence: xg must be 3-d, h0 2-d");
  const int64_t T = xg.shape()[0], N = xg.shape()[1], H = h0.shape()[1];
  const Shape state{N, H}, weight{gates_of(cell) * H, H};
  NN_CHECK(xg.shape()[2] == gates_of(cell) * H && h0.shape() == state &&
               (!lstm || c0.shape() == state) && w_hh.shape() == weight,
           "recurrent_sequence: inconsistent shapes");
  // under autocast, W_hh lowered once for every step's product (the backward's products take
  // the weight as it is: their operands are the gradients' dtype, f32)
  const Tensor w_run = amp::autocast_lower(w_hh.detach());
  const Tensor b_run = b_hh.defined() ? amp::autocast_lower(b_hh.detach()) : Tensor();
  auto order = [&](int64_t s) { return reverse ? T - 1 - s : s; };
  Tensor y = empty({T + (lstm ? 2 : 1), N, H}, h0.options());
  // what the backward reads, kept only when there will be one (inference keeps one step's)
  const bool keep = any_requires_grad({&xg, &h0, &c0, &w_hh, &b_hh});
  auto steps = std::make_shared<std::vector<Step>>(size_t(keep ? T : 1));
  {
    NoGradGuard ng;
    const Tensor zero = zeros({}, h0.options());
    Tensor h = h0.detach(), c = lstm ? c0.detach() : Tensor();
    for (int64_t s = 0; s < T; ++s) {
      const int64_t t = order(s);
      const Tensor x = xg.select(0, t), hg = linear(h, w_run, b_run);  // (N, G * H)
      Step& st = (*steps)[keep ? size_t(t) : 0];
      st.h_prev = h;
      Tensor h_next, c_next;
      if (lstm) {
        const Tensor g = add(x, hg);
        st.acts = sigmoid(g);
        st.cand = tanh(g.narrow(1, 2 * H, H));
        st.c_prev = c;
        c_next = add(mul(st.acts.narrow(1, H, H), c), mul(st.acts.narrow(1, 0, H), st.cand));
        st.tanh_c = tanh(c_next);
        h_next = mul(st.acts.narrow(1, 3 * H, H), st.tanh_c);
      } else {
        st.acts = sigmoid(add(x.narrow(1, 0, 2 * H), hg.narrow(1, 0, 2 * H)));
        st.hg_n = hg.narrow(1, 2 * H, H);
        st.cand = tanh(add(x.narrow(1, 2 * H, H), mul(st.acts.narrow(1, 0, H), st.hg_n)));
        h_next = add(st.cand, mul(st.acts.narrow(1, H, H), sub(h, st.cand)));  // (1 - z) n + z h
      }
      if (mask.defined()) {  // past its length a sequence keeps its state and outputs zeros
        const Tensor m = mask.select(0, t);
        y.select(0, t).copy_(where(m, h_next, zero));
        h = where(m, h_next, h);
        if (lstm) c = where(m, c_next, c);
      } else {
        y.select(0, t).copy_(h_next);
        h = h_next;
        c = c_next;
      }
    }
    y.select(0, T).copy_(h);
    if (lstm) y.select(0, T + 1).copy_(c);
  }
  // (the initial states are read as step 0's: a change in place is refused at backward)
  record(lstm ? "lstm" : "gru", {xg, h0, c0, w_hh, b_hh}, y, {w_hh, h0, c0},
         [steps, lstm, T, N, H, reverse, mask, w = w_hh.detach(), has_bias = b_hh.defined()](const Tensor& gy, auto& need) {
    const int64_t G = lstm ? 4 : 3;
    const Tensor zero = zeros({}, gy.options());
    // the gates' gradients: of the input projections (dx) and of h W_hh^T + b_hh (dhg);
    // the same tensor for LSTM, whose gates add the two
    Tensor dx = empty({T, N, G * H}, gy.options());
    Tensor dhg = lstm ? dx : empty({T, N, G * H}, gy.options());
    Tensor dh = gy.select(0, T), dc = lstm ? gy.select(0, T + 1) : Tensor();
    // gates' gradients (N, width) written side by side into row t of `to`: no concatenated
    // temporary
    auto put = [](const Tensor& to, int64_t t, std::initializer_list<Tensor> gates) {
      int64_t at = 0;
      for (const Tensor& g : gates) {
        to.select(0, t).narrow(1, at, g.shape()[1]).copy_(g);
        at += g.shape()[1];
      }
    };
    for (int64_t s = T - 1; s >= 0; --s) {
      const int64_t t = reverse ? T - 1 - s : s;
      const Step& st = (*steps)[size_t(t)];
      Tensor dh_next = add(dh, gy.select(0, t));  // into the step's new h: carried and output
      Tensor dh_keep, dc_keep, dc_next;           // past the length: straight to the state before
      if (mask.defined()) {
        const Tensor m = mask.select(0, t);
        dh_keep = where(m, zero, dh);
        dh_next = where(m, dh_next, zero);
        if (lstm) {
          dc_keep = where(m, zero, dc);
          dc_next = where(m, dc, zero);
        }
      } else if (lstm) {
        dc_next = dc;
      }
      Tensor dh_prev;
      if (lstm) {
        const Tensor i = st.acts.narrow(1, 0, H), f = st.acts.narrow(1, H, H),
                     o = st.acts.narrow(1, 3 * H, H);
        dc_next = add(dc_next, mul(mul(dh_next, o), dtanh(st.tanh_c)));
        const Tensor dsig = dsigmoid(st.acts);
        put(dx, t, {mul(mul(dc_next, st.cand), dsig.narrow(1, 0, H)),
                    mul(mul(dc_next, st.c_prev), dsig.narrow(1, H, H)),
                    mul(mul(dc_next, i), dtanh(st.cand)),
                    mul(mul(dh_next, st.tanh_c), dsig.narrow(1, 3 * H, H))});
        dc = mul(dc_next, f);
        if (dc_keep.defined()) dc = add(dc, dc_keep);
        dh_prev = matmul(dx.select(0, t), w);
      } else {
        const Tensor r = st.acts.narrow(1, 0, H), z = st.acts.narrow(1, H, H);
        const Tensor dn = mul(mul(dh_next, rsub(z, 1.0)), dtanh(st.cand));  // through tanh
        const Tensor drz = mul(concat({mul(dn, st.hg_n), mul(dh_next, sub(st.h_prev, st.cand))}, 1),
                               dsigmoid(st.acts));
        put(dx, t, {drz, dn});
        put(dhg, t, {drz, mul(dn, r)});
        dh_prev = add(matmul(dhg.select(0, t), w), mul(dh_next, z));
      }
      dh = dh_keep.defined() ? add(dh_prev, dh_keep) : dh_prev;
    }
    std::vector<Tensor> g(5);
    g[0] = dx;
    if (need[1]) g[1] = dh;
    if (need[2]) g[2] = dc;
    if (need[3]) {  // sum over steps of dhg_t^T h_prev_t: one GEMM over (T N) rows
      std::vector<Tensor> hp;
      for (const Step& st : *steps) hp.push_back(st.h_prev);
      g[3] = matmul(dhg.reshape({T * N, G * H}).t(), stack(hp, 0).reshape({T * N, H}));
    }
    if (need[4] && has_bias) g[4] = sum(dhg, {0, 1});
    return g;
  });
  return y;
}

}  // namespace nn::ops
