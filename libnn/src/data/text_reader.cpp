// The aclImdb folder layout (<root>/<split>/<label>/*.txt) and random relabelling.
#include <nn/text.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include "data/folder.h"
#include "text_internal.h"

namespace nn::text {
namespace fs = std::filesystem;
namespace {

constexpr const char* kLayout = "<root>/<split>/<label>/*.txt, the aclImdb layout";

bool ends_with_txt(const std::string& name) {
  return name.size() > 4 && name.compare(name.size() - 4, 4, ".txt") == 0;
}

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  NN_CHECK(f.is_open(), "cannot read '", p.string(), "' (a broken link or no permission?)");
  f.seekg(0, std::ios::end);
  const std::streamoff size = f.tellg();
  NN_CHECK(size >= 0, "cannot read '", p.string(), "': expected a regular file");
  std::string s(size_t(size), '\0');
  f.seekg(0);
  f.read(s.data(), size);
  NN_CHECK(!f.fail(), "cannot read '", p.string(), "': read ", f.gcount(), " of ", size,
           " bytes");
  return s;
}

TextSplit read_split(const fs::path& root, const std::string& split,
                     const std::vector<std::string>& label_names) {
  data::detail::check_folder(root.string(), "text data folder",
                             nn::detail::cat(" (expected ", kLayout, ")"));
  const fs::path dir = root / split;
  NN_CHECK(fs::is_directory(dir), "no '", split, "' folder in '", root.string(), "' (expected ",
           kLayout, ")");
  const std::vector<std::string> folders = data::detail::sorted_names(dir, true);

  // Labels name the model's classes in its metadata (UTF-8, one per line): a folder name
  // that cannot be saved there is refused now, not when the first checkpoint is written.
  for (const auto& f : folders) {
    NN_CHECK(detail::find_invalid_utf8(f) == std::string::npos, "label folder '", f, "' in '",
             dir.string(), "': the name is not valid UTF-8 (class names are saved with the "
             "model); rename the folder");
    NN_CHECK(f.find('\n') == std::string::npos, "label folder '", f, "' in '", dir.string(),
             "': a line break in the name (class names are saved one per line); rename the "
             "folder");
  }
  TextSplit out;
  if (label_names.empty()) {
    for (const auto& f : folders)
      if (f != "unsup") out.label_names.push_back(f);  // aclImdb's unlabelled reviews
    NN_CHECK(!out.label_names.empty(), "no label folders in '", dir.string(),
             "' (expected one folder per class, e.g. neg/ and pos/)");
  } else {
    std::set<std::string> listed;
    for (const auto& n : label_names) {
      NN_CHECK(!n.empty(), "read_text_folder: label names must not be empty");
      NN_CHECK(listed.insert(n).second, "read_text_folder: label '", n, "' is listed twice");
    }
    std::string all;
    for (const auto& n : label_names) all += (all.empty() ? "" : ", ") + n;
    bool any = false;
    for (const auto& f : folders) {
      any = any || listed.count(f);
      NN_CHECK(listed.count(f) || f == "unsup", "unknown label folder '", f, "' in '",
               dir.string(), "'; expected one of the given labels (", all, ")");
    }
    NN_CHECK(any, "none of the label folders (", all, ") is in '", dir.string(), "'");
    out.label_names = label_names;
  }

  for (size_t k = 0; k < out.label_names.size(); ++k) {
    const fs::path ldir = dir / out.label_names[k];
    if (!fs::is_directory(ldir)) continue;  // a class the test split lacks
    // .txt files only (not labeledBow.feat)
    const std::vector<std::string> files = data::detail::sorted_names(ldir, false, ends_with_txt);
    NN_CHECK(!files.empty(), "label folder '", ldir.string(), "' holds no .txt files");
    for (const auto& name : files)
      out.examples.push_back({replace_html_breaks(read_file(ldir / name)), int64_t(k),
                              split + "/" + out.label_names[k] + "/" + name});
  }
  return out;
}

}  // namespace

std::string replace_html_breaks(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  const size_t n = text.size();
  for (size_t i = 0; i < n;) {
    if (text[i] == '<' && i + 3 < n && (text[i + 1] | 0x20) == 'b' &&
        (text[i + 2] | 0x20) == 'r') {
      size_t j = i + 3;
      if (j < n && text[j] == ' ') ++j;
      if (j < n && text[j] == '/') ++j;
      if (j < n && text[j] == '>') {
        out += ' ';
        i = j + 1;
        continue;
      }
    }
    out += text[i++];
  }
  return out;
}

TextSplit read_text_folder(const std::string& root, const std::string& split,
                           const std::vector<std::string>& label_names) {
  try {
    return read_split(fs::path(root), split, label_names);
  } catch (const fs::filesystem_error& e) {  // e.g. a folder without read permission
    NN_ERROR("cannot read text data in '", root, "/", split, "': ", e.what());
  }
}

void relabel(TextSplit& split, int64_t num_classes, uint64_t seed) {
  NN_CHECK(num_classes >= 1, "relabel: num_classes must be at least 1, got ", num_classes);
  std::mt19937_64 rng(seed);
  for (auto& e : split.examples) e.label = int64_t(detail::below(rng, uint64_t(num_classes)));
  split.label_names.clear();
  for (int64_t k = 0; k < num_classes; ++k)
    split.label_names.push_back("class_" + std::to_string(k));
}

}  // namespace nn::text
