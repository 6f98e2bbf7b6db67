// Ready-made models: ResNet-50 (torchvision's architecture and parameter names).
#pragma once
#include <nn/layers.h>
#include <nn/module.h>

#include <array>
#include <memory>

namespace nn::models {

// conv1x1 -> BN -> ReLU -> conv3x3 (stride here, as torchvision v1.5) -> BN -> ReLU ->
// conv1x1 (x4 channels) -> BN, plus the shortcut, then ReLU.
class Bottleneck : public Module {
 public:
  static constexpr int64_t kExpansion = 4;
  Bottleneck(int64_t in, int64_t planes, int64_t stride);
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<Conv2d> conv1, conv2, conv3;
  std::shared_ptr<BatchNorm2d> bn1, bn2, bn3;
  std::shared_ptr<Sequential> downsample;  // null when the shortcut is the identity
};

using BlockCounts = std::array<int64_t, 4>;
struct ResNetOptions {
  NN_ARG(BlockCounts, layers) = {3, 4, 6, 3};  // ResNet-50
  NN_ARG(int64_t, num_classes) = 1000;
  // Start each block's last BN at zero, so blocks begin as identities (helps large batches).
  NN_ARG(bool, zero_init_residual) = false;
};

class ResNet : public Module {
 public:
  explicit ResNet(const ResNetOptions& o = {});
  // x (N, 3, H, W) -> logits (N, num_classes)
  Tensor forward(const Tensor& x) override;
  ResNetOptions options;
  std::shared_ptr<Conv2d> conv1;
  std::shared_ptr<BatchNorm2d> bn1;
  std::shared_ptr<Sequential> layer1, layer2, layer3, layer4;
  std::shared_ptr<Linear> fc;
};

// ResNet-50: 25,557,032 parameters with 1000 classes.
std::shared_ptr<ResNet> resnet50(const ResNetOptions& o = {});

}  // namespace nn::models
