// nn::data::read_idx on arbitrary bytes (plain or gzip): it must return a tensor that
// matches its header or throw nn::Error; anything else (crash, sanitizer report, another
// exception, a huge allocation) is a finding.
#include <nn/data.h>

#include <cstdlib>

#include "input_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = fuzz::write_input(data, size);
  try {
    nn::Tensor t = nn::data::read_idx(path);
    int64_t n = 1;
    for (int64_t d : t.shape()) n *= d;
    if (n != t.numel() || !t.is_contiguous()) std::abort();
    // Touch every byte, so the address sanitizer checks the whole buffer.
    const auto* p = static_cast<const uint8_t*>(t.data_ptr());
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < t.nbytes(); ++i) sink = sink ^ p[i];
  } catch (const nn::Error&) {
  }
  return 0;
}
