// Where a tensor lives: the CPU or CUDA device N.
#pragma once
#include <cstdint>
#include <string>

namespace nn {

enum class DeviceType : uint8_t { cpu, cuda };

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;

  Device() = default;
  Device(DeviceType t, int i = 0) : type(t), index(i) {}  // NOLINT: kCUDA converts
  // "cpu", "cuda", "cuda:1"; throws nn::Error otherwise.
  explicit Device(const std::string& spec);
  Device(const char* spec) : Device(std::string(spec)) {}  // NOLINT

  bool is_cpu() const { return type == DeviceType::cpu; }
  bool is_cuda() const { return type == DeviceType::cuda; }
  std::string str() const;
  bool operator==(const Device& o) const {
    return type == o.type && (type == DeviceType::cpu || index == o.index);
  }
  bool operator!=(const Device& o) const { return !(*this == o); }
};

inline const Device kCPU{DeviceType::cpu, 0};
inline const Device kCUDA{DeviceType::cuda, 0};

// True when libnn was built with CUDA and a device is present.
bool cuda_available();
int cuda_device_count();
// Empty when cuda_available(); otherwise why not: "libnn was built without CUDA", "no CUDA
// device is present", or what the runtime reported (a driver older than the runtime libnn
// was built with, ...), which a machine with a GPU should not ignore.
std::string cuda_unavailable_reason();
// The device's model name, as torch.cuda.get_device_name gives it: the GPU's as its driver
// reports it ("NVIDIA H100 80GB HBM3"), the CPU's from /proc/cpuinfo ("cpu" where that
// cannot be read). Throws nn::Error, as check_device does, when `d` cannot be used.
std::string device_name(const Device& d);
// Throws nn::Error naming the reason when `d` cannot be used (no CUDA build, no device,
// index out of range).
void check_device(const Device& d);

// Threads the CPU backend uses (OpenMP); defaults to OMP_NUM_THREADS or all cores. Process-
// wide, as libtorch's: work on any thread uses the count from its next op on. 1 to
// kMaxThreads, else nn::Error (OpenMP cannot create tens of thousands: it aborted, or
// crashed in its first parallel region).
inline constexpr int kMaxThreads = 1024;
void set_num_threads(int n);
int num_threads();

}  // namespace nn
