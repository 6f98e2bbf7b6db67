// WordPiece: greedy longest-match-first sub-words, as in BERT's tokenizer.
#include <nn/text.h>

#include "text_internal.h"

namespace nn::text {

WordPiece::WordPiece(Vocab vocab, int64_t max_chars_per_word)
    : vocab_(std::move(vocab)), max_chars_(max_chars_per_word) {
  NN_CHECK(max_chars_ >= 1, "WordPiece: max_chars_per_word must be at least 1, got ",
           max_chars_per_word);
}

void WordPiece::encode_word(const std::string& word, std::vector<int64_t>& out) const {
  // Character boundaries: pieces never split a multi-byte character.
  std::vector<size_t> bounds{0};
  for (size_t i = 0; i < word.size();) {
    detail::decode_utf8(word, i);
    bounds.push_back(i);
    if (int64_t(bounds.size()) - 1 > max_chars_) {
      out.push_back(vocab_.unk_id());
      return;
    }
  }
  const size_t n = bounds.size() - 1, first = out.size();
  std::string key;
  for (size_t start = 0; start < n;) {
    int64_t id = -1;
    size_t end = n;
    for (; end > start; --end) {
      key.assign(start > 0 ? "##" : "");
      key.append(word, bounds[start], bounds[end] - bounds[start]);
      id = vocab_.find(key);
      if (id >= 0) break;
    }
    if (id < 0) {  // some part matches nothing: the whole word is unknown
      out.resize(first);
      out.push_back(vocab_.unk_id());
      return;
    }
    out.push_back(id);
    start = end;
  }
}

std::vector<int64_t> WordPiece::encode(const std::string& text) const {
  std::vector<int64_t> ids;
  for (const auto& w : basic_tokenize(text)) encode_word(w, ids);
  return ids;
}

std::vector<std::string> WordPiece::tokenize(const std::string& text) const {
  std::vector<std::string> pieces;
  for (int64_t id : encode(text)) pieces.push_back(vocab_.token(id));
  return pieces;
}

}  // namespace nn::text
