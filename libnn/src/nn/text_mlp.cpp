#include <nn/models.h>
#include <nn/ops.h>
#include <nn/text.h>

namespace nn::models {

TextMLP::TextMLP(const TextMLPOptions& o) : Module("TextMLP"), options(o) {
  NN_CHECK(o.vocab_size() > 0 && o.num_classes() > 0 && o.embed_dim() > 0 && o.hidden() > 0 &&
               o.layers() >= 0,
           "TextMLP: sizes must be positive");
  embed = register_module("embed", std::make_shared<Embedding>(
                                        EmbeddingOptions(o.vocab_size(), o.embed_dim()).padding_idx(o.pad_id())));
  mlp = register_module("mlp", std::make_shared<Sequential>());
  int64_t in = o.embed_dim();
  for (int64_t i = 0; i < o.layers(); ++i) {
    mlp->push_back(std::make_shared<Linear>(in, o.hidden()));
    mlp->push_back(std::make_shared<ReLU>());
    mlp->push_back(std::make_shared<Dropout>(o.dropout()));
    in = o.hidden();
  }
  mlp->push_back(std::make_shared<Linear>(in, o.num_classes()));
}

Tensor TextMLP::forward(const Tensor& ids, const Tensor& keep) {
  // without a mask, [PAD] tokens are left out of the mean and get no gradient (as
  // EmbeddingBag's padding_idx has it)
  return mlp->forward(
      embedding_bag(embed->weight, ids, keep.defined() ? keep : text::padding_mask(ids, options.pad_id())));
}

}  // namespace nn::models
