// The BERT-style encoder. Containers named like Hugging Face's modules give parameter names
// that match its checkpoints one to one.
#include <nn/autograd.h>
#include <nn/init.h>
#include <nn/models.h>
#include <nn/ops.h>

#include <set>

namespace nn::models {

namespace {
// A named container with no forward, standing for an HF module level ("attention", ...).
std::shared_ptr<Module> container(Module& parent, const std::string& name) {
  return parent.register_module(name, std::make_shared<Module>(name));
}
std::shared_ptr<Linear> linear(Module& parent, const std::string& name, int64_t in, int64_t out) {
  return parent.register_module(name, std::make_shared<Linear>(in, out));
}
std::shared_ptr<LayerNorm> norm(Module& parent, const BertConfig& c) {
  return parent.register_module(
      "LayerNorm", std::make_shared<LayerNorm>(LayerNormOptions({c.hidden()}).eps(c.layer_norm_eps())));
}
}  // namespace

BertConfig BertConfig::preset(const std::string& name) {
  if (name == "tiny") return BertConfig().hidden(128).layers(2).heads(2).ffn(512);
  if (name == "mini") return BertConfig().hidden(256).layers(4).heads(4).ffn(1024);
  if (name == "base") return BertConfig();
  NN_ERROR("unknown BERT preset '", name, "' (expected tiny, mini or base)");
}

BertSelfAttention::BertSelfAttention(const BertConfig& c)
    : Module("BertSelfAttention"), heads(c.heads()),
      dropout_p(c.attention_dropout().value_or(c.dropout())) {
  NN_CHECK(dropout_p >= 0 && dropout_p <= 1, "BERT: attention dropout must be in [0, 1], got ",
           dropout_p);
  query = linear(*this, "query", c.hidden(), c.hidden());
  key = linear(*this, "key", c.hidden(), c.hidden());
  value = linear(*this, "value", c.hidden(), c.hidden());
}

Tensor BertSelfAttention::forward(const Tensor& x, const Tensor& keep) {
  const int64_t N = x.size(0), T = x.size(1), H = x.size(2), dh = H / heads;
  // q, k and v from one product (the three weights side by side: one pass over x, one GEMM
  // three times as wide), their heads read where they lie in its (N, T, 3, heads, dh) output
  const Tensor w = concat({query->weight, key->weight, value->weight}, 0);
  const Tensor b = concat({query->bias, key->bias, value->bias}, 0);
  Tensor qkv = linear(x, w, b).reshape({N, T, 3, heads, dh});
  Tensor o = scaled_dot_product_attention_packed(qkv, keep, std::nullopt,
                                                 is_training() ? dropout_p : 0.0);
  return o.reshape({N, T, H});
}

BertLayer::BertLayer(const BertConfig& c) : Module("BertLayer"), config(c) {
  auto attention = container(*this, "attention");
  self = attention->register_module("self", std::make_shared<BertSelfAttention>(c));
  auto attn_out = container(*attention, "output");
  attention_out = linear(*attn_out, "dense", c.hidden(), c.hidden());
  attention_norm = norm(*attn_out, c);
  intermediate = linear(*container(*this, "intermediate"), "dense", c.hidden(), c.ffn());
  auto out = container(*this, "output");
  output = linear(*out, "dense", c.ffn(), c.hidden());
  output_norm = norm(*out, c);
}

Tensor BertLayer::forward(const Tensor& x, const Tensor& keep) {
  const double p = config.dropout();
  const bool train = is_training();
  auto feed_forward = [&](const Tensor& h) { return output->forward(gelu(intermediate->forward(h))); };
  if (config.pre_ln()) {
    Tensor h = add(x, dropout(attention_out->forward(self->forward(attention_norm->forward(x), keep)), p, train));
    return add(h, dropout(feed_forward(output_norm->forward(h)), p, train));
  }
  // post-LN: each sub-layer ends in norm(residual + dropout(out)), one call
  Tensor h = attention_norm->forward_residual(attention_out->forward(self->forward(x, keep)), x,
                                              p, train);
  return output_norm->forward_residual(feed_forward(h), h, p, train);
}

BertModel::BertModel(const BertConfig& c) : Module("BertModel"), config(c) {
  NN_CHECK(c.hidden() > 0 && c.heads() > 0 && c.hidden() % c.heads() == 0,
           "BERT: hidden size ", c.hidden(), " must be a positive multiple of heads ", c.heads());
  NN_CHECK(c.layers() >= 1 && c.ffn() > 0 && c.vocab_size() > 0 && c.max_len() > 0,
           "BERT: layers, ffn, vocab_size and max_len must be positive");
  NN_CHECK(c.dropout() >= 0 && c.dropout() <= 1, "BERT: dropout must be in [0, 1], got ", c.dropout());
  auto emb = container(*this, "embeddings");
  word = emb->register_module("word_embeddings", std::make_shared<Embedding>(
                                                     EmbeddingOptions(c.vocab_size(), c.hidden()).padding_idx(c.pad_id())));
  position = emb->register_module("position_embeddings",
                                  std::make_shared<Embedding>(c.max_len(), c.hidden()));
  token_type = emb->register_module("token_type_embeddings",
                                    std::make_shared<Embedding>(c.type_vocab(), c.hidden()));
  embed_norm = norm(*emb, c);
  auto encoder = container(*this, "encoder");
  layers = encoder->register_module("layer", std::make_shared<ModuleList>());
  for (int64_t i = 0; i < c.layers(); ++i) layers->push_back(std::make_shared<BertLayer>(c));
  if (c.pre_ln()) final_norm = norm(*encoder, c);
  pooler = linear(*container(*this, "pooler"), "dense", c.hidden(), c.hidden());
  // BERT's init: N(0, 0.02) for weights, zero biases, LayerNorm as identity.
  for (auto& [name, t] : named_parameters()) {
    if (name.find("LayerNorm") != std::string::npos) continue;
    if (name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0) init::zeros_(t);
    else init::normal_(t, 0, 0.02);
  }
  NoGradGuard ng;
  word->weight.select(0, *word->options.padding_idx()).zero_();  // [PAD]'s row, as HF's
}

Tensor BertModel::encode(const Tensor& ids, const Tensor& keep) {
  NN_CHECK(ids.dim() == 2, "BERT: ids must be (N, T), got ", shape_str(ids.shape()));
  const int64_t T = ids.size(1);
  NN_CHECK(T <= config.max_len(), "BERT: sequence of ", T, " tokens is longer than max_len ",
           config.max_len());
  Tensor pos = arange(T, TensorOptions(kI64).device(ids.device()));
  Tensor types = zeros({T}, TensorOptions(kI64).device(ids.device()));
  Tensor h = add(add(word->forward(ids), position->forward(pos)), token_type->forward(types));
  h = dropout(embed_norm->forward(h), config.dropout(), is_training());
  for (size_t i = 0; i < layers->size(); ++i) h = layers->at<BertLayer>(i)->forward(h, keep);
  return final_norm ? final_norm->forward(h) : h;
}

Tensor BertModel::forward(const Tensor& ids, const Tensor& keep) {
  NN_CHECK(ids.dim() != 2 || ids.size(1) > 0, "BERT: sequences of 0 tokens have no [CLS] "
           "position to pool");
  Tensor h = encode(ids, keep);
  return tanh(pooler->forward(h.select(1, 0)));  // the [CLS] position
}

BertClassifier::BertClassifier(const BertConfig& c) : Module("BertClassifier") {
  NN_CHECK(c.num_classes() > 0, "BERT: num_classes must be positive");
  bert = register_module("bert", std::make_shared<BertModel>(c));
  classifier = register_module("classifier", std::make_shared<Linear>(c.hidden(), c.num_classes()));
  init::normal_(classifier->weight, 0, 0.02);
  init::zeros_(classifier->bias);
}

Tensor BertClassifier::forward(const Tensor& ids, const Tensor& keep) {
  return classifier->forward(dropout(bert->forward(ids, keep), bert->config.dropout(), is_training()));
}

Module::LoadResult BertClassifier::load_pretrained(const NamedTensors& hf) {
  NamedTensors renamed;
  for (auto& [name, t] : hf) {
    std::string n = name;
    auto ends = [&](const std::string& s) {
      return n.size() >= s.size() && n.compare(n.size() - s.size(), s.size(), s) == 0;
    };
    if (ends("LayerNorm.gamma")) n = n.substr(0, n.size() - 5) + "weight";
    else if (ends("LayerNorm.beta")) n = n.substr(0, n.size() - 4) + "bias";
    if (n.rfind("bert.", 0) != 0 && n.rfind("classifier.", 0) != 0 && n.rfind("cls.", 0) != 0)
      n = "bert." + n;  // a bare BertModel checkpoint
    renamed.emplace_back(n, t);
  }
  NN_CHECK(!bert->config.pre_ln(), "load_pretrained: BERT's weights are post-LN, this model is "
           "pre-LN (BertConfig::pre_ln; transformer_train --norm post)");
  std::set<std::string> given;
  for (auto& [n, t] : renamed) given.insert(n);
  for (auto& [n, t] : named_parameters())
    NN_CHECK(n.rfind("bert.", 0) != 0 || n.rfind("bert.pooler.", 0) == 0 || given.count(n),
             "load_pretrained: the file lacks '", n, "' (not a BERT checkpoint?)");
  return load_state_dict(renamed, false);
}

}  // namespace nn::models
