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
#define NN_CHECK(cond, ...)            \
  do {                                 \
    if (!(cond)) [[unlikely]] {        \
      NN_ERROR(__VA_ARGS__);           \
    }                                  \
  } while (0)
