// Vocab: building from token counts, and the one-token-per-line file (BERT's vocab.txt).
#include <nn/text.h>
#include <nn/train.h>

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "text_internal.h"

namespace nn::text {
namespace {

constexpr const char* kSpecials[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]"};

std::string hex_byte(uint8_t b) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%02x", b);
  return buf;
}

}  // namespace

Vocab::Vocab(std::vector<std::string> tokens) : tokens_(std::move(tokens)) { index(""); }

void Vocab::index(const std::string& file) {
  auto where = [&](size_t i) {
    return file.empty() ? nn::detail::cat("Vocab: token ", i)
                        : nn::detail::cat("vocab file '", file, "', line ", i + 1);
  };
  NN_CHECK(!tokens_.empty(), file.empty() ? std::string("Vocab: no tokens")
                                          : nn::detail::cat("vocab file '", file, "' is empty"),
           "; expected one token per line, including [PAD], [UNK], [CLS] and [SEP]");
  ids_.clear();
  ids_.reserve(tokens_.size());
  for (size_t i = 0; i < tokens_.size(); ++i) {
    const std::string& t = tokens_[i];
    NN_CHECK(!t.empty(), where(i), ": empty token; expected one token per line");
    NN_CHECK(t.size() <= kMaxTokenBytes, where(i), ": token of ", t.size(),
             " bytes; expected at most ", kMaxTokenBytes, " (is this a vocabulary file?)");
    for (size_t b = 0; b < t.size(); ++b) {
      const auto c = uint8_t(t[b]);
      NN_CHECK(c != '\t', where(i), ": tab at byte ", b, "; expected one token per line "
               "with nothing after it (a 'token<TAB>score' file is not a vocab.txt)");
      NN_CHECK(c >= 0x20 && c != 0x7F, where(i), ": control character ", hex_byte(c),
               " at byte ", b, "; expected printable text");
    }
    const size_t bad = detail::find_invalid_utf8(t);
    NN_CHECK(bad == std::string::npos, where(i), ": invalid UTF-8 (byte ",
             hex_byte(uint8_t(t[bad])), " at offset ", bad, "); expected UTF-8 text");
    auto [it, fresh] = ids_.emplace(t, int64_t(i));
    NN_CHECK(fresh, where(i), ": duplicate token '", t, "' (first at ",
             file.empty() ? "token " : "line ", file.empty() ? it->second : it->second + 1,
             "); expected every token once");
  }
  int64_t* special_ids[] = {&pad_, &unk_, &cls_, &sep_};
  for (int k = 0; k < 4; ++k) {
    const int64_t id = find(kSpecials[k]);
    NN_CHECK(id >= 0,
             file.empty() ? std::string("Vocab") : nn::detail::cat("vocab file '", file, "'"),
             " has no ", kSpecials[k], " token; expected [PAD], [UNK], [CLS] and [SEP] "
             "(BERT's vocab.txt has them)");
    *special_ids[k] = id;
  }
}

Vocab Vocab::build(const std::vector<std::vector<std::string>>& docs, int64_t max_size,
                   int64_t min_count) {
  NN_CHECK(max_size == -1 || max_size >= 4, "Vocab::build: max_size must be -1 (no limit) or "
           "at least 4 (the special tokens), got ", max_size);
  NN_CHECK(min_count >= 1, "Vocab::build: min_count must be at least 1, got ", min_count);
  std::unordered_map<std::string, int64_t> counts;
  for (const auto& doc : docs)
    for (const auto& t : doc) ++counts[t];
  for (const char* s : kSpecials) counts.erase(s);

  std::vector<std::pair<const std::string*, int64_t>> kept;
  for (const auto& [t, n] : counts)
    if (n >= min_count && t.size() <= kMaxTokenBytes) kept.emplace_back(&t, n);
  // Descending count, then byte order: the same vocabulary whatever the hash map's order.
  auto before = [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : *a.first < *b.first;
  };
  size_t room = max_size < 0 ? kept.size() : std::min(kept.size(), size_t(max_size - 4));
  std::partial_sort(kept.begin(), kept.begin() + ptrdiff_t(room), kept.end(), before);

  std::vector<std::string> tokens(std::begin(kSpecials), std::end(kSpecials));
  tokens.reserve(4 + room);
  for (size_t i = 0; i < room; ++i) tokens.push_back(*kept[i].first);
  return Vocab(std::move(tokens));
}

int64_t Vocab::find(const std::string& token) const {
  auto it = ids_.find(token);
  return it == ids_.end() ? -1 : it->second;
}

int64_t Vocab::id(const std::string& token) const {
  auto it = ids_.find(token);
  return it == ids_.end() ? unk_ : it->second;
}

const std::string& Vocab::token(int64_t id) const {
  NN_CHECK(id >= 0 && id < size(), "Vocab::token: id ", id, " is out of range for a vocabulary "
           "of ", size(), " tokens");
  return tokens_[size_t(id)];
}

void Vocab::save(const std::string& path) const {
  std::string text;
  for (const auto& t : tokens_) text += t + '\n';
  train::write_file(path, text);  // (beside it, then renamed: a failed save leaves the old file)
}

Vocab Vocab::load(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  NN_CHECK(f.is_open(), "cannot open vocab file '", path, "'");
  Vocab v;
  std::string line;
  auto finish_line = [&] {
    if (!line.empty() && line.back() == '\r') line.pop_back();  // a file saved on Windows
    v.tokens_.push_back(std::move(line));
    line.clear();
  };
  // Read in chunks and stop at the first over-long line, so a large file that is not a
  // vocabulary (a checkpoint, say) fails fast instead of being read whole.
  char buf[1 << 16];
  while (f.read(buf, sizeof buf) || f.gcount() > 0) {
    for (std::streamsize i = 0; i < f.gcount(); ++i) {
      if (buf[i] == '\n') {
        finish_line();
        continue;
      }
      line += buf[i];
      NN_CHECK(line.size() <= kMaxTokenBytes + 1, "vocab file '", path, "', line ",
               v.tokens_.size() + 1, ": longer than ", kMaxTokenBytes,
               " bytes; expected one token per line (is this a vocabulary file?)");
    }
    if (f.eof()) break;
  }
  NN_CHECK(!f.bad(), "error reading vocab file '", path, "'");
  if (!line.empty()) finish_line();  // no newline after the last token
  // As Hugging Face's loader takes them: a UTF-8 byte-order mark before the first token (an
  // editor on Windows) is not part of it, and blank lines at the end are no tokens (one in
  // the middle still is an error: every later token's id would depend on it)
  static const std::string kBom = "\xEF\xBB\xBF";
  if (!v.tokens_.empty() && v.tokens_[0].compare(0, kBom.size(), kBom) == 0)
    v.tokens_[0].erase(0, kBom.size());
  while (!v.tokens_.empty() && v.tokens_.back().empty()) v.tokens_.pop_back();
  v.index(path);
  return v;
}

}  // namespace nn::text
