// The text classifiers' shared program (mlp_train, transformer_train): aclImdb-layout data or
// a generated synthetic set, tokenisation (a word vocabulary built from the training split and
// saved beside the model, or a BERT WordPiece vocab.txt), training with AdamW, warm-up and
// linear decay, optional clipping and mixed precision, validation on the test split with
// inference throughput, --eval-only on a saved model, and the long-run options of run.h.
#pragma once
#include <nn/nn.h>

#include <cxxopts.hpp>

#include <functional>
#include <memory>
#include <string>

namespace apps {

struct TextApp {
  std::string name, description;
  double lr = 1e-3, weight_decay = 0.01, warmup = 0.0, clip = 0.0;  // defaults of the flags
  int64_t max_len = 256;  // default of --max-len
  bool cls_sep = false;  // wrap sequences in [CLS] ... [SEP]
  std::function<void(cxxopts::Options&)> add_options;
  // Optional: checks the app's own flags (a UsageError for a bad one) before any data is read.
  std::function<void(const cxxopts::ParseResult&)> check_options;
  // Builds the model for a vocabulary (and its [PAD] id), a class count and a sequence length;
  // `loaded` is the --load-model file's tensors (null without one), whose shapes the model
  // must take where the length does not fix them (a position table).
  std::function<std::shared_ptr<nn::Module>(const cxxopts::ParseResult&, int64_t vocab,
                                            int64_t classes, int64_t max_len, int64_t pad_id,
                                            const nn::NamedTensors* loaded)>
      make_model;
  // logits (N, classes) from ids (N, L) and keep (N, L).
  std::function<nn::Tensor(nn::Module&, const nn::Tensor&, const nn::Tensor&)> forward;
  // Optional, after the model is built and before it moves to the device (e.g. load
  // pretrained weights); prints what it did.
  std::function<void(nn::Module&, const cxxopts::ParseResult&)> prepare;
};

int run_text_app(const TextApp& app, int argc, char** argv);

}  // namespace apps
