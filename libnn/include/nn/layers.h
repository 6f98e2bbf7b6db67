// Standard layers. Each initialises its parameters the way PyTorch does for that layer.
#pragma once
#include <nn/module.h>
#include <nn/ops.h>

#include <array>
#include <optional>

namespace nn {

struct LinearOptions {
  LinearOptions(int64_t in, int64_t out) : in_features_(in), out_features_(out) {}
  NN_ARG(int64_t, in_features);
  NN_ARG(int64_t, out_features);
  NN_ARG(bool, bias) = true;
};
class Linear : public Module {
 public:
  explicit Linear(const LinearOptions& o);
  Linear(int64_t in, int64_t out) : Linear(LinearOptions(in, out)) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  void reset_parameters();
  LinearOptions options;
  Tensor weight, bias;  // (out, in), (out) or undefined
};

using Size2 = std::array<int64_t, 2>;
struct Conv2dOptions {
  Conv2dOptions(int64_t in, int64_t out, Size2 kernel)
      : in_channels_(in), out_channels_(out), kernel_size_(kernel) {}
  Conv2dOptions(int64_t in, int64_t out, int64_t kernel)
      : Conv2dOptions(in, out, Size2{kernel, kernel}) {}
  NN_ARG(int64_t, in_channels);
  NN_ARG(int64_t, out_channels);
  NN_ARG(Size2, kernel_size);
  NN_ARG(Size2, stride) = {1, 1};
  NN_ARG(Size2, padding) = {0, 0};
  NN_ARG(Size2, dilation) = {1, 1};
  NN_ARG(int64_t, groups) = 1;
  NN_ARG(bool, bias) = true;
};
class Conv2d : public Module {
 public:
  explicit Conv2d(const Conv2dOptions& o);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  void reset_parameters();
  Conv2dOptions options;
  Tensor weight, bias;  // (O, C/groups, KH, KW), (O) or undefined
};

struct Conv1dOptions {
  Conv1dOptions(int64_t in, int64_t out, int64_t kernel)
      : in_channels_(in), out_channels_(out), kernel_size_(kernel) {}
  NN_ARG(int64_t, in_channels);
  NN_ARG(int64_t, out_channels);
  NN_ARG(int64_t, kernel_size);
  NN_ARG(int64_t, stride) = 1;
  NN_ARG(int64_t, padding) = 0;
  NN_ARG(int64_t, dilation) = 1;
  NN_ARG(int64_t, groups) = 1;
  NN_ARG(bool, bias) = true;
};
// Over (N, C, L): see nn::conv1d.
class Conv1d : public Module {
 public:
  explicit Conv1d(const Conv1dOptions& o);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  void reset_parameters();
  Conv1dOptions options;
  Tensor weight, bias;  // (O, C/groups, K), (O) or undefined
};

struct BatchNormOptions {
  explicit BatchNormOptions(int64_t num_features) : num_features_(num_features) {}
  NN_ARG(int64_t, num_features);
  NN_ARG(double, eps) = 1e-5;
  // The running statistics' update factor; std::nullopt (PyTorch's momentum=None) makes them
  // the plain average of every batch so far: factor 1 / num_batches_tracked, read from the
  // counter at each training step (a device sync on CUDA, as PyTorch's).
  NN_ARG(std::optional<double>, momentum) = 0.1;
  NN_ARG(bool, affine) = true;
  NN_ARG(bool, track_running_stats) = true;
};
// Normalises (N, C, ...) per channel; works for BatchNorm1d and 2d shapes alike.
class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(const BatchNormOptions& o);
  explicit BatchNorm2d(int64_t c) : BatchNorm2d(BatchNormOptions(c)) {}
  Tensor forward(const Tensor& x) override;
  // relu(forward(x) + residual) (residual undefined: relu(forward(x))), fused: see
  // nn::batch_norm_relu.
  Tensor forward_relu(const Tensor& x, const Tensor& residual = {});
  std::string extra_repr() const override;
  BatchNormOptions options;
  Tensor weight, bias, running_mean, running_var, num_batches_tracked;
};

struct GroupNormOptions {
  GroupNormOptions(int64_t num_groups, int64_t num_channels)
      : num_groups_(num_groups), num_channels_(num_channels) {}
  NN_ARG(int64_t, num_groups);
  NN_ARG(int64_t, num_channels);
  NN_ARG(double, eps) = 1e-5;
  NN_ARG(bool, affine) = true;
};
// nn::group_norm with a weight (ones) and bias (zeros) per channel.
class GroupNorm : public Module {
 public:
  explicit GroupNorm(const GroupNormOptions& o);
  GroupNorm(int64_t num_groups, int64_t num_channels) : GroupNorm(GroupNormOptions(num_groups, num_channels)) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  GroupNormOptions options;
  Tensor weight, bias;
};

struct LayerNormOptions {
  explicit LayerNormOptions(Shape normalized_shape) : normalized_shape_(std::move(normalized_shape)) {}
  NN_ARG(Shape, normalized_shape);
  NN_ARG(double, eps) = 1e-5;
  NN_ARG(bool, elementwise_affine) = true;
};
class LayerNorm : public Module {
 public:
  explicit LayerNorm(const LayerNormOptions& o);
  explicit LayerNorm(int64_t d) : LayerNorm(LayerNormOptions({d})) {}
  Tensor forward(const Tensor& x) override;
  // The norm of residual + dropout(x) (nn::dropout_add_layer_norm): a post-LN block's end.
  Tensor forward_residual(const Tensor& x, const Tensor& residual, double dropout_p,
                          bool training, Generator* gen = nullptr);
  std::string extra_repr() const override;
  LayerNormOptions options;
  Tensor weight, bias;
};

struct EmbeddingOptions {
  EmbeddingOptions(int64_t num, int64_t dim) : num_embeddings_(num), embedding_dim_(dim) {}
  NN_ARG(int64_t, num_embeddings);
  NN_ARG(int64_t, embedding_dim);
  NN_ARG(std::optional<int64_t>, padding_idx);
};
class Embedding : public Module {
 public:
  explicit Embedding(const EmbeddingOptions& o);
  Embedding(int64_t num, int64_t dim) : Embedding(EmbeddingOptions(num, dim)) {}
  Tensor forward(const Tensor& indices) override;
  std::string extra_repr() const override;
  EmbeddingOptions options;
  Tensor weight;  // (num, dim)
};

class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  double p;
};

// Stateless layers.
class ReLU : public Module {
 public:
  ReLU() : Module("ReLU") {}
  Tensor forward(const Tensor& x) override { return relu(x); }
};
class GELU : public Module {
 public:
  GELU() : Module("GELU") {}
  Tensor forward(const Tensor& x) override { return gelu(x); }
};
class SiLU : public Module {
 public:
  SiLU() : Module("SiLU") {}
  Tensor forward(const Tensor& x) override { return silu(x); }
};
class LeakyReLU : public Module {
 public:
  explicit LeakyReLU(double negative_slope = 0.01) : Module("LeakyReLU"), negative_slope(negative_slope) {}
  Tensor forward(const Tensor& x) override { return leaky_relu(x, negative_slope); }
  double negative_slope;
};
class ELU : public Module {
 public:
  explicit ELU(double alpha = 1.0) : Module("ELU"), alpha(alpha) {}
  Tensor forward(const Tensor& x) override { return elu(x, alpha); }
  double alpha;
};
class Tanh : public Module {
 public:
  Tanh() : Module("Tanh") {}
  Tensor forward(const Tensor& x) override { return tanh(x); }
};
class Sigmoid : public Module {
 public:
  Sigmoid() : Module("Sigmoid") {}
  Tensor forward(const Tensor& x) override { return sigmoid(x); }
};
class Identity : public Module {
 public:
  Identity() : Module("Identity") {}
  Tensor forward(const Tensor& x) override { return x; }
};

struct Pool2dOptions {
  explicit Pool2dOptions(Size2 kernel) : kernel_size_(kernel) {}
  explicit Pool2dOptions(int64_t kernel) : kernel_size_{kernel, kernel} {}
  NN_ARG(Size2, kernel_size);
  NN_ARG(Size2, stride) = {0, 0};  // 0: same as the kernel
  NN_ARG(Size2, padding) = {0, 0};
  NN_ARG(Size2, dilation) = {1, 1};  // MaxPool2d only (AvgPool2d refuses another)
  NN_ARG(bool, count_include_pad) = true;
  NN_ARG(bool, ceil_mode) = false;  // the output size rounded up (Pool2dParams::ceil_mode)
};
class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(const Pool2dOptions& o) : Module("MaxPool2d"), options(o) {}
  explicit MaxPool2d(int64_t k) : MaxPool2d(Pool2dOptions(k)) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  Pool2dOptions options;
};
class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(const Pool2dOptions& o) : Module("AvgPool2d"), options(o) {}
  explicit AvgPool2d(int64_t k) : AvgPool2d(Pool2dOptions(k)) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  Pool2dOptions options;
};
class AdaptiveAvgPool2d : public Module {
 public:
  explicit AdaptiveAvgPool2d(Size2 size) : Module("AdaptiveAvgPool2d"), output_size(size) {}
  Tensor forward(const Tensor& x) override { return adaptive_avg_pool2d(x, output_size); }
  std::string extra_repr() const override;
  Size2 output_size;
};
struct Pool1dOptions {
  explicit Pool1dOptions(int64_t kernel) : kernel_size_(kernel) {}
  NN_ARG(int64_t, kernel_size);
  NN_ARG(int64_t, stride) = 0;  // 0: same as the kernel
  NN_ARG(int64_t, padding) = 0;
  NN_ARG(int64_t, dilation) = 1;  // MaxPool1d only (AvgPool1d refuses another)
  NN_ARG(bool, count_include_pad) = true;
  NN_ARG(bool, ceil_mode) = false;
};
class MaxPool1d : public Module {
 public:
  explicit MaxPool1d(const Pool1dOptions& o) : Module("MaxPool1d"), options(o) {}
  explicit MaxPool1d(int64_t k) : MaxPool1d(Pool1dOptions(k)) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  Pool1dOptions options;
};
class AvgPool1d : public Module {
 public:
  explicit AvgPool1d(const Pool1dOptions& o) : Module("AvgPool1d"), options(o) {}
  explicit AvgPool1d(int64_t k) : AvgPool1d(Pool1dOptions(k)) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  Pool1dOptions options;
};
class AdaptiveAvgPool1d : public Module {
 public:
  explicit AdaptiveAvgPool1d(int64_t size) : Module("AdaptiveAvgPool1d"), output_size(size) {}
  Tensor forward(const Tensor& x) override { return adaptive_avg_pool1d(x, output_size); }
  std::string extra_repr() const override;
  int64_t output_size;
};
class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1)
      : Module("Flatten"), start(start_dim), end(end_dim) {}
  Tensor forward(const Tensor& x) override { return x.flatten(start, end); }
  int64_t start, end;
};

}  // namespace nn
