// Text data for classifiers (IMDB-style sentiment, bag-of-words MLPs, BERT-like encoders):
// a reader for the aclImdb folder layout, a word tokenizer and vocabulary, BERT's WordPiece,
// encoding to padded id tensors, and a synthetic data set in the same layout.
//
//   auto train = text::read_text_folder("aclImdb", "train");
//   auto test = text::read_text_folder("aclImdb", "test", train.label_names);
//   auto vocab = text::Vocab::build(text::tokenize_words(train.examples), 20000, 2);
//   vocab.save("run/vocab.txt");   // beside the model: the ids mean nothing without it
//   auto ds = std::make_shared<text::TextDataset>(
//       text::encode_batch(train.examples, vocab, 256, /*add_cls_sep=*/false));
//   for (auto& b : loader) {       // b.data: i64 (B, L <= 256) ids, b.target: i64 (B) labels
//     Tensor mask = text::padding_mask(b.data, vocab.pad_id());  // u8 (B, L)
//     ...
//
// Text is UTF-8 throughout. Tokens are always valid UTF-8 (invalid bytes in the input are
// dropped), so every vocabulary built here saves to a file that loads again.
#pragma once
#include <nn/data.h>
#include <nn/tensor.h>

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace nn::text {

// ---- the aclImdb layout -------------------------------------------------------------------

struct TextExample {
  std::string text;
  int64_t label = 0;   // index into TextSplit::label_names
  std::string source;  // where it came from: "<split>/<label>/<file>" from read_text_folder
};

struct TextSplit {
  std::vector<TextExample> examples;
  std::vector<std::string> label_names;
};

// Reads <root>/<split>/<label>/*.txt: one example per file, label = the folder's name.
// Labels are the sub-folders sorted by name, or `label_names` in that order when given (pass
// the train split's names when reading the test split so the ids agree; a listed folder may
// be missing, an unlisted one is an error). A folder named "unsup" (aclImdb's unlabelled
// reviews) is skipped unless listed. Files come sorted by name within each label; names not
// ending in ".txt" and hidden files are skipped. HTML line breaks (<br />, <br/>, <br>, any
// case) become a space; all other bytes are kept as they are.
TextSplit read_text_folder(const std::string& root, const std::string& split,
                           const std::vector<std::string>& label_names = {});

// `text` with every <br />, <br/> and <br> (any case) replaced by one space.
std::string replace_html_breaks(const std::string& text);

// Replaces every label by one drawn uniformly from [0, num_classes), the same for a given
// seed on every platform; label_names become "class_0" .. "class_<num_classes-1>". The text no
// longer predicts the label, so accuracy falls to chance: this is for measuring how runtime
// grows with the number of classes (2 .. 20,000) on real text lengths, not for learning.
void relabel(TextSplit& split, int64_t num_classes, uint64_t seed);

// ---- tokenizers ---------------------------------------------------------------------------

// The word tokenizer for word-level vocabularies: lower-cases (ASCII, Latin-1, Latin
// Extended-A, Greek, Cyrillic), keeps runs of letters, digits and non-ASCII characters
// together, keeps an apostrophe between two such characters inside the word ("don't"; a
// typographic ’ there becomes '), makes every other ASCII punctuation character, every
// Unicode punctuation character, every emoji/pictograph and every CJK ideograph its own
// token. Combining marks, variation selectors, skin-tone modifiers and zero-width joiners stay
// with the character before them, so no character (or emoji sequence) is split. Accents are
// kept ("café"). Control and zero-width characters and invalid UTF-8 bytes are dropped.
std::vector<std::string> tokenize_words(const std::string& text);
// tokenize_words of every example (in parallel), ready for Vocab::build.
std::vector<std::vector<std::string>> tokenize_words(const std::vector<TextExample>& examples);

// BERT's basic tokenizer (uncased models): drops control, format and private-use
// characters, lower-cases, strips accents (NFD, then the marks dropped: Hangul syllables
// split into jamo, kana lose their voicing marks), splits on whitespace and punctuation
// (Unicode's, and ASCII's symbols, as in BERT), makes every CJK ideograph its own token.
// Apostrophes split ("don", "'", "t"). Every script, from tables generated from the Unicode
// data (libnn/src/data/make_unicode_tables.py, Unicode 14); a test checks it against Hugging
// Face's tokenizer (tests/fixtures/make_wordpiece_cases.py). One difference from that
// tokenizer: a capital sigma becomes ς where Python's str.lower makes it final (a cased
// letter before it and none after, apostrophes, periods, marks and the like skipped), as in
// BERT's own Python code (Hugging Face's gives σ).
std::vector<std::string> basic_tokenize(const std::string& text);

// ---- vocabulary ---------------------------------------------------------------------------

// Tokens and their ids. Always holds [PAD], [UNK], [CLS] and [SEP]; their ids come from the
// vocabulary itself (0..3 when built here, 0/100/101/102 in BERT's vocab.txt).
class Vocab {
 public:
  // Longest token accepted, in bytes: a longer line means the file is not a vocabulary.
  static constexpr size_t kMaxTokenBytes = 1024;

  // The tokens in id order. Throws nn::Error on a duplicate, an empty or over-long token, a
  // control character (line break, tab) or invalid UTF-8 in a token, or a missing special
  // token: what could not be saved one per line and loaded back.
  explicit Vocab(std::vector<std::string> tokens);

  // The four special tokens (ids 0..3), then every token seen at least `min_count` times, by
  // descending count, ties in byte order, cut so the whole vocabulary has at most `max_size`
  // tokens (-1: no limit). Tokens longer than kMaxTokenBytes are left out ([UNK] later); a
  // token the constructor rejects throws (the tokenizers here never produce one).
  static Vocab build(const std::vector<std::vector<std::string>>& docs, int64_t max_size,
                     int64_t min_count = 1);

  // The id of `token`, or unk_id() when absent.
  int64_t id(const std::string& token) const;
  // The id of `token`, or -1 when absent.
  int64_t find(const std::string& token) const;
  const std::string& token(int64_t id) const;
  int64_t size() const { return int64_t(tokens_.size()); }
  const std::vector<std::string>& tokens() const { return tokens_; }

  int64_t pad_id() const { return pad_; }
  int64_t unk_id() const { return unk_; }
  int64_t cls_id() const { return cls_; }
  int64_t sep_id() const { return sep_; }

  // One token per line, in id order (BERT's vocab.txt format); written beside `path` and
  // renamed over it, so a failed save leaves the old file whole.
  void save(const std::string& path) const;
  // Reads a vocab.txt (ours or BERT's; "\r\n" line ends, a UTF-8 byte-order mark and blank
  // lines at the end accepted, as Hugging Face's loader takes them). Errors name the file and
  // the line: empty file or line, duplicate, over-long line, tab (a "token<TAB>score" file),
  // control character, invalid UTF-8, a missing special token.
  static Vocab load(const std::string& path);

 private:
  Vocab() = default;
  // Checks and indexes tokens_; errors name `file` and the line when it is not empty.
  void index(const std::string& file);

  std::vector<std::string> tokens_;
  std::unordered_map<std::string, int64_t> ids_;
  int64_t pad_ = -1, unk_ = -1, cls_ = -1, sep_ = -1;
};

// BERT's WordPiece: basic_tokenize, then each word split greedily into the longest pieces
// found in the vocabulary, continuation pieces prefixed with "##". A word that cannot be
// split, or has more than `max_chars_per_word` characters, becomes one [UNK].
class WordPiece {
 public:
  explicit WordPiece(Vocab vocab, int64_t max_chars_per_word = 100);
  std::vector<int64_t> encode(const std::string& text) const;
  std::vector<std::string> tokenize(const std::string& text) const;
  const Vocab& vocab() const { return vocab_; }

 private:
  // Appends the ids of one basic token to `out`.
  void encode_word(const std::string& word, std::vector<int64_t>& out) const;

  Vocab vocab_;
  int64_t max_chars_;
};

// ---- tensors ------------------------------------------------------------------------------

struct Encoded {
  Tensor ids;     // i64 (N, max_len), [PAD] after the text
  Tensor mask;    // u8 (N, max_len), 1 = real token (including [CLS] and [SEP]), 0 = padding
  Tensor labels;  // i64 (N)
};

// Tokenizes every example (in parallel), keeps its first tokens, optionally wrapped as
// [CLS] tokens [SEP] (BERT's single-sentence form; [SEP] is kept when truncating), and pads
// to `max_len` with [PAD]. The word-level form maps tokenize_words through the vocabulary.
Encoded encode_batch(const std::vector<TextExample>& examples, const Vocab& vocab,
                     int64_t max_len, bool add_cls_sep);
Encoded encode_batch(const std::vector<TextExample>& examples, const WordPiece& tokenizer,
                     int64_t max_len, bool add_cls_sep);

// u8 (ids' shape): 1 where ids != pad_id, on ids' device. Real tokens are never [PAD] (no
// tokenizer here produces it from text), so for encode_batch's output this equals the mask:
// how a DataLoader loop, which sees only {ids, labels}, gets the mask of its batch.
Tensor padding_mask(const Tensor& ids, int64_t pad_id);

// Pre-encoded examples for a DataLoader: get_batch gives {data = ids rows i64 (B, L),
// target = labels i64 (B)}. With trim_padding (the default) L is as long as the batch needs,
// not max_len: the longest of its rows (a row ends at its mask's last 1; a batch of empty
// rows counts as 1 long) rounded up to a multiple of 8, at most max_len, so that short
// reviews cost no work on padding (a model masks the padding either way); without it, L is
// max_len. The rows' lengths are read from the mask once, here. The mask of a batch is
// padding_mask(batch.data, pad id), or mask_rows(indices) when you pick rows yourself.
class TextDataset : public data::Dataset {
 public:
  explicit TextDataset(Encoded encoded, bool trim_padding = true);
  int64_t size() const override { return enc_.ids.shape()[0]; }
  data::Batch get_batch(const std::vector<int64_t>& indices) const override;
  Tensor mask_rows(const std::vector<int64_t>& indices) const;  // u8 (B, L)
  int64_t batch_length(const std::vector<int64_t>& indices) const;  // L above
  const Encoded& encoded() const { return enc_; }

 private:
  Encoded enc_;
  bool trim_;
  std::vector<int64_t> lengths_;  // each row's mask up to its last 1
};

// ---- synthetic data -----------------------------------------------------------------------

// Writes an aclImdb-layout folder, <root>/{train,test}/class_<k>/<n>.txt (k zero-padded so
// the names sort in class order), of generated "reviews" of 30-90 words in sentences, with an
// occasional <br /><br />. 88% of the words are filler shared by all classes (Zipf-distributed);
// the rest are class words, 70% of them the review's own class's, 30% another class's. So a
// bag-of-words model learns it well above chance but not perfectly: with 2 classes no model
// beats ~85% (naive Bayes gets there with 2,000 reviews per class), with more classes the
// ceiling rises (~95% for 10). The same seed writes the same files on every platform.
void write_synthetic_text(const std::string& root, int64_t num_classes, int64_t per_class_train,
                          int64_t per_class_test, uint64_t seed);

// The same set in memory, as read_text_folder reads back what write_synthetic_text writes
// (the same examples in the same order, each <br /> a space, `source` the file's path in that
// layout): for runs that need the data and no folder.
struct SyntheticText {
  TextSplit train, test;
};
SyntheticText make_synthetic_text(int64_t num_classes, int64_t per_class_train,
                                  int64_t per_class_test, uint64_t seed);

}  // namespace nn::text
