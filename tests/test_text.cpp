// nn::text: tokenizers, vocabulary files, WordPiece, encoding, the aclImdb reader,
// relabelling and the synthetic data set.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>

#include "test_util.h"

using namespace nn;
namespace fs = std::filesystem;
using test::TempDir;
using Strings = std::vector<std::string>;

namespace {
// A fresh folder under the system temp dir, removed at the end of the test.
void write_file(const fs::path& p, const std::string& bytes) {
  fs::create_directories(p.parent_path());
  std::ofstream f(p, std::ios::binary);
  f << bytes;
}

std::string read_all(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// Fails, showing both, unless `part` occurs in `message`.
void require_contains(const std::string& message, const std::string& part) {
  INFO("message: " << message << "\nexpected to contain: " << part);
  REQUIRE(contains(message, part));
}
// The statement (the variadic arguments) must throw an nn::Error whose message holds `part`.
#define REQUIRE_ERROR(part, ...) require_contains(test::error_of([&] { __VA_ARGS__; }), part)

text::Vocab vocab_of(const Strings& words) {
  Strings t{"[PAD]", "[UNK]", "[CLS]", "[SEP]"};
  t.insert(t.end(), words.begin(), words.end());
  return text::Vocab(t);
}
}  // namespace

TEST_CASE("word tokenizer: punctuation, apostrophes, numbers, URLs, markup", "[text][tokenize]") {
  using text::tokenize_words;
  REQUIRE(tokenize_words("Hello, World!!! It's 3.5/10... don't") ==
          Strings{"hello", ",", "world", "!", "!", "!", "it's", "3", ".", "5", "/", "10", ".",
                  ".", ".", "don't"});
  // an apostrophe joins only two word characters
  REQUIRE(tokenize_words("'quoted' dogs' rock'n'roll '90s it''s") ==
          Strings{"'", "quoted", "'", "dogs", "'", "rock'n'roll", "'", "90s", "it", "'", "'", "s"});
  // the typographic apostrophe inside a word becomes ', elsewhere it is punctuation
  REQUIRE(tokenize_words("Don\u2019t \u2019tis") == Strings{"don't", "\u2019", "tis"});
  REQUIRE(tokenize_words("http://www.imdb.com/title/tt0111161/?ref=x_1") ==
          Strings{"http", ":", "/", "/", "www", ".", "imdb", ".", "com", "/", "title", "/",
                  "tt0111161", "/", "?", "ref", "=", "x", "_", "1"});
  REQUIRE(tokenize_words("$1,000 (10%) -- #1 @me") ==
          Strings{"$", "1", ",", "000", "(", "10", "%", ")", "-", "-", "#", "1", "@", "me"});
  // markup is punctuation to the tokenizer; the reader removes line breaks before it
  REQUIRE(tokenize_words("Great.<br /><br />Bad") ==
          Strings{"great", ".", "<", "br", "/", ">", "<", "br", "/", ">", "bad"});
  REQUIRE(tokenize_words(text::replace_html_breaks("Great.<br /><br />Bad<BR>x<br/>y")) ==
          Strings{"great", ".", "bad", "x", "y"});
  REQUIRE(tokenize_words(" a\tb\r\n\nc\u00A0d\u3000e ") == Strings{"a", "b", "c", "d", "e"});
  REQUIRE(tokenize_words("").empty());
  REQUIRE(tokenize_words(" \n\t ").empty());
}

TEST_CASE("word tokenizer: UTF-8 stays whole", "[text][tokenize]") {
  using text::tokenize_words;
  // accents kept, upper case lowered beyond ASCII
  REQUIRE(tokenize_words("Café NAÏVE Señor ÉCOLE") == Strings{"café", "naïve", "señor", "école"});
  REQUIRE(tokenize_words("ПРИВЕТ мир ΚΑΛΗ ΟΔΟΣ.") == Strings{"привет", "мир", "καλη", "οδος", "."});
  // a combining accent stays on its letter
  REQUIRE(tokenize_words("cafe\u0301!") == Strings{"cafe\u0301", "!"});
  // emoji are tokens of their own; modifiers, variation selectors and joiners stay with them
  REQUIRE(tokenize_words("great\U0001F600movie \U0001F44D\U0001F3FD \u2764\uFE0F") ==
          Strings{"great", "\U0001F600", "movie", "\U0001F44D\U0001F3FD", "\u2764\uFE0F"});
  REQUIRE(tokenize_words("\U0001F468\u200D\U0001F469\u200D\U0001F467") ==
          Strings{"\U0001F468\u200D\U0001F469\u200D\U0001F467"});
  REQUIRE(tokenize_words("\U0001F1EB\U0001F1F7\U0001F1E9\U0001F1EA") ==
          Strings{"\U0001F1EB\U0001F1F7", "\U0001F1E9\U0001F1EA"});  // two flags
  // CJK ideographs one by one; kana and hangul stay words
  REQUIRE(tokenize_words("我爱电影 ok ひらがな 영화") ==
          Strings{"我", "爱", "电", "影", "ok", "ひらがな", "영화"});
  // Unicode punctuation splits
  REQUIRE(tokenize_words("«bien» a\u2014b wow\u2026 \u201Cyes\u201D") ==
          Strings{"«", "bien", "»", "a", "\u2014", "b", "wow", "\u2026", "\u201C", "yes",
                  "\u201D"});
  // invalid bytes and control characters are dropped, never half a character kept
  REQUIRE(tokenize_words("ab\xff\xfe" "cd \xc3 e\x01" "f \xe2\x82") == Strings{"abcd", "ef"});
  // a soft hyphen and a zero-width space join
  REQUIRE(tokenize_words("co\u00ADop\u200Bera") == Strings{"coopera"});
}

TEST_CASE("BERT basic tokenizer splits apostrophes and strips accents", "[text][tokenize]") {
  using text::basic_tokenize;
  REQUIRE(basic_tokenize("Don't STOP, Café naïve!") ==
          Strings{"don", "'", "t", "stop", ",", "cafe", "naive", "!"});
  REQUIRE(basic_tokenize("$5 + x=y^2 ~ok`") ==
          Strings{"$", "5", "+", "x", "=", "y", "^", "2", "~", "ok", "`"});
  REQUIRE(basic_tokenize("Ångström Łódź Œuvre straße cafe\u0301") ==
          Strings{"angstrom", "łodz", "œuvre", "straße", "cafe"});
  // as in BERT: emoji stay inside words, CJK ideographs are split, format characters removed
  REQUIRE(basic_tokenize("great\U0001F600 我爱 co\u00ADop") ==
          Strings{"great\U0001F600", "我", "爱", "coop"});
  REQUIRE(basic_tokenize("\u00ABwow\u00BB\u2026") == Strings{"«", "wow", "»", "…"});
  // Greek and Cyrillic accents go too; Hangul syllables split into jamo (Unicode NFD)
  REQUIRE(basic_tokenize("Ёлка ΆΛΦΑΣ 영화") ==
          Strings{"елка", "αλφας", "\u110B\u1167\u11BC\u1112\u116A"});
}

// A capital sigma lower-cases as str.lower has it in BERT's own Python tokenizer (Unicode's
// Final_Sigma: a cased letter before it, none after, case-ignorable characters such as
// periods, apostrophes, marks and modifier letters skipped; characters BERT's cleaning drops
// skipped too). Expected tokens from that tokenizer's Python code (transformers 5.24's copy,
// BasicTokenizer(do_lower_case=True)); "9Σ" and "ΑΣ.Α" had given ς.
TEST_CASE("BERT basic tokenizer lower-cases a capital sigma as Python's str.lower", "[text][tokenize]") {
  using text::basic_tokenize;
  const std::vector<std::pair<std::string, Strings>> cases{
      {"9\u03A3", {"9\u03C3"}},
      {"\uAC0C\u03A3", {"\u1100\u1161\u11B3\u03C3"}},
      {"\u0391\u03A3.\u0391", {"\u03B1\u03C3", ".", "\u03B1"}},
      {"\u0391\u03A3'\u0391", {"\u03B1\u03C3", "'", "\u03B1"}},
      {"\u0391\u03A3", {"\u03B1\u03C2"}},
      {"\u03A3\u0391", {"\u03C3\u03B1"}},
      {"\u03A3", {"\u03C3"}},
      {"a\u03A3", {"a\u03C2"}},
      {"\u02B0\u03A3", {"\u02B0\u03C3"}},
      {"\u0391\u03A3.", {"\u03B1\u03C2", "."}},
      {"\u0391.\u03A3", {"\u03B1", ".", "\u03C2"}},
      {"\u0391 \u03A3", {"\u03B1", "\u03C3"}},
      {"\u038C\u03A3\u039F\u03A3 \u03A3\u039F\u03A6\u039F\u03A3", {"\u03BF\u03C3\u03BF\u03C2", "\u03C3\u03BF\u03C6\u03BF\u03C2"}},
      {"\u0391\u03A3\u0301\u0391", {"\u03B1\u03C3\u03B1"}},
      {"\u0391\u03A3\u0301", {"\u03B1\u03C2"}},
      {"\u0391\u03A3\u200B\u0391", {"\u03B1\u03C3\u03B1"}},
      {"\u0391\u03A39", {"\u03B1\u03C29"}},
      {"\u0391\u03A3\x01\u0391", {"\u03B1\u03C3\u03B1"}},
      {"\u0391\u03A3\u6211", {"\u03B1\u03C2", "\u6211"}},
  };
  for (const auto& [text, tokens] : cases) {
    INFO(text);
    REQUIRE(basic_tokenize(text) == tokens);
  }
  // the word tokenizer lower-cases the same way
  REQUIRE(text::tokenize_words("9\u03A3 \u0391\u03A3.\u0391 \u0391\u03A3") ==
          Strings{"9\u03C3", "\u03B1\u03C3", ".", "\u03B1", "\u03B1\u03C2"});
}

TEST_CASE("tokens of any bytes are valid UTF-8, so their vocabulary saves and loads",
          "[text][tokenize][vocab]") {
  // Random bytes, biased towards UTF-8 lead and continuation bytes to make broken sequences.
  std::mt19937_64 rng(11);
  std::vector<Strings> words, pieces;
  for (int d = 0; d < 300; ++d) {
    std::string s;
    for (int i = 0; i < 60; ++i) {
      const uint64_t r = rng();
      const uint64_t b = (r >> 8) % 0x80;
      s += char(r % 4 == 0 ? 0x80 + b : r % 4 == 1 ? 0xC0 + b % 0x38 : b);
    }
    words.push_back(text::tokenize_words(s));
    pieces.push_back(text::basic_tokenize(s));
    for (const auto& t : words.back()) REQUIRE(!t.empty());
    for (const auto& t : pieces.back()) REQUIRE(!t.empty());
  }
  TempDir d;
  for (const auto* docs : {&words, &pieces}) {
    auto v = text::Vocab::build(*docs, -1, 1);  // throws on an invalid token
    REQUIRE(v.size() > 100);
    v.save(d.file("v.txt"));
    REQUIRE(text::Vocab::load(d.file("v.txt")).tokens() == v.tokens());
  }
}

TEST_CASE("Vocab::build orders by count then bytes, with min_count and max_size", "[text][vocab]") {
  std::vector<Strings> docs{{"b", "a", "c", "a", "b", "d"}, {"a", "e", "[PAD]", "[CLS]"}};
  auto v = text::Vocab::build(docs, -1, 1);
  REQUIRE(v.tokens() == Strings{"[PAD]", "[UNK]", "[CLS]", "[SEP]", "a", "b", "c", "d", "e"});
  REQUIRE((v.pad_id() == 0 && v.unk_id() == 1 && v.cls_id() == 2 && v.sep_id() == 3));
  REQUIRE(v.id("b") == 5);
  REQUIRE(v.id("zzz") == v.unk_id());
  REQUIRE(v.find("zzz") == -1);
  REQUIRE(v.token(4) == "a");
  REQUIRE_ERROR("id 9 is out of range for a vocabulary of 9", v.token(9));
  const Strings top2{"[PAD]", "[UNK]", "[CLS]", "[SEP]", "a", "b"};
  REQUIRE(text::Vocab::build(docs, -1, 2).tokens() == top2);  // c, d, e seen once
  REQUIRE(text::Vocab::build(docs, 6, 1).tokens() == top2);   // room for two
  REQUIRE(text::Vocab::build(docs, 4, 1).size() == 4);
  REQUIRE(text::Vocab::build({}, -1, 1).size() == 4);
  // the order of the documents does not matter
  std::vector<Strings> swapped{docs[1], docs[0]};
  REQUIRE(text::Vocab::build(swapped, 7, 1).tokens() == text::Vocab::build(docs, 7, 1).tokens());
  // a token too long to be a vocabulary line is left out
  std::string huge(text::Vocab::kMaxTokenBytes + 1, 'x');
  REQUIRE(text::Vocab::build({{huge, huge, "a"}}, -1, 1).find(huge) == -1);

  REQUIRE_ERROR("max_size must be -1", text::Vocab::build(docs, 3, 1));
  REQUIRE_ERROR("min_count must be at least 1, got 0", text::Vocab::build(docs, 10, 0));
  REQUIRE_ERROR("control character 0x0a", text::Vocab::build({{"a\nb"}}, -1, 1));
  REQUIRE_ERROR("Vocab: token 5: duplicate token 'a' (first at token 4)", vocab_of({"a", "a"}));
  REQUIRE_ERROR("Vocab has no [SEP] token", text::Vocab(Strings{"[PAD]", "[UNK]", "[CLS]"}));
}

TEST_CASE("Vocab save/load round trip and BERT's vocab.txt layout", "[text][vocab]") {
  TempDir d;
  auto v = text::Vocab::build({{"the", "café", "the", "##s", "\U0001F600"}}, -1, 1);
  v.save(d.file("vocab.txt"));
  REQUIRE(read_all(d.file("vocab.txt")) ==
          "[PAD]\n[UNK]\n[CLS]\n[SEP]\nthe\n##s\ncafé\n\U0001F600\n");
  auto back = text::Vocab::load(d.file("vocab.txt"));
  REQUIRE(back.tokens() == v.tokens());
  REQUIRE(back.id("café") == v.id("café"));

  // BERT: [PAD] 0, [unused0..98], [UNK] 100, [CLS] 101, [SEP] 102, [MASK] 103; Windows line
  // ends and a missing final newline are fine
  std::string bert = "[PAD]\n";
  for (int i = 0; i < 99; ++i) bert += "[unused" + std::to_string(i) + "]\r\n";
  bert += "[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\n##s";
  write_file(d.file("bert.txt"), bert);
  auto b = text::Vocab::load(d.file("bert.txt"));
  REQUIRE(b.size() == 106);
  REQUIRE((b.pad_id() == 0 && b.unk_id() == 100 && b.cls_id() == 101 && b.sep_id() == 102));
  REQUIRE(b.id("[unused5]") == 6);
  REQUIRE(b.id("##s") == 105);

  // as Hugging Face reads them: a byte-order mark before the first token is not part of it,
  // and blank lines at the end are no tokens
  write_file(d.file("bom.txt"), "\xEF\xBB\xBF" + bert + "\n\n\r\n");
  auto bom = text::Vocab::load(d.file("bom.txt"));
  REQUIRE(bom.tokens() == b.tokens());
}

TEST_CASE("Vocab::load rejects bad files, naming the file and the line", "[text][vocab][errors]") {
  TempDir d;
  const std::string p = d.file("vocab.txt");
  const std::string head = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n";
  auto load_error = [&](const std::string& bytes) {
    write_file(p, bytes);
    return test::error_of([&] { text::Vocab::load(p); });
  };
  REQUIRE_ERROR("cannot open vocab file '" + d.file("none.txt") + "'",
                text::Vocab::load(d.file("none.txt")));
  require_contains(load_error(""), "vocab file '" + p + "' is empty; expected one token per line");
  require_contains(load_error(head + "a\n\nb\n"), "vocab file '" + p + "', line 6: empty token");
  require_contains(load_error(head + "a\nb\na\n"), "line 7: duplicate token 'a' (first at line 5)");
  require_contains(load_error(head + std::string(5000, 'x') + "\n"),
                   "line 5: longer than 1024 bytes");
  require_contains(load_error(head + "the\t-1.5\n"), "line 5: tab at byte 3");
  require_contains(load_error(head + "a\x01z\n"), "line 5: control character 0x01 at byte 1");
  require_contains(load_error(head + "ok\nbad\xc3(\n"),
                   "line 6: invalid UTF-8 (byte 0xc3 at offset 3)");
  require_contains(load_error(head + "\xed\xa0\x80\n"), "line 5: invalid UTF-8");  // a surrogate
  require_contains(load_error("[PAD]\n[CLS]\n[SEP]\nthe\n"), "vocab file '" + p + "' has no [UNK]");
  require_contains(load_error("[UNK]\n[CLS]\n[SEP]\n"), "has no [PAD] token");
  // a binary file fails fast at its first over-long line
  require_contains(load_error(std::string(1 << 20, '\x07')), "line 1: longer than 1024 bytes");
}

TEST_CASE("WordPiece: greedy longest-match sub-words, [UNK] for the rest", "[text][wordpiece]") {
  text::WordPiece wp(vocab_of({"un", "##aff", "##able", "want", "##want", "##ed", "runn",
                               "##ing", ",", "the", "cafe", "a", "ab", "##c", "##bc", "при",
                               "##вет"}));
  REQUIRE(wp.tokenize("unaffable") == Strings{"un", "##aff", "##able"});
  REQUIRE(wp.tokenize("UNwant\u00E9d,running") ==
          Strings{"un", "##want", "##ed", ",", "runn", "##ing"});
  REQUIRE(wp.tokenize("Café the") == Strings{"cafe", "the"});
  REQUIRE(wp.tokenize("abc") == Strings{"ab", "##c"});  // longest first piece, not a + ##bc
  REQUIRE(wp.tokenize("Привет") == Strings{"при", "##вет"});
  // a word with a part found nowhere is one [UNK], not a partial match
  REQUIRE(wp.tokenize("unwantedx the") == Strings{"[UNK]", "the"});
  REQUIRE(wp.tokenize("the\U0001F600") == Strings{"[UNK]"});
  REQUIRE(wp.tokenize("").empty());
  REQUIRE(wp.encode("unaffable ,") == std::vector<int64_t>{4, 5, 6, 12});
  // the length limit counts characters, not bytes
  const auto pieces = vocab_of({"un", "##aff", "##able", "при", "##вет"});
  REQUIRE(text::WordPiece(pieces, 9).tokenize("unaffable") == Strings{"un", "##aff", "##able"});
  REQUIRE(text::WordPiece(pieces, 8).tokenize("unaffable") == Strings{"[UNK]"});
  REQUIRE(text::WordPiece(pieces, 6).tokenize("привет") == Strings{"при", "##вет"});  // 12 bytes
  REQUIRE_ERROR("max_chars_per_word must be at least 1", text::WordPiece(vocab_of({}), 0));
}

TEST_CASE("WordPiece agrees with Hugging Face's BERT tokenizer on tricky text", "[text][wordpiece]") {
  // tests/fixtures/make_wordpiece_cases.py: texts (as hex) and the tokens Hugging Face's
  // tokenizers package gives them with BERT's normalizer (lower case, accents stripped,
  // control characters dropped, CJK split) and pre-tokenizer, on the same vocab.txt
  const std::string dir = test::fixtures_dir() + "/wordpiece";
  text::WordPiece wp(text::Vocab::load(dir + "/vocab.txt"));
  std::ifstream in(dir + "/cases.txt");
  REQUIRE(in.good());
  std::string line;
  int cases = 0;
  while (std::getline(in, line)) {
    const size_t tab = line.find('\t');
    REQUIRE(tab != std::string::npos);
    std::string textbytes;
    for (size_t i = 0; i + 1 < tab; i += 2) textbytes += char(std::stoi(line.substr(i, 2), nullptr, 16));
    Strings want;
    std::istringstream ws(line.substr(tab + 1));
    for (std::string t; ws >> t;) want.push_back(t);
    INFO("case " << cases << ": '" << textbytes << "'");
    CHECK(wp.tokenize(textbytes) == want);
    ++cases;
  }
  REQUIRE(cases >= 30);
}

TEST_CASE("encode_batch pads, truncates and masks, and TextDataset serves rows", "[text][encode]") {
  auto v = vocab_of({"a", "b", "c", "d", "e", "f", "g"});  // a = 4 ... g = 10
  std::vector<text::TextExample> ex{{"a b c", 0, ""}, {"A b c d e f g", 1, ""}, {"", 2, ""}, {"zz a", 3, ""}};
  auto plain = text::encode_batch(ex, v, 5, false);
  REQUIRE(plain.ids.dtype() == kI64);
  REQUIRE(plain.mask.dtype() == kU8);
  REQUIRE(plain.ids.shape() == Shape{4, 5});
  REQUIRE(plain.ids.to_vector<int64_t>() ==
          std::vector<int64_t>{4, 5, 6, 0, 0, 4, 5, 6, 7, 8, 0, 0, 0, 0, 0, 1, 4, 0, 0, 0});
  REQUIRE(plain.mask.to_vector<int64_t>() ==
          std::vector<int64_t>{1, 1, 1, 0, 0, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0});
  REQUIRE(plain.labels.to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2, 3});

  auto bert = text::encode_batch(ex, v, 5, true);  // [SEP] survives truncation
  REQUIRE(bert.ids.to_vector<int64_t>() ==
          std::vector<int64_t>{2, 4, 5, 6, 3, 2, 4, 5, 6, 3, 2, 3, 0, 0, 0, 2, 1, 4, 3, 0});
  REQUIRE(bert.mask.to_vector<int64_t>() ==
          std::vector<int64_t>{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 1, 1, 1, 1, 0});
  REQUIRE(text::padding_mask(bert.ids, v.pad_id()).to_vector<int64_t>() ==
          bert.mask.to_vector<int64_t>());

  text::WordPiece wp(vocab_of({"un", "##aff", "##able"}));
  auto pieces = text::encode_batch({{"unaffable unaffable", 1, ""}}, wp, 6, true);
  REQUIRE(pieces.ids.to_vector<int64_t>() == std::vector<int64_t>{2, 4, 5, 6, 4, 3});
  REQUIRE(text::encode_batch({}, wp, 6, true).ids.shape() == Shape{0, 6});

  REQUIRE_ERROR("max_len must be at least 3", text::encode_batch(ex, v, 2, true));
  REQUIRE_ERROR("max_len must be at least 1, got 0", text::encode_batch(ex, v, 0, false));

  // batches from a DataLoader: ids with labels, and padding_mask gives the rows' masks
  auto ds = std::make_shared<text::TextDataset>(plain);
  REQUIRE(ds->size() == 4);
  auto b = ds->get_batch({3, 1});
  REQUIRE(b.data.to_vector<int64_t>() == std::vector<int64_t>{1, 4, 0, 0, 0, 4, 5, 6, 7, 8});
  REQUIRE(b.target.to_vector<int64_t>() == std::vector<int64_t>{3, 1});
  REQUIRE(ds->mask_rows({3, 1}).to_vector<int64_t>() ==
          std::vector<int64_t>{1, 1, 0, 0, 0, 1, 1, 1, 1, 1});
  data::DataLoaderOptions o;
  o.batch_size = 3;
  o.seed = 5;
  data::DataLoader loader(ds, o);
  int64_t rows = 0;
  for (auto& batch : loader) {
    REQUIRE(text::padding_mask(batch.data, v.pad_id()).to_vector<int64_t>() ==
            ds->mask_rows(batch.target.to_vector<int64_t>()).to_vector<int64_t>());
    rows += batch.data.shape()[0];
  }
  REQUIRE(rows == 4);
  // a batch as long as its longest row, in multiples of 8: at max_len 20, rows of 3, 7, 0
  // and 2 tokens (the last 1 of a mask, not its count, ends a row)
  auto longer = text::encode_batch(ex, v, 20, false);
  longer.mask = longer.mask.clone();
  longer.mask.narrow(0, 2, 1).narrow(1, 11, 1).fill_(1);  // row 2: a 1 at 11
  text::TextDataset wide(longer);
  REQUIRE(wide.batch_length({0, 3}) == 8);
  REQUIRE(wide.get_batch({0, 3}).data.to_vector<int64_t>() ==
          std::vector<int64_t>{4, 5, 6, 0, 0, 0, 0, 0, 1, 4, 0, 0, 0, 0, 0, 0});
  REQUIRE(wide.mask_rows({3}).to_vector<int64_t>() == std::vector<int64_t>{1, 1, 0, 0, 0, 0, 0, 0});
  REQUIRE(wide.get_batch({1}).data.shape() == Shape{1, 8});
  REQUIRE(wide.get_batch({3, 2}).data.shape() == Shape{2, 16});
  REQUIRE(wide.mask_rows({2}).to_vector<int64_t>()[11] == 1);
  REQUIRE(text::TextDataset(text::encode_batch({{"", 0, ""}}, v, 20, false)).get_batch({0}).data.shape() ==
          Shape{1, 8});
  REQUIRE_ERROR("index 4 out of range for 4 examples", wide.get_batch({4}));
  REQUIRE(wide.get_batch({}).data.shape() == Shape{0, 8});
  // rounded up past max_len: max_len (a row of 17 tokens at 20)
  auto seventeen = text::encode_batch({{"a b c d e f g a b c d e f g a b c", 0, ""}}, v, 20, false);
  REQUIRE(text::TextDataset(seventeen).get_batch({0}).data.shape() == Shape{1, 20});
  // trim_padding off: max_len always
  text::TextDataset full(longer, false);
  REQUIRE(full.get_batch({0, 3}).data.shape() == Shape{2, 20});
  REQUIRE(full.mask_rows({0, 3}).shape() == Shape{2, 20});
  auto bad = plain;
  bad.labels = from_vector<int64_t>({0, 1}, {2});
  REQUIRE_ERROR("expected labels as i64 (4), got i64 [2]", text::TextDataset{bad});
  REQUIRE_ERROR("expected i64 or i32 token ids, got f32", text::padding_mask(ones({2}), 0));
}

TEST_CASE("read_text_folder: labels, order, line breaks, UTF-8", "[text][reader]") {
  TempDir d;
  const fs::path root = d.path / "aclImdb";
  write_file(root / "train/pos/1_9.txt", "Great<br /><br />movie");
  write_file(root / "train/pos/0_7.txt", "Fine<BR>ok");
  write_file(root / "train/neg/0_2.txt", "Bad<br/>film: café \U0001F600");
  write_file(root / "train/neg/notes.md", "not a review");
  write_file(root / "train/neg/._0_2.txt", "macOS metadata");
  write_file(root / "train/unsup/0_0.txt", "unlabelled");
  write_file(root / "train/labeledBow.feat", "0 0:1");
  write_file(root / "train/urls_pos.txt", "http://");
  write_file(root / "test/pos/0_10.txt", "Yes");

  auto train = text::read_text_folder(root.string(), "train");
  REQUIRE(train.label_names == Strings{"neg", "pos"});
  REQUIRE(train.examples.size() == 3);
  REQUIRE(train.examples[0].text == "Bad film: café \U0001F600");
  REQUIRE(train.examples[1].text == "Fine ok");
  REQUIRE(train.examples[2].text == "Great  movie");
  REQUIRE(train.examples[0].label == 0);
  REQUIRE((train.examples[1].label == 1 && train.examples[2].label == 1));

  // the test split has no neg folder: it keeps the train split's ids
  auto test = text::read_text_folder(root.string(), "test", train.label_names);
  REQUIRE(test.label_names == Strings{"neg", "pos"});
  REQUIRE(test.examples.size() == 1);
  REQUIRE(test.examples[0].label == 1);
  // a given order wins over sorting; unsup is read when asked for
  auto swapped = text::read_text_folder(root.string(), "train", {"pos", "neg", "unsup"});
  REQUIRE(swapped.examples.size() == 4);
  REQUIRE(swapped.examples[0].text == "Fine ok");
  REQUIRE(swapped.examples[0].label == 0);
  REQUIRE(swapped.examples[3].label == 2);
}

TEST_CASE("read_text_folder errors say what is missing", "[text][reader][errors]") {
  TempDir d;
  const fs::path root = d.path / "data";
  auto err = [&](const std::string& split, const Strings& labels = {}) {
    return test::error_of([&] { text::read_text_folder(root.string(), split, labels); });
  };
  require_contains(err("train"), "text data folder '" + root.string() + "' does not exist");
  write_file(root, "a review");
  require_contains(err("train"), "text data folder '" + root.string() + "' is a file, not a folder");
  fs::remove(root);
  fs::create_directories(root / "train/unsup");
  require_contains(err("test"), "no 'test' folder in '" + root.string() + "'");
  require_contains(err("train"), "no label folders in '" + (root / "train").string() + "'");
  fs::create_directories(root / "train/pos");
  write_file(root / "train/pos/readme.md", "x");
  require_contains(err("train"),
                   "label folder '" + (root / "train/pos").string() + "' holds no .txt files");
  write_file(root / "train/pos/0.txt", "x");
  write_file(root / "train/extra/0.txt", "x");
  require_contains(err("train", {"neg", "pos"}), "unknown label folder 'extra'");
  require_contains(err("train", {"neg", "pos"}), "expected one of the given labels (neg, pos)");
  require_contains(err("train", {"a", "b"}), "unknown label folder");
  fs::remove_all(root / "train/extra");
  require_contains(err("train", {"neg", "neg"}), "label 'neg' is listed twice");
  require_contains(err("train", {"x", "y", "unsup"}), "unknown label folder 'pos'");
  fs::create_directories(root / "test/unsup");
  require_contains(err("test", {"neg", "pos"}), "none of the label folders (neg, pos) is in");
  // a review that cannot be read is named
  fs::create_symlink(d.path / "nowhere", root / "train/pos/1.txt");
  require_contains(err("train"), "cannot read '" + (root / "train/pos/1.txt").string() + "'");
  fs::remove(root / "train/pos/1.txt");
  // class names the model's metadata cannot hold: refused when read, not at the first save
  write_file(root / "train/n\xe9g/0.txt", "x");
  require_contains(err("train"), "the name is not valid UTF-8");
  fs::remove_all(root / "train/n\xe9g");
  write_file(root / "train/a\nb/0.txt", "x");
  require_contains(err("train"), "a line break in the name");
}

TEST_CASE("relabel draws labels uniformly and reproducibly", "[text][relabel]") {
  text::TextSplit s;
  for (int i = 0; i < 1400; ++i) s.examples.push_back({"x", 0, ""});
  s.label_names = {"neg", "pos"};
  auto a = s, b = s, c = s;
  text::relabel(a, 7, 42);
  text::relabel(b, 7, 42);
  text::relabel(c, 7, 43);
  REQUIRE(a.label_names ==
          Strings{"class_0", "class_1", "class_2", "class_3", "class_4", "class_5", "class_6"});
  std::vector<int64_t> la, lb, lc, counts(7);
  for (size_t i = 0; i < s.examples.size(); ++i) {
    la.push_back(a.examples[i].label);
    lb.push_back(b.examples[i].label);
    lc.push_back(c.examples[i].label);
    REQUIRE((la.back() >= 0 && la.back() < 7));
    ++counts[size_t(la.back())];
  }
  REQUIRE(la == lb);
  REQUIRE(la != lc);
  for (int64_t n : counts) REQUIRE((n > 140 && n < 260));  // 200 expected, sd 13
  auto many = s;
  text::relabel(many, 20000, 1);
  std::set<int64_t> distinct;
  for (auto& e : many.examples) {
    REQUIRE((e.label >= 0 && e.label < 20000));
    distinct.insert(e.label);
  }
  REQUIRE(distinct.size() > 1300);
  REQUIRE(many.label_names.size() == 20000);
  REQUIRE(many.label_names.back() == "class_19999");
  REQUIRE_ERROR("num_classes must be at least 1, got 0", text::relabel(many, 0, 1));
}

TEST_CASE("synthetic text: layout, class balance, same files for the same seed",
          "[text][synthetic]") {
  TempDir d;
  text::write_synthetic_text(d.file("a"), 3, 12, 5, 7);
  auto train = text::read_text_folder(d.file("a"), "train");
  auto test = text::read_text_folder(d.file("a"), "test", train.label_names);
  REQUIRE(train.label_names == Strings{"class_0", "class_1", "class_2"});
  REQUIRE(fs::exists(d.path / "a/train/class_2/11.txt"));
  REQUIRE(train.examples.size() == 36);
  REQUIRE(test.examples.size() == 15);
  std::vector<int64_t> counts(3);
  for (auto& e : train.examples) ++counts[size_t(e.label)];
  REQUIRE(counts == std::vector<int64_t>{12, 12, 12});
  // aclImdb-like line breaks in the files, gone after reading
  int with_breaks = 0;
  for (auto& f : fs::recursive_directory_iterator(d.path / "a/train"))
    with_breaks += f.is_regular_file() && contains(read_all(f.path()), "<br /><br />");
  REQUIRE(with_breaks > 5);
  for (auto& e : train.examples) REQUIRE(!contains(e.text, "<br"));
  REQUIRE(text::tokenize_words(train.examples)[5] == text::tokenize_words(train.examples[5].text));

  text::write_synthetic_text(d.file("b"), 3, 12, 5, 7);
  text::write_synthetic_text(d.file("c"), 3, 12, 5, 8);
  auto same = text::read_text_folder(d.file("b"), "train");
  auto other = text::read_text_folder(d.file("c"), "train");
  for (size_t i = 0; i < train.examples.size(); ++i) {
    REQUIRE(same.examples[i].text == train.examples[i].text);
    REQUIRE(other.examples[i].text != train.examples[i].text);
  }
  // in memory: what the reader reads back from the files, example by example
  const text::SyntheticText mem = text::make_synthetic_text(3, 12, 5, 7);
  for (const auto& [m, f] : {std::pair{&mem.train, &train}, std::pair{&mem.test, &test}}) {
    REQUIRE(m->label_names == f->label_names);
    REQUIRE(m->examples.size() == f->examples.size());
    for (size_t i = 0; i < m->examples.size(); ++i) {
      INFO(f->examples[i].source);
      REQUIRE(m->examples[i].text == f->examples[i].text);
      REQUIRE(m->examples[i].label == f->examples[i].label);
      REQUIRE(m->examples[i].source == f->examples[i].source);
    }
  }
  REQUIRE(text::make_synthetic_text(3, 12, 5, 8).train.examples[0].text != train.examples[0].text);
  REQUIRE_ERROR("make_synthetic_text: num_classes must be at least 2", text::make_synthetic_text(1, 2, 2, 7));
  REQUIRE_ERROR("already exists", text::write_synthetic_text(d.file("a"), 3, 12, 5, 7));
  REQUIRE_ERROR("num_classes must be at least 2",
                text::write_synthetic_text(d.file("z"), 1, 12, 5, 7));
  REQUIRE_ERROR("got 12 (train) and 0 (test)",
                text::write_synthetic_text(d.file("z"), 2, 12, 0, 7));
}

TEST_CASE("synthetic text: a bag of words learns it, but not perfectly", "[text][synthetic]") {
  // Multinomial naive Bayes on word counts. Small, as creating files is slow on some disks:
  // with 2,000 reviews per class it reaches ~85%, the best any model can do on this data.
  TempDir d;
  text::write_synthetic_text(d.file("nb"), 2, 60, 40, 3);
  auto tr = text::read_text_folder(d.file("nb"), "train");
  auto te = text::read_text_folder(d.file("nb"), "test", tr.label_names);
  std::map<std::string, std::array<double, 2>> counts;
  std::array<double, 2> totals{};
  for (auto& e : tr.examples)
    for (auto& w : text::tokenize_words(e.text)) {
      counts[w][size_t(e.label)] += 1;
      totals[size_t(e.label)] += 1;
    }
  int correct = 0;
  for (auto& e : te.examples) {
    std::array<double, 2> score{};
    for (auto& w : text::tokenize_words(e.text)) {
      auto it = counts.find(w);
      for (size_t k = 0; k < 2; ++k)
        score[k] += std::log(((it == counts.end() ? 0 : it->second[k]) + 1) /
                             (totals[k] + double(counts.size())));
    }
    correct += int64_t(score[1] > score[0]) == e.label;
  }
  const double acc = double(correct) / double(te.examples.size());
  INFO("naive Bayes accuracy " << acc);
  REQUIRE(acc > 0.65);  // chance is 0.5
  REQUIRE(acc < 0.95);
}
