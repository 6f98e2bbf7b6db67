// Printing in the style users know: tensor([[1.0000, 2.0000], ...], dtype=f32, device=cpu)
#include <nn/ops.h>
#include <nn/tensor.h>

#include <cmath>
#include <cstdio>
#include <sstream>

namespace nn {
namespace {
constexpr int64_t kEdge = 3;         // elements shown at each end of a summarised dim
constexpr int64_t kSummarise = 1000;  // summarise tensors with more elements than this

// Integers print from their own values (through a double, 2^53 + 1 printed as 2^53).
std::string fmt(int64_t v, bool) { return std::to_string(v); }
std::string fmt(double v, bool sci) {
  char buf[64];
  if (std::isnan(v)) std::snprintf(buf, sizeof buf, "nan");
  else if (std::isinf(v)) std::snprintf(buf, sizeof buf, v > 0 ? "inf" : "-inf");
  else std::snprintf(buf, sizeof buf, sci ? "%.4e" : "%.4f", v);
  return buf;
}

template <typename T>
void print_rec(std::ostream& os, const std::vector<T>& v, const Shape& shape,
               const Shape& strides, int64_t dim, int64_t base, bool sci,
               bool summarise, int indent) {
  if (shape.empty()) {
    os << fmt(v[base], sci);
    return;
  }
  int64_t n = shape[dim];
  os << "[";
  for (int64_t i = 0; i < n; ++i) {
    if (summarise && n > 2 * kEdge && i == kEdge) {
      os << "...";
      i = n - kEdge - 1;
      os << (dim + 1 == int64_t(shape.size()) ? ", " : ",\n" + std::string(indent + 1, ' '));
      continue;
    }
    if (dim + 1 == int64_t(shape.size())) {
      os << fmt(v[base + i * strides[dim]], sci);
      if (i + 1 < n) os << ", ";
    } else {
      print_rec(os, v, shape, strides, dim + 1, base + i * strides[dim], sci,
                summarise, indent + 1);
      if (i + 1 < n) os << "," << std::string(shape.size() - dim - 1, '\n')
                        << std::string(indent + 1, ' ');
    }
  }
  os << "]";
}
}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  const bool floating = is_floating(dtype());
  std::vector<double> v = floating ? to_vector<double>() : std::vector<double>();  // (integers: below)
  double maxabs = 0, minabs = INFINITY;
  for (double x : v)
    if (std::isfinite(x) && x != 0) {
      maxabs = std::max(maxabs, std::abs(x));
      minabs = std::min(minabs, std::abs(x));
    }
  bool sci = floating && (maxabs >= 1e5 || (minabs < 1e-4 && minabs > 0));
  std::ostringstream os;
  os << "tensor(";
  Shape strides(shape().size());
  int64_t s = 1;
  for (int64_t i = dim() - 1; i >= 0; --i) {
    strides[i] = s;
    s *= shape()[i];
  }
  const bool summarise = numel() > kSummarise;
  if (numel() == 0) os << "[]";
  else if (floating) print_rec(os, v, shape(), strides, 0, 0, sci, summarise, 7);
  else print_rec(os, to_vector<int64_t>(), shape(), strides, 0, 0, sci, summarise, 7);
  os << ", shape=" << shape_str(shape()) << ", dtype=" << dtype_name(dtype());
  if (!device().is_cpu()) os << ", device=" << device().str();
  if (requires_grad()) os << ", requires_grad";
  os << ")";
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }
std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }
std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.str(); }

}  // namespace nn
