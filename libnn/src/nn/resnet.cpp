#include <nn/init.h>
#include <nn/models.h>
#include <nn/ops.h>

namespace nn::models {

namespace {
std::shared_ptr<Conv2d> conv(int64_t in, int64_t out, int64_t k, int64_t stride, int64_t pad) {
  return std::make_shared<Conv2d>(
      Conv2dOptions(in, out, k).stride({stride, stride}).padding({pad, pad}).bias(false));
}
}  // namespace

Bottleneck::Bottleneck(int64_t in, int64_t planes, int64_t stride) : Module("Bottleneck") {
  const int64_t out = planes * kExpansion;
  conv1 = register_module("conv1", conv(in, planes, 1, 1, 0));
  bn1 = register_module("bn1", std::make_shared<BatchNorm2d>(planes));
  conv2 = register_module("conv2", conv(planes, planes, 3, stride, 1));
  bn2 = register_module("bn2", std::make_shared<BatchNorm2d>(planes));
  conv3 = register_module("conv3", conv(planes, out, 1, 1, 0));
  bn3 = register_module("bn3", std::make_shared<BatchNorm2d>(out));
  if (stride != 1 || in != out) {
    auto ds = std::make_shared<Sequential>();
    ds->push_back(conv(in, out, 1, stride, 0));
    ds->push_back(std::make_shared<BatchNorm2d>(out));
    downsample = register_module("downsample", ds);
  }
}

Tensor Bottleneck::forward(const Tensor& x) {
  Tensor h = bn1->forward_relu(conv1->forward(x));
  h = bn2->forward_relu(conv2->forward(h));
  return bn3->forward_relu(conv3->forward(h), downsample ? downsample->forward(x) : x);
}

ResNet::ResNet(const ResNetOptions& o) : Module("ResNet"), options(o) {
  NN_CHECK(o.num_classes() > 0, "ResNet: num_classes must be positive");
  for (int64_t blocks : o.layers())
    NN_CHECK(blocks >= 1, "ResNet: every stage needs at least one block, got layers {",
             o.layers()[0], ", ", o.layers()[1], ", ", o.layers()[2], ", ", o.layers()[3], "}");
  conv1 = register_module("conv1", conv(3, 64, 7, 2, 3));
  bn1 = register_module("bn1", std::make_shared<BatchNorm2d>(64));
  int64_t in = 64;
  auto make_layer = [&](const char* name, int64_t planes, int64_t blocks, int64_t stride) {
    auto seq = std::make_shared<Sequential>();
    for (int64_t b = 0; b < blocks; ++b) {
      seq->push_back(std::make_shared<Bottleneck>(in, planes, b == 0 ? stride : 1));
      in = planes * Bottleneck::kExpansion;
    }
    return register_module(name, seq);
  };
  layer1 = make_layer("layer1", 64, o.layers()[0], 1);
  layer2 = make_layer("layer2", 128, o.layers()[1], 2);
  layer3 = make_layer("layer3", 256, o.layers()[2], 2);
  layer4 = make_layer("layer4", 512, o.layers()[3], 2);
  fc = register_module("fc", std::make_shared<Linear>(in, o.num_classes()));
  // torchvision's init: He normal (fan_out, ReLU) for convolutions, BN to identity.
  for (auto& [name, p] : named_parameters()) {
    if (p.dim() == 4) init::kaiming_normal_(p, 0, init::FanMode::fan_out, init::Nonlinearity::relu);
  }
  if (o.zero_init_residual()) {
    for (auto* layer : {layer1.get(), layer2.get(), layer3.get(), layer4.get()})
      for (auto& [n, block] : layer->named_children())
        init::zeros_(std::static_pointer_cast<Bottleneck>(block)->bn3->weight);
  }
}

Tensor ResNet::forward(const Tensor& x) {
  NN_CHECK(x.dim() == 4 && x.shape()[1] == 3, "ResNet: input must be (N, 3, H, W), got ",
           shape_str(x.shape()));
  Pool2dParams mp;
  mp.kernel = {3, 3};
  mp.stride = {2, 2};
  mp.padding = {1, 1};
  const Tensor in = options.channels_last() ? x.contiguous(MemoryFormat::channels_last) : x;
  Tensor h = max_pool2d(bn1->forward_relu(conv1->forward(in)), mp);
  h = layer4->forward(layer3->forward(layer2->forward(layer1->forward(h))));
  h = adaptive_avg_pool2d(h, {1, 1}).flatten(1);
  return fc->forward(h);
}

std::shared_ptr<ResNet> resnet50(const ResNetOptions& o) { return std::make_shared<ResNet>(o); }

BasicBlock::BasicBlock(int64_t in, int64_t planes_, int64_t stride_)
    : Module("BasicBlock"), in_planes(in), planes(planes_), stride(stride_) {
  NN_CHECK(in > 0 && planes >= in && stride >= 1, "BasicBlock: ", in, " -> ", planes, " channels, stride ",
           stride, ": the parameter-free shortcut can only keep or add channels");
  conv1 = register_module("conv1", conv(in, planes, 3, stride, 1));
  bn1 = register_module("bn1", std::make_shared<BatchNorm2d>(planes));
  conv2 = register_module("conv2", conv(planes, planes, 3, 1, 1));
  bn2 = register_module("bn2", std::make_shared<BatchNorm2d>(planes));
}

Tensor BasicBlock::forward(const Tensor& x) {
  Tensor h = bn1->forward_relu(conv1->forward(x));
  Tensor shortcut = x;
  if (stride != 1)  // option A: the pixels the strided convolution is centred on
    shortcut = x.slice(2, 0, x.shape()[2], stride).slice(3, 0, x.shape()[3], stride);
  if (planes != in_planes) {  // and zero channels on both sides
    const int64_t lo = (planes - in_planes) / 2, hi = planes - in_planes - lo;
    Shape s = shortcut.shape();
    std::vector<Tensor> parts;
    if (lo > 0) parts.push_back(zeros({s[0], lo, s[2], s[3]}, shortcut.options()));
    parts.push_back(shortcut);
    parts.push_back(zeros({s[0], hi, s[2], s[3]}, shortcut.options()));
    shortcut = concat(parts, 1);
  }
  return bn2->forward_relu(conv2->forward(h), shortcut);
}

CifarResNet::CifarResNet(const CifarResNetOptions& o) : Module("CifarResNet"), options(o) {
  NN_CHECK(o.depth() >= 8 && (o.depth() - 2) % 6 == 0, "CifarResNet: depth must be 6n + 2 with n >= 1 "
           "(20, 32, 44, 56, 110, ...), got ", o.depth());
  NN_CHECK(o.num_classes() > 0, "CifarResNet: num_classes must be positive");
  NN_CHECK(o.width() > 0, "CifarResNet: width must be positive");
  const int64_t n = (o.depth() - 2) / 6, w = o.width();
  conv1 = register_module("conv1", conv(3, w, 3, 1, 1));
  bn1 = register_module("bn1", std::make_shared<BatchNorm2d>(w));
  int64_t in = w;
  auto make_layer = [&](const char* name, int64_t planes, int64_t stride) {
    auto seq = std::make_shared<Sequential>();
    for (int64_t b = 0; b < n; ++b) {
      seq->push_back(std::make_shared<BasicBlock>(in, planes, b == 0 ? stride : 1));
      in = planes;
    }
    return register_module(name, seq);
  };
  layer1 = make_layer("layer1", w, 1);
  layer2 = make_layer("layer2", 2 * w, 2);
  layer3 = make_layer("layer3", 4 * w, 2);
  fc = register_module("fc", std::make_shared<Linear>(in, o.num_classes()));
  for (auto& [name, p] : named_parameters())
    if (p.dim() == 4) init::kaiming_normal_(p, 0, init::FanMode::fan_out, init::Nonlinearity::relu);
  if (o.zero_init_residual())
    for (auto* layer : {layer1.get(), layer2.get(), layer3.get()})
      for (auto& [name, block] : layer->named_children())
        init::zeros_(std::static_pointer_cast<BasicBlock>(block)->bn2->weight);
}

Tensor CifarResNet::forward(const Tensor& x) {
  NN_CHECK(x.dim() == 4 && x.shape()[1] == 3, "CifarResNet: input must be (N, 3, H, W), got ",
           shape_str(x.shape()));
  const Tensor in = options.channels_last() ? x.contiguous(MemoryFormat::channels_last) : x;
  Tensor h = bn1->forward_relu(conv1->forward(in));
  h = layer3->forward(layer2->forward(layer1->forward(h)));
  return fc->forward(adaptive_avg_pool2d(h, {1, 1}).flatten(1));
}

std::shared_ptr<CifarResNet> cifar_resnet(const CifarResNetOptions& o) { return std::make_shared<CifarResNet>(o); }

}  // namespace nn::models

namespace nn::models {

std::shared_ptr<Sequential> keras_mnist_cnn() {
  auto m = std::make_shared<Sequential>();
  m->push_back(std::make_shared<Conv2d>(Conv2dOptions(1, 32, 3)));
  m->push_back(std::make_shared<ReLU>());
  m->push_back(std::make_shared<Conv2d>(Conv2dOptions(32, 64, 3)));
  m->push_back(std::make_shared<ReLU>());
  m->push_back(std::make_shared<MaxPool2d>(2));
  m->push_back(std::make_shared<Dropout>(0.25));
  m->push_back(std::make_shared<Flatten>());
  m->push_back(std::make_shared<Linear>(9216, 128));
  m->push_back(std::make_shared<ReLU>());
  m->push_back(std::make_shared<Dropout>(0.5));
  m->push_back(std::make_shared<Linear>(128, 10));
  return m;
}

std::shared_ptr<Sequential> keras_mnist_mlp() {
  auto m = std::make_shared<Sequential>();
  m->push_back(std::make_shared<Flatten>());
  m->push_back(std::make_shared<Linear>(784, 512));
  m->push_back(std::make_shared<ReLU>());
  m->push_back(std::make_shared<Dropout>(0.2));
  m->push_back(std::make_shared<Linear>(512, 512));
  m->push_back(std::make_shared<ReLU>());
  m->push_back(std::make_shared<Dropout>(0.2));
  m->push_back(std::make_shared<Linear>(512, 10));
  return m;
}

}  // namespace nn::models
