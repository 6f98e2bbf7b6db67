// CPU attention family: per (batch x head) slice, scores in blocks of query rows so the
// (T x S) matrix never exists whole; softmax statistics (log-sum-exp) saved for backward,
// which recomputes the probabilities from them.
//
// bf16 inputs (where cpu::bf16_gemm_native(): AVX512_BF16 and the avx512 f32 kernel; the
// upcast16 layer widens them elsewhere) run their six products (Q K^T, P V; in backward Q K^T
// again, P^T dO, dO V^T, dS K, dS^T Q) on the bf16 kernel with f32 results: scores, softmax, statistics and
// the dK / dV sums stay f32, and the probabilities P and the score gradient dS are rounded to
// bf16 as the operands of the products that follow (as PyTorch's CPU flash attention does).
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/eigen_util.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/exp0.h"
#include "backend/cpu/parallel.h"
#include "backend/cpu/philox_batch.h"

namespace nn::backend {
using namespace nn::cpu;

namespace {
constexpr int64_t kRows = 64;  // query rows per block

// S: the stored element type (float, double, or uint16_t for bf16 bits); A: what its
// products and softmax compute in (S itself, f32 for bf16).
template <typename S>
using Acc = gemm_result_t<S>;

template <typename S>
float widen(S x) {
  if constexpr (std::is_same_v<S, uint16_t>) return bf16_bits_to_float(x);
  else return float(x);
}

// Masked scores of rows [t0, t0 + n) of q (row stride ldq) against every key (row stride
// ldk), into s (n, S).
template <typename S>
void scores(const S* q, int64_t ldq, const S* k, int64_t ldk, const uint8_t* mask, int64_t t0,
            int64_t n, int64_t S_, int64_t D, Acc<S> scale, RowMat<Acc<S>>& s) {
  s.resize(n, S_);
  gemm_of<S>(n, S_, D, scale, row_major(q + t0 * ldq, ldq), row_major(k, ldk).t(), Acc<S>(0),
             s.data(), S_);
  if (mask)
    for (int64_t j = 0; j < S_; ++j)
      if (!mask[j]) s.col(j).setConstant(-std::numeric_limits<Acc<S>>::infinity());
}

// m (rows x cols, row-major) as an operand of S's products: itself, or rounded to bf16 bits
// in buf.
template <typename S>
const S* operand(const RowMat<Acc<S>>& m, std::vector<S>& buf) {
  if constexpr (std::is_same_v<S, Acc<S>>) {
    return m.data();
  } else {
    buf.resize(size_t(m.size()));
    const float* src = m.data();
    for (size_t i = 0; i < buf.size(); ++i) buf[i] = float_to_bf16_bits(src[i]);
    return buf.data();
  }
}

// rows x cols values of A (row-major) into S rows `ld` apart (rounded to bf16 bits where S
// is).
template <typename S>
void store(const Acc<S>* src, int64_t rows, int64_t cols, S* dst, int64_t ld) {
  for (int64_t r = 0; r < rows; ++r) {
    const Acc<S>* from = src + r * cols;
    S* to = dst + r * ld;
    if constexpr (std::is_same_v<S, Acc<S>>) std::copy(from, from + cols, to);
    else for (int64_t i = 0; i < cols; ++i) to[i] = float_to_bf16_bits(from[i]);
  }
}

// The shapes of a call (Backend::attention_forward): B = N * heads slices of T queries and S
// keys, head dims D (q, k) and E (v), and where each operand's rows are.
struct Dims {
  int64_t B, T, S, D, E;
  kernels::AttnLayout L;
  Dims(const Tensor& mask, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o,
       const Tensor& g = {}, const Tensor& gq = {}, const Tensor& gk = {}, const Tensor& gv = {})
      : B(q.shape()[0] * q.shape()[1]), T(q.shape()[2]), S(k.shape()[2]), D(q.shape()[3]),
        E(v.shape()[3]), L(attention_layout(mask, q, k, v, o, g, gq, gk, gv)) {}
};

// The dropout multipliers (0, or drop.scale where kept) of `count` consecutive elements of
// drop's stream from `first` (a block of query rows: row * S + key), into z: kPhiloxBatch
// Philox blocks at a time, vectorised, through a buffer in element order.
template <typename A>
void dropout_multipliers(const rng::DropoutDraw& drop, uint64_t first, int64_t count, A* z) {
  const A kept = A(drop.scale);
  uint32_t r[4][kPhiloxBatch];
  A buf[4 * kPhiloxBatch];
  const uint64_t end = first + uint64_t(count);
  for (uint64_t i = first; i < end;) {
    const uint64_t b0 = i / 4;
    philox_batch(drop.seed, drop.offset + b0, r);
#pragma omp simd
    for (int k = 0; k < kPhiloxBatch; ++k) {
      buf[4 * k] = drop.keeps(r[0][k]) ? kept : A(0);
      buf[4 * k + 1] = drop.keeps(r[1][k]) ? kept : A(0);
      buf[4 * k + 2] = drop.keeps(r[2][k]) ? kept : A(0);
      buf[4 * k + 3] = drop.keeps(r[3][k]) ? kept : A(0);
    }
    const uint64_t stop = std::min(end, (b0 + kPhiloxBatch) * 4);
    std::copy(buf + (i - b0 * 4), buf + (stop - b0 * 4), z + (i - first));
    i = stop;
  }
}

// x times the dropout multipliers z, a dropped element 0 whatever x held (as nn::dropout
// selects: 0 x inf would be NaN).
template <typename A>
RowMat<A> dropped(const RowMat<A>& x, const RowMat<A>& z) {
  return (z.array() != A(0)).select(x.array() * z.array(), A(0)).matrix();
}

// Slices a thread takes at least: enough multiply-adds to be worth a parallel region.
inline int64_t slices_per_thread(int64_t T, int64_t S, int64_t DE) {
  return grain_for(double(T * S * DE) / 2);
}

template <typename S>
void forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask,
             double scale, const rng::DropoutDraw& drop, Tensor& out, Tensor& lse) {
  using A = Acc<S>;
  const Dims dm(key_mask, q, k, v, out);
  const kernels::AttnLayout& L = dm.L;
  const int64_t B = dm.B, Tq = dm.T, D = dm.D, S_ = dm.S, E = dm.E;
  const S* pq = static_cast<const S*>(q.data_ptr());
  const S* pk = static_cast<const S*>(k.data_ptr());
  const S* pv = static_cast<const S*>(v.data_ptr());
  const uint8_t* pm = key_mask.defined() ? key_mask.data<uint8_t>() : nullptr;
  S* po = static_cast<S*>(out.data_ptr());
  // f64 statistics for f64 inputs (exact gradient checks), f32 otherwise
  float* pl32 = lse.dtype() == kF32 ? lse.data<float>() : nullptr;
  double* pl64 = lse.dtype() == kF64 ? lse.data<double>() : nullptr;
  auto set_lse = [&](int64_t i, double v) {
    if (pl64) pl64[i] = v;
    else pl32[i] = float(v);
  };
  parallel_for(0, B, slices_per_thread(Tq, S_, D + E), [&](int64_t b0, int64_t b1) {
    RowMat<A> s;
    Eigen::Array<A, Eigen::Dynamic, 1> e(S_);  // a row's exponentials (exp0 writes apart)
    std::vector<S> p16;
    std::vector<A> o;  // a block's output before rounding (bf16)
    RowMat<A> z;       // a block's dropout multipliers, where drop is active
    for (int64_t b = b0; b < b1; ++b) {
      const S* qb = pq + L.slice(L.q, b);
      const S* kb = pk + L.slice(L.k, b);
      const uint8_t* mb = pm ? pm + (b / L.mask_per) * S_ : nullptr;
      for (int64_t t0 = 0; t0 < Tq; t0 += kRows) {
        const int64_t n = std::min(kRows, Tq - t0);
        scores<S>(qb, L.q.st, kb, L.k.st, mb, t0, n, S_, D, A(scale), s);
        if (drop.active()) {
          z.resize(n, S_);
          dropout_multipliers(drop, uint64_t(b * Tq + t0) * uint64_t(S_), n * S_, z.data());
        }
        for (int64_t r = 0; r < n; ++r) {
          auto row = s.row(r);
          const A m = S_ ? row.maxCoeff() : -std::numeric_limits<A>::infinity();
          // every key masked (a NaN or infinite score goes on and makes the row NaN)
          if (m == -std::numeric_limits<A>::infinity() && !row.hasNaN()) {
            row.setZero();
            set_lse(b * Tq + t0 + r, -std::numeric_limits<double>::infinity());
            continue;
          }
          exp0(row.data(), m, e.data(), S_);
          row = e.matrix().transpose();
          const A sum = row.sum();
          row /= sum;
          set_lse(b * Tq + t0 + r, double(m) + std::log(double(sum)));
          // P V with the dropped probabilities (the statistics keep every key); a dropped
          // one is 0 whatever it held, as nn::dropout selects
          if (drop.active())
            row = (z.row(r).array() != A(0)).select(row.array() * z.row(r).array(), A(0)).matrix();
        }
        S* ob = po + L.slice(L.o, b) + t0 * L.o.st;
        if constexpr (std::is_same_v<S, A>) {
          gemm_of<S>(n, E, S_, A(1), row_major(operand<S>(s, p16), S_),
                     row_major(pv + L.slice(L.v, b), L.v.st), A(0), ob, L.o.st);
        } else {
          o.resize(size_t(n * E));
          gemm_of<S>(n, E, S_, A(1), row_major(operand<S>(s, p16), S_),
                     row_major(pv + L.slice(L.v, b), L.v.st), A(0), o.data(), E);
          store<S>(o.data(), n, E, ob, L.o.st);
        }
      }
    }
  });
}

template <typename S>
void backward(const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v,
              const Tensor& key_mask, const Tensor& out, const Tensor& lse, double scale,
              const rng::DropoutDraw& drop, Tensor& grad_q, Tensor& grad_k, Tensor& grad_v) {
  using A = Acc<S>;
  constexpr bool same = std::is_same_v<S, A>;
  const Dims dm(key_mask, q, k, v, out, grad_out, grad_q, grad_k, grad_v);
  const kernels::AttnLayout& L = dm.L;
  const int64_t B = dm.B, Tq = dm.T, D = dm.D, S_ = dm.S, E = dm.E;
  const S* pq = static_cast<const S*>(q.data_ptr());
  const S* pk = static_cast<const S*>(k.data_ptr());
  const S* pv = static_cast<const S*>(v.data_ptr());
  const S* pg = static_cast<const S*>(grad_out.data_ptr());
  const S* po = static_cast<const S*>(out.data_ptr());
  auto lse_at = [&](int64_t i) {
    return lse.dtype() == kF64 ? lse.data<double>()[i] : double(lse.data<float>()[i]);
  };
  const uint8_t* pm = key_mask.defined() ? key_mask.data<uint8_t>() : nullptr;
  S* gq = static_cast<S*>(grad_q.data_ptr());
  S* gk = static_cast<S*>(grad_k.data_ptr());
  S* gv = static_cast<S*>(grad_v.data_ptr());
  parallel_for(0, B, slices_per_thread(Tq, S_, D + E), [&](int64_t b0, int64_t b1) {
    RowMat<A> p, dp, z;  // z: the block's dropout multipliers, where drop is active
    Eigen::Array<A, Eigen::Dynamic, 1> e(S_);  // a row's exponentials (exp0 writes apart)
    std::vector<S> p16, ds16;
    std::vector<A> kacc, vacc, qblk;  // bf16: dK and dV sums, a block's dQ, in f32
    for (int64_t b = b0; b < b1; ++b) {
      const S* qb = pq + L.slice(L.q, b);
      const S* kb = pk + L.slice(L.k, b);
      const S* vb = pv + L.slice(L.v, b);
      const uint8_t* mb = pm ? pm + (b / L.mask_per) * S_ : nullptr;
      // dK and dV accumulate over the query blocks: in place, or (bf16) in f32 rows
      A* gkb;
      A* gvb;
      int64_t ldk, ldv;
      if constexpr (same) {
        gkb = gk + L.slice(L.gk, b);
        gvb = gv + L.slice(L.gv, b);
        ldk = L.gk.st;
        ldv = L.gv.st;
      } else {
        kacc.resize(size_t(S_ * D));
        vacc.resize(size_t(S_ * E));
        gkb = kacc.data();
        gvb = vacc.data();
        ldk = D;
        ldv = E;
      }
      for (int64_t j = 0; j < S_; ++j) {
        std::fill(gkb + j * ldk, gkb + j * ldk + D, A(0));
        std::fill(gvb + j * ldv, gvb + j * ldv + E, A(0));
      }
      for (int64_t t0 = 0; t0 < Tq; t0 += kRows) {
        const int64_t n = std::min(kRows, Tq - t0);
        scores<S>(qb, L.q.st, kb, L.k.st, mb, t0, n, S_, D, A(scale), p);
        for (int64_t r = 0; r < n; ++r) {  // P = exp(s - lse), recomputed
          const double l = lse_at(b * Tq + t0 + r);
          if (l == -std::numeric_limits<double>::infinity()) p.row(r).setZero();
          else {
            exp0(p.row(r).data(), A(l), e.data(), S_);
            p.row(r) = e.matrix().transpose();
          }
        }
        const S* dO = pg + L.slice(L.g, b) + t0 * L.g.st;
        const S* O = po + L.slice(L.o, b) + t0 * L.o.st;
        const RowMat<A>* pz = &p;  // P, or P Z with Z the forward's dropout multipliers
        if (drop.active()) {
          z.resize(n, S_);
          dropout_multipliers(drop, uint64_t(b * Tq + t0) * uint64_t(S_), n * S_, z.data());
          dp = dropped(p, z);
          pz = &dp;
        }
        gemm_of<S>(S_, E, n, A(1), row_major(operand<S>(*pz, p16), S_).t(), row_major(dO, L.g.st),
                   A(1), gvb, ldv);  // dV += (P Z)^T dO
        dp.resize(n, S_);
        gemm_of<S>(n, S_, E, A(1), row_major(dO, L.g.st), row_major(vb, L.v.st).t(), A(0),
                   dp.data(), S_);  // dP = dO V^T
        if (drop.active()) dp = dropped(dp, z);  // through the dropout: d(P Z) Z
        // dS = P * (dP - rowsum(dO * O)), the softmax backward per row (rowsum(dO * O) is
        // rowsum(P * dP) with or without dropout, as O = (P Z) V)
        for (int64_t r = 0; r < n; ++r) {
          A delta = 0;
          if constexpr (same) {
            delta = crmap(dO, n, E, L.g.st).row(r).dot(crmap(O, n, E, L.o.st).row(r));
          } else {
            for (int64_t e = 0; e < E; ++e)
              delta += widen(dO[r * L.g.st + e]) * widen(O[r * L.o.st + e]);
          }
          dp.row(r) = p.row(r).array() * (dp.row(r).array() - delta);
        }
        const S* ds = operand<S>(dp, ds16);
        S* gqb = gq + L.slice(L.gq, b) + t0 * L.gq.st;
        if constexpr (same) {
          gemm_of<S>(n, D, S_, A(scale), row_major(ds, S_), row_major(kb, L.k.st), A(0), gqb,
                     L.gq.st);  // dQ = dS K * scale
        } else {
          qblk.resize(size_t(n * D));
          gemm_of<S>(n, D, S_, A(scale), row_major(ds, S_), row_major(kb, L.k.st), A(0),
                     qblk.data(), D);
          store<S>(qblk.data(), n, D, gqb, L.gq.st);
        }
        gemm_of<S>(S_, D, n, A(scale), row_major(ds, S_).t(), row_major(qb + t0 * L.q.st, L.q.st),
                   A(1), gkb, ldk);  // dK += dS^T Q * scale
      }
      if constexpr (!same) {
        store<S>(gkb, S_, D, gk + L.slice(L.gk, b), L.gk.st);
        store<S>(gvb, S_, E, gv + L.slice(L.gv, b), L.gv.st);
      }
    }
  });
}

// f32 and f64 as themselves, bf16 as its bits (uint16_t).
template <typename F>
void dispatch_attention(DType t, const char* op, F&& f) {
  if (t == DType::bf16) return f.template operator()<uint16_t>();
  dispatch_float(t, op, std::forward<F>(f));
}
}  // namespace

void CpuBackend::attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                   const Tensor& key_mask, double scale, const rng::DropoutDraw& drop, Tensor& out,
                                   Tensor& lse) {
  dispatch_attention(q.dtype(), "attention", [&]<typename S>() {
    forward<S>(q, k, v, key_mask, scale, drop, out, lse);
  });
}

void CpuBackend::attention_backward(const Tensor& grad_out, const Tensor& q, const Tensor& k,
                                    const Tensor& v, const Tensor& key_mask, const Tensor& out,
                                    const Tensor& lse, double scale, const rng::DropoutDraw& drop, Tensor& grad_q,
                                    Tensor& grad_k, Tensor& grad_v) {
  dispatch_attention(q.dtype(), "attention_backward", [&]<typename S>() {
    backward<S>(grad_out, q, k, v, key_mask, out, lse, scale, drop, grad_q, grad_k, grad_v);
  });
}

}  // namespace nn::backend
