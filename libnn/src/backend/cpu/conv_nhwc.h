// The CPU backend's channels-last (NHWC) convolutions (internal): every 4-d argument of the
// call stored NHWC, the weight as (O, KH, KW, C/groups). conv.cpp routes calls here when the
// input-sized tensor is channels-last.
#pragma once
#include <nn/tensor.h>

#include "backend/backend.h"

namespace nn::backend {

void conv2d_forward_nhwc(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out,
                         const Conv2dParams& p);
void conv2d_backward_input_nhwc(const Tensor& grad_out, const Tensor& w, Tensor& grad_x,
                                const Conv2dParams& p);
void conv2d_backward_weight_nhwc(const Tensor& grad_out, const Tensor& x, Tensor& grad_w,
                                 const Conv2dParams& p);

// bf16 operands straight into a bf16 result (each rounded once from its f32 sum), where the
// bf16 tile kernels do the whole call (this CPU has them, the channels pair up, the weights
// fit one slice, stride 1 for the input gradient) or, with AMX (cpu::bf16_gemm_amx()), the
// column path does, a run of images at a time; false, with nothing written, elsewhere.
bool conv2d_forward_nhwc_bf16(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out,
                              const Conv2dParams& p);
bool conv2d_backward_input_nhwc_bf16(const Tensor& grad_out, const Tensor& w, Tensor& grad_x,
                                     const Conv2dParams& p);

}  // namespace nn::backend
