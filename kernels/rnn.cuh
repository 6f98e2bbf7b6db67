// Kernels for the recurrence's steps (kernels/rnn.cu): one LSTM, GRU or RNN step past its product
// with W_hh, forward and backward, as Backend::recurrent_step_forward / _backward define them.
#pragma once
#include <cuda_runtime.h>
#include <nn/dtype.h>

#include <cstdint>

#include "kernels/rnn_cell.h"

namespace nn::kernels {

// Rows of one dtype, contiguous: (N, G H) for x, hg, acts and the gate gradients, (N, H) for
// the states and their gradients, b (G H) and mask (N) or null.
struct RecurrentStepPtrs {
  const void *x, *hg, *b, *h, *c, *mask;
  void *acts, *aux, *y, *h_next, *c_next;
};
struct RecurrentGradPtrs {
  const void *gy, *dh, *dc, *acts, *aux, *h, *c, *mask;
  void *dx, *dhg, *dh_prev, *dc_prev;  // dh_prev and dc_prev may be dh and dc
};
void launch_recurrent_forward(DType t, RecurrentCell cell, const RecurrentStepPtrs& p, int64_t N,
                              int64_t H, cudaStream_t s);
void launch_recurrent_backward(DType t, RecurrentCell cell, const RecurrentGradPtrs& p, int64_t N,
                               int64_t H, cudaStream_t s);

}  // namespace nn::kernels
