#include "core/env.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <string>

namespace nn {

bool env_switch(const char* name, bool fallback) {
  const char* e = std::getenv(name);
  if (!e || !*e) return fallback;
  if (std::strcmp(e, "1") == 0) return true;
  if (std::strcmp(e, "0") == 0) return false;
  static std::mutex mu;
  static std::set<std::string> said;
  std::lock_guard<std::mutex> lock(mu);
  if (said.insert(name).second)
    std::fprintf(stderr, "libnn: %s=%s ignored (0 or 1): it stays %s\n", name, e,
                 fallback ? "on" : "off");
  return fallback;
}

}  // namespace nn
