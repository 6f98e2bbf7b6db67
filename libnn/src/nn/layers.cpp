#include <nn/autograd.h>
#include <nn/init.h>
#include <nn/layers.h>

#include <cmath>

namespace nn {

namespace {
std::string s2(const Size2& s) { return detail::cat("(", s[0], ", ", s[1], ")"); }
std::string s1(int64_t s) { return detail::cat("(", s, ",)"); }  // as PyTorch prints a 1-tuple
// PyTorch's default for Linear and Conv: kaiming_uniform(a = sqrt(5)) on the weight, which is
// U(-1/sqrt(fan_in), 1/sqrt(fan_in)), and the same bound for the bias.
void reset_affine(Tensor& w, Tensor& b) {
  init::kaiming_uniform_(w, std::sqrt(5.0));
  if (b.defined()) {
    double bound = 1.0 / std::sqrt(double(init::fans(w).first));
    init::uniform_(b, -bound, bound);
  }
}
}  // namespace

Linear::Linear(const LinearOptions& o) : Module("Linear"), options(o) {
  NN_CHECK(o.in_features() > 0 && o.out_features() > 0, "Linear: features must be positive, got ",
           o.in_features(), " -> ", o.out_features());
  weight = register_parameter("weight", empty({o.out_features(), o.in_features()}));
  if (o.bias()) bias = register_parameter("bias", empty({o.out_features()}));
  reset_parameters();
}
void Linear::reset_parameters() { reset_affine(weight, bias); }
Tensor Linear::forward(const Tensor& x) { return linear(x, weight, bias); }
std::string Linear::extra_repr() const {
  return detail::cat("in_features=", options.in_features(), ", out_features=",
                     options.out_features(), ", bias=", options.bias() ? "true" : "false");
}

namespace {
// What Conv1d and Conv2d share (O: their options). The weight's shape (O, C/groups, *kernel),
// groups checked.
template <class O>
Shape conv_weight_shape(const char* layer, const O& o, std::initializer_list<int64_t> kernel) {
  NN_CHECK(o.groups() >= 1 && o.in_channels() % o.groups() == 0 &&
               o.out_channels() % o.groups() == 0,
           layer, ": groups=", o.groups(), " must divide in_channels=", o.in_channels(),
           " and out_channels=", o.out_channels());
  Shape s{o.out_channels(), o.in_channels() / o.groups()};
  s.insert(s.end(), kernel);
  return s;
}
// PyTorch's repr, sizes printed by fmt; padding and dilation when not the defaults.
template <class O, class F>
std::string conv_repr(const O& o, F fmt) {
  const O defaults(1, 1, 1);
  std::string s = detail::cat(o.in_channels(), ", ", o.out_channels(), ", kernel_size=",
                              fmt(o.kernel_size()), ", stride=", fmt(o.stride()));
  if (o.padding() != defaults.padding()) s += ", padding=" + fmt(o.padding());
  if (o.dilation() != defaults.dilation()) s += ", dilation=" + fmt(o.dilation());
  if (o.groups() != 1) s += detail::cat(", groups=", o.groups());
  if (!o.bias()) s += ", bias=false";
  return s;
}
}  // namespace

Conv2d::Conv2d(const Conv2dOptions& o) : Module("Conv2d"), options(o) {
  weight = register_parameter(
      "weight", empty(conv_weight_shape("Conv2d", o, {o.kernel_size()[0], o.kernel_size()[1]})));
  if (o.bias()) bias = register_parameter("bias", empty({o.out_channels()}));
  reset_parameters();
}
void Conv2d::reset_parameters() { reset_affine(weight, bias); }
Tensor Conv2d::forward(const Tensor& x) {
  Conv2dParams p;
  p.stride = options.stride();
  p.padding = options.padding();
  p.dilation = options.dilation();
  p.groups = options.groups();
  return conv2d(x, weight, bias, p);
}
std::string Conv2d::extra_repr() const { return conv_repr(options, s2); }

Conv1d::Conv1d(const Conv1dOptions& o) : Module("Conv1d"), options(o) {
  weight = register_parameter("weight", empty(conv_weight_shape("Conv1d", o, {o.kernel_size()})));
  if (o.bias()) bias = register_parameter("bias", empty({o.out_channels()}));
  reset_parameters();
}
void Conv1d::reset_parameters() { reset_affine(weight, bias); }
Tensor Conv1d::forward(const Tensor& x) {
  return conv1d(x, weight, bias,
                {.stride = options.stride(), .padding = options.padding(),
                 .dilation = options.dilation(), .groups = options.groups()});
}
std::string Conv1d::extra_repr() const { return conv_repr(options, s1); }

BatchNorm2d::BatchNorm2d(const BatchNormOptions& o) : Module("BatchNorm2d"), options(o) {
  const int64_t c = o.num_features();
  NN_CHECK(c > 0, "BatchNorm2d: num_features must be positive");
  if (o.affine()) {
    weight = register_parameter("weight", ones({c}));
    bias = register_parameter("bias", zeros({c}));
  }
  if (o.track_running_stats()) {
    running_mean = register_buffer("running_mean", zeros({c}));
    running_var = register_buffer("running_var", ones({c}));
    num_batches_tracked = register_buffer("num_batches_tracked", zeros({}, kI64));
  }
}
namespace {
// Whether batch norm uses the batch's statistics (counting the batch when it updates the
// running ones), and the factor of that update.
struct Step {
  bool use_batch;
  double momentum;
};
Step count_batch(BatchNorm2d& m) {
  const bool use_batch = m.is_training() || !m.options.track_running_stats();
  double momentum = m.options.momentum().value_or(0.0);
  if (m.is_training() && m.options.track_running_stats()) {
    NoGradGuard ng;
    m.num_batches_tracked.add_(1);  // one kernel on a GPU (a launch per layer and step)
    if (!m.options.momentum())  // the cumulative average: this batch's share of all so far
      momentum = 1.0 / double(m.num_batches_tracked.item<int64_t>());
  }
  return {use_batch, momentum};
}
void check_4d(const Tensor& x) {
  NN_CHECK(x.dim() == 4, "BatchNorm2d: expected a 4-d (N, C, H, W) input, got ",
           shape_str(x.shape()), " (for (N, C) or (N, C, L), nn::batch_norm)");
}
}  // namespace
Tensor BatchNorm2d::forward(const Tensor& x) {
  check_4d(x);
  const Step s = count_batch(*this);
  return batch_norm(x, running_mean, running_var, weight, bias, s.use_batch, s.momentum,
                    options.eps());
}
Tensor BatchNorm2d::forward_relu(const Tensor& x, const Tensor& residual) {
  check_4d(x);
  const Step s = count_batch(*this);
  return batch_norm_relu(x, residual, running_mean, running_var, weight, bias, s.use_batch,
                         s.momentum, options.eps());
}
std::string BatchNorm2d::extra_repr() const {
  const auto m = options.momentum();
  return detail::cat(options.num_features(), ", eps=", options.eps(), ", momentum=",
                     m ? detail::cat(*m) : std::string("None"), ", affine=",
                     options.affine() ? "true" : "false");
}

GroupNorm::GroupNorm(const GroupNormOptions& o) : Module("GroupNorm"), options(o) {
  NN_CHECK(o.num_groups() >= 1 && o.num_channels() >= 1 && o.num_channels() % o.num_groups() == 0,
           "GroupNorm: ", o.num_channels(), " channels do not split into ", o.num_groups(), " groups");
  if (o.affine()) {
    weight = register_parameter("weight", ones({o.num_channels()}));
    bias = register_parameter("bias", zeros({o.num_channels()}));
  }
}
Tensor GroupNorm::forward(const Tensor& x) {
  return group_norm(x, options.num_groups(), weight, bias, options.eps());
}
std::string GroupNorm::extra_repr() const {
  return detail::cat(options.num_groups(), ", ", options.num_channels(), ", eps=", options.eps(),
                     ", affine=", options.affine() ? "true" : "false");
}

LayerNorm::LayerNorm(const LayerNormOptions& o) : Module("LayerNorm"), options(o) {
  if (o.elementwise_affine()) {
    weight = register_parameter("weight", ones(o.normalized_shape()));
    bias = register_parameter("bias", zeros(o.normalized_shape()));
  }
}
Tensor LayerNorm::forward(const Tensor& x) {
  return layer_norm(x, options.normalized_shape(), weight, bias, options.eps());
}
Tensor LayerNorm::forward_residual(const Tensor& x, const Tensor& residual, double dropout_p,
                                  bool training, Generator* gen) {
  return dropout_add_layer_norm(x, residual, options.normalized_shape(), weight, bias, dropout_p,
                                training, options.eps(), gen);
}
std::string LayerNorm::extra_repr() const {
  return detail::cat(shape_str(options.normalized_shape()), ", eps=", options.eps());
}

Embedding::Embedding(const EmbeddingOptions& o) : Module("Embedding"), options(o) {
  NN_CHECK(o.num_embeddings() > 0 && o.embedding_dim() > 0,
           "Embedding: sizes must be positive, got ", o.num_embeddings(), " x ", o.embedding_dim());
  if (o.padding_idx()) {
    NN_CHECK(*o.padding_idx() >= -o.num_embeddings() && *o.padding_idx() < o.num_embeddings(),
             "Embedding: padding_idx ", *o.padding_idx(), " out of range for ",
             o.num_embeddings(), " embeddings");
    if (*o.padding_idx() < 0) options.padding_idx(*o.padding_idx() + o.num_embeddings());
  }
  weight = register_parameter("weight", empty({o.num_embeddings(), o.embedding_dim()}));
  init::normal_(weight, 0, 1);
  if (options.padding_idx()) {
    NoGradGuard ng;
    weight.select(0, *options.padding_idx()).zero_();
  }
}
Tensor Embedding::forward(const Tensor& indices) {
  return embedding(weight, indices, options.padding_idx());
}
std::string Embedding::extra_repr() const {
  return detail::cat(options.num_embeddings(), ", ", options.embedding_dim());
}

Dropout::Dropout(double p_) : Module("Dropout"), p(p_) {
  NN_CHECK(p >= 0 && p <= 1, "Dropout: probability must be in [0, 1], got ", p);
}
Tensor Dropout::forward(const Tensor& x) { return dropout(x, p, is_training()); }
std::string Dropout::extra_repr() const { return detail::cat("p=", p); }

namespace {
// Pool2dParams or Pool1dParams (P) from Pool2dOptions or Pool1dOptions.
template <class P, class O>
P pool_params(const O& o) {
  P p;
  p.kernel = o.kernel_size();
  p.stride = o.stride();
  p.padding = o.padding();
  p.dilation = o.dilation();
  p.count_include_pad = o.count_include_pad();
  p.ceil_mode = o.ceil_mode();
  return p;
}
}  // namespace
Tensor MaxPool2d::forward(const Tensor& x) { return max_pool2d(x, pool_params<Pool2dParams>(options)); }
std::string MaxPool2d::extra_repr() const {
  return "kernel_size=" + s2(options.kernel_size()) + ", stride=" +
         s2(options.stride() == Size2{0, 0} ? options.kernel_size() : options.stride()) +
         (options.ceil_mode() ? ", ceil_mode=True" : "");
}
Tensor AvgPool2d::forward(const Tensor& x) { return avg_pool2d(x, pool_params<Pool2dParams>(options)); }
std::string AvgPool2d::extra_repr() const {
  return "kernel_size=" + s2(options.kernel_size()) + (options.ceil_mode() ? ", ceil_mode=True" : "");
}
std::string AdaptiveAvgPool2d::extra_repr() const { return "output_size=" + s2(output_size); }

Tensor MaxPool1d::forward(const Tensor& x) { return max_pool1d(x, pool_params<Pool1dParams>(options)); }
std::string MaxPool1d::extra_repr() const {
  return detail::cat("kernel_size=", options.kernel_size(), ", stride=",
                     options.stride() == 0 ? options.kernel_size() : options.stride(),
                     options.ceil_mode() ? ", ceil_mode=True" : "");
}
Tensor AvgPool1d::forward(const Tensor& x) { return avg_pool1d(x, pool_params<Pool1dParams>(options)); }
std::string AvgPool1d::extra_repr() const {
  return "kernel_size=" + s1(options.kernel_size()) + (options.ceil_mode() ? ", ceil_mode=True" : "");
}
std::string AdaptiveAvgPool1d::extra_repr() const { return detail::cat("output_size=", output_size); }

}  // namespace nn
