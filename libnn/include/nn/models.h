// Ready-made models: ResNet-50 (torchvision's architecture and parameter names).
#pragma once
#include <nn/layers.h>
#include <nn/module.h>

#include <array>
#include <memory>
#include <optional>

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
  // Run in channels-last (NHWC) memory format: forward() converts its input once, and the
  // convolutions, batch norms and pools then work NHWC (on the GPU, tensor-core kernels
  // without transposes). Weights and results are the same either way.
  NN_ARG(bool, channels_last) = false;
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

// The Keras MNIST examples: mnist_cnn (conv3x3 32 relu, conv3x3 64 relu, maxpool 2,
// dropout .25, flatten, dense 128 relu, dropout .5, dense 10; 1,199,882 parameters) and
// mnist_mlp (dense 512 relu, dropout .2, dense 512 relu, dropout .2, dense 10).
std::shared_ptr<Sequential> keras_mnist_cnn();
std::shared_ptr<Sequential> keras_mnist_mlp();

// ResNet-50: 25,557,032 parameters with 1000 classes.
std::shared_ptr<ResNet> resnet50(const ResNetOptions& o = {});

// ---- The CIFAR ResNets (He et al. 2016, section 4.2) ------------------------------------------
// conv3x3 -> BN -> ReLU -> conv3x3 -> BN, plus the shortcut, then ReLU. Where the shape changes
// (stride 2, twice the channels) the shortcut is the paper's option A, without parameters:
// every second pixel, and zero channels added on both sides.
class BasicBlock : public Module {
 public:
  BasicBlock(int64_t in, int64_t planes, int64_t stride);
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<Conv2d> conv1, conv2;
  std::shared_ptr<BatchNorm2d> bn1, bn2;
  int64_t in_planes, planes, stride;
};

struct CifarResNetOptions {
  NN_ARG(int64_t, depth) = 20;  // 6n + 2: 20, 32, 44, 56, 110, ...
  NN_ARG(int64_t, num_classes) = 10;
  NN_ARG(int64_t, width) = 16;  // channels of the first stage (then 2x, 4x)
  NN_ARG(bool, zero_init_residual) = false;
  NN_ARG(bool, channels_last) = false;  // as in ResNetOptions
};

// conv3x3 (16) -> BN -> ReLU -> three stages of n blocks (16, 32, 64 channels; the second and
// third start with stride 2) -> global average pool -> Linear. For 32 x 32 inputs (any size
// works). ResNet-20: 269,722 parameters with 10 classes; ResNet-56: 853,018; ResNet-110:
// 1,727,962.
class CifarResNet : public Module {
 public:
  explicit CifarResNet(const CifarResNetOptions& o = {});
  // x (N, 3, H, W) -> logits (N, num_classes)
  Tensor forward(const Tensor& x) override;
  CifarResNetOptions options;
  std::shared_ptr<Conv2d> conv1;
  std::shared_ptr<BatchNorm2d> bn1;
  std::shared_ptr<Sequential> layer1, layer2, layer3;
  std::shared_ptr<Linear> fc;
};
std::shared_ptr<CifarResNet> cifar_resnet(const CifarResNetOptions& o = {});

}  // namespace nn::models

namespace nn::models {

// ---- BERT-style encoder ---------------------------------------------------------------------
// Parameter names follow Hugging Face's BertForSequenceClassification ("bert.embeddings.
// word_embeddings.weight", "bert.encoder.layer.0.attention.self.query.weight", ...,
// "classifier.weight"), so its safetensors checkpoints load by name.
struct BertConfig {
  NN_ARG(int64_t, vocab_size) = 30522;
  NN_ARG(int64_t, hidden) = 768;
  NN_ARG(int64_t, layers) = 12;
  NN_ARG(int64_t, heads) = 12;
  NN_ARG(int64_t, ffn) = 3072;
  NN_ARG(int64_t, max_len) = 512;      // position embeddings
  NN_ARG(int64_t, type_vocab) = 2;     // segment (token type) embeddings
  NN_ARG(double, dropout) = 0.1;        // on embeddings, sublayer outputs and the pooled [CLS]
  // on the attention probabilities (HF's attention_probs_dropout_prob); unset: `dropout`'s
  NN_ARG(std::optional<double>, attention_dropout) = std::nullopt;
  NN_ARG(double, layer_norm_eps) = 1e-12;
  NN_ARG(bool, pre_ln) = false;        // BERT is post-LN; pre-LN trains more stably from scratch
  NN_ARG(int64_t, num_classes) = 2;
  NN_ARG(int64_t, pad_id) = 0;         // [PAD]'s token id: its embedding stays zero (HF's pad_token_id)

 public:
  // Presets: tiny (2 x 128, 2 heads), mini (4 x 256, 4 heads), base (BERT-base).
  static BertConfig preset(const std::string& name);
};

class BertSelfAttention : public Module {
 public:
  explicit BertSelfAttention(const BertConfig& c);
  using Module::forward;  // not hidden (-Woverloaded-virtual); alone it is an error
  // x (N, T, H), keep (N, T) u8 or undefined -> (N, T, H)
  Tensor forward(const Tensor& x, const Tensor& keep);
  std::shared_ptr<Linear> query, key, value;
  int64_t heads;
  double dropout_p;  // on the attention probabilities, in training
};

class BertLayer : public Module {
 public:
  explicit BertLayer(const BertConfig& c);
  using Module::forward;  // not hidden (-Woverloaded-virtual); alone it is an error
  Tensor forward(const Tensor& x, const Tensor& keep);
  BertConfig config;
  std::shared_ptr<BertSelfAttention> self;
  std::shared_ptr<Linear> attention_out, intermediate, output;
  std::shared_ptr<LayerNorm> attention_norm, output_norm;
};

class BertModel : public Module {
 public:
  explicit BertModel(const BertConfig& c);
  // ids (N, T) i64, keep (N, T) u8 (1 = real token) or undefined -> pooled [CLS] (N, H)
  using Module::forward;  // not hidden (-Woverloaded-virtual); alone it is an error
  Tensor forward(const Tensor& ids, const Tensor& keep);
  // The final hidden states (N, T, H).
  Tensor encode(const Tensor& ids, const Tensor& keep);
  BertConfig config;
  std::shared_ptr<Embedding> word, position, token_type;
  std::shared_ptr<LayerNorm> embed_norm, final_norm;  // final_norm only with pre_ln
  std::shared_ptr<ModuleList> layers;
  std::shared_ptr<Linear> pooler;
};

class BertClassifier : public Module {
 public:
  explicit BertClassifier(const BertConfig& c);
  // ids (N, T), keep (N, T) -> logits (N, num_classes)
  using Module::forward;  // not hidden (-Woverloaded-virtual); alone it is an error
  Tensor forward(const Tensor& ids, const Tensor& keep);
  std::shared_ptr<BertModel> bert;
  std::shared_ptr<Linear> classifier;
  // Loads a Hugging Face checkpoint's tensors (old "gamma"/"beta" LayerNorm names too); tensors
  // the model lacks (a pre-training head) and ones the file lacks (a new classifier, the
  // pooler) are skipped and returned. Refused, before anything is loaded, for a pre-LN model
  // (BERT's weights are post-LN) and for a file that lacks an encoder tensor (not a BERT
  // checkpoint, or another size).
  LoadResult load_pretrained(const NamedTensors& hf);
};

}  // namespace nn::models

namespace nn::models {

// The light text classifier: mean of token embeddings -> `layers` x (Linear, ReLU, Dropout)
// -> Linear to the classes.
struct TextMLPOptions {
  TextMLPOptions(int64_t vocab, int64_t classes) : vocab_size_(vocab), num_classes_(classes) {}
  NN_ARG(int64_t, vocab_size);
  NN_ARG(int64_t, num_classes);
  NN_ARG(int64_t, embed_dim) = 128;
  NN_ARG(int64_t, hidden) = 256;
  NN_ARG(int64_t, layers) = 1;
  NN_ARG(double, dropout) = 0.2;
  NN_ARG(int64_t, pad_id) = 0;  // [PAD]'s token id: its embedding row starts at zero
};
class TextMLP : public Module {
 public:
  explicit TextMLP(const TextMLPOptions& o);
  // ids (N, L) i64, keep (N, L) (1 = real token) or undefined -> logits (N, classes)
  using Module::forward;  // not hidden (-Woverloaded-virtual); alone it is an error
  Tensor forward(const Tensor& ids, const Tensor& keep);
  TextMLPOptions options;
  std::shared_ptr<Embedding> embed;
  std::shared_ptr<Sequential> mlp;
};

}  // namespace nn::models
