// CPU reduce family: sum/mean/max/min over chosen dims, argmax.
#include <Eigen/Core>
#include <algorithm>
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

// x's dims in memory order (the largest stride first; size-1 dims dropped), with `red` made
// to match, when that view is contiguous and keeps the kept dims in their order (which is
// out's): a transposed or permuted tensor then reduces in place, where move_dims_last would
// copy it across the cache lines (a linear layer's bias gradient, the sum over the rows of
// a transposed (O, R) view, took 5x its product's time that way). False otherwise.
bool memory_order(const Tensor& x, std::vector<bool>& red, Tensor& view) {
  std::vector<int64_t> order;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (x.shape()[d] != 1) order.push_back(d);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return x.strides()[a] > x.strides()[b]; });
  Shape shape, strides;
  std::vector<bool> r;
  int64_t last_kept = -1;
  for (int64_t d : order) {
    if (!red[d]) {
      if (d < last_kept) return false;
      last_kept = d;
    }
    shape.push_back(x.shape()[d]);
    strides.push_back(x.strides()[d]);
    r.push_back(red[d]);
  }
  Tensor v = make_view(x, shape, strides, x.offset());
  if (!v.is_contiguous()) return false;
  view = v;
  red = r;
  return true;
}

// f16 and bf16 are summed like f32 (in double) and compared as their f32 values.
template <typename T>
constexpr bool kFloating = std::is_floating_point_v<T> || std::is_same_v<T, Half> ||
                           std::is_same_v<T, BFloat16>;
template <typename T>
using Acc = std::conditional_t<kFloating<T>, double, int64_t>;
template <typename T>
using Cmp = std::conditional_t<sizeof(T) == 2 && kFloating<T>, float, T>;

template <typename T>
inline bool better_max(T v_, T m_) {
  const Cmp<T> v = Cmp<T>(v_), m = Cmp<T>(m_);
  if constexpr (kFloating<T>) return v > m || (std::isnan(v) && !std::isnan(m));
  else return v > m;
}
template <typename T>
inline bool better_min(T v_, T m_) {
  const Cmp<T> v = Cmp<T>(v_), m = Cmp<T>(m_);
  if constexpr (kFloating<T>) return v < m || (std::isnan(v) && !std::isnan(m));
  else return v < m;
}

// Sum (in Acc) or extremum of a contiguous run of n elements.
template <typename T>
Acc<T> run_sum(const T* p, int64_t n) {
  Acc<T> acc = 0;
#pragma omp simd reduction(+ : acc)
  for (int64_t i = 0; i < n; ++i) acc += Acc<T>(p[i]);
  return acc;
}
template <typename T>
T run_extremum(bool max_, const T* p, int64_t n, T m) {
  if (max_) {
    for (int64_t i = 0; i < n; ++i) if (better_max(p[i], m)) m = p[i];
  } else {
    for (int64_t i = 0; i < n; ++i) if (better_min(p[i], m)) m = p[i];
  }
  return m;
}

// x contiguous, seen as (A, K, B): reduce over A and B, keep K. Threads split K when it is
// large, else A (with per-thread partials combined at the end).
template <typename T>
void reduce_akb(ReduceOp op, const T* x, int64_t A, int64_t K, int64_t B, T* out) {
  const bool sum_like = op == ReduceOp::sum || op == ReduceOp::mean;
  const bool max_ = op == ReduceOp::max;
  const double count = double(A) * double(B);
  const int nt = parallel_slots();
  auto finish = [&](int64_t k, Acc<T> acc) {
    out[k] = op == ReduceOp::mean ? T(double(acc) / count) : T(acc);
  };
  // partial reduction of rows [a0, a1) for outputs [k0, k1)
  auto block = [&](int64_t a0, int64_t a1, int64_t k0, int64_t k1, Acc<T>* acc, T* ext) {
    for (int64_t a = a0; a < a1; ++a) {
      const T* row = x + (a * K + k0) * B;
      if (B == 1) {
        if (sum_like) {
#pragma omp simd
          for (int64_t k = 0; k < k1 - k0; ++k) acc[k] += Acc<T>(row[k]);
        } else {
          for (int64_t k = 0; k < k1 - k0; ++k) ext[k] = run_extremum(max_, row + k, 1, ext[k]);
        }
      } else {
        for (int64_t k = 0; k < k1 - k0; ++k) {
          if (sum_like) acc[k] += run_sum(row + k * B, B);
          else ext[k] = run_extremum(max_, row + k * B, B, ext[k]);
        }
      }
    }
  };
  auto init_ext = [&](int64_t k) { return x[k * B]; };  // element (0, k, 0) seeds max/min
  if constexpr (kFloating<T>) {
    // The column sums of an (A, K) matrix with rows enough to share out (fewer rows: the
    // columns are split over threads below)
    if (sum_like && B == 1 && A >= 4 * nt) {
      std::vector<double> part(size_t(row_block_slots(A, K) * K), 0.0);
      const int64_t slots = for_row_blocks(A, K, [&](int64_t t, int64_t r0, int64_t r1) {
        add_row_sums(r0, r1, K, [&](int64_t r, int64_t k) { return double(x[r * K + k]); },
                     part.data() + t * K);
      });
      for (int64_t k = 0; k < K; ++k) {
        double s = 0;
        for (int64_t t = 0; t < slots; ++t) s += part[t * K + k];
        finish(k, s);
      }
      return;
    }
  }
  if (K >= 4 * nt || A * K * B < kGrain) {
    parallel_for(0, K, std::max<int64_t>(1, kGrain / std::max<int64_t>(1, A * B)), [&](int64_t k0, int64_t k1) {
      std::vector<Acc<T>> acc(k1 - k0, 0);
      std::vector<T> ext(k1 - k0);
      for (int64_t k = k0; k < k1; ++k) ext[k - k0] = init_ext(k);
      block(0, A, k0, k1, acc.data(), ext.data());
      for (int64_t k = k0; k < k1; ++k)
        if (sum_like) finish(k, acc[k - k0]);
        else out[k] = ext[k - k0];
    });
    return;
  }
  std::vector<std::vector<Acc<T>>> acc(nt, std::vector<Acc<T>>(K, 0));
  std::vector<std::vector<T>> ext(nt, std::vector<T>(K));
  for (auto& e : ext) for (int64_t k = 0; k < K; ++k) e[k] = init_ext(k);
  if (A >= nt) {
    parallel_for_slots(0, A, 1, [&](int t, int64_t a0, int64_t a1) {
      block(a0, a1, 0, K, acc[t].data(), ext[t].data());
    });
  } else {
    // Few, long rows (e.g. a full reduction of a vector): split B.
    for (int64_t a = 0; a < A; ++a)
      for (int64_t k = 0; k < K; ++k) {
        const T* row = x + (a * K + k) * B;
        parallel_for_slots(0, B, kGrain, [&](int t, int64_t b0, int64_t b1) {
          if (sum_like) acc[t][k] += run_sum(row + b0, b1 - b0);
          else ext[t][k] = run_extremum(max_, row + b0, b1 - b0, ext[t][k]);
        });
      }
  }
  for (int64_t k = 0; k < K; ++k) {
    if (sum_like) {
      Acc<T> s = 0;
      for (int t = 0; t < nt; ++t) s += acc[t][k];
      finish(k, s);
    } else {
      T m = ext[0][k];
      for (int t = 1; t < nt; ++t) m = run_extremum(max_, &ext[t][k], 1, m);
      out[k] = m;
    }
  }
}
}  // namespace

void CpuBackend::reduce(ReduceOp op, const Tensor& x, const Shape& dims, Tensor& out) {
  auto typed = [&]<typename T>() {
    const int64_t K = out.numel();
    const int64_t total = x.numel();
    T* po = out.data<T>();
    if (total == 0 || K == 0) {  // reducing an empty dim: sum 0, mean nan
      NN_CHECK(op == ReduceOp::sum || op == ReduceOp::mean || K == 0,
               "max/min of an empty tensor (shape ", shape_str(x.shape()), ")");
      T v = op == ReduceOp::sum ? T(0) : T(std::numeric_limits<double>::quiet_NaN());
      for (int64_t i = 0; i < K; ++i) po[i] = v;
      return;
    }
    // Without a copy when x (or x in its memory order) is contiguous and its kept dims are
    // adjacent: (A, K, B).
    std::vector<bool> red(x.dim(), false);
    for (int64_t d : dims) red[d] = true;
    Tensor xm = x;
    if (!x.is_contiguous()) memory_order(x, red, xm);  // (leaves both as they are if not)
    int64_t first_kept = -1, last_kept = -1;
    for (int64_t d = 0; d < xm.dim(); ++d)
      if (!red[d] && xm.shape()[d] != 1) {
        if (first_kept < 0) first_kept = d;
        last_kept = d;
      }
    bool adjacent = true;
    for (int64_t d = first_kept; d >= 0 && d <= last_kept; ++d)
      if (red[d] && xm.shape()[d] != 1) adjacent = false;
    if (xm.is_contiguous() && adjacent) {
      int64_t A = 1, B = 1;
      for (int64_t d = 0; d < xm.dim(); ++d) {
        if (first_kept >= 0 && d > last_kept) B *= xm.shape()[d];
        else if (first_kept < 0 || d < first_kept) A *= xm.shape()[d];
      }
      if (K == 1) { A = 1; B = total; }  // one output: a single contiguous run
      reduce_akb<T>(op, static_cast<const T*>(xm.data_ptr()), A, K, B, po);
      return;
    }
    Tensor xc = move_dims_last(*this, x, dims);  // (K, B)
    reduce_akb<T>(op, static_cast<const T*>(xc.data_ptr()), 1, K, total / K, po);
  };
  // f16 and bf16 in one pass (CpuBackend::native16): their sums in double, like f32's
  if (!dispatch16(x.dtype(), typed)) dispatch_numeric(x.dtype(), "reduce", typed);
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
        if constexpr (std::is_floating_point_v<T>) {
          // The first maximum, or the first NaN if there is one (better_max's rule), found
          // with a vectorised maximum and then a search for its first occurrence.
          const T m = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>(row, n)
                          .template maxCoeff<Eigen::PropagateNaN>();
          const T* at = std::isnan(m) ? std::find_if(row, row + n, [](T v) { return std::isnan(v); })
                                      : std::find(row, row + n, m);
          po[o] = at - row;
          continue;
        }
        int64_t best = 0;
        for (int64_t i = 1; i < n; ++i) if (better_max(row[i], row[best])) best = i;
        po[o] = best;
      }
    });
  });
}

}  // namespace nn::backend
