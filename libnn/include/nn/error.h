// Errors users can cause throw nn::Error with a message saying what was expected and found.
#pragma once
#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace nn {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {
template <typename... Args>
std::string cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

// "[2, 3, 4]"
std::string shape_str(const std::vector<int64_t>& shape);

}  // namespace nn

#define NN_ERROR(...) throw ::nn::Error(::nn::detail::cat(__VA_ARGS__))
// [[unlikely]] is C++20: the headers stay C++17 for their users
#if __cplusplus >= 202002L
#define NN_UNLIKELY [[unlikely]]
#else
#define NN_UNLIKELY
#endif
#define NN_CHECK(cond, ...)            \
  do {                                 \
    if (!(cond)) NN_UNLIKELY {         \
      NN_ERROR(__VA_ARGS__);           \
    }                                  \
  } while (0)
