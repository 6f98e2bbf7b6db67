// Shared by the apps: command-line checks, one error path, evaluation.
#pragma once
#include <nn/nn.h>

#include <cxxopts.hpp>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/run.h"

namespace apps {

// A usage error: printed with a pointer to --help, exit code 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// cxxopts's "Argument 'abc' failed to parse" with the flag it was given to, found in argv
// ("--epochs abc" or "--epochs=abc"): "'abc' is not a valid value for --epochs". Of several
// flags given that value ("--data-dir abc --epochs abc"), the first that `refuses` (flag, value).
template <typename Refuses>
std::string name_bad_value(const std::string& what, int argc, char** argv, Refuses refuses) {
  const std::string head = "Argument ", tail = " failed to parse";
  if (what.size() < head.size() + tail.size() || what.rfind(head, 0) != 0 ||
      what.compare(what.size() - tail.size(), tail.size(), tail) != 0)
    return what;
  std::string v = what.substr(head.size(), what.size() - head.size() - tail.size());
  for (const char* q : {"'", "\u2018", "\u2019"})  // (the quotes, ASCII or typographic)
    for (bool front : {true, false}) {
      const std::string qs = q;
      if (v.size() >= qs.size() &&
          v.compare(front ? 0 : v.size() - qs.size(), qs.size(), qs) == 0)
        v = front ? v.substr(qs.size()) : v.substr(0, v.size() - qs.size());
    }
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.empty() || arg[0] != '-') continue;
    const size_t eq = arg.find('=');
    const std::string flag = arg.substr(0, eq);
    if ((eq != std::string::npos ? arg.substr(eq + 1) == v : (i + 1 < argc && argv[i + 1] == v)) &&
        refuses(flag, v))
      return "'" + v + "' is not a valid value for " + flag;
  }
  return what;
}

// Parses argv; prints help and returns nullopt for --help. Unknown flags and stray
// positional arguments are usage errors.
inline std::optional<cxxopts::ParseResult> parse(cxxopts::Options& opts, int argc, char** argv) {
  cxxopts::ParseResult r;
  try {
    r = opts.parse(argc, argv);
  } catch (const cxxopts::exceptions::incorrect_argument_type& e) {
    // (a flag refuses the value when it alone, given it, fails the same way)
    auto refuses = [&](const std::string& flag, const std::string& value) {
      const std::string given = flag + "=" + value;
      const char* one[] = {argv[0], given.c_str()};
      try {
        opts.parse(2, one);
      } catch (const cxxopts::exceptions::incorrect_argument_type&) {
        return true;
      } catch (const cxxopts::exceptions::exception&) {
      }
      return false;
    };
    throw UsageError(name_bad_value(e.what(), argc, argv, refuses));
  } catch (const cxxopts::exceptions::exception& e) {
    throw UsageError(e.what());
  }
  if (flag(r, "help")) {
    std::printf("%s\n", opts.help().c_str());
    return std::nullopt;
  }
  if (!r.unmatched().empty()) throw UsageError("unexpected argument '" + r.unmatched()[0] + "'");
  return r;
}

inline void check_choice(const std::string& flag, const std::string& value,
                         std::initializer_list<const char*> allowed) {
  std::string list;
  for (const char* a : allowed) {
    if (value == a) return;
    list += (list.empty() ? "" : ", ") + std::string(a);
  }
  throw UsageError("--" + flag + " must be one of " + list + ", got '" + value + "'");
}

// The items of a comma-separated list flag ("fp32,bf16"). A list of no items is a usage error,
// and so is an empty item in a list that has others ("fp32,,bf16").
inline std::vector<std::string> list_items(const std::string& flag, const std::string& value) {
  std::vector<std::string> items;
  size_t start = 0;
  for (size_t comma; (comma = value.find(',', start)) != std::string::npos; start = comma + 1)
    items.push_back(value.substr(start, comma - start));
  items.push_back(value.substr(start));
  size_t empty = 0;
  for (const auto& item : items) empty += item.empty();
  if (empty == items.size()) throw UsageError("--" + flag + " names nothing");
  if (empty) throw UsageError("--" + flag + " has an empty item: '" + value + "'");
  return items;
}

// A comma-separated list flag whose items are each one of `allowed`.
inline std::vector<std::string> check_choices(const std::string& flag, const std::string& value,
                                              std::initializer_list<const char*> allowed) {
  std::vector<std::string> items = list_items(flag, value);
  for (const auto& item : items) check_choice(flag, item, allowed);
  return items;
}

// A comma-separated list flag of positive whole numbers ("2,10,1000").
inline std::vector<int64_t> check_positive_list(const std::string& flag, const std::string& value) {
  std::vector<int64_t> out;
  for (const auto& item : list_items(flag, value)) {
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (*end != '\0' || errno != 0 || v <= 0)
      throw UsageError("--" + flag + " must list positive whole numbers, got '" + item + "'");
    out.push_back(v);
  }
  return out;
}

// A number as a user would write it (1e-3, not 0.001000), for flag defaults and messages.
inline std::string short_number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

template <typename T>
T check_positive(const std::string& flag, T value) {
  if (!(value > 0))
    throw UsageError("--" + flag + " must be positive, got " +
                     (std::is_floating_point_v<T> ? short_number(double(value)) : std::to_string(value)));
  return value;
}

// A positive count with an upper bound far past any real run, so that the sizes made from it
// (a schedule's total steps: epochs x batches) cannot overflow.
inline int64_t check_count(const std::string& flag, int64_t value, int64_t most) {
  check_positive(flag, value);
  if (value > most) throw UsageError("--" + flag + " must be at most " + std::to_string(most));
  return value;
}
constexpr int64_t kMaxEpochs = int64_t(1) << 24;
// An upper bound alone (a flag whose lower bound is checked elsewhere, or is 0).
inline int64_t check_at_most(const std::string& flag, int64_t value, int64_t most) {
  if (value > most) throw UsageError("--" + flag + " must be at most " + std::to_string(most));
  return value;
}
// Upper bounds of the size flags: far past any real run, short of sizes that would take
// the machine's memory or disk before anything is checked.
constexpr int64_t kMaxClasses = int64_t(1) << 20;   // --num-classes, --relabel, ...
constexpr int64_t kMaxLayers = 10000;               // --layers, --depth
constexpr int64_t kMaxSamples = int64_t(1) << 24;   // synthetic data sets
constexpr int64_t kMaxBatch = int64_t(1) << 24;     // --batch-size
constexpr int64_t kMaxBatches = int64_t(1) << 32;   // --num-batches (times kMaxEpochs: no overflow)

// --threads, when given (1 to nn::kMaxThreads).
inline void set_threads(const cxxopts::ParseResult& a) {
  if (a.count("threads"))
    nn::set_num_threads(int(check_count("threads", a["threads"].as<int>(), nn::kMaxThreads)));
}

// A class count: 2 (a classifier of one class learns nothing and reports 100%) to kMaxClasses.
inline int64_t check_classes(const std::string& flag, int64_t value) {
  check_count(flag, value, kMaxClasses);
  if (value < 2)
    throw UsageError("--" + flag + " must be at least 2, got " + std::to_string(value) +
                     " (a classifier needs two classes)");
  return value;
}

template <typename T>
T check_non_negative(const std::string& flag, T value) {
  if (value < 0) throw UsageError("--" + flag + " must be 0 or more, got " + std::to_string(value));
  return value;
}

// A probability flag (dropout): in [0, 1); 1 would zero every activation.
inline double check_probability(const std::string& flag, double value) {
  if (!(value >= 0 && value < 1))
    throw UsageError("--" + flag + " must be in [0, 1), got " + short_number(value));
  return value;
}

// A finite number of at least 0: a learning rate, momentum, weight decay or clipping norm.
// Checked with the other flags, so a typo fails before the data is read.
inline double check_finite_non_negative(const std::string& flag, double value) {
  if (!(value >= 0 && std::isfinite(value)))
    throw UsageError("--" + flag + " must be a finite number >= 0, got " + short_number(value));
  return value;
}

// The rate flags among `flags` (learning rate, momentum, weight decay, clipping norm) that the
// user gave: each a finite number >= 0. Defaults are the program's own and need no check.
inline void check_rates(const cxxopts::ParseResult& a, std::initializer_list<const char*> flags) {
  for (const char* f : flags)
    if (a.count(f)) check_finite_non_negative(f, a[f].as<double>());
}

// A share in [0, 1]: label smoothing, the warm-up fraction of a run.
inline double check_fraction(const std::string& flag, double value) {
  if (!(value >= 0 && value <= 1))
    throw UsageError("--" + flag + " must be in [0, 1], got " + short_number(value));
  return value;
}

// The flags of the ResNet apps' recipe (SGD with momentum, label smoothing, warm-up then
// cosine decay over `epochs`).
inline void check_resnet_recipe(const cxxopts::ParseResult& a, int64_t epochs) {
  check_rates(a, {"lr", "momentum", "weight-decay"});
  check_fraction("label-smoothing", a["label-smoothing"].as<double>());
  if (check_finite_non_negative("warmup-epochs", a["warmup-epochs"].as<double>()) > double(epochs))
    throw UsageError("--warmup-epochs must not exceed --epochs (" + std::to_string(epochs) + ")");
}

// An output file the program writes later (at its end, or once an epoch): one it could not
// write is an error now, not after the work. The folder must exist, and the file is opened
// for appending, which never truncates it; a file this check created is removed again.
// Returns the path given to --FLAG.
inline std::string check_output_file(const cxxopts::ParseResult& a, const char* flag) {
  namespace fs = std::filesystem;
  const std::string path = a[flag].as<std::string>();
  const fs::path parent = fs::path(path).parent_path();
  NN_CHECK(parent.empty() || fs::is_directory(parent), "cannot open '", path,
           "' for writing (--", flag, "): folder '", parent.string(), "' does not exist");
  NN_CHECK(!fs::is_directory(path), "cannot open '", path, "' for writing (--", flag,
           "): it is a folder");
  std::error_code ec;
  const bool existed = fs::exists(path, ec);
  // a named pipe is not opened to try it: that would wait for a reader, and then end the
  // reader's input when closed (the run's real writes would find nobody there)
  if (existed && (fs::is_fifo(path, ec) || fs::is_socket(path, ec))) return path;
  errno = 0;
  const bool ok = std::ofstream(path, std::ios::app).good();
  const int err = errno;
  if (ok && !existed) fs::remove(path, ec);
  NN_CHECK(ok, "cannot open '", path, "' for writing (--", flag, "): ",
           err ? std::strerror(err) : "unknown error");
  return path;
}

// An input file the program reads later (after the data, say): one it cannot read is an
// error now. Returns the path given to --FLAG.
inline std::string check_input_file(const cxxopts::ParseResult& a, const char* flag) {
  namespace fs = std::filesystem;
  const std::string path = a[flag].as<std::string>();
  NN_CHECK(fs::exists(path), "cannot read '", path, "' (--", flag, "): no such file");
  NN_CHECK(!fs::is_directory(path), "cannot read '", path, "' (--", flag, "): it is a folder");
  errno = 0;
  const bool ok = std::ifstream(path, std::ios::binary).good();
  NN_CHECK(ok, "cannot read '", path, "' (--", flag, "): ", errno ? std::strerror(errno) : "unknown error");
  return path;
}

// A flag's output folder: created (with its parents) if missing, and a file can be written
// there; else an nn::Error naming the flag. Its path.
inline std::string check_output_dir(const cxxopts::ParseResult& a, const char* flag) {
  namespace fs = std::filesystem;
  const std::string dir = a[flag].as<std::string>();
  std::error_code ec;
  fs::create_directories(dir, ec);
  NN_CHECK(!ec && fs::is_directory(dir), "cannot create the folder '", dir, "' (--", flag, "): ",
           ec ? ec.message() : "a file of that name exists");
  const fs::path probe = fs::path(dir) / (".libnn-write-test-" + std::to_string(::getpid()));
  errno = 0;
  const bool ok = std::ofstream(probe).good();
  const int err = errno;
  fs::remove(probe, ec);
  NN_CHECK(ok, "cannot write into the folder '", dir, "' (--", flag, "): ",
           err ? std::strerror(err) : "unknown error");
  return dir;
}

// --device value: a usage error when it does not name a device. A bare "cuda" in a process
// started by a launcher (LOCAL_RANK set, as scripts/dist_launch.sh and torchrun do) means
// cuda:LOCAL_RANK, one GPU per process.
inline nn::Device parse_device(const std::string& spec) {
  try {
    const char* local = std::getenv("LOCAL_RANK");
    if (spec == "cuda" && local && *local) {
      const std::string rank = local;
      if (rank.find_first_not_of("0123456789") != std::string::npos || rank.size() > 9)
        throw UsageError("--device cuda: LOCAL_RANK='" + rank + "' (a launcher's process index, "
                         "which picks the GPU) is not a number");
      return nn::Device(spec + ":" + rank);
    }
    return nn::Device(spec);
  } catch (const nn::Error& e) {
    throw UsageError(std::string("--device: ") + e.what());
  }
}

// How a banner names a device: "cpu", or "cuda:0 (NVIDIA H100 80GB HBM3)".
inline std::string describe_device(const nn::Device& d) {
  return d.is_cpu() ? d.str() : d.str() + " (" + nn::device_name(d) + ")";
}

// Runs `body`, turning errors into one line on stderr and an exit code: 2 for usage errors,
// 1 for everything else.
inline int guarded_main(const char* name, int argc, char** argv, int (*body)(int, char**)) {
  try {
    return body(argc, argv);
  } catch (const Stopped& s) {
    return 128 + s.signal;  // the conventional status of a process ended by that signal
  } catch (const UsageError& e) {
    std::fprintf(stderr, "%s: %s (see --help)\n", name, e.what());
    return 2;
  } catch (const cxxopts::exceptions::exception& e) {
    std::fprintf(stderr, "%s: %s (see --help)\n", name, e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s: error: %s\n", name, e.what());
    return 1;
  }
}

// Mean cross-entropy loss and accuracy of a classifier over a loader, in eval mode, and with
// `top5` the top-5 accuracy (NaN with 5 classes or fewer, where every target is in the top
// 5). Batches are moved to `device` first when given (loaders that produce them on the CPU).
// With `par`, each rank's loader holds its shard and the sums are added over the ranks.
struct Evaluation {
  double loss = 0, accuracy = 0, top5 = std::nan("");
};
inline Evaluation evaluate(nn::Module& model, nn::data::DataLoader& loader,
                           std::optional<nn::Device> device = std::nullopt,
                           const Parallel* par = nullptr, bool top5 = false) {
  nn::NoGradGuard ng;
  model.eval();
  nn::Tensor loss_sum, correct, correct5;
  int64_t n = 0;
  for (auto& b : loader) {
    nn::Tensor x = device ? b.data.to(*device) : b.data;
    nn::Tensor y = device ? b.target.to(*device) : b.target;
    nn::Tensor logits = model.forward(x);
    nn::CrossEntropyOptions o;
    o.reduction = nn::Reduction::sum;
    nn::Tensor l = nn::cross_entropy(logits, y, o);
    nn::Tensor c = nn::sum(nn::eq(nn::argmax(logits, 1), y));
    loss_sum = loss_sum.defined() ? nn::add(loss_sum, l) : l;
    correct = correct.defined() ? nn::add(correct, c) : c;
    if (top5 && logits.shape()[1] > 5) {
      nn::Tensor c5 = nn::top_k_correct(logits, y, 5);
      correct5 = correct5.defined() ? nn::add(correct5, c5) : c5;
    }
    n += b.data.shape()[0];
  }
  model.train();
  std::vector<double> v{n ? loss_sum.item() : 0.0, n ? correct.item() : 0.0, double(n),
                        correct5.defined() ? correct5.item() : 0.0};
  if (par) par->sum(v);  // (every rank's shard has the same classes: all or none have top-5)
  Evaluation e;
  if (v[2] == 0) return e;
  e.loss = v[0] / v[2];
  e.accuracy = v[1] / v[2];
  if (correct5.defined()) e.top5 = v[3] / v[2];
  return e;
}

}  // namespace apps
