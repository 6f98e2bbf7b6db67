// The readers under test take a path, so each input goes to a temporary file first (one per
// fuzzing process, removed at exit).
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace fuzz {

inline const std::string& input_path() {
  static const std::string path = [] {
    std::string p = (std::filesystem::temp_directory_path() /
                     ("libnn_fuzz_" + std::to_string(getpid()) + ".bin")).string();
    static std::string copy = p;
    std::atexit([] { std::remove(copy.c_str()); });
    return p;
  }();
  return path;
}

inline const std::string& write_input(const uint8_t* data, size_t size) {
  const std::string& path = input_path();
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f || (size && std::fwrite(data, 1, size, f) != size) || std::fclose(f) != 0) {
    std::perror(path.c_str());
    std::abort();  // the harness, not the library, is broken
  }
  return path;
}

}  // namespace fuzz
