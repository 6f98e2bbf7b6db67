// Where attention's operands lie in memory, shared by the CPU and CUDA backends. Each operand
// is (N, heads, rows, cols) with its cols contiguous and any strides in the other three dims,
// so the heads of a projection laid out (N, T, heads, D), or of a packed (N, T, 3, heads, D)
// one, are read and written where they are, without a copy into (N, heads, T, D) order.
#pragma once
#include <cstdint>

#include "kernels/hd.h"

namespace nn::kernels {

// Row t of slice b = n * heads + h of an operand starts at element n * sn + h * sh + t * st.
struct AttnRows {
  int64_t sn = 0, sh = 0, st = 0;
};

// A call's operands: q (N, heads, T, D), k (N, heads, S, D), v (N, heads, S, E), the output
// and its gradient o, g (N, heads, T, E), and the input gradients gq, gk, gv shaped as q, k,
// v. Those a call does not have stay zero.
struct AttnLayout {
  int64_t heads = 1;
  AttnRows q, k, v, o, g, gq, gk, gv;
  int64_t mask_per = 1;  // slices per row of the key mask: slice b reads row b / mask_per
  // where slice b of an operand starts, in elements
  NN_HD int64_t slice(const AttnRows& r, int64_t b) const {
    return (b / heads) * r.sn + (b % heads) * r.sh;
  }
  // Moves pointers to q, k, v (and grad_out) to the start of their slice b.
  template <typename T>
  NN_HD void seek(int64_t b, const T*& pq, const T*& pk, const T*& pv) const {
    pq += slice(q, b);
    pk += slice(k, b);
    pv += slice(v, b);
  }
  template <typename T>
  NN_HD void seek(int64_t b, const T*& pq, const T*& pk, const T*& pv, const T*& pg) const {
    seek(b, pq, pk, pv);
    pg += slice(g, b);
  }
};

}  // namespace nn::kernels
