// nn::io::load_safetensors on arbitrary bytes: it must return tensors that fit the file or
// throw nn::Error; anything else (crash, sanitizer report, another exception, a huge
// allocation) is a finding.
#include <nn/io.h>

#include <cstdlib>

#include "input_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = fuzz::write_input(data, size);
  try {
    nn::io::SafetensorsFile f = nn::io::load_safetensors(path);
    size_t total = 0;
    for (auto& [name, t] : f.tensors) {
      if (!t.is_contiguous()) std::abort();
      const auto* p = static_cast<const uint8_t*>(t.data_ptr());
      volatile uint8_t sink = 0;
      for (size_t i = 0; i < t.nbytes(); ++i) sink = sink ^ p[i];
      total += t.nbytes();
    }
    // A file that loads holds exactly its tensors' bytes after the header.
    if (total > size) std::abort();
  } catch (const nn::Error&) {
  }
  return 0;
}
