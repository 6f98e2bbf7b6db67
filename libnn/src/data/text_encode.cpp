// Encoding examples to padded id tensors, and the data set that serves them.
#include <nn/autograd.h>
#include <nn/ops.h>
#include <nn/text.h>

#include <algorithm>

#include "core/first_error.h"

namespace nn::text {
namespace {

// fn(i) for i in [0, n) over OpenMP threads; the first exception is rethrown afterwards (an
// exception must not leave an OpenMP region).
template <typename F>
void parallel_for(int64_t n, const F& fn) {
  FirstError error;
#pragma omp parallel for schedule(dynamic, 16)
  for (int64_t i = 0; i < n; ++i) error.run([&] { fn(i); });
  error.rethrow();
}

template <typename Tokenize>
Encoded encode(const std::vector<TextExample>& examples, const Vocab& vocab, int64_t max_len,
               bool add_cls_sep, const Tokenize& tokenize) {
  const int64_t reserved = add_cls_sep ? 2 : 0;
  NN_CHECK(max_len >= reserved + 1, "encode_batch: max_len must be at least ", reserved + 1,
           add_cls_sep ? " ([CLS], one token, [SEP])" : "", ", got ", max_len);
  const auto n = int64_t(examples.size());
  std::vector<int64_t> ids(size_t(n * max_len), vocab.pad_id());
  std::vector<int64_t> labels(static_cast<size_t>(n));
  std::vector<uint8_t> mask(size_t(n * max_len), 0);
  parallel_for(n, [&](int64_t i) {
    std::vector<int64_t> t = tokenize(examples[size_t(i)].text);
    const auto keep = std::min(int64_t(t.size()), max_len - reserved);
    int64_t* row = ids.data() + i * max_len;
    int64_t p = 0;
    if (add_cls_sep) row[p++] = vocab.cls_id();
    for (int64_t k = 0; k < keep; ++k) row[p++] = t[size_t(k)];
    if (add_cls_sep) row[p++] = vocab.sep_id();
    std::fill_n(mask.data() + i * max_len, p, uint8_t(1));
    labels[size_t(i)] = examples[size_t(i)].label;
  });
  return {from_vector(ids, {n, max_len}), from_vector(mask, {n, max_len}),
          from_vector(labels, {n})};
}

Tensor index_tensor(const std::vector<int64_t>& indices, Device d) {
  return from_vector(indices, {int64_t(indices.size())}).to(d);
}
// t's rows idx, the first len columns: gathered whole, then cut (a narrowed table would be
// copied whole to gather from).
Tensor rows(const Tensor& t, const Tensor& idx, int64_t len) {
  Tensor out = index_select(t, idx);
  return len == out.shape()[1] ? out : out.narrow(1, 0, len).contiguous();
}

}  // namespace

std::vector<std::vector<std::string>> tokenize_words(const std::vector<TextExample>& examples) {
  std::vector<std::vector<std::string>> docs(examples.size());
  parallel_for(int64_t(examples.size()),
               [&](int64_t i) { docs[size_t(i)] = tokenize_words(examples[size_t(i)].text); });
  return docs;
}

Encoded encode_batch(const std::vector<TextExample>& examples, const Vocab& vocab,
                     int64_t max_len, bool add_cls_sep) {
  return encode(examples, vocab, max_len, add_cls_sep, [&](const std::string& text) {
    std::vector<int64_t> ids;
    for (const auto& w : tokenize_words(text)) ids.push_back(vocab.id(w));
    return ids;
  });
}

Encoded encode_batch(const std::vector<TextExample>& examples, const WordPiece& tokenizer,
                     int64_t max_len, bool add_cls_sep) {
  return encode(examples, tokenizer.vocab(), max_len, add_cls_sep,
                [&](const std::string& text) { return tokenizer.encode(text); });
}

Tensor padding_mask(const Tensor& ids, int64_t pad_id) {
  NN_CHECK(ids.defined() && (ids.dtype() == kI64 || ids.dtype() == kI32),
           "padding_mask: expected i64 or i32 token ids, got ",
           ids.defined() ? dtype_name(ids.dtype()) : "an undefined tensor");
  NoGradGuard ng;
  return ne(ids, full({}, double(pad_id), ids.options())).to(kU8);
}

TextDataset::TextDataset(Encoded encoded, bool trim_padding)
    : enc_(std::move(encoded)), trim_(trim_padding) {
  const auto& [ids, mask, labels] = enc_;
  NN_CHECK(ids.defined() && ids.dtype() == kI64 && ids.dim() == 2, "TextDataset: expected ids "
           "as i64 (N, max_len), got ", ids.defined() ? dtype_name(ids.dtype()) : "undefined",
           " ", ids.defined() ? shape_str(ids.shape()) : "");
  NN_CHECK(mask.defined() && mask.dtype() == kU8 && mask.shape() == ids.shape(),
           "TextDataset: expected mask as u8 ", shape_str(ids.shape()), " like the ids, got ",
           mask.defined() ? dtype_name(mask.dtype()) : "undefined", " ",
           mask.defined() ? shape_str(mask.shape()) : "");
  NN_CHECK(labels.defined() && labels.dtype() == kI64 && labels.dim() == 1 &&
               labels.shape()[0] == ids.shape()[0],
           "TextDataset: expected labels as i64 (", ids.shape()[0], "), got ",
           labels.defined() ? dtype_name(labels.dtype()) : "undefined", " ",
           labels.defined() ? shape_str(labels.shape()) : "");
  const Tensor m = mask.cpu().contiguous();
  const int64_t n = m.shape()[0], len = m.shape()[1];
  const uint8_t* p = m.data<uint8_t>();
  lengths_.resize(size_t(n));
  for (int64_t i = 0; i < n; ++i) {
    int64_t l = len;
    while (l > 0 && p[i * len + l - 1] == 0) --l;
    lengths_[size_t(i)] = l;
  }
}

int64_t TextDataset::batch_length(const std::vector<int64_t>& indices) const {
  int64_t longest = 1;
  for (int64_t i : indices) {
    NN_CHECK(i >= 0 && i < size(), "TextDataset: index ", i, " out of range for ", size(),
             " examples");
    longest = std::max(longest, lengths_[size_t(i)]);
  }
  const int64_t max_len = enc_.ids.shape()[1];
  return trim_ ? std::min((longest + 7) / 8 * 8, max_len) : max_len;
}

data::Batch TextDataset::get_batch(const std::vector<int64_t>& indices) const {
  NoGradGuard ng;
  const int64_t len = batch_length(indices);  // (checks the indices first)
  const Tensor idx = index_tensor(indices, enc_.ids.device());
  return {rows(enc_.ids, idx, len), index_select(enc_.labels, idx.to(enc_.labels.device()))};
}

Tensor TextDataset::mask_rows(const std::vector<int64_t>& indices) const {
  NoGradGuard ng;
  const int64_t len = batch_length(indices);
  return rows(enc_.mask, index_tensor(indices, enc_.mask.device()), len);
}

}  // namespace nn::text
