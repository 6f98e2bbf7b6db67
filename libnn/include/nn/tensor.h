// nn::Tensor: a shared handle to (storage, shape, strides, offset, dtype) plus autograd state.
// Views (reshape, transpose, slice, expand, ...) share storage and cost no copy.
#pragma once
#include <nn/device.h>
#include <nn/dtype.h>
#include <nn/error.h>

#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <ostream>
#include <string>
#include <type_traits>
#include <vector>

namespace nn {

using Shape = std::vector<int64_t>;
class Node;
class Generator;
struct TensorImpl;

// A block of memory on one device, shared by a tensor and all its views. Memory comes from
// the device's caching allocator and goes back to it when the last user lets go.
class Storage {
 public:
  Storage(size_t nbytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  // How many in-place writes the memory has had. Backward checks that what a node saved was
  // not changed after the forward pass (see record() in autograd.h).
  uint64_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }

 private:
  void* data_ = nullptr;
  std::atomic<uint64_t> version_{0};
  size_t nbytes_ = 0;
  Device device_;
};

struct TensorOptions {
  DType dtype_ = DType::f32;
  Device device_{};
  bool requires_grad_ = false;

  TensorOptions() = default;
  TensorOptions(DType d) : dtype_(d) {}            // NOLINT: zeros({2}, kF64)
  TensorOptions(Device d) : device_(d) {}          // NOLINT: zeros({2}, kCUDA)
  TensorOptions(const char* d) : device_(d) {}     // NOLINT: zeros({2}, "cuda:1")
  TensorOptions dtype(DType d) const { auto o = *this; o.dtype_ = d; return o; }
  TensorOptions device(Device d) const { auto o = *this; o.device_ = d; return o; }
  TensorOptions requires_grad(bool r = true) const { auto o = *this; o.requires_grad_ = r; return o; }
};

// How a 4-d (N, C, H, W) tensor lies in memory. channels_last keeps the shape and indexing
// (N, C, H, W) but stores NHWC, which tensor-core convolutions want (as in libtorch).
// Elementwise ops, conv2d, batch_norm and the pools give channels-last outputs for
// channels-last inputs, so converting a network's input once is enough.
enum class MemoryFormat { contiguous, channels_last };
// The format whose convolutions, pools and batch norms `device` computes `compute` in
// natively: channels_last on CUDA (every floating type but f64) and on the CPU (every floating
// type), contiguous elsewhere. A model fed the other format gets its results all the same,
// through copies. This is what the apps' and benchmarks' --layout auto picks; on the CPU,
// channels-last f32 and bf16 run the tile kernels of the NHWC convolutions
// (docs/architecture.md).
MemoryFormat preferred_memory_format(const Device& device, DType compute);

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool is_same(const Tensor& o) const { return impl_ == o.impl_; }

  // ---- metadata -------------------------------------------------------------------------
  const Shape& shape() const;
  const Shape& strides() const;
  int64_t offset() const;
  int64_t dim() const { return int64_t(shape().size()); }
  int64_t size(int64_t d) const;    // negative d counts from the end
  int64_t stride(int64_t d) const;
  int64_t numel() const;
  DType dtype() const;
  Device device() const;
  TensorOptions options() const { return TensorOptions(dtype()).device(device()); }
  bool is_contiguous() const;
  bool is_contiguous(MemoryFormat f) const;  // channels_last: 4-d with NHWC-packed strides
  size_t nbytes() const { return size_t(numel()) * element_size(dtype()); }
  const std::shared_ptr<Storage>& storage() const;

  // Pointer to the first element (offset applied). Host-readable only for CPU tensors.
  void* data_ptr() const;
  template <typename T>
  T* data() const {
    NN_CHECK(dtype() == dtype_of<T>(), "data<T>(): tensor is ", dtype_name(dtype()),
             ", asked for ", dtype_name(dtype_of<T>()));
    return static_cast<T*>(data_ptr());
  }

  // ---- conversion and copies ------------------------------------------------------------
  Tensor to(Device d) const;     // differentiable; a no-op view when already there
  Tensor to(DType t) const;      // differentiable between floating types
  Tensor to(const char* d) const { return to(Device(d)); }
  Tensor cpu() const { return to(kCPU); }
  Tensor contiguous() const;     // differentiable; returns *this when already contiguous
  Tensor contiguous(MemoryFormat f) const;  // differentiable; channels_last needs 4-d
  Tensor clone() const;          // differentiable; always a fresh contiguous copy
  double item() const;           // one element, as double (reads back from the device)
  // One element as T; i64 and i32 read exactly (not through double, which has 53 bits), and
  // a value T cannot hold (or a NaN) throws, as libtorch's item<T>() does.
  template <typename T> T item() const {
    if constexpr (std::is_same_v<T, int64_t> || std::is_same_v<T, int32_t>) {
      NN_CHECK(numel() == 1, "item(): tensor has ", numel(), " elements, expected exactly one");
      constexpr bool i32 = std::is_same_v<T, int32_t>;
      if (is_floating(dtype())) {
        const double d = item();  // (i64's range: [-2^63, 2^63))
        NN_CHECK(d >= (i32 ? -2147483648.0 : -9223372036854775808.0) &&
                     d < (i32 ? 2147483648.0 : 9223372036854775808.0),
                 "item(): ", d, " does not fit ", i32 ? "int32_t" : "int64_t");
      }
      const int64_t v = to_vector<int64_t>()[0];
      NN_CHECK(!i32 || (v >= INT32_MIN && v <= INT32_MAX), "item(): ", v, " does not fit int32_t");
      return T(v);
    } else {
      return static_cast<T>(item());
    }
  }
  // All elements in row-major order, converted to T.
  template <typename T> std::vector<T> to_vector() const;

  // ---- views (differentiable, share storage) ----------------------------------------------
  Tensor view(const Shape& shape) const;      // needs compatible strides; -1 infers one dim
  Tensor reshape(const Shape& shape) const;   // a view when possible, else a copy
  Tensor flatten(int64_t start = 0, int64_t end = -1) const;
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor t() const;  // transpose(0, 1) of a 2-d tensor; a 0-d or 1-d tensor itself
  Tensor permute(const Shape& dims) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor expand(const Shape& shape) const;    // broadcast: size-1 dims get stride 0

  // ---- math shorthands (see nn/ops.h for the full list) ----------------------------------
  Tensor sum(const Shape& dims = {}, bool keepdim = false) const;
  Tensor mean(const Shape& dims = {}, bool keepdim = false) const;
  Tensor amax(const Shape& dims = {}, bool keepdim = false) const;
  Tensor argmax(int64_t dim, bool keepdim = false) const;
  Tensor var(const Shape& dims = {}, int64_t correction = 1, bool keepdim = false) const;
  Tensor exp() const;
  Tensor log() const;
  Tensor sqrt() const;
  Tensor abs() const;
  Tensor relu() const;
  Tensor tanh() const;
  Tensor sigmoid() const;
  Tensor pow(double exponent) const;
  Tensor matmul(const Tensor& other) const;

  // ---- in-place (never recorded by autograd) ---------------------------------------------
  // Refused on a tensor that requires grad while grad mode is on; use NoGradGuard (as the
  // optimizers and initialisers do). Refused too, except fill_/zero_, on a view that holds one
  // element under several indices (expand). A source sharing memory with the target (a
  // shifted slice, a transpose) is read whole before anything is written.
  Tensor& zero_();
  Tensor& fill_(double value);
  Tensor& copy_(const Tensor& src);                   // src broadcast to this shape; casts
  Tensor& add_(const Tensor& other, double alpha = 1.0);
  Tensor& add_(double value);
  Tensor& mul_(double value);
  Tensor& uniform_(double low, double high, Generator* gen = nullptr);
  Tensor& normal_(double mean, double std, Generator* gen = nullptr);

  // ---- autograd ---------------------------------------------------------------------------
  bool requires_grad() const;
  Tensor& requires_grad_(bool on = true);  // only on leaves
  const Tensor& grad() const;              // undefined until a backward pass reaches it
  void set_grad(const Tensor& g);
  const std::shared_ptr<Node>& grad_fn() const;
  bool is_leaf() const { return !grad_fn(); }
  // Back-propagates from this tensor. A scalar needs no `grad`; otherwise pass d(out)/d(this).
  void backward(const Tensor& grad = {}, bool retain_graph = false) const;
  Tensor detach() const;                   // same storage, no history

  // Swap in another tensor's data (storage, shape, dtype, device), keeping this handle and
  // its autograd flags: how Module::to() moves parameters other code already holds.
  void set_data(const Tensor& other);

  std::string str() const;

 private:
  std::shared_ptr<TensorImpl> impl_;
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  Shape strides;  // in elements
  int64_t offset = 0;
  DType dtype = DType::f32;
  bool requires_grad = false;
  Tensor grad;
  std::shared_ptr<Node> grad_fn;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);
std::ostream& operator<<(std::ostream& os, DType t);  // "f32"
std::ostream& operator<<(std::ostream& os, const Device& d);  // "cuda:0"

// ---- factories ------------------------------------------------------------------------------
Tensor empty(const Shape& shape, TensorOptions opts = {});
Tensor empty(const Shape& shape, TensorOptions opts, MemoryFormat f);  // channels_last: 4-d
Tensor zeros(const Shape& shape, TensorOptions opts = {});
Tensor ones(const Shape& shape, TensorOptions opts = {});
Tensor full(const Shape& shape, double value, TensorOptions opts = {});
Tensor arange(int64_t end, TensorOptions opts = {});
Tensor arange(double start, double end, double step, TensorOptions opts = {});
Tensor rand(const Shape& shape, TensorOptions opts = {}, Generator* gen = nullptr);   // U[0,1)
Tensor randn(const Shape& shape, TensorOptions opts = {}, Generator* gen = nullptr);  // N(0,1)
Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions opts = kI64,
               Generator* gen = nullptr);  // [low, high)
Tensor empty_like(const Tensor& t);
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
// Values converted to opts.dtype, laid out row-major in `shape`.
Tensor tensor(const std::vector<double>& values, const Shape& shape, TensorOptions opts = {});
Tensor tensor(std::initializer_list<double> values, TensorOptions opts = {});
// Copies `shape`'s worth of elements of `dtype` from host memory.
Tensor from_blob(const void* data, const Shape& shape, DType dtype, Device device = kCPU);
template <typename T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape, Device device = kCPU) {
  int64_t n = 1;
  for (int64_t s : shape)
    NN_CHECK(s >= 0 && !__builtin_mul_overflow(n, s, &n), "from_vector: shape ",
             shape_str(shape), " has a negative dimension or too many elements");
  NN_CHECK(n == int64_t(values.size()), "from_vector: shape ", shape_str(shape), " holds ", n,
           " elements, got ", values.size());
  return from_blob(values.data(), shape, dtype_of<T>(), device);
}

}  // namespace nn
