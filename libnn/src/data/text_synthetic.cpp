// A synthetic text classification set in the aclImdb layout, for tests and for runs that
// must not depend on a download.
#include <nn/text.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "text_internal.h"

namespace nn::text {
namespace fs = std::filesystem;
namespace {

// Shares of the words in a review, chosen so that naive Bayes on 2 classes lands near 85%:
// most words carry no signal, and a class word is the review's own only 70% of the time.
constexpr double kClassWordShare = 0.12;
constexpr double kOwnClassShare = 0.7;
constexpr int64_t kWordsPerClass = 12;
constexpr int64_t kMadeUpFillers = 320;

constexpr const char* kCommon[] = {
    "the", "a", "and", "of", "to", "is", "it", "this", "that", "in", "was", "movie", "film",
    "i", "as", "with", "for", "but", "on", "not", "you", "are", "his", "have", "he", "be",
    "one", "all", "at", "by", "an", "they", "who", "so", "from", "like", "her", "just", "or",
    "about", "out", "has", "if", "some", "there", "what", "more", "when", "very", "up", "time",
    "no", "even", "my", "would", "which", "only", "story", "really", "see", "their", "had",
    "can", "were", "me", "well", "than", "we", "been", "get", "will", "also", "other",
    "people", "first", "because", "how", "him", "most", "made", "its", "then", "make", "way",
    "could", "too", "any", "after", "don't", "it's", "plot", "scene", "actors", "ending"};

// Made-up word number `index`: `syllables` consonant-vowel pairs, a bijection, so different
// indices never give the same word.
std::string made_up_word(int64_t index, int syllables) {
  static constexpr char consonants[] = "bdfgklmnprstvz";  // 14 x 5 vowels = 70 syllables
  static constexpr char vowels[] = "aeiou";
  std::string w;
  for (int s = 0; s < syllables; ++s) {
    const int64_t syl = index % 70;
    index /= 70;
    w += consonants[syl / 5];
    w += vowels[syl % 5];
  }
  return w;
}

struct Words {
  std::vector<std::string> fillers;  // in Zipf rank order
  std::vector<double> filler_cdf;
  std::vector<std::string> class_words;  // kWordsPerClass per class
};

Words make_words(int64_t num_classes) {
  Words w;
  const int64_t made_up = kMadeUpFillers + num_classes * kWordsPerClass;
  int syllables = 3;
  for (double cap = 70.0 * 70 * 70; cap <= double(made_up); cap *= 70) ++syllables;
  for (const char* c : kCommon) w.fillers.emplace_back(c);
  for (int64_t i = 0; i < kMadeUpFillers; ++i) w.fillers.push_back(made_up_word(i, syllables));
  double total = 0;
  for (size_t r = 0; r < w.fillers.size(); ++r)
    w.filler_cdf.push_back(total += 1.0 / double(r + 1));
  for (double& c : w.filler_cdf) c /= total;
  for (int64_t i = kMadeUpFillers; i < made_up; ++i)
    w.class_words.push_back(made_up_word(i, syllables));
  return w;
}

std::string review(const Words& w, int64_t cls, int64_t num_classes, std::mt19937_64& rng) {
  using detail::below;
  using detail::uniform01;
  const int64_t length = 30 + int64_t(below(rng, 61));
  std::string out;
  int64_t in_sentence = 0, sentence_len = 6 + int64_t(below(rng, 9));
  for (int64_t i = 0; i < length; ++i) {
    std::string word;
    if (uniform01(rng) < kClassWordShare) {
      int64_t owner = cls;
      if (num_classes > 1 && uniform01(rng) >= kOwnClassShare)
        owner = (cls + 1 + int64_t(below(rng, uint64_t(num_classes - 1)))) % num_classes;
      word = w.class_words[size_t(owner * kWordsPerClass + int64_t(below(rng, kWordsPerClass)))];
    } else {
      const double u = uniform01(rng);
      const auto it = std::upper_bound(w.filler_cdf.begin(), w.filler_cdf.end(), u);
      word = w.fillers[std::min(size_t(it - w.filler_cdf.begin()), w.fillers.size() - 1)];
    }
    if (in_sentence == 0) word[0] = char(std::toupper(uint8_t(word[0])));
    if (!out.empty()) out += ' ';
    out += word;
    if (++in_sentence == sentence_len || i + 1 == length) {
      const double u = uniform01(rng);
      out += u < 0.8 ? "." : u < 0.9 ? "!" : u < 0.95 ? "?" : "...";
      if (i + 1 < length && uniform01(rng) < 0.15) out += "<br /><br />";
      in_sentence = 0;
      sentence_len = 6 + int64_t(below(rng, 9));
    } else if (uniform01(rng) < 0.06) {
      out += ',';
    }
  }
  return out;
}

std::string padded(int64_t value, int64_t below_this) {
  const size_t width = std::to_string(std::max<int64_t>(below_this - 1, 0)).size();
  std::string s = std::to_string(value);
  return std::string(width - std::min(width, s.size()), '0') + s;
}

void check_synthetic(const char* fn, int64_t num_classes, int64_t per_class_train,
                     int64_t per_class_test) {
  NN_CHECK(num_classes >= 2, fn, ": num_classes must be at least 2, got ", num_classes);
  NN_CHECK(per_class_train >= 1 && per_class_test >= 1, fn, ": expected at least one example "
           "per class in each split, got ", per_class_train, " (train) and ", per_class_test,
           " (test)");
  constexpr int64_t kMost = int64_t(1) << 32;  // examples in a split: far past any memory
  for (const int64_t per : {per_class_train, per_class_test})
    NN_CHECK(per <= kMost / num_classes, fn, ": ", num_classes, " classes x ", per,
             " examples is over ", kMost, " examples in a split");
}

// The set's reviews in order (train then test, class by class, file by file), each passed to
// emit(split, class, class folder, index in the folder, file name, text as written).
template <typename Emit>
void generate(int64_t num_classes, int64_t per_class_train, int64_t per_class_test,
              uint64_t seed, const Emit& emit) {
  const Words words = make_words(num_classes);
  std::mt19937_64 rng(seed);
  for (const char* split : {"train", "test"}) {
    const int64_t per_class = std::string(split) == "train" ? per_class_train : per_class_test;
    for (int64_t c = 0; c < num_classes; ++c) {
      const std::string label = "class_" + padded(c, num_classes);
      for (int64_t n = 0; n < per_class; ++n)
        emit(split, c, label, n, padded(n, per_class) + ".txt", review(words, c, num_classes, rng));
    }
  }
}
}  // namespace

void write_synthetic_text(const std::string& root, int64_t num_classes, int64_t per_class_train,
                          int64_t per_class_test, uint64_t seed) {
  check_synthetic("write_synthetic_text", num_classes, per_class_train, per_class_test);
  // Stale files from an earlier, larger set would be read back with the new ones.
  for (const char* split : {"train", "test"})
    NN_CHECK(!fs::exists(fs::path(root) / split), "write_synthetic_text: '",
             (fs::path(root) / split).string(), "' already exists; expected a new folder");
  try {
    generate(num_classes, per_class_train, per_class_test, seed,
             [&](const char* split, int64_t, const std::string& label, int64_t n,
                 const std::string& name, const std::string& text) {
               const fs::path dir = fs::path(root) / split / label;
               if (n == 0) fs::create_directories(dir);
               const fs::path file = dir / name;
               std::ofstream f(file, std::ios::binary);
               f << text;
               f.close();
               NN_CHECK(!f.fail(), "write_synthetic_text: cannot write '", file.string(), "'");
             });
  } catch (const fs::filesystem_error& e) {
    NN_ERROR("write_synthetic_text: cannot create the folders under '", root, "': ", e.what());
  }
}

SyntheticText make_synthetic_text(int64_t num_classes, int64_t per_class_train,
                                  int64_t per_class_test, uint64_t seed) {
  check_synthetic("make_synthetic_text", num_classes, per_class_train, per_class_test);
  SyntheticText out;
  out.train.examples.reserve(size_t(num_classes * per_class_train));
  out.test.examples.reserve(size_t(num_classes * per_class_test));
  generate(num_classes, per_class_train, per_class_test, seed,
           [&](const char* split, int64_t c, const std::string& label, int64_t n,
               const std::string& name, const std::string& text) {
             TextSplit& s = std::string(split) == "train" ? out.train : out.test;
             if (n == 0) s.label_names.push_back(label);
             s.examples.push_back({replace_html_breaks(text), c,
                                   std::string(split) + "/" + label + "/" + name});
           });
  return out;
}

}  // namespace nn::text
