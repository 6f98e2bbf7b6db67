// Dropout: Philox-drawn masks, four elements a draw, and the backward through a saved mask.
#include "kernels/dropout.cuh"

#include "kernels/common.cuh"
#include "kernels/philox.h"

namespace nn::kernels {
namespace {

// ---- dropout ---------------------------------------------------------------------------------
// Four elements per thread (one Philox draw); with Vec, aligned quads move as one vector load
// and store and the four mask bytes as one 32-bit store.
template <typename T, bool Vec>
__global__ void dropout_kernel(const T* x, T* y, uint8_t* mask, int64_t n, float p, acc_t<T> scale,
                               uint64_t seed, uint64_t offset) {
  using A = acc_t<T>;
  const int64_t blocks = (n + 3) / 4, stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t blk = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; blk < blocks; blk += stride) {
    float u[4];
    rng::uniform4(seed, offset + uint64_t(blk), u);
    if (Vec && blk * 4 + 4 <= n) {
      const Quad<T> xv = *reinterpret_cast<const Quad<T>*>(x + blk * 4);
      Quad<T> yv;
      uint32_t bits = 0;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const bool keep = u[k] >= p;
        bits |= uint32_t(keep) << (8 * k);  // byte k of the little-endian word
        yv.v[k] = convert<T>(keep ? A(load(xv.v[k])) * A(scale) : A(0));
      }
      *reinterpret_cast<Quad<T>*>(y + blk * 4) = yv;
      *reinterpret_cast<uint32_t*>(mask + blk * 4) = bits;
      continue;
    }
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      int64_t i = blk * 4 + k;
      if (i >= n) break;
      bool keep = u[k] >= p;
      mask[i] = keep;
      y[i] = convert<T>(keep ? A(load(x[i])) * A(scale) : A(0));
    }
  }
}
template <typename T, bool Vec>
__global__ void dropout_backward_kernel(const T* g, const uint8_t* mask, T* gx, int64_t n,
                                        acc_t<T> scale) {
  using A = acc_t<T>;
  const int64_t blocks = (n + 3) / 4, stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t blk = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; blk < blocks; blk += stride) {
    if (Vec && blk * 4 + 4 <= n) {
      const Quad<T> gv = *reinterpret_cast<const Quad<T>*>(g + blk * 4);
      const uint32_t bits = *reinterpret_cast<const uint32_t*>(mask + blk * 4);
      Quad<T> out;
#pragma unroll
      for (int k = 0; k < 4; ++k)
        out.v[k] = convert<T>(((bits >> (8 * k)) & 0xffu) ? A(load(gv.v[k])) * A(scale) : A(0));
      *reinterpret_cast<Quad<T>*>(gx + blk * 4) = out;
      continue;
    }
    for (int64_t i = blk * 4; i < n && i < blk * 4 + 4; ++i)
      gx[i] = convert<T>(mask[i] ? A(load(g[i])) * A(scale) : A(0));
  }
}

}  // namespace

void launch_dropout(DType t, const void* x, void* y, uint8_t* mask, int64_t n, double p,
                    uint64_t seed, uint64_t offset, cudaStream_t s) {
  if (n == 0) return;
  dispatch_float(t, "dropout", [&]<typename T>() {
    const bool vec = aligned_to(x, 4 * sizeof(T)) && aligned_to(y, 4 * sizeof(T)) && aligned_to(mask, 4);
    auto kernel = vec ? dropout_kernel<T, true> : dropout_kernel<T, false>;
    kernel<<<grid_for(ceil_div(n, 4)), kThreads, 0, s>>>(static_cast<const T*>(x),
                                                           static_cast<T*>(y), mask, n, float(p),
                                                           acc_t<T>(1.0 / (1.0 - p)), seed, offset);
    NN_CUDA_CHECK_LAUNCH();
  });
}

void launch_dropout_backward(DType t, const void* grad, const uint8_t* mask, void* grad_x,
                             int64_t n, double p, cudaStream_t s) {
  if (n == 0) return;
  dispatch_float(t, "dropout_backward", [&]<typename T>() {
    const bool vec = aligned_to(grad, 4 * sizeof(T)) && aligned_to(grad_x, 4 * sizeof(T)) &&
                     aligned_to(mask, 4);
    auto kernel = vec ? dropout_backward_kernel<T, true> : dropout_backward_kernel<T, false>;
    kernel<<<grid_for(ceil_div(n, 4)), kThreads, 0, s>>>(static_cast<const T*>(grad), mask,
                                                           static_cast<T*>(grad_x), n,
                                                           acc_t<T>(1.0 / (1.0 - p)));
    NN_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace nn::kernels
