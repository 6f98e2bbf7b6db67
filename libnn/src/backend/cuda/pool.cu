// CUDA pool family. Our own kernels rather than cuDNN's: the max-pool backward reads the saved
// argmax (one index per output) instead of re-reading every window, and each input element
// gathers its gradient from the outputs whose window holds it, so there are no atomics and
// results are deterministic.
#include "backend/cuda/cuda_backend.h"
#include "core/util.h"
#include "kernels/pool.cuh"

namespace nn::backend {
using namespace cuda;

namespace {
// x is the input-sized tensor, y the output-sized one (the backend's layout rule: x decides).
kernels::PoolGeom pool_geom(const Tensor& x, const Tensor& y, const Pool2dParams& p) {
  kernels::PoolGeom g{};
  g.planes = x.shape()[0] * x.shape()[1];
  g.C = x.shape()[1];
  g.nhwc = is_channels_last(x);  // then out (and indices) are NHWC too
  g.H = x.shape()[2];
  g.W = x.shape()[3];
  g.OH = y.shape()[2];
  g.OW = y.shape()[3];
  g.kh = int(p.kernel[0]);
  g.kw = int(p.kernel[1]);
  g.sh = int(p.stride[0]);
  g.sw = int(p.stride[1]);
  g.ph = int(p.padding[0]);
  g.pw = int(p.padding[1]);
  g.dh = int(p.dilation[0]);
  g.dw = int(p.dilation[1]);
  g.count_include_pad = p.count_include_pad;
  return g;
}
}  // namespace

void CudaBackend::max_pool2d_forward(const Tensor& x, Tensor& out, Tensor& indices,
                                     const Pool2dParams& p) {
  activate();
  kernels::launch_max_pool(x.dtype(), x.data_ptr(), out.data_ptr(), ptr<int64_t>(indices),
                           pool_geom(x, out, p), stream_);
}

void CudaBackend::max_pool2d_backward(const Tensor& grad_out, const Tensor& indices,
                                      Tensor& grad_x, const Pool2dParams& p) {
  activate();
  kernels::launch_max_pool_backward(grad_out.dtype(), grad_out.data_ptr(), ptr<int64_t>(indices),
                                    grad_x.data_ptr(), pool_geom(grad_x, grad_out, p), stream_);
}

void CudaBackend::avg_pool2d_forward(const Tensor& x, Tensor& out, const Pool2dParams& p) {
  activate();
  kernels::launch_avg_pool(x.dtype(), x.data_ptr(), out.data_ptr(), pool_geom(x, out, p), stream_);
}

void CudaBackend::avg_pool2d_backward(const Tensor& grad_out, Tensor& grad_x,
                                      const Pool2dParams& p) {
  activate();
  kernels::launch_avg_pool_backward(grad_out.dtype(), grad_out.data_ptr(), grad_x.data_ptr(),
                                    pool_geom(grad_x, grad_out, p), stream_);
}

void CudaBackend::adaptive_avg_pool2d_forward(const Tensor& x, Tensor& out) {
  activate();
  kernels::launch_adaptive_avg_pool(x.dtype(), x.data_ptr(), out.data_ptr(),
                                    pool_geom(x, out, Pool2dParams{}), stream_);
}

void CudaBackend::adaptive_avg_pool2d_backward(const Tensor& grad_out, Tensor& grad_x) {
  activate();
  kernels::launch_adaptive_avg_pool_backward(grad_out.dtype(), grad_out.data_ptr(),
                                             grad_x.data_ptr(),
                                             pool_geom(grad_x, grad_out, Pool2dParams{}), stream_);
}

}  // namespace nn::backend
