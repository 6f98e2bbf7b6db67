// CUDA reduce family: reductions over (A, K, B) views and argmax, via kernels/reduce.cu.
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "core/util.h"
#include "kernels/reduce.cuh"

namespace nn::backend {
using namespace cuda;

namespace {
// x with `dims` moved last, contiguous (a copy only when needed).
Tensor move_dims_last(CudaBackend& be, const Tensor& x, const Shape& dims) {
  Shape shape, strides;
  std::vector<bool> red(x.dim(), false);
  for (int64_t d : dims) red[d] = true;
  for (int pass = 0; pass < 2; ++pass)
    for (int64_t d = 0; d < x.dim(); ++d)
      if (red[d] == bool(pass)) {
        shape.push_back(x.shape()[d]);
        strides.push_back(x.strides()[d]);
      }
  Tensor v = make_view(x, shape, strides, x.offset());
  if (v.is_contiguous()) return v;
  Tensor c = empty(shape, x.options());
  be.copy(v, c);
  return c;
}
}  // namespace

void CudaBackend::reduce(ReduceOp op, const Tensor& x, const Shape& dims, Tensor& out) {
  activate();
  const int64_t K = out.numel(), total = x.numel();
  if (K == 0) return;
  if (total == 0) {  // an empty reduced dim: sum 0, mean nan (as on the CPU)
    NN_CHECK(op == ReduceOp::sum || op == ReduceOp::mean, "max/min of an empty tensor (shape ",
             shape_str(x.shape()), ")");
    fill(out, op == ReduceOp::sum ? 0.0 : std::nan(""));
    return;
  }
  // (A, K, B) without a copy when x is contiguous and its kept dims are adjacent.
  std::vector<bool> red(x.dim(), false);
  for (int64_t d : dims) red[d] = true;
  int64_t first = -1, last = -1;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (!red[d] && x.shape()[d] != 1) {
      if (first < 0) first = d;
      last = d;
    }
  bool adjacent = true;
  for (int64_t d = first; d >= 0 && d <= last; ++d)
    if (red[d] && x.shape()[d] != 1) adjacent = false;
  Tensor src = x;
  int64_t A = 1, B = total / K;
  if (x.is_contiguous() && adjacent && K > 1) {
    A = 1;
    B = 1;
    for (int64_t d = 0; d < x.dim(); ++d) {
      if (d > last) B *= x.shape()[d];
      else if (d < first) A *= x.shape()[d];
    }
  } else if (K == 1 && x.is_contiguous()) {
    B = total;
  } else {
    src = move_dims_last(*this, x, dims);  // (K, B)
  }
  Tensor ws = scratch(kernels::reduce_workspace_bytes(x.dtype(), A, K, B));
  kernels::launch_reduce(op, x.dtype(), src.data_ptr(), A, K, B, out.data_ptr(), ws.data_ptr(),
                         stream_);
}

void CudaBackend::argmax(const Tensor& x, int64_t dim, Tensor& out) {
  activate();
  const int64_t D = x.shape()[dim];
  NN_CHECK(D > 0, "argmax over an empty dim");
  Tensor src = move_dims_last(*this, x, {dim});
  kernels::launch_argmax(x.dtype(), src.data_ptr(), out.numel(), D, ptr<int64_t>(out), stream_);
}

}  // namespace nn::backend
