// Fused attention (the flash-attention idea): keys and values stream through shared memory
// in tiles while each query row keeps a running max and sum (online softmax), so no (T x S)
// score matrix is ever stored; the backward recomputes probabilities from the saved
// log-sum-exp. f16/bf16 with head dims that are multiples of 16 run on tensor cores
// (attention_tc.cu: WMMA tiles, f32 accumulation); everything else, or any dtype when the
// environment sets LIBNN_CUDA_ATTENTION=simt, runs the plain kernel of attention.cu (one
// thread per row, FMA arithmetic). Head dims up to 128.
#pragma once
#include <cuda_runtime.h>
#include <nn/dtype.h>

#include "kernels/attention_layout.h"
#include "kernels/philox.h"

namespace nn::kernels {

constexpr int kAttentionMaxDim = 128;

// q, k, v, out (and grad_out, the gradients) as Backend::attention_forward describes them:
// B = N * heads slices, each operand's rows where L says (kernels/attention_layout.h); mask
// (B, S) or null; lse (B, T) in the accumulation type (f64 for f64 data, else f32). `drop`,
// where active, drops probability (b, t, j) as element (b * T + t) * S + j of its stream.
void launch_attention_forward(DType t, const void* q, const void* k, const void* v,
                              const uint8_t* mask, const AttnLayout& L, int64_t B, int64_t T,
                              int64_t S, int64_t D, int64_t E, double scale,
                              const rng::DropoutDraw& drop, void* out, void* lse, cudaStream_t s);
// `delta` is scratch of B * T accumulation-type elements.
// dq_work: attention_backward_workspace_bytes(t, B, T, D) bytes, or null where that is 0.
void launch_attention_backward(DType t, const void* grad_out, const void* q, const void* k,
                               const void* v, const uint8_t* mask, const void* out,
                               const void* lse, const AttnLayout& L, int64_t B, int64_t T,
                               int64_t S, int64_t D, int64_t E, double scale,
                               const rng::DropoutDraw& drop, void* grad_q, void* grad_k,
                               void* grad_v, void* delta, float* dq_work, cudaStream_t s);
// LIBNN_CUDA_ATTENTION=one-pass-backward: the tensor-core backward sums dQ in its dK/dV pass,
// into a workspace of B * T * D floats, instead of a dQ pass of its own; 0 otherwise (and
// for f64, which the tensor-core kernels never take).
size_t attention_backward_workspace_bytes(DType t, int64_t B, int64_t T, int64_t D);

// The tensor-core path (attention_tc.cu); false, with nothing launched, where it does not
// apply. The backward expects `delta` already computed.
bool launch_attention_forward_tc(DType t, const void* q, const void* k, const void* v,
                                 const uint8_t* mask, const AttnLayout& L, int64_t B, int64_t T,
                                 int64_t S, int64_t D, int64_t E, double scale,
                                 const rng::DropoutDraw& drop, void* out, void* lse,
                                 cudaStream_t s);
bool launch_attention_backward_tc(DType t, const void* grad_out, const void* q, const void* k,
                                  const void* v, const uint8_t* mask, const void* lse,
                                  const void* delta, const AttnLayout& L, int64_t B, int64_t T,
                                  int64_t S, int64_t D, int64_t E, double scale,
                                  const rng::DropoutDraw& drop, void* grad_q, void* grad_k,
                                  void* grad_v, float* dq_work, cudaStream_t s);

}  // namespace nn::kernels
