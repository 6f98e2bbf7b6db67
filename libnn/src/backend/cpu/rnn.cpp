// CPU recurrence steps (Backend::recurrent_step_forward / _backward), LSTM, GRU and RNN: one pass over each
// batch row, its gate activations through the vectorised sigmoid and tanh of the elementwise
// ops (CpuBackend::activate) in per-thread buffers, the rest through the cells' shared
// arithmetic (kernels/rnn_cell.h). f16 and bf16 compute in f32, each result rounded once.
#include <type_traits>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/parallel.h"
#include "kernels/rnn_cell.h"

namespace nn::backend {
using namespace nn::cpu;
using namespace nn::kernels;

namespace {
// The type a step computes in: double for f64, float for the others.
template <typename T>
using Compute = std::conditional_t<std::is_same_v<T, double>, double, float>;

// An optional tensor's data (null when undefined).
template <typename T>
T* rows_of(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

// Rows a thread takes at once: about 8K gate values, so a step of a small batch still splits.
int64_t row_grain(int64_t width) { return std::max<int64_t>(1, 8192 / std::max<int64_t>(width, 1)); }

// f over every row with per-thread scratch of `width` C values, four of them.
template <typename C, typename F>
void for_rows(int64_t N, int64_t width, F&& f) {
  parallel_for(0, N, row_grain(width), [&](int64_t b, int64_t e) {
    static thread_local std::vector<C> scratch;
    if (scratch.size() < size_t(4 * width)) scratch.resize(size_t(4 * width));
    for (int64_t n = b; n < e; ++n) f(n, scratch.data());
  });
}

template <typename T>
void step_forward(const Backend::RecurrentStep& s) {
  using C = Compute<T>;
  const bool lstm = s.cell == RecurrentCell::lstm, gru = s.cell == RecurrentCell::gru;
  const int64_t N = s.h.shape()[0], H = s.h.shape()[1], GH = gates_of(s.cell) * H;
  const T *x = rows_of<T>(s.x), *hg = rows_of<T>(s.hg), *b = rows_of<T>(s.b_hh),
          *h = rows_of<T>(s.h), *c = rows_of<T>(s.c), *mask = rows_of<T>(s.mask);
  T *acts = s.acts.data<T>(), *aux = rows_of<T>(s.aux), *y = s.y.data<T>(),
    *h_next = s.h_next.data<T>(), *c_next = lstm ? s.c_next.data<T>() : nullptr;
  auto bias = [b](int64_t j) { return b ? C(b[j]) : C(0); };
  for_rows<C>(N, GH, [&](int64_t n, C* buf) {
    C *pre = buf, *act = buf + GH, *cell = buf + 2 * GH, *tc = buf + 3 * GH;
    const T *xr = x + n * GH, *hr = hg + n * GH, *hp = h + n * H;
    T *ar = acts + n * GH, *xa = aux ? aux + n * H : nullptr, *yr = y + n * H, *hn = h_next + n * H;
    const bool keep = !mask || C(mask[n]) != C(0);
    if (lstm) {
      const T* cp = c + n * H;
      for (int64_t j = 0; j < GH; ++j) pre[j] = C(xr[j]) + C(hr[j]) + bias(j);
      CpuBackend::activate(UnaryOp::sigmoid, pre, act, 2 * H);
      CpuBackend::activate(UnaryOp::tanh, pre + 2 * H, act + 2 * H, H);
      CpuBackend::activate(UnaryOp::sigmoid, pre + 3 * H, act + 3 * H, H);
      for (int64_t j = 0; j < H; ++j)
        cell[j] = lstm_cell(act[j], act[H + j], act[2 * H + j], C(cp[j]));
      CpuBackend::activate(UnaryOp::tanh, cell, tc, H);
      T* cn = c_next + n * H;
      for (int64_t j = 0; j < H; ++j) {
        const C hv = act[3 * H + j] * tc[j];
        put(yr[j], keep ? hv : C(0));
        put(hn[j], keep ? hv : C(hp[j]));
        put(cn[j], keep ? cell[j] : C(cp[j]));
        put(xa[j], tc[j]);
      }
    } else if (gru) {
      for (int64_t j = 0; j < 2 * H; ++j) pre[j] = C(xr[j]) + C(hr[j]) + bias(j);
      CpuBackend::activate(UnaryOp::sigmoid, pre, act, 2 * H);
      C* h_n = cell;  // h W_hn^T + b_hn
      for (int64_t j = 0; j < H; ++j) {
        h_n[j] = C(hr[2 * H + j]) + bias(2 * H + j);
        pre[2 * H + j] = gru_candidate_input(C(xr[2 * H + j]), act[j], h_n[j]);
      }
      CpuBackend::activate(UnaryOp::tanh, pre + 2 * H, act + 2 * H, H);
      for (int64_t j = 0; j < H; ++j) {
        const C hv = gru_state(act[2 * H + j], act[H + j], C(hp[j]));
        put(yr[j], keep ? hv : C(0));
        put(hn[j], keep ? hv : C(hp[j]));
        put(xa[j], h_n[j]);
      }
    } else {  // RNN: the new state is the activation itself
      for (int64_t j = 0; j < H; ++j) pre[j] = C(xr[j]) + C(hr[j]) + bias(j);
      if (s.cell == RecurrentCell::rnn_tanh) CpuBackend::activate(UnaryOp::tanh, pre, act, H);
      else for (int64_t j = 0; j < H; ++j) act[j] = rnn_relu(pre[j]);
      for (int64_t j = 0; j < H; ++j) {
        put(yr[j], keep ? act[j] : C(0));
        put(hn[j], keep ? act[j] : C(hp[j]));
      }
    }
    for (int64_t j = 0; j < GH; ++j) put(ar[j], act[j]);
  });
}

template <typename T>
void step_backward(const Backend::RecurrentStepGrad& s) {
  using C = Compute<T>;
  const bool lstm = s.cell == RecurrentCell::lstm, gru = s.cell == RecurrentCell::gru;
  const int64_t N = s.dh.shape()[0], H = s.dh.shape()[1], GH = gates_of(s.cell) * H;
  const T *gy = rows_of<T>(s.gy), *dh = rows_of<T>(s.dh), *dc = rows_of<T>(s.dc),
          *acts = rows_of<T>(s.acts), *aux = rows_of<T>(s.aux), *h = rows_of<T>(s.h),
          *c = rows_of<T>(s.c), *mask = rows_of<T>(s.mask);
  T *dx = s.dx.data<T>(), *dh_prev = s.dh_prev.data<T>();
  T *dhg = gru ? s.dhg.data<T>() : nullptr, *dc_prev = lstm ? s.dc_prev.data<T>() : nullptr;
  parallel_for(0, N, row_grain(GH), [&](int64_t b, int64_t e) {
    for (int64_t n = b; n < e; ++n) {
      const T *a = acts + n * GH, *xa = aux ? aux + n * H : nullptr, *gyr = gy + n * H,
              *dhr = dh + n * H;
      T *dxr = dx + n * GH, *dhp = dh_prev + n * H;
      const bool keep = !mask || C(mask[n]) != C(0);
      if (lstm) {
        const T *cp = c + n * H, *dcr = dc + n * H;
        T* dcp = dc_prev + n * H;
        for (int64_t j = 0; j < H; ++j) {
          // past the length: no gate gradients; the carried gradients pass to the states before
          const C dh_in = C(dhr[j]), dc_in = C(dcr[j]);
          if (!keep) {
            for (int64_t k = 0; k < 4; ++k) put(dxr[k * H + j], C(0));
            put(dhp[j], dh_in);
            put(dcp[j], dc_in);
            continue;
          }
          const LstmGrads<C> g = lstm_backward(dh_in + C(gyr[j]), dc_in, C(a[j]), C(a[H + j]),
                                               C(a[2 * H + j]), C(a[3 * H + j]), C(xa[j]), C(cp[j]));
          put(dxr[j], g.di);
          put(dxr[H + j], g.df);
          put(dxr[2 * H + j], g.dg);
          put(dxr[3 * H + j], g.d_o);
          put(dhp[j], C(0));
          put(dcp[j], g.dc_prev);
        }
      } else if (gru) {
        const T* hp = h + n * H;
        T* dgr = dhg + n * GH;
        for (int64_t j = 0; j < H; ++j) {
          const C dh_in = C(dhr[j]);
          if (!keep) {
            for (int64_t k = 0; k < 3; ++k) put(dxr[k * H + j], C(0)), put(dgr[k * H + j], C(0));
            put(dhp[j], dh_in);
            continue;
          }
          const GruGrads<C> g = gru_backward(dh_in + C(gyr[j]), C(a[j]), C(a[H + j]),
                                             C(a[2 * H + j]), C(xa[j]), C(hp[j]));
          put(dxr[j], g.dr);
          put(dxr[H + j], g.dz);
          put(dxr[2 * H + j], g.dn);
          put(dgr[j], g.dr);
          put(dgr[H + j], g.dz);
          put(dgr[2 * H + j], g.dhn);
          put(dhp[j], g.dh_prev);
        }
      } else {  // RNN: a's gradient from h'; nothing reaches h but through W_hh
        const bool relu = s.cell == RecurrentCell::rnn_relu;
        for (int64_t j = 0; j < H; ++j) {
          const C dh_in = C(dhr[j]);
          put(dxr[j], keep ? rnn_backward(dh_in + C(gyr[j]), C(a[j]), relu) : C(0));
          put(dhp[j], keep ? C(0) : dh_in);
        }
      }
    }
  });
}

template <typename F>
void dispatch_step(DType t, F&& f) {
  if (!dispatch16(t, f)) dispatch_float(t, "recurrent_step", f);
}
}  // namespace

void CpuBackend::recurrent_step_forward(const RecurrentStep& s) {
  dispatch_step(s.h.dtype(), [&]<typename T>() { step_forward<T>(s); });
}

void CpuBackend::recurrent_step_backward(const RecurrentStepGrad& s) {
  dispatch_step(s.dh.dtype(), [&]<typename T>() { step_backward<T>(s); });
}

}  // namespace nn::backend
