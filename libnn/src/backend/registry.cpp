// Finds the backend of a device. CPU always exists; CUDA backends are created on first use
// when libnn was built with CUDA and the device is present.
#include <nn/device.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/upcast16.h"
#include "backend/profiling.h"
#include "core/util.h"

namespace nn::backend {

int64_t Backend::mark() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
double Backend::elapsed(int64_t a, int64_t b) { return double(b - a) * 1e-9; }

void Backend::copy_many(const std::vector<Tensor>& src, std::vector<Tensor>& dst) {
  NN_CHECK(src.size() == dst.size(), "copy_many: ", src.size(), " sources, ", dst.size(),
           " destinations");
  for (size_t i = 0; i < src.size(); ++i) copy(src[i], dst[i]);
}

void Backend::gemm_bias(const Tensor& a, const Tensor& b, const Tensor& bias, Tensor& out) {
  copy(make_view(bias, out.shape(), {0, 0, bias.strides()[0]}, bias.offset()), out);
  gemm(a, b, out, 1.0, 1.0);
}

void Backend::gemm_bias_grad(const Tensor& a, const Tensor& b, Tensor& out, Tensor& grad_bias) {
  gemm(a, b, out, 1.0, 0.0);
  // (a reduction writes its input's dtype: f32 sums of 16-bit rows reduce a widened copy,
  // so that they are never rounded to 16 bits)
  Tensor rows = a;
  if (a.dtype() != grad_bias.dtype()) {
    rows = empty(a.shape(), grad_bias.options());
    copy(a, rows);
  }
  Tensor sums = make_view(grad_bias, {1, a.shape()[1], 1}, {0, 1, 1}, grad_bias.offset());
  reduce(ReduceOp::sum, rows, {2}, sums);
}

void Backend::dropout_add_layer_norm_forward(const Tensor& x, const Tensor& residual, double p,
                                             uint64_t seed, uint64_t offset,
                                             const Tensor& weight, const Tensor& bias, double eps,
                                             Tensor& sum, Tensor& mask, Tensor& out, Tensor& mean,
                                             Tensor& rstd) {
  Tensor dropped = x;
  if (p > 0) {
    dropped = empty(x.shape(), x.options());
    dropout_forward(x, p, seed, offset, dropped, mask);
  }
  if (dropped.dtype() != sum.dtype()) {  // add's promotion
    Tensor wide = empty(x.shape(), sum.options());
    copy(dropped, wide);
    dropped = wide;
  }
  binary(BinaryOp::add, residual, dropped, sum);
  layer_norm_forward(sum, weight, bias, eps, out, mean, rstd);
}

void Backend::dropout_add_layer_norm_backward(const Tensor& grad, const Tensor& sum,
                                              const Tensor& weight, const Tensor& mean,
                                              const Tensor& rstd, const Tensor& mask, double p,
                                              Tensor& grad_sum, Tensor& grad_x,
                                              Tensor& grad_weight, Tensor& grad_bias) {
  layer_norm_backward(grad, sum, weight, mean, rstd, grad_sum, grad_weight, grad_bias);
  if (!grad_x.defined()) return;
  if (p == 0) return copy(grad_sum, grad_x);
  Tensor g = grad_sum;
  if (g.dtype() != grad_x.dtype()) {  // the promotion's backward
    g = empty(grad_x.shape(), grad_x.options());
    copy(grad_sum, g);
  }
  dropout_backward(g, mask, p, grad_x);
}

namespace {
// A dense tensor (row-major or channels-last) as one run of its elements in memory order.
Tensor flat(const Tensor& t) {
  NN_CHECK(t.is_contiguous() || is_channels_last(t), "batch_norm_relu: a tensor of shape ",
           shape_str(t.shape()), " is neither contiguous nor channels-last");
  return make_view(t, {t.numel()}, {1}, t.offset());
}
}  // namespace

void Backend::batch_norm_relu_forward(const Tensor& x, const Tensor& z, const Tensor& weight,
                                      const Tensor& bias, Tensor& running_mean,
                                      Tensor& running_var, bool training, double momentum,
                                      double eps, Tensor& out, Tensor& save_mean,
                                      Tensor& save_invstd, Tensor& reserve) {
  reserve = Tensor();
  batch_norm_forward(x, weight, bias, running_mean, running_var, training, momentum, eps, out,
                     save_mean, save_invstd);
  Tensor o = flat(out);
  if (z.defined()) binary(BinaryOp::add, o, flat(z), o);
  unary(UnaryOp::relu, o, o, 0, 0);
}

void Backend::batch_norm_relu_backward(const Tensor& grad, const Tensor& out, const Tensor& x,
                                       const Tensor& weight, const Tensor& /*bias*/,
                                       const Tensor& save_mean, const Tensor& save_invstd,
                                       const Tensor& /*reserve*/, bool training, double /*eps*/, Tensor& grad_x,
                                       Tensor& grad_z, Tensor& grad_weight, Tensor& grad_bias) {
  // ReLU's backward reads its input's sign, which out's shares
  Tensor g = grad_z.defined() ? grad_z : empty(x.shape(), x.options(), format_of(x));
  Tensor gf = flat(g);
  unary_backward(UnaryOp::relu, flat(grad), flat(out), flat(out), 0.0, gf);
  batch_norm_backward(g, x, weight, save_mean, save_invstd, training, grad_x, grad_weight,
                      grad_bias);
}

namespace {
struct CudaRegistry {
#ifdef LIBNN_HAVE_CUDA
  CudaFactory factory = &create_cuda_backend;
  CudaCount count = &cuda_device_count_impl;
  CudaName name = &cuda_device_name_impl;
#else
  CudaFactory factory = nullptr;
  CudaCount count = nullptr;
  CudaName name = nullptr;
#endif
  std::mutex mu;
  std::vector<Backend*> devices;  // leaked on purpose: tensors may outlive static destructors
};

std::string cpu_model_name() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos)
      return line.substr(line.find_first_not_of(" \t", line.find(':') + 1));
  return "cpu";
}
CudaRegistry& cuda_registry() {
  static auto* r = new CudaRegistry;
  return *r;
}
}  // namespace

static Backend& get_unprofiled(const Device& d);

Backend& get(const Device& d) {
  Backend& b = get_unprofiled(d);
  return profiling_enabled() ? profiled(b) : b;
}

static Backend& get_unprofiled(const Device& d) {
  if (d.is_cpu()) {
    static Backend* cpu = upcast16(new CpuBackend);
    follow_num_threads();
    return *cpu;
  }
  auto& r = cuda_registry();
  NN_CHECK(r.factory, "device ", d.str(), " asked for, but libnn was built without CUDA "
           "(reconfigure with -DLIBNN_WITH_CUDA=ON on a machine with the CUDA toolkit)");
  std::string why;
  int n = r.count(&why);
  NN_CHECK(n > 0, "device ", d.str(), " asked for, but no CUDA device is present",
           why.empty() ? "" : ": ", why);
  NN_CHECK(d.index >= 0 && d.index < n, "device ", d.str(), " asked for, but only ", n,
           " CUDA device(s) are present (cuda:0..cuda:", n - 1, ")");
  std::lock_guard<std::mutex> lock(r.mu);
  if (r.devices.empty()) r.devices.resize(n, nullptr);
  if (!r.devices[d.index]) r.devices[d.index] = r.factory(d.index);
  return *r.devices[d.index];
}

}  // namespace nn::backend

namespace nn {
int cuda_device_count() {
  auto& r = backend::cuda_registry();
  return r.count ? r.count(nullptr) : 0;
}
bool cuda_available() { return cuda_device_count() > 0; }
std::string cuda_unavailable_reason() {
  auto& r = backend::cuda_registry();
  if (!r.count) return "libnn was built without CUDA";
  std::string why;
  if (r.count(&why) > 0) return "";
  return why.empty() ? "no CUDA device is present" : why;
}

MemoryFormat preferred_memory_format(const Device& device, DType compute) {
  return backend::get(device).channels_last_native(compute) ? MemoryFormat::channels_last
                                                             : MemoryFormat::contiguous;
}

std::string device_name(const Device& d) {
  if (d.is_cpu()) {
    static const std::string cpu = backend::cpu_model_name();
    return cpu;
  }
  check_device(d);  // throws without CUDA, a device or a valid index
  return backend::cuda_registry().name(d.index);
}
}  // namespace nn
