// Parameter initialisers (in place, without autograd), named and defined as in PyTorch.
#pragma once
#include <nn/random.h>
#include <nn/tensor.h>

#include <utility>

namespace nn::init {

enum class Nonlinearity { linear, relu, leaky_relu, tanh, sigmoid };
enum class FanMode { fan_in, fan_out };

double calculate_gain(Nonlinearity nl, double param = 0.01);
// (fan_in, fan_out) of a weight: dims 1 and 0 times the receptive field.
std::pair<int64_t, int64_t> fans(const Tensor& w);

void uniform_(Tensor t, double low, double high, Generator* gen = nullptr);
void normal_(Tensor t, double mean, double std, Generator* gen = nullptr);
void constant_(Tensor t, double value);
void zeros_(Tensor t);
void ones_(Tensor t);
void kaiming_uniform_(Tensor t, double a = 0, FanMode mode = FanMode::fan_in,
                      Nonlinearity nl = Nonlinearity::leaky_relu, Generator* gen = nullptr);
void kaiming_normal_(Tensor t, double a = 0, FanMode mode = FanMode::fan_in,
                     Nonlinearity nl = Nonlinearity::leaky_relu, Generator* gen = nullptr);
void xavier_uniform_(Tensor t, double gain = 1.0, Generator* gen = nullptr);
void xavier_normal_(Tensor t, double gain = 1.0, Generator* gen = nullptr);

}  // namespace nn::init
