// OpenMP loops and dtype dispatch for the CPU backend (internal).
#pragma once
#include <omp.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include <nn/tensor.h>

#include "core/first_error.h"
#include "core/geometry.h"

namespace nn::cpu {

// Work below this many elements runs on the calling thread.
inline constexpr int64_t kGrain = 32768;

// The grain of a loop whose items each do `work` (elements, multiply-adds): items enough to
// make kGrain, at least one.
inline int64_t grain_for(double work) {
  return std::max<int64_t>(1, int64_t(double(kGrain) / std::max(work, 1.0)));
}

// The result slots a parallel_for_slots loop may use: one per thread of libnn's team, one
// when the loop runs inline inside a parallel region.
inline int parallel_slots() { return omp_in_parallel() ? 1 : omp_get_max_threads(); }

// Splits [begin, end) into one contiguous chunk per thread and calls f(slot, b, e) for each,
// slot (< parallel_slots()) being the chunk's thread in libnn's own team: per-thread partial
// results are indexed by it, never by omp_get_thread_num(), which inside a caller's parallel
// region is the caller's thread number and may exceed the slots. Runs inline (slot 0) when
// the range is small, when already inside a parallel region, or with one thread. An
// exception thrown by f on any thread reaches the caller (the first one, after all threads
// have finished).
template <typename F>
void parallel_for_slots(int64_t begin, int64_t end, int64_t grain, F&& f) {
  int64_t n = end - begin;
  if (n <= 0) return;
  int max_t = omp_get_max_threads();
  if (n <= grain || max_t == 1 || omp_in_parallel()) {
    f(0, begin, end);
    return;
  }
  int64_t nt = std::min<int64_t>(max_t, (n + grain - 1) / grain);
  FirstError error;
#pragma omp parallel num_threads(int(nt))
  {
    // (the team may be smaller than asked for: OMP_DYNAMIC, OMP_THREAD_LIMIT)
    int64_t t = omp_get_thread_num(), T = omp_get_num_threads();
    int64_t chunk = (n + T - 1) / T;
    int64_t b = begin + t * chunk, e = std::min(end, b + chunk);
    if (b < e) error.run([&] { f(int(t), b, e); });
  }
  error.rethrow();
}

// parallel_for_slots for loops without per-thread results: f(b, e).
template <typename F>
void parallel_for(int64_t begin, int64_t end, int64_t grain, F&& f) {
  parallel_for_slots(begin, end, grain, [&](int, int64_t b, int64_t e) { f(b, e); });
}

// ---- per-column sums of a row-major (R, C) matrix --------------------------------------------
// (batch norm's channel statistics on channels-last data, bias gradients.) Rows are taken in
// blocks of about 128 KB, so a block read twice comes from L2 the second time; each thread
// takes one contiguous run of blocks and the caller combines their results in slot order, so
// the sums do not depend on timing.

// Rows a block: about 128 KB, and at least 16 (a block of one wide row would pay the register
// tiles' set-up for each of its values).
inline int64_t row_block_rows(int64_t C) { return std::max<int64_t>(16, 32768 / std::max<int64_t>(1, C)); }
// The result slots for_row_blocks(R, C, ...) uses: one per thread, at most one per block.
inline int64_t row_block_slots(int64_t R, int64_t C) {
  const int64_t blocks = (R + row_block_rows(C) - 1) / row_block_rows(C);
  if (omp_in_parallel() || blocks <= 1) return 1;
  return std::clamp<int64_t>(std::min(R * C / kGrain, blocks), 1, omp_get_max_threads());
}

// Calls f(slot, r0, r1) for row blocks [r0, r1); slot (< row_block_slots(R, C)) is the
// caller's result slot, one per thread, in row order. Returns the number of slots used.
// Exceptions from f reach the caller, as with parallel_for.
template <typename F>
int64_t for_row_blocks(int64_t R, int64_t C, F&& f) {
  const int64_t block = row_block_rows(C);
  const int64_t blocks = (R + block - 1) / block;
  const int64_t slots = row_block_slots(R, C);
  const int64_t per = (blocks + slots - 1) / slots;
  FirstError error;
#pragma omp parallel for num_threads(int(slots)) schedule(static) if (slots > 1)
  for (int64_t t = 0; t < slots; ++t)
    error.run([&] {
      for (int64_t b = t * per; b < std::min(blocks, (t + 1) * per); ++b)
        f(t, b * block, std::min(R, (b + 1) * block));
    });
  error.rethrow();
  return slots;
}

// s[c] += the sum over rows [r0, r1) of term(r, c), for c in [0, C), and s2[c] of term2's in
// the same sweep when given: 16 columns at a time, whose sums (two sets, for two rows at a
// time) stay in registers; a sums array updated row by row costs a store-to-load round trip
// a row. The register sums have the terms' type (float terms: twice the lanes a vector) and
// are added into s, in double, every 256 rows at most.
template <typename F, typename F2 = std::nullptr_t>
void add_row_sums(int64_t r0, int64_t r1, int64_t C, F&& term, double* s, F2&& term2 = nullptr,
                  double* s2 = nullptr) {
  constexpr bool two = !std::is_same_v<std::decay_t<F2>, std::nullptr_t>;
  using A = decltype(term(r0, int64_t(0)));
  constexpr int64_t W = 16, kRun = 256;
  int64_t c0 = 0;
  for (; c0 + W <= C; c0 += W) {
    for (int64_t q0 = r0; q0 < r1; q0 += kRun) {
      const int64_t q1 = std::min(r1, q0 + kRun);
      A a[W] = {}, b[W] = {}, a2[W] = {}, b2[W] = {};
      int64_t r = q0;
      for (; r + 2 <= q1; r += 2)
#pragma omp simd
        for (int64_t j = 0; j < W; ++j) {
          a[j] += term(r, c0 + j);
          b[j] += term(r + 1, c0 + j);
          if constexpr (two) {
            a2[j] += term2(r, c0 + j);
            b2[j] += term2(r + 1, c0 + j);
          }
        }
      if (r < q1)
#pragma omp simd
        for (int64_t j = 0; j < W; ++j) {
          a[j] += term(r, c0 + j);
          if constexpr (two) a2[j] += term2(r, c0 + j);
        }
      for (int64_t j = 0; j < W; ++j) {
        s[c0 + j] += double(a[j]) + double(b[j]);
        if constexpr (two) s2[c0 + j] += double(a2[j]) + double(b2[j]);
      }
    }
  }
  for (; c0 < C; ++c0) {  // the last C % 16 columns one at a time
    double a = 0, a2 = 0;
    for (int64_t r = r0; r < r1; ++r) {
      a += double(term(r, c0));
      if constexpr (two) a2 += double(term2(r, c0));
    }
    s[c0] += a;
    if constexpr (two) s2[c0] += a2;
  }
}

[[noreturn]] void unsupported_dtype(const char* op, DType t);

// Calls f.template operator()<T>() with T the C++ type of `t`.
template <typename F>
void dispatch_float(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::f32: f.template operator()<float>(); return;
    case DType::f64: f.template operator()<double>(); return;
    default: unsupported_dtype(op, t);
  }
}
// Calls f.template operator()<T>() for an f16 or bf16 `t` (T Half or BFloat16) and returns
// true; false, doing nothing, for other types.
template <typename F>
bool dispatch16(DType t, F&& f) {
  if (t == DType::f16) f.template operator()<Half>();
  else if (t == DType::bf16) f.template operator()<BFloat16>();
  else return false;
  return true;
}
// f.template operator()<T, C>() with T the C++ type of `t` and C the type to compute in: T
// itself for f32 and f64, f32 for f16 and bf16 (each value widened, computed, rounded once:
// the values of the upcast16 layer's widened path, in one pass).
template <typename F>
void dispatch_float_compute(DType t, const char* op, F&& f) {
  if (dispatch16(t, [&]<typename T>() { f.template operator()<T, float>(); })) return;
  dispatch_float(t, op, [&]<typename T>() { f.template operator()<T, T>(); });
}
// For the GEMM families: f<T>() with T the operands' float type (a, b and the result all of
// it), or f<uint16_t>() for two bf16 operands into an f32 result (what the upcast16 layer
// sends when cpu::bf16_gemm_native(); cpu::gemm_of runs either).
template <typename F>
void dispatch_product(const Tensor& a, const Tensor& b, const Tensor& result, const char* op,
                      F&& f) {
  if (a.dtype() == DType::bf16 && b.dtype() == DType::bf16 && result.dtype() == DType::f32)
    return f.template operator()<uint16_t>();
  NN_CHECK(a.dtype() == b.dtype() && a.dtype() == result.dtype(), op, ": dtypes ",
           dtype_name(a.dtype()), ", ", dtype_name(b.dtype()), " into ",
           dtype_name(result.dtype()), " are not computed here");
  dispatch_float(a.dtype(), op, std::forward<F>(f));
}
template <typename F>
void dispatch_numeric(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::f32: f.template operator()<float>(); return;
    case DType::f64: f.template operator()<double>(); return;
    case DType::i32: f.template operator()<int32_t>(); return;
    case DType::i64: f.template operator()<int64_t>(); return;
    case DType::u8: f.template operator()<uint8_t>(); return;
    default: unsupported_dtype(op, t);
  }
}
template <typename F>
void dispatch_all(DType t, F&& f) {
  switch (t) {
    case DType::f32: f.template operator()<float>(); return;
    case DType::f64: f.template operator()<double>(); return;
    case DType::f16: f.template operator()<Half>(); return;
    case DType::bf16: f.template operator()<BFloat16>(); return;
    case DType::i32: f.template operator()<int32_t>(); return;
    case DType::i64: f.template operator()<int64_t>(); return;
    case DType::u8: f.template operator()<uint8_t>(); return;
  }
}

// Index tensors may be i64 or i32; read them as int64.
inline int64_t index_at(const Tensor& idx, int64_t i) {
  return idx.dtype() == DType::i64 ? static_cast<const int64_t*>(idx.data_ptr())[i]
                                   : static_cast<const int32_t*>(idx.data_ptr())[i];
}

// o = v in o's type: an f16 or bf16 destination takes the rounded bits as one 16-bit store
// (a Half or BFloat16 temporary copied in keeps GCC from vectorising the loop).
template <typename T, typename V>
inline void put(T& o, V v) {
  if constexpr (std::is_same_v<T, V>) o = v;
  else if constexpr (std::is_same_v<T, BFloat16>) o.bits = float_to_bf16_bits(float(v));
  else if constexpr (std::is_same_v<T, Half>) o.bits = float_to_half_bits(float(v));
  else o = T(v);
}

// ---- strided elementwise loops (dims merged by core/geometry.h) ------------------------
// One input whose unit stride is along another dim (d) than out's (a transpose, a permute
// into another memory order), or the other way round: row by row, one of the two would be
// read or written a cache line per element (a (8192, 1024) f32 transpose took 27x a plain
// copy's time). Instead kTile x kTile tiles of dims d and the innermost, each within L1.
template <typename TO, typename TI, typename F, size_t N>
void map_tiled(TO* po, const TI* pi, F& f, const Geometry<N>& g, int64_t d) {
  constexpr int64_t kTile = 32;
  const int64_t nd = int64_t(g.shape.size()), inner = g.shape[nd - 1], rows = g.shape[d];
  const int64_t so = g.strides[0][nd - 1], si = g.strides[1][nd - 1];
  const int64_t so_d = g.strides[0][d], si_d = g.strides[1][d];
  const int64_t row_tiles = (rows + kTile - 1) / kTile;
  int64_t outer = 1;  // every dim but d and the innermost
  for (int64_t k = 0; k < nd - 1; ++k)
    if (k != d) outer *= g.shape[k];
  const int64_t units = outer * row_tiles;
  parallel_for(0, units, std::max<int64_t>(1, kGrain / (kTile * inner)), [&](int64_t ub, int64_t ue) {
    for (int64_t u = ub; u < ue; ++u) {
      int64_t rest = u / row_tiles, oo = 0, oi = 0;
      for (int64_t k = nd - 2; k >= 0; --k) {
        if (k == d) continue;
        const int64_t idx = rest % g.shape[k];
        rest /= g.shape[k];
        oo += idx * g.strides[0][k];
        oi += idx * g.strides[1][k];
      }
      const int64_t a0 = (u % row_tiles) * kTile, a1 = std::min(rows, a0 + kTile);
      for (int64_t i0 = 0; i0 < inner; i0 += kTile) {
        const int64_t i1 = std::min(inner, i0 + kTile);
        for (int64_t a = a0; a < a1; ++a) {
          TO* o = po + oo + a * so_d;
          const TI* p = pi + oi + a * si_d;
          for (int64_t i = i0; i < i1; ++i) put(o[i * so], f(p[i * si]));
        }
      }
    }
  });
}

// out[i] = f(in0[i], in1[i], ...) over the broadcast shape of `out`, converted to TO by put
// (so f may return its compute type, f32 for 16-bit outputs, which put rounds).
template <typename TO, typename... TI, typename F, size_t... I>
void map_impl(Tensor& out, F& f, std::index_sequence<I...>, const Tensor* const* ins) {
  constexpr size_t N = 1 + sizeof...(TI);
  const int64_t n = out.numel();
  if (n == 0) return;
  TO* po = static_cast<TO*>(out.data_ptr());
  std::tuple<const TI*...> pi{static_cast<const TI*>(ins[I]->data_ptr())...};
  auto flat = [&] {
    parallel_for(0, n, kGrain, [&](int64_t b, int64_t e) {
      TO* o = po;
      [[maybe_unused]] auto p = pi;
#pragma omp simd
      for (int64_t i = b; i < e; ++i) put(o[i], f(std::get<I>(p)[i]...));
    });
  };
  if (out.is_contiguous() && (ins[I]->is_contiguous() && ...)) return flat();
  std::array<const Shape*, N> st{&out.strides(), &ins[I]->strides()...};
  Geometry<N> g = coalesce<N>(out.shape(), st);
  const int64_t nd = int64_t(g.shape.size());
  // every operand dense in one and the same order (all channels-last, say): one flat run
  if (nd == 1 && g.strides[0][0] == 1 && ((g.strides[1 + I][0] == 1) && ...)) return flat();
  const int64_t inner = g.shape.back();
  if constexpr (N == 2) {
    const int64_t so = g.strides[0][nd - 1], si = g.strides[1][nd - 1];
    if (inner >= 8 && (so == 1) != (si == 1))
      for (int64_t d = 0; d < nd - 1; ++d)
        if (g.shape[d] >= 8 && (so == 1 ? g.strides[1][d] : g.strides[0][d]) == 1)
          return map_tiled<TO>(po, std::get<0>(pi), f, g, d);
  }
  const int64_t rows = n / inner;
  parallel_for(0, rows, std::max<int64_t>(1, kGrain / inner), [&](int64_t rb, int64_t re) {
    std::vector<int64_t> idx(nd, 0);
    int64_t r = rb;
    for (int64_t d = nd - 2; d >= 0; --d) {
      idx[d] = r % g.shape[d];
      r /= g.shape[d];
    }
    const int64_t so = g.strides[0][nd - 1];
    [[maybe_unused]] const std::array<int64_t, sizeof...(TI)> si{g.strides[1 + I][nd - 1]...};
    for (int64_t row = rb; row < re; ++row) {
      std::array<int64_t, N> off{};
      for (int64_t d = 0; d < nd - 1; ++d)
        for (size_t k = 0; k < N; ++k) off[k] += idx[d] * g.strides[k][d];
      TO* o = po + off[0];
      std::tuple<const TI*...> p{(std::get<I>(pi) + off[1 + I])...};
      if (so == 1 && ((si[I] == 1) && ...)) {
#pragma omp simd
        for (int64_t i = 0; i < inner; ++i) put(o[i], f(std::get<I>(p)[i]...));
      } else {
        for (int64_t i = 0; i < inner; ++i) put(o[i * so], f(std::get<I>(p)[i * si[I]]...));
      }
      for (int64_t d = nd - 2; d >= 0; --d) {  // odometer step to the next row
        if (++idx[d] < g.shape[d]) break;
        idx[d] = 0;
      }
    }
  });
}

template <typename TO, typename... TI, typename F, typename... Ts>
void map(Tensor& out, F&& f, const Ts&... ins) {
  static_assert(sizeof...(TI) == sizeof...(Ts));
  const Tensor* arr[] = {&ins...};
  map_impl<TO, TI...>(out, f, std::index_sequence_for<TI...>{}, arr);
}

}  // namespace nn::cpu
