#include <nn/device.h>
#include <nn/error.h>

#include "backend/backend.h"

namespace nn {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::u8: return "u8";
  }
  return "?";
}

DType dtype_from_name(const std::string& name) {
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64,
                  DType::u8})
    if (name == dtype_name(t)) return t;
  NN_ERROR("unknown dtype '", name, "' (expected one of f32, f64, f16, bf16, i32, i64, u8)");
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

Device::Device(const std::string& spec) {
  if (spec == "cpu") {
    type = DeviceType::cpu;
    return;
  }
  if (spec.rfind("cuda", 0) == 0) {
    type = DeviceType::cuda;
    if (spec.size() == 4) return;
    if (spec[4] == ':' && spec.size() > 5 &&
        spec.find_first_not_of("0123456789", 5) == std::string::npos && spec.size() < 10) {
      index = std::stoi(spec.substr(5));
      return;
    }
  }
  NN_ERROR("unknown device '", spec, "' (expected cpu, cuda or cuda:N)");
}

std::string Device::str() const {
  return is_cpu() ? "cpu" : "cuda:" + std::to_string(index);
}

void check_device(const Device& d) { (void)backend::get(d); }

}  // namespace nn

namespace nn {
MemoryStats memory_stats(Device device) { return backend::get(device).memory_stats(); }
void empty_cache(Device device) { backend::get(device).empty_cache(); }
void reset_peak_memory_stats(Device device) { backend::get(device).reset_peak_memory_stats(); }
void synchronize(Device device) { backend::get(device).synchronize(); }
}  // namespace nn
