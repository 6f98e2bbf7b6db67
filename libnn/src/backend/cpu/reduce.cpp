// CPU reduce family: sum/mean/max/min over chosen dims, argmax.
#include <cmath>
#include <limits>
#include <type_traits>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/parallel.h"
#include "core/util.h"

namespace nn::backend {
using namespace nn::cpu;

namespace {
// x with `dims` moved last, made contiguous (a copy only when the strides need it).
Tensor move_dims_last(CpuBackend& be, const Tensor& x, const Shape& dims) {
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

template <typename T>
using Acc = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;

template <typename T>
inline bool better_max(T v, T m) {
  if constexpr (std::is_floating_point_v<T>) return v > m || (std::isnan(v) && !std::isnan(m));
  else return v > m;
}
template <typename T>
inline bool better_min(T v, T m) {
  if constexpr (std::is_floating_point_v<T>) return v < m || (std::isnan(v) && !std::isnan(m));
  else return v < m;
}

template <typename T>
T reduce_row(ReduceOp op, const T* p, int64_t n) {
  if (op == ReduceOp::sum || op == ReduceOp::mean) {
    Acc<T> acc = 0;
#pragma omp simd reduction(+ : acc)
    for (int64_t i = 0; i < n; ++i) acc += Acc<T>(p[i]);
    return op == ReduceOp::mean ? T(double(acc) / double(n)) : T(acc);
  }
  T m = p[0];
  if (op == ReduceOp::max) {
    for (int64_t i = 1; i < n; ++i) if (better_max(p[i], m)) m = p[i];
  } else {
    for (int64_t i = 1; i < n; ++i) if (better_min(p[i], m)) m = p[i];
  }
  return m;
}
}  // namespace

void CpuBackend::reduce(ReduceOp op, const Tensor& x, const Shape& dims, Tensor& out) {
  dispatch_numeric(x.dtype(), "reduce", [&]<typename T>() {
    const int64_t outer = out.numel();
    const int64_t inner = outer == 0 ? 0 : x.numel() / outer;
    T* po = out.data<T>();
    if (inner == 0) {  // reducing an empty dim: sum 0, mean nan, max/min undefined
      NN_CHECK(op == ReduceOp::sum || op == ReduceOp::mean,
               "max/min of an empty tensor (shape ", shape_str(x.shape()), ")");
      T v = op == ReduceOp::sum ? T(0) : T(std::numeric_limits<double>::quiet_NaN());
      for (int64_t i = 0; i < outer; ++i) po[i] = v;
      return;
    }
    // Leading dims reduced on a contiguous tensor: sum columns without a transpose.
    bool leading = x.is_contiguous() && (op == ReduceOp::sum || op == ReduceOp::mean);
    for (size_t i = 0; i < dims.size() && leading; ++i) leading = dims[i] == int64_t(i);
    if (leading) {
      const T* px = static_cast<const T*>(x.data_ptr());
      parallel_for(0, outer, std::max<int64_t>(16, kGrain / inner), [&](int64_t b, int64_t e) {
        std::vector<Acc<T>> acc(e - b, 0);
        for (int64_t r = 0; r < inner; ++r) {
          const T* row = px + r * outer;
          for (int64_t k = b; k < e; ++k) acc[k - b] += Acc<T>(row[k]);
        }
        for (int64_t k = b; k < e; ++k)
          po[k] = op == ReduceOp::mean ? T(double(acc[k - b]) / double(inner)) : T(acc[k - b]);
      });
      return;
    }
    Tensor xc = move_dims_last(*this, x, dims);
    const T* px = static_cast<const T*>(xc.data_ptr());
    if (outer >= omp_get_max_threads() || inner < kGrain) {
      parallel_for(0, outer, std::max<int64_t>(1, kGrain / inner), [&](int64_t b, int64_t e) {
        for (int64_t o = b; o < e; ++o) po[o] = reduce_row(op, px + o * inner, inner);
      });
      return;
    }
    // Few long rows: split each row across threads, then combine the partials.
    for (int64_t o = 0; o < outer; ++o) {
      const T* row = px + o * inner;
      int nt = omp_get_max_threads();
      std::vector<T> part(nt);
      std::vector<int64_t> cnt(nt, 0);
      parallel_for(0, inner, kGrain, [&](int64_t b, int64_t e) {
        int t = omp_get_thread_num();
        ReduceOp sub = op == ReduceOp::mean ? ReduceOp::sum : op;
        part[t] = reduce_row(sub, row + b, e - b);
        cnt[t] = e - b;
      });
      std::vector<T> live;
      for (int t = 0; t < nt; ++t) if (cnt[t]) live.push_back(part[t]);
      ReduceOp comb = op == ReduceOp::mean ? ReduceOp::sum : op;
      T r = reduce_row(comb, live.data(), int64_t(live.size()));
      po[o] = op == ReduceOp::mean ? T(double(r) / double(inner)) : r;
    }
  });
}

void CpuBackend::argmax(const Tensor& x, int64_t dim, Tensor& out) {
  dispatch_numeric(x.dtype(), "argmax", [&]<typename T>() {
    Tensor xc = move_dims_last(*this, x, {dim});
    const int64_t n = x.shape()[dim], outer = out.numel();
    NN_CHECK(n > 0, "argmax over an empty dim");
    const T* px = static_cast<const T*>(xc.data_ptr());
    int64_t* po = out.data<int64_t>();
    parallel_for(0, outer, std::max<int64_t>(1, kGrain / n), [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) {
        const T* row = px + o * n;
        int64_t best = 0;
        for (int64_t i = 1; i < n; ++i) if (better_max(row[i], row[best])) best = i;
        po[o] = best;
      }
    });
  });
}

}  // namespace nn::backend
