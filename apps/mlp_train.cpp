// The light text classifier on IMDB-style data: mean of token embeddings -> MLP -> classes.
#include "common/cli.h"
#include "common/text_app.h"

namespace {
// The model's flags, checked (a usage error for a bad one).
nn::models::TextMLPOptions options(const cxxopts::ParseResult& a, int64_t vocab, int64_t classes) {
  return nn::models::TextMLPOptions(vocab, classes)
      .embed_dim(apps::check_positive("embed-dim", a["embed-dim"].as<int64_t>()))
      .hidden(apps::check_positive("hidden", a["hidden"].as<int64_t>()))
      .layers(apps::check_non_negative("layers", apps::check_at_most("layers", a["layers"].as<int64_t>(), apps::kMaxLayers)))
      .dropout(apps::check_probability("dropout", a["dropout"].as<double>()));
}

int run(int argc, char** argv) {
  apps::TextApp app;
  app.name = "mlp_train";
  app.description = "Train (or evaluate) the embedding-bag MLP text classifier.";
  app.lr = 2e-3;
  app.add_options = [](cxxopts::Options& o) {
    o.add_options("model")
        ("embed-dim", "embedding size", cxxopts::value<int64_t>()->default_value("128"))
        ("hidden", "hidden layer width", cxxopts::value<int64_t>()->default_value("256"))
        ("layers", "hidden layers", cxxopts::value<int64_t>()->default_value("1"))
        ("dropout", "dropout after each hidden layer", cxxopts::value<double>()->default_value("0.2"));
  };
  app.check_options = [](const cxxopts::ParseResult& a) { options(a, 1, 1); };
  app.make_model = [](const cxxopts::ParseResult& a, int64_t vocab, int64_t classes, int64_t,
                      int64_t pad_id, const nn::NamedTensors*) {
    return std::make_shared<nn::models::TextMLP>(options(a, vocab, classes).pad_id(pad_id));
  };
  app.forward = [](nn::Module& m, const nn::Tensor& ids, const nn::Tensor& keep) {
    return static_cast<nn::models::TextMLP&>(m).forward(ids, keep);
  };
  return apps::run_text_app(app, argc, argv);
}
}  // namespace

int main(int argc, char** argv) { return apps::guarded_main("mlp_train", argc, argv, run); }
