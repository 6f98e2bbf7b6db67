#include "common/text_app.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>

#include "common/cli.h"
#include "common/run.h"

namespace apps {

namespace {
namespace fs = std::filesystem;

struct TextData {
  nn::text::TextSplit train, test;
  std::unique_ptr<nn::text::Vocab> vocab;        // word vocabulary
  std::unique_ptr<nn::text::WordPiece> wordpiece;  // or WordPiece
  int64_t pad_id() const { return wordpiece ? wordpiece->vocab().pad_id() : vocab->pad_id(); }
  int64_t vocab_size() const { return wordpiece ? wordpiece->vocab().size() : vocab->size(); }
};

// What a text model's weights mean beyond their shapes: its class names in output order, the
// vocabulary its embedding rows belong to (a hash of its tokens, and which tokenizer), the
// sequence length it was trained at, and --relabel's N ("none" without it: a set whose own
// classes are named as relabel's, like the synthetic one's, would take other labels
// silently). Saved with checkpoints and --save-model (Run's identity); a resume refuses
// another, and --eval-only takes the class names and length.
// The vocabulary's part: its kind, size and the CRC-32C of its tokens, each ended by a line
// break (as vocab.txt holds them).
std::string vocab_identity(const TextData& d) {
  const auto& tokens = d.wordpiece ? d.wordpiece->vocab().tokens() : d.vocab->tokens();
  uint32_t h = 0;
  for (const std::string& t : tokens) h = nn::train::crc32c("\n", 1, nn::train::crc32c(t.data(), t.size(), h));
  char hex[9];
  std::snprintf(hex, sizeof hex, "%08x", unsigned(h));
  return nn::detail::cat(d.wordpiece ? "wordpiece" : "words", " ", tokens.size(), " ", hex);
}
std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}
std::map<std::string, std::string> identity(const TextData& d, const std::vector<std::string>& labels,
                                            int64_t max_len, int64_t relabel) {
  return {{"labels", join(labels, "\n")}, {"vocab", vocab_identity(d)},
          {"max_len", std::to_string(max_len)}, {"relabel", relabel ? std::to_string(relabel) : "none"}};
}
std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> out;
  size_t b = 0;
  for (size_t e; (e = s.find('\n', b)) != std::string::npos; b = e + 1) out.push_back(s.substr(b, e - b));
  out.push_back(s.substr(b));
  return out;
}

nn::text::Encoded encode(const TextData& d, const std::vector<nn::text::TextExample>& ex,
                         int64_t max_len, bool cls_sep) {
  return d.wordpiece ? nn::text::encode_batch(ex, *d.wordpiece, max_len, cls_sep)
                     : nn::text::encode_batch(ex, *d.vocab, max_len, cls_sep);
}

// Loss, accuracy and inference throughput over a loader; with `predictions`, also each
// sample's predicted class and its probability, in the loader's order.
struct Eval {
  double loss = 0, accuracy = 0, seconds = 0, samples_per_second = 0;  // NaN loss, accuracy: no samples
  int64_t samples = 0;
};
struct Prediction {
  int64_t label = 0;
  double probability = 0;
};
// Data parallel: each rank's loader holds its shard; the sums are added over the ranks, and
// the time is the slowest rank's.
Eval evaluate(const TextApp& app, nn::Module& model, nn::data::DataLoader& loader,
              const nn::Device& dev, int64_t pad, const std::string& precision, const Parallel& par,
              std::vector<Prediction>* predictions = nullptr, bool stop_on_signal = false) {
  nn::NoGradGuard ng;
  model.eval();
  PrecisionAutocast ac(precision);
  nn::train::Stopwatch clock;
  nn::Tensor loss_sum = nn::zeros({}, dev), correct = nn::zeros({}, dev);
  int64_t n = 0;
  nn::CrossEntropyOptions o;
  o.reduction = nn::Reduction::sum;
  for (auto& b : loader) {
    // --eval-only has nothing to save: a stop request ends it here. (Validation during
    // training lets the run stop after its next step, with a checkpoint.)
    if (stop_on_signal && nn::train::StopSignal::requested()) {
      const int sig = nn::train::StopSignal::signal_number();
      std::fprintf(stderr, "%s: stopped by signal %d during the evaluation; nothing to save\n",
                   app.name.c_str(), sig);
      throw Stopped{sig};
    }
    nn::Tensor ids = b.data.to(dev), y = b.target.to(dev);
    nn::Tensor logits = app.forward(model, ids, nn::text::padding_mask(ids, pad));
    loss_sum = nn::add(loss_sum, nn::cross_entropy(logits, y, o));
    correct = nn::add(correct, nn::sum(nn::eq(nn::argmax(logits, 1), y)));
    n += ids.shape()[0];
    if (predictions) {
      nn::Tensor p = nn::softmax(logits.to(nn::kF32), 1);
      auto label = nn::argmax(p, 1).to_vector<int64_t>();
      auto prob = nn::amax(p, {1}).to_vector<double>();
      for (size_t i = 0; i < label.size(); ++i) predictions->push_back({label[i], prob[i]});
    }
  }
  std::vector<double> sums{loss_sum.item(), correct.item(), double(n)}, seconds{clock.seconds()};
  par.sum(sums);
  par.max(seconds);
  Eval e;
  e.samples = int64_t(sums[2]);
  e.loss = e.samples ? sums[0] / sums[2] : std::nan("");
  e.accuracy = e.samples ? sums[1] / sums[2] : std::nan("");
  e.seconds = seconds[0];
  e.samples_per_second = sums[2] / e.seconds;
  model.train();
  return e;
}
}  // namespace

int run_text_app(const TextApp& app, int argc, char** argv) {
  cxxopts::Options opts(app.name, app.description);
  opts.add_options()
      ("data-dir", "aclImdb-layout folder: train/<label>/*.txt and test/<label>/*.txt",
       cxxopts::value<std::string>())
      ("data", "'synthetic': generate a text set instead of --data-dir", cxxopts::value<std::string>())
      ("synthetic-classes", "classes of the synthetic set", cxxopts::value<int64_t>()->default_value("2"))
      ("synthetic-size", "training reviews per class of the synthetic set (test: a quarter)",
       cxxopts::value<int64_t>()->default_value("1000"))
      ("relabel", "reassign labels at random to N classes (runtime vs. class count)",
       cxxopts::value<int64_t>())
      ("vocab", "a BERT vocab.txt: tokenise with WordPiece instead of a word vocabulary",
       cxxopts::value<std::string>())
      ("vocab-size", "word vocabulary size (with the 4 special tokens)",
       cxxopts::value<int64_t>()->default_value("20000"))
      ("min-count", "words seen fewer times become [UNK]", cxxopts::value<int64_t>()->default_value("2"))
      ("max-len", "tokens per review (longer ones are cut)", cxxopts::value<int64_t>()->default_value(std::to_string(app.max_len)))
      ("epochs", "training epochs", cxxopts::value<int64_t>()->default_value("3"))
      ("batch-size", "reviews per step", cxxopts::value<int64_t>()->default_value("64"))
      ("lr", "peak learning rate", cxxopts::value<double>()->default_value(short_number(app.lr)))
      ("weight-decay", "AdamW weight decay (not on biases and norms)",
       cxxopts::value<double>()->default_value(short_number(app.weight_decay)))
      ("warmup", "fraction of the steps spent warming up the learning rate",
       cxxopts::value<double>()->default_value(short_number(app.warmup)))
      ("clip", "clip the gradient norm to this (0: off)",
       cxxopts::value<double>()->default_value(short_number(app.clip)))
      ("precision", "fp32, fp16 (autocast + loss scaling) or bf16",
       cxxopts::value<std::string>()->default_value("fp32"))
      ("eval-only", "evaluate --load-model on the test split and report inference throughput")
      ("predictions", "with --eval-only: write each review's predicted label to FILE (JSON lines)",
       cxxopts::value<std::string>())
      ("shard", "with --eval-only: evaluate only part I of N of the test split (I from 0), as one "
                "of N independent jobs", cxxopts::value<std::string>())
      ("load-model", "a model saved with --save-model", cxxopts::value<std::string>())
      ("device", "cpu, cuda or cuda:N", cxxopts::value<std::string>()->default_value("cpu"))
      ("seed", "random seed", cxxopts::value<uint64_t>()->default_value("0"))
      ("threads", "CPU threads", cxxopts::value<int>())
      ("metrics", "append one JSON object per epoch to FILE", cxxopts::value<std::string>())
      ("h,help", "show this help");
  app.add_options(opts);
  add_run_options(opts);
  auto parsed = parse(opts, argc, argv);
  if (!parsed) return 0;
  const auto& a = *parsed;
  const std::string precision = a["precision"].as<std::string>();
  check_choice("precision", precision, {"fp32", "fp16", "bf16"});
  const int64_t epochs = check_count("epochs", a["epochs"].as<int64_t>(), kMaxEpochs);
  const int64_t batch = check_count("batch-size", a["batch-size"].as<int64_t>(), kMaxBatch);
  int64_t max_len = check_positive("max-len", a["max-len"].as<int64_t>());
  // far past any real run (a huge --max-len failed after the data was read, with a bare
  // bad_alloc)
  check_count("max-len", max_len, int64_t(1) << 20);
  if (app.cls_sep && max_len < 3)
    throw UsageError("--max-len must be at least 3 ([CLS], a token, [SEP]), got " +
                     std::to_string(max_len));
  set_threads(a);
  const nn::Device dev = parse_device(a["device"].as<std::string>());
  nn::check_device(dev);
  const uint64_t seed = a["seed"].as<uint64_t>();
  nn::manual_seed(seed);
  const bool eval_only = flag(a, "eval-only");
  if (eval_only && !a.count("load-model")) throw UsageError("--eval-only needs --load-model");
  if (eval_only)  // they would be ignored
    for (const char* f : {"save-model", "checkpoint-dir", "resume", "tensorboard", "notify-cmd",
                          "epochs", "lr", "weight-decay", "warmup", "clip", "vocab-size", "min-count"})
      if (a.count(f)) throw UsageError(std::string("--") + f + " goes with training, not --eval-only");
  if ((a.count("predictions") || a.count("shard")) && !eval_only)
    throw UsageError("--predictions and --shard go with --eval-only");
  int64_t shard = 0, shards = 1;
  if (a.count("shard")) {
    const std::string v = a["shard"].as<std::string>();
    // (from_chars: sscanf's %lld took 99999999999999999999 as LLONG_MAX, silently)
    const size_t slash = v.find('/');
    auto whole = [&](size_t from, size_t to, int64_t& out) {
      const auto r = std::from_chars(v.data() + from, v.data() + to, out);
      return from < to && r.ec == std::errc() && r.ptr == v.data() + to;
    };
    if (slash == std::string::npos || !whole(0, slash, shard) || !whole(slash + 1, v.size(), shards))
      shards = 0;
    if (shards < 1 || shard < 0 || shard >= shards)
      throw UsageError("--shard must be I/N with 0 <= I < N, got '" + v + "'");
  }
  const std::string predictions_file = a.count("predictions") ? check_output_file(a, "predictions") : "";
  if ((a.count("data-dir") > 0) == (a.count("data") > 0))
    throw UsageError("give either --data-dir DIR or --data synthetic");
  // Every flag is checked before the data is read (aclImdb takes a while to tokenise).
  if (a.count("data")) {
    check_choice("data", a["data"].as<std::string>(), {"synthetic"});
    const int64_t classes = check_classes("synthetic-classes", a["synthetic-classes"].as<int64_t>());
    const int64_t per = check_positive("synthetic-size", a["synthetic-size"].as<int64_t>());
    // The set is generated in memory, in one thread (7 s at this bound, before a signal is
    // looked at), about 3 KB a review with its ids at the default --max-len: 4 GB at this
    // bound, aclImdb's 25,000 training reviews 40 times over. (For many classes on a smaller
    // set, --relabel.)
    constexpr int64_t kMaxSynthetic = int64_t(1) << 20;
    if (per > kMaxSynthetic / classes)
      throw UsageError("--synthetic-classes " + std::to_string(classes) + " x --synthetic-size " +
                       std::to_string(per) + " is over " + std::to_string(kMaxSynthetic) +
                       " training reviews; lower --synthetic-size (or --relabel N to measure many "
                       "classes on a smaller set)");
  }
  if (a.count("relabel")) check_classes("relabel", a["relabel"].as<int64_t>());
  const int64_t vocab_size = check_positive("vocab-size", a["vocab-size"].as<int64_t>());
  if (vocab_size < 5)  // [PAD], [UNK], [CLS], [SEP] come first, then the words
    throw UsageError("--vocab-size must be at least 5 ([PAD], [UNK], [CLS], [SEP] and a word), got " +
                     std::to_string(vocab_size));
  const int64_t min_count = check_positive("min-count", a["min-count"].as<int64_t>());
  check_rates(a, {"lr", "weight-decay", "clip"});
  check_fraction("warmup", a["warmup"].as<double>());
  if (app.check_options) app.check_options(a);
  if (Parallel::options(a).world_size > 1 && (shards > 1 || !predictions_file.empty()))
    throw UsageError("--shard and --predictions are for independent jobs, not with --world-size > 1");
  Parallel par(app.name, a);
  if (!eval_only) check_run_options(a, par);
  else if (a.count("metrics") && par.leader()) check_output_file(a, "metrics");
  for (const char* f : {"load-model", "vocab", "pretrained"})  // (read after the data)
    if (a.count(f)) check_input_file(a, f);

  // ---- data ---------------------------------------------------------------------------------
  // From here a SIGTERM/SIGINT/SIGHUP only raises a flag, looked at after each stage of the
  // preparation (reading a split, the vocabulary, encoding a split: aclImdb's take seconds to
  // minutes each).
  nn::train::StopSignal::install();
  TextData d;
  // Data parallel: the ranks agree at each stage, so a signal that reached some of them
  // before it and others after still stops them all at the same one.
  auto stop_if_signalled = [&] {
    std::vector<double> stop{nn::train::StopSignal::requested() ? 1.0 : 0.0};
    par.max(stop);
    if (stop[0] == 0) return;
    const int sig = nn::train::StopSignal::requested() ? nn::train::StopSignal::signal_number() : SIGTERM;
    std::fprintf(stderr, "%s: stopped by signal %d while preparing the data; nothing to save\n",
                 app.name.c_str(), sig);
    throw Stopped{sig};
  };
  std::optional<nn::text::SyntheticText> synthetic;
  if (a.count("data")) {
    const int64_t per = a["synthetic-size"].as<int64_t>();
    synthetic = nn::text::make_synthetic_text(a["synthetic-classes"].as<int64_t>(), per,
                                              std::max<int64_t>(per / 4, 1), seed);
  }
  const std::string root = synthetic ? "the synthetic set" : a["data-dir"].as<std::string>();
  nn::train::Stopwatch prep;
  // A model saved with --save-model says what it was trained on (identity() above): its
  // class names spare --eval-only the training split, and its length is the default here.
  std::optional<nn::io::SafetensorsFile> loaded;
  if (a.count("load-model")) {
    loaded = nn::io::load_safetensors(a["load-model"].as<std::string>());
    // (a model of another program failed later, on its vocabulary or a weight's name)
    auto by = loaded->metadata.find("app");
    NN_CHECK(by == loaded->metadata.end() || by->second == app.name, "'",
             a["load-model"].as<std::string>(), "' was written by ", by->second, ", not ", app.name);
  }
  auto saved = [&](const char* key) -> std::optional<std::string> {
    if (!loaded) return std::nullopt;
    auto it = loaded->metadata.find(std::string("model.") + key);
    if (it == loaded->metadata.end()) return std::nullopt;
    return it->second;
  };
  if (auto l = saved("max_len")) {
    char* end = nullptr;
    const long long v = std::strtoll(l->c_str(), &end, 10);
    NN_CHECK(!l->empty() && *end == '\0' && v >= 1 && v <= (int64_t(1) << 20), "'",
             a["load-model"].as<std::string>(), "': its metadata model.max_len is not a length: '",
             *l, "'");
    if (!a.count("max-len")) max_len = v;
    else if (std::to_string(max_len) != *l)
      std::printf("%s: the model was trained at --max-len %s; this run reads reviews at %lld\n",
                  app.name.c_str(), l->c_str(), (long long)max_len);
  }
  if (eval_only && saved("labels") && !a.count("relabel")) {
    d.train.label_names = split_lines(*saved("labels"));
  } else {
    d.train = synthetic ? std::move(synthetic->train) : nn::text::read_text_folder(root, "train");
    // Fine-tuning on other classes is allowed; the outputs are matched by position, so say so.
    if (auto l = saved("labels"); l && !a.count("relabel") && split_lines(*l) != d.train.label_names) {
      std::printf("%s: the model was trained on the classes (%s); this run trains its outputs, in "
                  "order, on (%s)\n", app.name.c_str(), join(split_lines(*l), ", ").c_str(),
                  join(d.train.label_names, ", ").c_str());
    }
  }
  stop_if_signalled();
  if (!synthetic) {
    d.test = nn::text::read_text_folder(root, "test", d.train.label_names);
  } else {  // labelled by position in the training split's names, as the reader does
    d.test = std::move(synthetic->test);
    for (nn::text::TextExample& e : d.test.examples) {
      const std::string& name = d.test.label_names[size_t(e.label)];
      const auto it = std::find(d.train.label_names.begin(), d.train.label_names.end(), name);
      NN_CHECK(it != d.train.label_names.end(), "the synthetic set's class '", name, "' is not "
               "one of the model's classes (", join(d.train.label_names, ", "), ")");
      e.label = int64_t(it - d.train.label_names.begin());
    }
    d.test.label_names = d.train.label_names;
    synthetic.reset();  // (its training split, where --eval-only took the model's classes)
  }
  stop_if_signalled();
  if (a.count("relabel")) {
    const int64_t n = a["relabel"].as<int64_t>();
    nn::text::relabel(d.train, n, seed);
    nn::text::relabel(d.test, n, seed + 1);
  }
  const int64_t classes = int64_t(d.train.label_names.size());
  NN_CHECK(classes >= 2, "the training split of '", root, "' has one class folder ('",
           d.train.label_names.at(0), "'): a classifier needs at least two");
  std::string vocab_note;
  const bool built_vocab = !a.count("vocab") && !a.count("load-model");
  if (a.count("vocab")) {
    d.wordpiece = std::make_unique<nn::text::WordPiece>(nn::text::Vocab::load(a["vocab"].as<std::string>()));
    vocab_note = "WordPiece vocabulary " + a["vocab"].as<std::string>();
  } else if (a.count("load-model")) {
    const std::string vp = a["load-model"].as<std::string>() + ".vocab.txt";
    NN_CHECK(fs::exists(vp), "'", vp, "' does not exist: --load-model reads the word vocabulary "
             "saved beside the model; a model trained with --vocab needs that --vocab again");
    d.vocab = std::make_unique<nn::text::Vocab>(nn::text::Vocab::load(vp));
    vocab_note = "vocabulary " + vp;
  } else {
    d.vocab = std::make_unique<nn::text::Vocab>(nn::text::Vocab::build(
        nn::text::tokenize_words(d.train.examples), vocab_size, min_count));
    vocab_note = "word vocabulary built from the training split";
  }
  {
    const auto& tokens = d.wordpiece ? d.wordpiece->vocab().tokens() : d.vocab->tokens();
    const bool words = std::any_of(tokens.begin(), tokens.end(), [](const std::string& t) {
      return t.size() < 2 || t.front() != '[' || t.back() != ']';  // ([PAD], [unused0], ...)
    });
    NN_CHECK(words, "the ", vocab_note, " holds only special tokens such as [PAD] and [UNK], so "
             "every word would read as [UNK]", built_vocab ? nn::detail::cat(" (no word of the "
             "training split is there --min-count ", min_count, " times)") : std::string());
  }
  // The vocabulary the model's embedding rows belong to (a model saved beside another run's
  // vocabulary, by a run killed between the two writes say, read the wrong tokens silently)
  if (auto v = saved("vocab")) {
    const std::string mine = vocab_identity(d);
    NN_CHECK(*v == mine, "'", a["load-model"].as<std::string>(), "' was trained with another "
             "vocabulary (its model.vocab is '", *v, "'; the ", vocab_note, " is '", mine, "')");
  }
  stop_if_signalled();
  std::shared_ptr<nn::text::TextDataset> train_set;
  if (!eval_only)
    train_set = std::make_shared<nn::text::TextDataset>(encode(d, d.train.examples, max_len, app.cls_sep));
  stop_if_signalled();
  auto test_set = std::make_shared<nn::text::TextDataset>(encode(d, d.test.examples, max_len, app.cls_sep));
  stop_if_signalled();
  std::printf("%s: %lld train / %lld test reviews, %lld classes, %s (%lld tokens), prepared in %.1fs\n",
              app.name.c_str(), (long long)(train_set ? train_set->size() : 0), (long long)test_set->size(),
              (long long)classes, vocab_note.c_str(), (long long)d.vocab_size(), prep.seconds());
  std::fflush(stdout);

  // ---- model --------------------------------------------------------------------------------
  auto model = app.make_model(a, d.vocab_size(), classes, max_len, d.pad_id(),
                              loaded ? &loaded->tensors : nullptr);
  if (loaded) {
    try {
      model->load_state_dict(loaded->tensors);
    } catch (const nn::Error& e) {
      NN_ERROR("'", a["load-model"].as<std::string>(), "' does not fit this model: ", e.what());
    }
  } else if (app.prepare) {
    app.prepare(*model, a);
  }
  model->to(dev);
  std::printf("%s: %lld parameters on %s, %s\n", app.name.c_str(), (long long)model->num_parameters(),
              apps::describe_device(dev).c_str(), precision.c_str());
  std::fflush(stdout);  // a log file shows the set-up now, and keeps it if the run is killed
  nn::data::DataLoaderOptions lo;
  lo.batch_size = batch;
  lo.seed = seed;
  par.shard(lo, true);
  std::optional<nn::data::DataLoader> train_loader;
  if (train_set) train_loader.emplace(train_set, lo);
  nn::data::DataLoaderOptions vo;
  vo.batch_size = std::max<int64_t>(batch, 256);
  vo.shuffle = false;
  par.shard(vo, false);
  if (shards > 1) {  // one of N independent inference jobs
    vo.shards = shards;
    vo.shard = shard;
  }
  nn::data::DataLoader val_loader(test_set, vo);
  const int64_t pad = d.pad_id();

  if (eval_only) {
    std::vector<Prediction> preds;
    Eval e = evaluate(app, *model, val_loader, dev, pad, precision, par,
                      predictions_file.empty() ? nullptr : &preds, /*stop_on_signal=*/true);
    const int64_t evaluated = e.samples;
    if (evaluated == 0)
      std::printf("%s: eval on 0 reviews (shard %lld/%lld): nothing to evaluate in this shard\n",
                  app.name.c_str(), (long long)shard, (long long)shards);
    else
      std::printf("%s: eval on %lld reviews%s: loss %.4f  accuracy %.2f%%  %.2fs  %.0f samples/s (inference)\n",
                app.name.c_str(), (long long)evaluated,
                shards > 1 ? nn::detail::cat(" (shard ", shard, "/", shards, ")").c_str() : "", e.loss,
                100 * e.accuracy, e.seconds, e.samples_per_second);
    if (!predictions_file.empty()) {
      std::string out;
      const std::vector<int64_t> order = val_loader.order(0);
      for (size_t i = 0; i < preds.size(); ++i) {
        const nn::text::TextExample& ex = d.test.examples[size_t(order[i])];
        out += nn::train::JsonLine()
                   .add("source", ex.source)
                   .add("label", d.test.label_names[size_t(ex.label)])
                   .add("predicted", d.train.label_names[size_t(preds[i].label)])
                   .add("probability", preds[i].probability)
                   .str() + "\n";
      }
      nn::train::write_file(predictions_file, out);
      std::printf("%s: %lld predictions written to '%s'\n", app.name.c_str(), (long long)preds.size(),
                  predictions_file.c_str());
    }
    if (a.count("metrics") && par.leader())
      nn::train::append_line(a["metrics"].as<std::string>(),
                             nn::train::JsonLine().add("phase", std::string("infer")).add("val_loss", e.loss)
                                 .add("val_accuracy", e.accuracy).add("samples", e.samples)
                                 .add("seconds", e.seconds).add("samples_per_second", e.samples_per_second)
                                 .str());
    return 0;
  }

  // ---- training -----------------------------------------------------------------------------
  loaded.reset();  // (its tensors are in the model)
  nn::data::DataLoader& loader = *train_loader;
  nn::optim::AdamW opt(decay_groups(*model),
                       nn::optim::AdamWOptions(a["lr"].as<double>()).weight_decay(a["weight-decay"].as<double>()));
  const int64_t nb = loader.num_batches(), total = epochs * nb;
  nn::optim::LinearLR schedule(opt, int64_t(a["warmup"].as<double>() * double(total)), total);
  nn::amp::GradScaler scaler(nn::amp::GradScalerOptions{.enabled = precision == "fp16"});
  const double clip = a["clip"].as<double>();

  Run run(app.name, a, argc, argv, par);
  Position pos = run.start({model.get(), &opt, &schedule, &scaler, nb, batch,
                            identity(d, d.train.label_names, max_len,
                                     a.count("relabel") ? a["relabel"].as<int64_t>() : 0)});
  for (int64_t epoch = pos.epoch; epoch <= epochs; ++epoch) {
    model->train();
    EpochMeter meter(run, pos, epochs, nb, dev);
    loader.set_epoch(epoch - 1, pos.batch);
    for (auto& b : loader) {
      nn::Tensor ids = b.data.to(dev), y = b.target.to(dev);
      nn::Tensor loss;
      {
        PrecisionAutocast ac(precision);
        loss = nn::cross_entropy(app.forward(*model, ids, nn::text::padding_mask(ids, pad)), y);
      }
      opt.zero_grad();
      scaler.scale(loss).backward();
      run.sync_gradients();
      if (clip > 0) {
        scaler.unscale_(opt);
        nn::optim::clip_grad_norm_(model->parameters(), clip);  // (the norm is not read: no wait)
      }
      scaler.step(opt);
      scaler.update();
      schedule.step();
      meter.step(loss, ids.shape()[0]);
    }
    EpochSummary s = meter.finish();
    Eval e = evaluate(app, *model, val_loader, dev, pad, precision, par);
    s.val_loss = e.loss;
    s.val_accuracy = e.accuracy;
    s.lr = opt.lr();
    s.loss_scale = scaler.options().enabled ? scaler.get_scale() : 0;
    std::printf("  inference: %.0f samples/s over %lld test reviews\n", e.samples_per_second,
                (long long)test_set->size());
    pos = Position{epoch + 1, 0, pos.step, 0, 0, 0};
    run.end_epoch(s, pos);
  }
  // The vocabulary before the model (finish() saves it), so that a model is never beside an
  // older vocabulary; --load-model checks the two belong together (model.vocab)
  if (a.count("save-model") && par.leader()) {
    const std::string vp = a["save-model"].as<std::string>() + ".vocab.txt";
    if (d.vocab) {
      d.vocab->save(vp);
      std::printf("%s: vocabulary saved to '%s' (read back by --load-model)\n", app.name.c_str(),
                  vp.c_str());
    } else {  // WordPiece (--vocab): an older run's word vocabulary there would be read back
      std::error_code ec;
      fs::remove(vp, ec);
    }
  }
  run.finish();
  return 0;
}

}  // namespace apps
