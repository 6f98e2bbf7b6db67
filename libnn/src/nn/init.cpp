#include <nn/autograd.h>
#include <nn/init.h>

#include <cmath>

namespace nn::init {

double calculate_gain(Nonlinearity nl, double param) {
  switch (nl) {
    case Nonlinearity::linear: case Nonlinearity::sigmoid: return 1.0;
    case Nonlinearity::tanh: return 5.0 / 3.0;
    case Nonlinearity::relu: return std::sqrt(2.0);
    case Nonlinearity::leaky_relu: return std::sqrt(2.0 / (1 + param * param));
  }
  return 1.0;
}

std::pair<int64_t, int64_t> fans(const Tensor& w) {
  NN_CHECK(w.dim() >= 2, "init: fan in/out needs a weight of at least 2 dims, got ",
           shape_str(w.shape()));
  int64_t field = 1;
  for (int64_t i = 2; i < w.dim(); ++i) field *= w.shape()[i];
  return {w.shape()[1] * field, w.shape()[0] * field};
}

void uniform_(Tensor t, double low, double high, Generator* gen) {
  NoGradGuard ng;
  t.uniform_(low, high, gen);
}
void normal_(Tensor t, double mean, double std, Generator* gen) {
  NoGradGuard ng;
  t.normal_(mean, std, gen);
}
void constant_(Tensor t, double value) {
  NoGradGuard ng;
  t.fill_(value);
}
void zeros_(Tensor t) { constant_(t, 0); }
void ones_(Tensor t) { constant_(t, 1); }

static double kaiming_std(const Tensor& t, double a, FanMode mode, Nonlinearity nl) {
  auto [fi, fo] = fans(t);
  int64_t fan = mode == FanMode::fan_in ? fi : fo;
  NN_CHECK(fan > 0, "init: zero fan for weight ", shape_str(t.shape()));
  return calculate_gain(nl, a) / std::sqrt(double(fan));
}
void kaiming_uniform_(Tensor t, double a, FanMode mode, Nonlinearity nl, Generator* gen) {
  double bound = std::sqrt(3.0) * kaiming_std(t, a, mode, nl);
  uniform_(t, -bound, bound, gen);
}
void kaiming_normal_(Tensor t, double a, FanMode mode, Nonlinearity nl, Generator* gen) {
  normal_(t, 0, kaiming_std(t, a, mode, nl), gen);
}
void xavier_uniform_(Tensor t, double gain, Generator* gen) {
  auto [fi, fo] = fans(t);
  double bound = gain * std::sqrt(6.0 / double(fi + fo));
  uniform_(t, -bound, bound, gen);
}
void xavier_normal_(Tensor t, double gain, Generator* gen) {
  auto [fi, fo] = fans(t);
  normal_(t, 0, gain * std::sqrt(2.0 / double(fi + fo)), gen);
}

}  // namespace nn::init
