// The recurrence's steps (LSTM, GRU, RNN): one thread per element (n, j) of the (N, H) states, reading its
// gates j, H + j, ... of row n; the cells' arithmetic is kernels/rnn_cell.h's (the CPU
// backend's too), the activations the elementwise ops' (kernels/math.cuh).
#include "kernels/rnn.cuh"

#include "kernels/common.cuh"
#include "kernels/math.cuh"
#include "kernels/rnn_cell.h"

namespace nn::kernels {
namespace {

template <typename A>
__device__ __forceinline__ A sigmoid_of(A v) { return unary_value<A>(UnaryOp::sigmoid, v, A(0), A(0)); }
template <typename A>
__device__ __forceinline__ A tanh_of(A v) { return unary_value<A>(UnaryOp::tanh, v, A(0), A(0)); }

template <typename T, RecurrentCell Cell>
__global__ void recurrent_forward_kernel(RecurrentStepPtrs p, int64_t N, int64_t H) {
  using A = acc_t<T>;
  constexpr int64_t G = gates_of(Cell);
  const T *x = static_cast<const T*>(p.x), *hg = static_cast<const T*>(p.hg),
          *b = static_cast<const T*>(p.b), *h = static_cast<const T*>(p.h),
          *c = static_cast<const T*>(p.c), *mask = static_cast<const T*>(p.mask);
  T *acts = static_cast<T*>(p.acts), *aux = static_cast<T*>(p.aux), *y = static_cast<T*>(p.y),
    *h_next = static_cast<T*>(p.h_next), *c_next = static_cast<T*>(p.c_next);
  const int64_t total = N * H, stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const int64_t n = e / H, j = e % H, row = n * G * H;
    auto bias = [&](int64_t k) { return b ? A(load(b[k * H + j])) : A(0); };
    auto pre = [&](int64_t k) { return A(load(x[row + k * H + j])) + A(load(hg[row + k * H + j])) + bias(k); };
    const bool keep = !mask || A(load(mask[n])) != A(0);
    const A hp = load(h[e]);
    A hv;
    if constexpr (Cell == RecurrentCell::lstm) {
      const A i = sigmoid_of(pre(0)), f = sigmoid_of(pre(1)), g = tanh_of(pre(2)),
              o = sigmoid_of(pre(3)), cp = load(c[e]);
      const A cn = lstm_cell(i, f, g, cp), tc = tanh_of(cn);
      hv = o * tc;
      acts[row + j] = convert<T>(i);
      acts[row + H + j] = convert<T>(f);
      acts[row + 2 * H + j] = convert<T>(g);
      acts[row + 3 * H + j] = convert<T>(o);
      aux[e] = convert<T>(tc);
      c_next[e] = convert<T>(keep ? cn : cp);
    } else if constexpr (Cell == RecurrentCell::gru) {
      const A r = sigmoid_of(pre(0)), z = sigmoid_of(pre(1));
      const A h_n = A(load(hg[row + 2 * H + j])) + bias(2);
      const A nv = tanh_of(gru_candidate_input(A(load(x[row + 2 * H + j])), r, h_n));
      hv = gru_state(nv, z, hp);
      acts[row + j] = convert<T>(r);
      acts[row + H + j] = convert<T>(z);
      acts[row + 2 * H + j] = convert<T>(nv);
      aux[e] = convert<T>(h_n);
    } else {  // RNN: the new state is the activation itself
      hv = Cell == RecurrentCell::rnn_tanh ? tanh_of(pre(0)) : rnn_relu(pre(0));
      acts[row + j] = convert<T>(hv);
    }
    y[e] = convert<T>(keep ? hv : A(0));
    h_next[e] = convert<T>(keep ? hv : hp);
  }
}

template <typename T, RecurrentCell Cell>
__global__ void recurrent_backward_kernel(RecurrentGradPtrs p, int64_t N, int64_t H) {
  using A = acc_t<T>;
  constexpr int64_t G = gates_of(Cell);
  const T *gy = static_cast<const T*>(p.gy), *dh = static_cast<const T*>(p.dh),
          *dc = static_cast<const T*>(p.dc), *acts = static_cast<const T*>(p.acts),
          *aux = static_cast<const T*>(p.aux), *h = static_cast<const T*>(p.h),
          *c = static_cast<const T*>(p.c), *mask = static_cast<const T*>(p.mask);
  T *dx = static_cast<T*>(p.dx), *dhg = static_cast<T*>(p.dhg),
    *dh_prev = static_cast<T*>(p.dh_prev), *dc_prev = static_cast<T*>(p.dc_prev);
  const int64_t total = N * H, stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const int64_t n = e / H, j = e % H, row = n * G * H;
    auto act = [&](int64_t k) { return A(load(acts[row + k * H + j])); };
    const bool keep = !mask || A(load(mask[n])) != A(0);
    const A dh_in = load(dh[e]);
    if constexpr (Cell == RecurrentCell::lstm) {
      const A dc_in = load(dc[e]);
      if (!keep) {  // past the length: no gate gradients; the carried ones pass through
        for (int64_t k = 0; k < 4; ++k) dx[row + k * H + j] = convert<T>(A(0));
        dh_prev[e] = convert<T>(dh_in);
        dc_prev[e] = convert<T>(dc_in);
        continue;
      }
      const LstmGrads<A> g = lstm_backward(dh_in + A(load(gy[e])), dc_in, act(0), act(1), act(2),
                                           act(3), A(load(aux[e])), A(load(c[e])));
      dx[row + j] = convert<T>(g.di);
      dx[row + H + j] = convert<T>(g.df);
      dx[row + 2 * H + j] = convert<T>(g.dg);
      dx[row + 3 * H + j] = convert<T>(g.d_o);
      dh_prev[e] = convert<T>(A(0));
      dc_prev[e] = convert<T>(g.dc_prev);
    } else if constexpr (Cell == RecurrentCell::gru) {
      if (!keep) {
        for (int64_t k = 0; k < 3; ++k) {
          dx[row + k * H + j] = convert<T>(A(0));
          dhg[row + k * H + j] = convert<T>(A(0));
        }
        dh_prev[e] = convert<T>(dh_in);
        continue;
      }
      const GruGrads<A> g = gru_backward(dh_in + A(load(gy[e])), act(0), act(1), act(2),
                                         A(load(aux[e])), A(load(h[e])));
      dx[row + j] = convert<T>(g.dr);
      dx[row + H + j] = convert<T>(g.dz);
      dx[row + 2 * H + j] = convert<T>(g.dn);
      dhg[row + j] = convert<T>(g.dr);
      dhg[row + H + j] = convert<T>(g.dz);
      dhg[row + 2 * H + j] = convert<T>(g.dhn);
      dh_prev[e] = convert<T>(g.dh_prev);
    } else {  // RNN: a's gradient from h'; nothing reaches h but through W_hh
      const A da = rnn_backward(dh_in + A(load(gy[e])), act(0), Cell == RecurrentCell::rnn_relu);
      dx[row + j] = convert<T>(keep ? da : A(0));
      dh_prev[e] = convert<T>(keep ? A(0) : dh_in);
    }
  }
}

}  // namespace

namespace {
// f.template operator()<C>() with C the compile-time value of `cell` (a kernel per cell kind).
template <typename F>
void dispatch_cell(RecurrentCell cell, F&& f) {
  switch (cell) {
    case RecurrentCell::lstm: f.template operator()<RecurrentCell::lstm>(); return;
    case RecurrentCell::gru: f.template operator()<RecurrentCell::gru>(); return;
    case RecurrentCell::rnn_tanh: f.template operator()<RecurrentCell::rnn_tanh>(); return;
    case RecurrentCell::rnn_relu: f.template operator()<RecurrentCell::rnn_relu>(); return;
  }
}
}  // namespace

void launch_recurrent_forward(DType t, RecurrentCell cell, const RecurrentStepPtrs& p, int64_t N,
                              int64_t H, cudaStream_t s) {
  if (N * H == 0) return;
  dispatch_float(t, "recurrent_step_forward", [&]<typename T>() {
    dispatch_cell(cell, [&]<RecurrentCell C>() {
      recurrent_forward_kernel<T, C><<<grid_for(N * H), kThreads, 0, s>>>(p, N, H);
      NN_CUDA_CHECK_LAUNCH();
    });
  });
}

void launch_recurrent_backward(DType t, RecurrentCell cell, const RecurrentGradPtrs& p, int64_t N,
                               int64_t H, cudaStream_t s) {
  if (N * H == 0) return;
  dispatch_float(t, "recurrent_step_backward", [&]<typename T>() {
    dispatch_cell(cell, [&]<RecurrentCell C>() {
      recurrent_backward_kernel<T, C><<<grid_for(N * H), kThreads, 0, s>>>(p, N, H);
      NN_CUDA_CHECK_LAUNCH();
    });
  });
}

}  // namespace nn::kernels
