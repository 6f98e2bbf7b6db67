// nn::text::Vocab::load on arbitrary bytes: it must return a vocabulary that is consistent
// (every token's id is its line, the special tokens exist) and that saves and loads back
// unchanged, or throw nn::Error; anything else (crash, sanitizer report, another exception)
// is a finding. A loaded vocabulary also drives WordPiece, so that runs on the input too.
#include <nn/text.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "input_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = fuzz::write_input(data, size);
  static const std::string saved = [] {
    static std::string p = fuzz::input_path() + ".vocab";
    std::atexit([] { std::remove(p.c_str()); });
    return p;
  }();
  try {
    nn::text::Vocab v = nn::text::Vocab::load(path);
    if (v.size() < 4) std::abort();
    for (int64_t i = 0; i < v.size(); ++i)
      if (v.id(v.token(i)) != i) std::abort();
    for (int64_t s : {v.pad_id(), v.unk_id(), v.cls_id(), v.sep_id()})
      if (s < 0 || s >= v.size()) std::abort();
    v.save(saved);
    if (nn::text::Vocab::load(saved).tokens() != v.tokens()) std::abort();
    // The input's bytes as text: every id WordPiece returns must be in the vocabulary.
    nn::text::WordPiece wp(v, 16);
    for (int64_t id : wp.encode(std::string(reinterpret_cast<const char*>(data), size)))
      if (id < 0 || id >= v.size()) std::abort();
  } catch (const nn::Error&) {
  }
  return 0;
}
