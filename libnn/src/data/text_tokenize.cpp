// UTF-8 handling and the two pre-tokenizers: tokenize_words (word-level vocabularies) and
// basic_tokenize (BERT's, before WordPiece). Both share one scanner; they differ in the
// rules for apostrophes, emoji, accents and zero-width characters.
#include <nn/text.h>

#include <algorithm>
#include <iterator>

#include "text_internal.h"

namespace nn::text {
namespace detail {

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

}  // namespace detail

namespace {

using detail::append_utf8;
using detail::decode_utf8;

struct Range {
  uint32_t lo, hi;
};
template <size_t N>
bool in_ranges(uint32_t c, const Range (&r)[N]) {
  return std::any_of(std::begin(r), std::end(r), [c](Range x) { return c >= x.lo && c <= x.hi; });
}

bool is_space(uint32_t c) {
  static constexpr Range r[] = {{9, 13},         {32, 32},         {0x85, 0x85},
                                {0xA0, 0xA0},    {0x1680, 0x1680}, {0x2000, 0x200A},
                                {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F},
                                {0x3000, 0x3000}};
  return in_ranges(c, r);
}

// The word tokenizer's dropped characters: the common control and format ones (U+FFFD too:
// that is what invalid bytes decode to elsewhere). Removing rather than splitting keeps
// "ab\u00ADcd" whole. (BERT's tokenizer drops all of category C*: kBertClasses.)
bool is_dropped(uint32_t c) {
  static constexpr Range r[] = {{0, 31},          {0x7F, 0x9F},     {0xAD, 0xAD},
                                {0x200B, 0x200F}, {0x202A, 0x202E}, {0x2060, 0x2064},
                                {0xFEFF, 0xFEFF}, {0xFFFD, 0xFFFD}};
  return in_ranges(c, r);
}

// Characters that modify the one before them: combining marks, variation selectors,
// emoji skin tones (and U+200D, the zero-width joiner, handled by the caller).
bool is_combining(uint32_t c) {
  static constexpr Range r[] = {{0x300, 0x36F},   {0x1AB0, 0x1AFF}, {0x1DC0, 0x1DFF},
                                {0x20D0, 0x20FF}, {0xFE00, 0xFE0F}, {0xFE20, 0xFE2F},
                                {0xE0100, 0xE01EF}};
  return in_ranges(c, r);
}
bool is_skin_tone(uint32_t c) { return c >= 0x1F3FB && c <= 0x1F3FF; }

// The word tokenizer's punctuation: Unicode's (category P*) in the blocks text actually
// uses: Latin-1, general punctuation, CJK and full-width forms; rarer scripts' punctuation
// stays inside words. (BERT's tokenizer tests the full category: kBertClasses.)
bool is_punct(uint32_t c) {
  if (c < 0x80) return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
                       (c >= 123 && c <= 126);
  static constexpr Range r[] = {
      {0xA1, 0xA1},     {0xA7, 0xA7},     {0xAB, 0xAB},     {0xB6, 0xB7},     {0xBB, 0xBB},
      {0xBF, 0xBF},     {0x37E, 0x37E},   {0x387, 0x387},   {0x2010, 0x2027}, {0x2030, 0x2043},
      {0x2045, 0x2051}, {0x2053, 0x205E}, {0x2E00, 0x2E4F}, {0x3001, 0x3003}, {0x3008, 0x3011},
      {0x3014, 0x301F}, {0x30FB, 0x30FB}, {0xFE10, 0xFE19}, {0xFE30, 0xFE4F}, {0xFF01, 0xFF03},
      {0xFF05, 0xFF0A}, {0xFF0C, 0xFF0F}, {0xFF1A, 0xFF1B}, {0xFF1F, 0xFF20}, {0xFF3B, 0xFF3D},
      {0xFF3F, 0xFF3F}, {0xFF5B, 0xFF5B}, {0xFF5D, 0xFF5D}, {0xFF5F, 0xFF65}};
  return in_ranges(c, r);
}

// BERT's "Chinese character" blocks: CJK ideographs, each its own token (no spaces between
// words in these scripts, so a run would otherwise be one huge word).
bool is_cjk(uint32_t c) {
  static constexpr Range r[] = {{0x4E00, 0x9FFF},   {0x3400, 0x4DBF},   {0x20000, 0x2A6DF},
                                {0x2A700, 0x2B73F}, {0x2B740, 0x2B81F}, {0x2B820, 0x2CEAF},
                                {0xF900, 0xFAFF},   {0x2F800, 0x2FA1F}};
  return in_ranges(c, r);
}

// Emoji and pictographs: their own tokens for word-level models (a strong sentiment signal),
// inside words for BERT, as in its tokenizer.
bool is_pictograph(uint32_t c) {
  static constexpr Range r[] = {{0x2190, 0x21FF}, {0x2300, 0x23FF},   {0x25A0, 0x25FF},
                                {0x2600, 0x27BF}, {0x2B00, 0x2BFF},   {0x1F000, 0x1FAFF}};
  return in_ranges(c, r);
}
bool is_regional_indicator(uint32_t c) { return c >= 0x1F1E6 && c <= 0x1F1FF; }

// The word tokenizer's lower case: ASCII, Latin-1, Latin Extended-A, Greek and Cyrillic
// (BERT's tokenizer folds with the full tables: kBertFold).
uint32_t to_lower(uint32_t c) {
  if (c < 0x80) return (c >= 'A' && c <= 'Z') ? c + 32 : c;
  if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 32;
  if (c == 0x130) return 'i';
  if (c >= 0x100 && c <= 0x137) return (c % 2 == 0) ? c + 1 : c;
  if (c >= 0x139 && c <= 0x148) return (c % 2 == 1) ? c + 1 : c;
  if (c >= 0x14A && c <= 0x177) return (c % 2 == 0) ? c + 1 : c;
  if (c == 0x178) return 0xFF;
  if (c >= 0x179 && c <= 0x17E) return (c % 2 == 1) ? c + 1 : c;
  if (c == 0x386) return 0x3AC;
  if (c >= 0x388 && c <= 0x38A) return c + 37;
  if (c == 0x38C) return 0x3CC;
  if (c == 0x38E || c == 0x38F) return c + 63;
  if (c >= 0x391 && c <= 0x3AB && c != 0x3A2) return c + 32;
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  return c;
}

// BERT's character tables, generated from the Unicode data (make_unicode_tables.py).
enum class BertClass : uint8_t { drop, mark, punct };
struct BertRange {
  uint32_t lo, hi;
  BertClass cls;
};
struct BertFold {
  uint32_t cp;
  uint32_t to[3];
  uint8_t n;
};
enum class SigmaClass : uint8_t { ignorable, cased };
struct SigmaRange {
  uint32_t lo, hi;
  SigmaClass cls;
};
#include "unicode_bert.inc"

// The class kBertClasses gives c, or null (a space, a letter, a symbol, ...).
const BertClass* bert_class(uint32_t c) {
  const auto* it = std::upper_bound(std::begin(kBertClasses), std::end(kBertClasses), c,
                                    [](uint32_t v, const BertRange& r) { return v < r.lo; });
  if (it == std::begin(kBertClasses) || c > (--it)->hi) return nullptr;
  return &it->cls;
}

// BERT's normalisation of one character: lower case, NFD (which also splits Hangul
// syllables into their jamo), then the marks (Mn) dropped.
void append_bert_folded(std::string& out, uint32_t c) {
  if (c >= 0xAC00 && c <= 0xD7A3) {  // Hangul: algorithmic decomposition (Unicode ch. 3.12)
    const uint32_t s = c - 0xAC00;
    append_utf8(out, 0x1100 + s / 588);
    append_utf8(out, 0x1161 + (s % 588) / 28);
    if (s % 28 != 0) append_utf8(out, 0x11A7 + s % 28);
    return;
  }
  if (c < 0x80) {
    append_utf8(out, (c >= 'A' && c <= 'Z') ? c + 32 : c);
    return;
  }
  const auto* it = std::lower_bound(std::begin(kBertFold), std::end(kBertFold), c,
                                    [](const BertFold& f, uint32_t v) { return f.cp < v; });
  if (it == std::end(kBertFold) || it->cp != c) {
    append_utf8(out, c);
    return;
  }
  for (int k = 0; k < it->n; ++k) append_utf8(out, it->to[k]);
}

// What a character is to a capital sigma's lower case (kSigmaContext): skipped (case-ignorable,
// as apostrophes, periods and marks are), cased, or neither.
enum class SigmaSide { skip, cased, other };
SigmaSide sigma_side(uint32_t c) {
  if (c < 0x80) {  // (the table's ASCII entries, without a search)
    if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return SigmaSide::cased;
    return c == '\'' || c == '.' || c == ':' || c == '^' || c == '`' ? SigmaSide::skip : SigmaSide::other;
  }
  const auto* it = std::upper_bound(std::begin(kSigmaContext), std::end(kSigmaContext), c,
                                    [](uint32_t v, const SigmaRange& r) { return v < r.lo; });
  if (it == std::begin(kSigmaContext) || c > (--it)->hi) return SigmaSide::other;
  return it->cls == SigmaClass::cased ? SigmaSide::cased : SigmaSide::skip;
}

enum class Kind { space, drop, extend, punct, own, apostrophe, word };

struct Rules {
  bool bert;  // BERT's basic tokenizer; else the word tokenizer
};

Kind classify(int32_t cp, Rules r) {
  if (cp < 0) return Kind::drop;  // invalid bytes: dropped, like U+FFFD
  const auto c = uint32_t(cp);
  if (r.bert) {
    // BERT's cleaning drops control, format and private-use characters (\v, \f and NEL too,
    // before it splits on whitespace), its accent stripping the marks; punctuation and CJK
    // ideographs are tokens of their own; emoji, their skin tones and enclosing marks (the
    // keycap U+20E3 is Me, not Mn) stay inside words.
    if (c < 0x80) {  // (the tables agree; this is the common case without a search)
      if ((c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z')) return Kind::word;
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') return Kind::space;
      return c < 32 || c == 127 ? Kind::drop : Kind::punct;
    }
    if (const BertClass* b = bert_class(c)) return *b == BertClass::punct ? Kind::punct : Kind::drop;
    if (is_space(c)) return Kind::space;
    return is_cjk(c) ? Kind::own : Kind::word;
  }
  if (c < 0x80) {  // the common case, answered without the range tables
    if ((c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z')) return Kind::word;
    if (c == ' ' || (c >= 9 && c <= 13)) return Kind::space;
    if (c < 32 || c == 127) return Kind::drop;
    return c == '\'' ? Kind::apostrophe : Kind::punct;
  }
  if (is_space(c)) return Kind::space;
  if (c == 0x200D || is_combining(c) || is_skin_tone(c)) return Kind::extend;
  if (is_dropped(c)) return Kind::drop;
  if (c == 0x2019) return Kind::apostrophe;  // ’, the typographic apostrophe
  if (is_punct(c)) return Kind::punct;
  if (is_cjk(c) || is_pictograph(c) || is_regional_indicator(c)) return Kind::own;
  return Kind::word;
}

std::vector<std::string> scan(const std::string& text, Rules rules) {
  std::vector<std::string> out;
  bool in_word = false;     // out.back() is a word that the next word character extends
  bool attached = false;    // the previous character belongs to out.back()
  bool open_flag = false;   // out.back() is a lone regional indicator (half a flag)
  bool joined = false;      // the previous character was a zero-width joiner in out.back()
  bool cased_before = false;  // for a capital sigma: see final_sigma
  const std::string_view s = text;
  // What a character is to a sigma: dropped ones (BERT's cleaning removes them before it
  // lower-cases) are skipped too.
  auto side = [&](int32_t c, Kind k) { return k == Kind::drop ? SigmaSide::skip : sigma_side(uint32_t(c)); };
  for (size_t i = 0; i < s.size();) {
    const size_t start = i;
    const int32_t cp = decode_utf8(s, i);
    Kind k = classify(cp, rules);
    const bool sigma_after_cased = cased_before;
    if (const SigmaSide sd = side(cp, k); sd != SigmaSide::skip) cased_before = sd == SigmaSide::cased;
    if (k == Kind::apostrophe) {
      // Inside a word only between two word characters: "don't", but "'quoted'" and "dogs'".
      size_t j = i;
      bool next_is_word = j < s.size() && classify(decode_utf8(s, j), rules) == Kind::word;
      if (in_word && next_is_word) {
        out.back() += '\'';
        continue;
      }
      k = Kind::punct;
    }
    if (k == Kind::extend && !attached) k = Kind::word;  // a stray mark at a word's start
    // Emoji sequences stay one token: a flag is two regional indicators, and a joiner glues
    // the next pictograph on (man + ZWJ + woman + ZWJ + girl = one family).
    if ((k == Kind::own && open_flag && is_regional_indicator(uint32_t(cp))) ||
        (joined && (k == Kind::own || k == Kind::word))) {
      out.back().append(s.substr(start, i - start));
      open_flag = joined = false;
      continue;
    }
    joined = k == Kind::extend && cp == 0x200D;
    switch (k) {
      case Kind::drop:
        break;
      case Kind::space:
        in_word = attached = open_flag = false;
        break;
      case Kind::extend:
        out.back().append(s.substr(start, i - start));
        break;
      case Kind::punct:
      case Kind::own:
        if (rules.bert) {
          out.emplace_back();
          append_bert_folded(out.back(), uint32_t(cp));
        } else {
          out.emplace_back(s.substr(start, i - start));
        }
        in_word = false;
        attached = true;
        open_flag = is_regional_indicator(uint32_t(cp));
        break;
      case Kind::word:
      case Kind::apostrophe: {
        // Σ lower-cases to ς where str.lower makes it final (Unicode's Final_Sigma): a cased
        // letter before it and none after, case-ignorable characters skipped either side
        bool final_sigma = false;
        if (cp == 0x3A3 && sigma_after_cased) {
          SigmaSide next = SigmaSide::other;
          for (size_t j = i; j < s.size();) {
            const int32_t c = decode_utf8(s, j);
            if ((next = side(c, classify(c, rules))) != SigmaSide::skip) break;
          }
          final_sigma = next != SigmaSide::cased;
        }
        if (!in_word) out.emplace_back();
        if (final_sigma) append_utf8(out.back(), 0x3C2);
        else if (rules.bert) append_bert_folded(out.back(), uint32_t(cp));
        else append_utf8(out.back(), to_lower(uint32_t(cp)));
        in_word = attached = true;
        open_flag = false;
        break;
      }
    }
  }
  return out;
}

}  // namespace

std::vector<std::string> tokenize_words(const std::string& text) { return scan(text, {false}); }

std::vector<std::string> basic_tokenize(const std::string& text) { return scan(text, {true}); }

}  // namespace nn::text
