// The installed headers as a C++17 user sees them: every public header (nn.h includes them
// all), compiled as C++17 with -Wall -Wextra -Wpedantic -Werror and as -I (not -isystem)
// includes, so a warning in a header or a C++20 requirement of the package fails here.
#include <nn/nn.h>

#include <cstdio>

static_assert(__cplusplus == 201703L, "the libnn package raised the C++ standard above C++17");

int main() {
  nn::Tensor a = nn::arange(6, nn::kF32).reshape({2, 3});
  const float s = nn::sum(a).item<float>();
  std::printf("install_check_cxx17 %s\n", s == 15.f ? "ok" : "FAILED");
  return s == 15.f ? 0 : 1;
}
