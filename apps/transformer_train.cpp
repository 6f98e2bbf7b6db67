// A BERT-style encoder classifier on IMDB-style data: from scratch, or fine-tuned from a
// Hugging Face safetensors checkpoint with its vocab.txt.
#include <cstdio>
#include <memory>

#include "common/cli.h"
#include "common/text_app.h"

namespace {
// The --pretrained checkpoint, read once: by make_model (its position table's length) and
// by prepare (its weights), which lets it go.
std::unique_ptr<nn::io::SafetensorsFile> g_pretrained;

nn::models::BertConfig config(const cxxopts::ParseResult& a, int64_t vocab, int64_t classes,
                              int64_t max_len, int64_t pad_id = 0) {
  const std::string preset = a["preset"].as<std::string>();
  apps::check_choice("preset", preset, {"tiny", "mini", "base"});
  auto c = nn::models::BertConfig::preset(preset).vocab_size(vocab).num_classes(classes).pad_id(pad_id);
  c.max_len(std::max<int64_t>(max_len, 512));
  if (a.count("layers")) c.layers(apps::check_count("layers", a["layers"].as<int64_t>(), apps::kMaxLayers));
  if (a.count("hidden")) c.hidden(apps::check_positive("hidden", a["hidden"].as<int64_t>()));
  if (a.count("heads")) c.heads(apps::check_positive("heads", a["heads"].as<int64_t>()));
  if (a.count("ffn")) c.ffn(apps::check_positive("ffn", a["ffn"].as<int64_t>()));
  c.dropout(apps::check_probability("dropout", a["dropout"].as<double>()));
  if (a.count("attention-dropout"))
    c.attention_dropout(apps::check_probability("attention-dropout", a["attention-dropout"].as<double>()));
  apps::check_choice("norm", a["norm"].as<std::string>(), {"pre", "post"});
  c.pre_ln(a["norm"].as<std::string>() == "pre");
  if (a.count("pretrained")) {  // BERT's weights are post-LN: --norm defaults to post then
    if (a.count("norm") && c.pre_ln())
      throw apps::UsageError("--pretrained loads BERT's post-LN weights: --norm pre cannot "
                             "use them");
    // a vocabulary built from the data would give its words other ids than the ones the
    // checkpoint's embeddings were trained for (and load without a word when the sizes match)
    if (!a.count("vocab"))
      throw apps::UsageError("--pretrained needs the checkpoint's own vocabulary: pass its "
                             "vocab.txt with --vocab");
    c.pre_ln(false);
  }
  if (c.hidden() % c.heads() != 0)
    throw apps::UsageError("the hidden size (" + std::to_string(c.hidden()) +
                           ") must be a multiple of the heads (" + std::to_string(c.heads()) +
                           "): set --hidden or --heads");
  return c;
}

int run(int argc, char** argv) {
  apps::TextApp app;
  app.name = "transformer_train";
  app.description = "Train (or fine-tune, or evaluate) a BERT-style encoder text classifier.";
  app.lr = 1e-3;
  app.max_len = 128;
  app.warmup = 0.1;
  app.clip = 1.0;
  app.cls_sep = true;
  app.add_options = [](cxxopts::Options& o) {
    o.add_options("model")
        ("preset", "tiny (2 x 128), mini (4 x 256) or base (BERT-base: 12 x 768, 12 heads)",
         cxxopts::value<std::string>()->default_value("tiny"))
        ("layers", "encoder layers (overrides the preset)", cxxopts::value<int64_t>())
        ("hidden", "hidden size", cxxopts::value<int64_t>())
        ("heads", "attention heads", cxxopts::value<int64_t>())
        ("ffn", "feed-forward width", cxxopts::value<int64_t>())
        ("dropout", "dropout on embeddings, sublayer outputs and the pooled [CLS]",
         cxxopts::value<double>()->default_value("0.1"))
        ("attention-dropout", "dropout on the attention probabilities (default: --dropout's)",
         cxxopts::value<double>())
        ("norm", "post (BERT) or pre layer norm", cxxopts::value<std::string>()->default_value("pre"))
        ("pretrained", "a Hugging Face BERT checkpoint (.safetensors) to start from; use with "
                       "its --vocab and --preset base (implies --norm post)",
         cxxopts::value<std::string>());
  };
  app.check_options = [](const cxxopts::ParseResult& a) { config(a, 1, 1, 1); };
  app.make_model = [](const cxxopts::ParseResult& a, int64_t vocab, int64_t classes, int64_t max_len,
                      int64_t pad_id, const nn::NamedTensors* loaded) {
    auto c = config(a, vocab, classes, max_len, pad_id);
    // The position table is the checkpoint's, whatever its length: the --load-model file's
    // (which takes precedence; it may be read at another --max-len than it was trained at),
    // else --pretrained's.
    std::string path;
    if (loaded) {
      path = a["load-model"].as<std::string>();
    } else if (a.count("pretrained")) {
      path = a["pretrained"].as<std::string>();
      g_pretrained = std::make_unique<nn::io::SafetensorsFile>(nn::io::load_safetensors(path));
      loaded = &g_pretrained->tensors;
    }
    if (loaded)
      for (auto& [name, t] : *loaded)
        if (name.ends_with("embeddings.position_embeddings.weight") && t.dim() == 2) {
          if (max_len > t.shape()[0])
            throw apps::UsageError("--max-len " + std::to_string(max_len) + " is longer than the " +
                                   std::to_string(t.shape()[0]) + " positions of '" + path + "'");
          c.max_len(t.shape()[0]);
        }
    return std::make_shared<nn::models::BertClassifier>(c);
  };
  app.forward = [](nn::Module& m, const nn::Tensor& ids, const nn::Tensor& keep) {
    return static_cast<nn::models::BertClassifier&>(m).forward(ids, keep);
  };
  app.prepare = [](nn::Module& m, const cxxopts::ParseResult& a) {
    if (!a.count("pretrained")) return;
    const std::string path = a["pretrained"].as<std::string>();
    if (!g_pretrained)
      g_pretrained = std::make_unique<nn::io::SafetensorsFile>(nn::io::load_safetensors(path));
    auto r = static_cast<nn::models::BertClassifier&>(m).load_pretrained(g_pretrained->tensors);
    g_pretrained.reset();
    std::printf("transformer_train: loaded '%s' (%zu tensors not in the file, e.g. the new "
                "classifier; %zu in the file not used)\n",
                path.c_str(), r.missing.size(), r.unexpected.size());
  };
  return apps::run_text_app(app, argc, argv);
}
}  // namespace

int main(int argc, char** argv) { return apps::guarded_main("transformer_train", argc, argv, run); }
