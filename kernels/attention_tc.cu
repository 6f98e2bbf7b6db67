// Tensor-core attention for f16, bf16 and f32: the same algorithm as attention.cu (online
// softmax over streamed key tiles, probabilities recomputed from the saved log-sum-exp in the
// backward), with the two products of each step on tensor cores through WMMA, accumulating in
// f32. A block of four warps owns 64 rows (queries in the forward and dQ, keys in dK/dV), 16 per
// warp, and streams the other side through shared memory 64 rows at a time. Scores, softmax
// statistics and accumulators stay f32; probabilities and their gradients meet the second
// product rounded to the data type, as in other flash-attention kernels. 16-bit data takes
// 16 x 16 x 16 products; f32 data takes TF32 products (16 x 16 x 8) in three parts for f32's
// accuracy (mma_k below). Used for head dims that are multiples of 16 up to 128 whose tiles fit
// the device's shared memory (attention.cu falls back to its plain kernel otherwise, and for
// f64).
#include <mma.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <map>
#include <mutex>

#include "kernels/attention.cuh"
#include "kernels/common.cuh"

namespace nn::kernels {
namespace {
using namespace nvcuda;

constexpr int kWarps = 4;
constexpr int kRows = 16 * kWarps;  // rows a block owns
constexpr int kCols = 64;           // rows of the other side per streamed tile
constexpr int kPadH = 8;            // padding of data rows (16 or 32 bytes: ldm stays a multiple of 16 bytes)
constexpr int kPadF = 4;            // padding of f32 rows (ldm stays a multiple of 4)

// The WMMA shape of a data type: 16-bit data in 16 x 16 x 16 products, f32 in TF32's 16 x 16 x 8.
template <typename T>
constexpr bool kTf32 = std::is_same_v<T, float>;
template <typename T>
constexpr int kWmmaK = kTf32<T> ? 8 : 16;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
template <typename T>
using WmmaIn = T;  // (no TF32 before sm_80, where the f32 kernels are traps: see tc_built)
#else
template <typename T>
using WmmaIn = std::conditional_t<kTf32<T>, wmma::precision::tf32, T>;
#endif
template <typename T, typename Use, typename L>
using Frag = wmma::fragment<Use, 16, 16, kWmmaK<T>, WmmaIn<T>, L>;
template <typename T> using FragA = Frag<T, wmma::matrix_a, wmma::row_major>;
template <typename T> using FragAt = Frag<T, wmma::matrix_a, wmma::col_major>;
template <typename T> using FragB = Frag<T, wmma::matrix_b, wmma::row_major>;
template <typename T> using FragBt = Frag<T, wmma::matrix_b, wmma::col_major>;
template <typename T> using FragC = wmma::fragment<wmma::accumulator, 16, 16, kWmmaK<T>, float>;

// bf16 and TF32 WMMA need sm_80; an sm_70 build keeps those kernels as traps (the host never
// launches them there).
template <typename T>
__device__ constexpr bool tc_built() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  return std::is_same_v<T, __half>;
#else
  return true;
#endif
}

// A TF32 operand split in two: hi keeps the top 10 mantissa bits (rounded), lo the rest, also
// rounded to TF32, so hi + lo holds 21 of f32's 24 bits. An infinity or NaN stays in hi (lo 0);
// a finite value that rounds up past f32's largest is truncated instead, so hi stays finite.
template <typename F>
__device__ __forceinline__ void split_tf32(F& hi, F& lo) {
  for (int e = 0; e < hi.num_elements; ++e) {
    const float x = hi.x[e];
    float h = wmma::__float_to_tf32(x);
    if (isinf(h) && isfinite(x)) h = __uint_as_float(__float_as_uint(x) & 0xffffe000u);
    hi.x[e] = h;
    lo.x[e] = isfinite(h) ? wmma::__float_to_tf32(x - h) : 0.f;
  }
}

// acc += A (16 x K at a, ld lda: row-major, or column-major when kColA) times B (K x 16 at b,
// ld ldb: row-major, or column-major when kColB), K a multiple of 16. 16-bit data: one product per 16 of K. f32 data
// ("3xTF32"): a_hi b_hi + a_hi b_lo + a_lo b_hi on TF32 tensor cores, f32 to about 2^-21
// relative per product (a_lo b_lo is below that); a result whose a_hi b_hi sum is infinite or
// NaN is that sum alone, as f32 has it (a cross term can be 0 x inf, where f32 has none).
template <typename T, bool kColB, bool kColA = false>
__device__ __forceinline__ void mma_k(FragC<T>& acc, const T* a, int lda, const T* b, int ldb,
                                      int K) {
  using FA = std::conditional_t<kColA, FragAt<T>, FragA<T>>;
  using FB = std::conditional_t<kColB, FragBt<T>, FragB<T>>;
  if constexpr (kTf32<T>) {
    FragC<T> hh, cross;
    wmma::fill_fragment(hh, 0.f);
    wmma::fill_fragment(cross, 0.f);
    for (int k = 0; k < K; k += 8) {
      FA ah, al;
      FB bh, bl;
      wmma::load_matrix_sync(ah, kColA ? a + k * lda : a + k, lda);
      wmma::load_matrix_sync(bh, kColB ? b + k : b + k * ldb, ldb);
      split_tf32(ah, al);
      split_tf32(bh, bl);
      wmma::mma_sync(cross, al, bh, cross);
      wmma::mma_sync(cross, ah, bl, cross);
      wmma::mma_sync(hh, ah, bh, hh);
    }
    for (int e = 0; e < acc.num_elements; ++e)
      acc.x[e] += isfinite(hh.x[e]) ? hh.x[e] + cross.x[e] : hh.x[e];
  } else {
    for (int k = 0; k < K; k += 16) {
      FA fa;
      FB fb;
      wmma::load_matrix_sync(fa, kColA ? a + k * lda : a + k, lda);
      wmma::load_matrix_sync(fb, kColB ? b + k : b + k * ldb, ldb);
      wmma::mma_sync(acc, fa, fb, acc);
    }
  }
}

// Hands out 128-byte aligned slices of a block's shared memory (WMMA wants 32-byte aligned
// tile pointers; every tile offset inside a slice is a multiple of 32 bytes).
struct Carve {
  size_t used = 0;
  __host__ __device__ size_t take(size_t bytes) {
    const size_t at = used;
    used += (bytes + 127) / 128 * 128;
    return at;
  }
};

// Shared memory of the three kernels: the block's own 64 rows (a, b: D and E wide), the
// streamed tile (c, d: D and E wide), 64 per-row values of the tile, and per warp two f32
// score tiles (s, t), two tiles of the data type (p, u) and an f32 tile for the results (o).
// The forward leaves b, t and u out. f32's p and u are s and t themselves (a lane turns each
// score into its probability in place), and the backward's o, used once the loop is done, is s
// and t: so f32 with head dims 64 takes 89 KB forward and 107 KB backward, two blocks to an
// H100's SM.
struct Smem {
  int ldd, lde, lds, ldp, ldo;
  size_t a, b, c, d, rows, warp, s, t, p, u, o, per_warp, total;
  __host__ __device__ Smem(int D, int E, int elem, bool backward) {
    const size_t bw = backward ? 1 : 0;
    const bool in_place = elem == 4;
    ldd = D + kPadH;
    lde = E + kPadH;
    lds = kCols + kPadF;
    ldp = in_place ? lds : kCols + kPadH;
    ldo = (D > E ? D : E) + kPadF;  // (16 x ldo floats fit in s and t: ldo <= 2 lds)
    Carve blk;
    a = blk.take(size_t(kRows) * ldd * elem);
    b = blk.take(bw * kRows * lde * elem);
    c = blk.take(size_t(kCols) * ldd * elem);
    d = blk.take(size_t(kCols) * lde * elem);
    rows = blk.take(size_t(kCols) * 3 * sizeof(float));
    Carve w;
    s = w.take(size_t(16) * lds * sizeof(float));
    t = w.take(bw * 16 * lds * sizeof(float));  // (right after s: 64 lds bytes are a multiple of 128)
    p = in_place ? s : w.take(size_t(16) * ldp * elem);
    u = in_place ? t : w.take(bw * 16 * ldp * elem);
    o = backward ? s : w.take(size_t(16) * ldo * sizeof(float));
    per_warp = w.used;
    warp = blk.take(per_warp * kWarps);
    total = blk.used;
  }
};

// Typed pointers to the block's tiles and to this warp's own.
template <typename T>
struct Tiles {
  T *a, *b, *c, *d, *p, *u;
  float *rows, *s, *t, *o;
  __device__ Tiles(unsigned char* smem, const Smem& L, int warp) {
    unsigned char* wm = smem + L.warp + warp * L.per_warp;
    a = reinterpret_cast<T*>(smem + L.a);
    b = reinterpret_cast<T*>(smem + L.b);
    c = reinterpret_cast<T*>(smem + L.c);
    d = reinterpret_cast<T*>(smem + L.d);
    rows = reinterpret_cast<float*>(smem + L.rows);
    s = reinterpret_cast<float*>(wm + L.s);
    t = reinterpret_cast<float*>(wm + L.t);
    p = reinterpret_cast<T*>(wm + L.p);
    u = reinterpret_cast<T*>(wm + L.u);
    o = reinterpret_cast<float*>(wm + L.o);
  }
};

// Rows [r0, r0 + n) of a (rows x cols) matrix whose rows are `stride` apart into shared
// memory (row stride ld), 16 bytes at a time; rows past the end are zeros.
template <typename T>
__device__ __forceinline__ void load_rows(const T* g, int64_t stride, int64_t r0, int64_t rows, int cols,
                                          T* s, int ld, int n) {
  constexpr int kVec = 16 / sizeof(T);
  const int chunks = cols / kVec;
  for (int i = threadIdx.x; i < n * chunks; i += blockDim.x) {
    const int r = i / chunks, c = (i % chunks) * kVec;
    uint4 val = make_uint4(0, 0, 0, 0);
    if (r0 + r < rows) val = *reinterpret_cast<const uint4*>(g + (r0 + r) * stride + c);
    *reinterpret_cast<uint4*>(s + r * ld + c) = val;
  }
}

// acc (16 x 64, row-major at out, ld lds) = A (16 x K rows of `a`) times the transpose of the
// 64 rows of `bt` (K wide): scores Q K^T, or dO V^T.
template <typename T>
__device__ __forceinline__ void rows_times_tile_t(const T* a, int lda, const T* bt, int ldb,
                                                  int K, float* out, int lds) {
  if constexpr (kTf32<T>) {  // a tile at a time (3xTF32 holds two accumulators per tile)
#pragma unroll
    for (int n = 0; n < kCols / 16; ++n) {
      FragC<T> acc;
      wmma::fill_fragment(acc, 0.f);
      mma_k<T, true>(acc, a, lda, bt + n * 16 * ldb, ldb, K);
      wmma::store_matrix_sync(out + n * 16, acc, lds, wmma::mem_row_major);
    }
  } else {  // 16-bit: each A fragment loaded once for the four tiles
    FragC<T> acc[kCols / 16];
#pragma unroll
    for (int n = 0; n < kCols / 16; ++n) wmma::fill_fragment(acc[n], 0.f);
    for (int k = 0; k < K; k += 16) {
      FragA<T> fa;
      wmma::load_matrix_sync(fa, a + k, lda);
#pragma unroll
      for (int n = 0; n < kCols / 16; ++n) {
        FragBt<T> fb;
        wmma::load_matrix_sync(fb, bt + n * 16 * ldb + k, ldb);
        wmma::mma_sync(acc[n], fa, fb, acc[n]);
      }
    }
#pragma unroll
    for (int n = 0; n < kCols / 16; ++n)
      wmma::store_matrix_sync(out + n * 16, acc[n], lds, wmma::mem_row_major);
  }
}

// acc[n] += P (16 x 64 at p, ld ldp) times columns [16n, 16n + 16) of the 64-row tile b,
// for the first `width` / 16 accumulators.
template <typename T, int DM>
__device__ __forceinline__ void tile_times_rows(const T* p, int ldp, const T* b, int ldb, int width,
                                FragC<T> (&acc)[DM / 16]) {
  if constexpr (kTf32<T>) {
#pragma unroll
    for (int n = 0; n < DM / 16; ++n)
      if (n * 16 < width) mma_k<T, false>(acc[n], p, ldp, b + n * 16, ldb, kCols);
  } else {
#pragma unroll
    for (int k = 0; k < kCols; k += 16) {
      FragA<T> fa;
      wmma::load_matrix_sync(fa, p + k, ldp);
#pragma unroll
      for (int n = 0; n < DM / 16; ++n) {
        if (n * 16 < width) {
          FragB<T> fb;
          wmma::load_matrix_sync(fb, b + k * ldb + n * 16, ldb);
          wmma::mma_sync(acc[n], fa, fb, acc[n]);
        }
      }
    }
  }
}

// Writes `acc` (16 rows x width, times `mul`) to rows [r0, r0 + 16) of out (rows `stride`
// apart), rows at or past `rows` skipped, staging through the warp's f32 tile.
template <typename T, int DM>
__device__ __forceinline__ void write_rows(FragC<T> (&acc)[DM / 16], float mul, int width, float* stage, int ldo,
                           T* out, int64_t stride, int64_t r0, int64_t rows, int lane) {
  __syncwarp();
#pragma unroll
  for (int n = 0; n < DM / 16; ++n) {
    if (n * 16 < width) {
      for (int e = 0; e < acc[n].num_elements; ++e) acc[n].x[e] *= mul;
      wmma::store_matrix_sync(stage + n * 16, acc[n], ldo, wmma::mem_row_major);
    }
  }
  __syncwarp();
  for (int i = lane; i < 16 * width; i += 32) {
    const int r = i / width, c = i % width;
    if (r0 + r < rows) out[(r0 + r) * stride + c] = convert<T>(stage[r * ldo + c]);
  }
}

// Forward: block = 64 query rows of slice b; each warp keeps its 16 rows' output in its f32
// tile o (rows rescaled there when the running maximum grows), two lanes per row.
template <typename T, int DM>
__global__ void __launch_bounds__(kWarps * 32)
    attention_fwd_tc(const T* q, const T* k, const T* v, const uint8_t* mask, AttnLayout Lo,
                     int64_t T_, int64_t S, int D, int E, float scale, rng::DropoutDraw drop,
                     int64_t blocks_per_slice, T* out, float* lse) {
  if constexpr (!tc_built<T>()) {
    __trap();
  } else {
    extern __shared__ __align__(128) unsigned char smem[];
    const Smem L(D, E, sizeof(T), false);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int r = lane / 2, half = lane % 2;  // this lane's row of the warp's 16, column parity
    const Tiles<T> tl(smem, L, warp);
    T *qs = tl.a, *ks = tl.c, *vs = tl.d, *ps = tl.p;
    float *live = tl.rows, *sf = tl.s, *of = tl.o;
    const int64_t b = blockIdx.x / blocks_per_slice;
    const int64_t t0 = (blockIdx.x % blocks_per_slice) * kRows;
    Lo.seek(b, q, k, v);
    if (mask) mask += (b / Lo.mask_per) * S;
    out += Lo.slice(Lo.o, b);
    load_rows(q, Lo.q.st, t0, T_, D, qs, L.ldd, kRows);
    for (int c = half; c < E; c += 2) of[r * L.ldo + c] = 0.f;
    float m = -INFINITY, l = 0.f;
    const T* qw = qs + warp * 16 * L.ldd;
    // Dropout: the 16-bit tile holds p or 0 and the output takes the 1/(1-p) in f32 with 1/l
    // (kept could overflow f16 times p near 1); l sums every key.
    rng::DropoutWalk walk(drop);
    const float kept = float(drop.scale);
    const uint64_t row0 = uint64_t(b * T_ + t0 + warp * 16 + r) * uint64_t(S);
    for (int64_t j0 = 0; j0 < S; j0 += kCols) {
      __syncthreads();  // the previous tile is no longer read
      load_rows(k, Lo.k.st, j0, S, D, ks, L.ldd, kCols);
      load_rows(v, Lo.v.st, j0, S, E, vs, L.lde, kCols);
      for (int i = threadIdx.x; i < kCols; i += blockDim.x)
        live[i] = (j0 + i < S && (!mask || mask[j0 + i])) ? 1.f : 0.f;
      __syncthreads();
      rows_times_tile_t(qw, L.ldd, ks, L.ldd, D, sf, L.lds);
      __syncwarp();
      float* srow = sf + r * L.lds;
      float mx = -INFINITY;
      for (int c = half; c < kCols; c += 2) {
        const float s = live[c] != 0.f ? srow[c] * scale : -INFINITY;
        srow[c] = s;
        mx = fmaxf(mx, s);
      }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      const float mnew = fmaxf(m, mx);
      const float corr = mnew == -INFINITY ? 1.f : expf(m - mnew);
      float sum = 0.f;
      T* prow = ps + r * L.ldp;
      for (int c = half; c < kCols; c += 2) {
        // a masked key adds nothing; a NaN score (which fmaxf passed over) makes p NaN
        const float p = srow[c] == -INFINITY ? 0.f : expf(srow[c] - mnew);
        sum += p;
        prow[c] = convert<T>(drop.active() && !walk.keep(row0 + uint64_t(j0 + c)) ? 0.f : p);
      }
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      l = l * corr + sum;
      m = mnew;
      for (int c = half; c < E; c += 2) of[r * L.ldo + c] *= corr;
      __syncwarp();
      for (int n = 0; n < E / 16; ++n) {  // O += P V, through the f32 tile
        FragC<T> acc;
        wmma::load_matrix_sync(acc, of + n * 16, L.ldo, wmma::mem_row_major);
        mma_k<T, false>(acc, ps, L.ldp, vs + n * 16, L.lde, kCols);
        wmma::store_matrix_sync(of + n * 16, acc, L.ldo, wmma::mem_row_major);
      }
      __syncwarp();
    }
    // Rows' 1/l through the (now free) score tile, then the warp's 16 rows written out whole
    // rows at a time (coalesced).
    const int64_t tw = t0 + warp * 16;
    if (half == 0) {
      // all keys masked: zeros (l is 0 only then; NaN goes on to the output)
      sf[r] = l == 0.f ? 0.f : kept / l;
      if (tw + r < T_) lse[b * T_ + tw + r] = l == 0.f ? -INFINITY : m + logf(l);
    }
    __syncwarp();
    for (int i = lane; i < 16 * E; i += 32) {
      const int rr = i / E, c = i % E;
      if (tw + rr < T_) out[(tw + rr) * Lo.o.st + c] = convert<T>(of[rr * L.ldo + c] * sf[rr]);
    }
  }
}

// dK and dV: block = 64 key rows of slice b, streaming 64 queries (q, dO, lse, delta) at a
// time; P^T and dS^T are formed per warp, dV += P^T dO and dK += dS^T Q stay in fragments.
// With dq (the one-pass backward), each query tile's dQ += dS K over the block's 64 keys too,
// added to dq's f32 rows (b * T + t, D wide) by atomics across the key blocks: no second
// computation of the scores and dP in a dQ pass.
template <typename T, int DM>
__global__ void __launch_bounds__(kWarps * 32)
    attention_bwd_kv_tc(const T* g, const T* q, const T* k, const T* v, const uint8_t* mask,
                        const float* lse, const float* delta, AttnLayout Lo, int64_t T_, int64_t S,
                        int D, int E,
                        float scale, rng::DropoutDraw drop, int64_t blocks_per_slice, T* gk,
                        T* gv, float* dq) {
  if constexpr (!tc_built<T>()) {
    __trap();
  } else {
    extern __shared__ __align__(128) unsigned char smem[];
    const Smem L(D, E, sizeof(T), true);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int r = lane / 2, half = lane % 2;
    const Tiles<T> tl(smem, L, warp);
    T *ks = tl.a, *vs = tl.b, *qs = tl.c, *gs = tl.d, *pt = tl.p, *dst = tl.u;
    float *ls = tl.rows, *dls = tl.rows + kCols, *sf = tl.s, *dpf = tl.t, *stage = tl.o;
    const int64_t b = blockIdx.x / blocks_per_slice;
    const int64_t j0 = (blockIdx.x % blocks_per_slice) * kRows;
    Lo.seek(b, q, k, v, g);
    if (mask) mask += (b / Lo.mask_per) * S;
    load_rows(k, Lo.k.st, j0, S, D, ks, L.ldd, kRows);
    load_rows(v, Lo.v.st, j0, S, E, vs, L.lde, kRows);
    const int64_t j = j0 + warp * 16 + r;  // this lane's key
    const bool live = j < S && (!mask || mask[j]);
    // dropout: the P^T tile holds p or 0 and dV takes the 1/(1-p) in f32 (as the forward);
    // a lane walks a column, a new Philox block per query
    const float kept = float(drop.scale);
    FragC<T> dk[DM / 16], dv[DM / 16];
#pragma unroll
    for (int n = 0; n < DM / 16; ++n) {
      wmma::fill_fragment(dk[n], 0.f);
      wmma::fill_fragment(dv[n], 0.f);
    }
    const T* kw = ks + warp * 16 * L.ldd;
    const T* vw = vs + warp * 16 * L.lde;
    for (int64_t i0 = 0; i0 < T_; i0 += kCols) {
      __syncthreads();
      load_rows(q, Lo.q.st, i0, T_, D, qs, L.ldd, kCols);
      load_rows(g, Lo.g.st, i0, T_, E, gs, L.lde, kCols);
      for (int i = threadIdx.x; i < kCols; i += blockDim.x) {
        ls[i] = i0 + i < T_ ? lse[b * T_ + i0 + i] : -INFINITY;
        dls[i] = i0 + i < T_ ? delta[b * T_ + i0 + i] : 0.f;
      }
      __syncthreads();
      rows_times_tile_t(kw, L.ldd, qs, L.ldd, D, sf, L.lds);   // S^T = K Q^T
      rows_times_tile_t(vw, L.lde, gs, L.lde, E, dpf, L.lds);  // dP^T = V dO^T
      __syncwarp();
      for (int c = half; c < kCols; c += 2) {
        const float li = ls[c];
        const float p = (live && li != -INFINITY) ? expf(sf[r * L.lds + c] * scale - li) : 0.f;
        const bool keep =
            !drop.active() || drop.keep(uint64_t(b * T_ + i0 + c) * uint64_t(S) + uint64_t(j));
        pt[r * L.ldp + c] = convert<T>(keep ? p : 0.f);
        const float dp = keep ? dpf[r * L.lds + c] * kept : 0.f;  // selects, as nn::dropout
        dst[r * L.ldp + c] = convert<T>(p * (dp - dls[c]));
      }
      __syncwarp();
      tile_times_rows<T, DM>(pt, L.ldp, gs, L.lde, E, dv);   // dV += P^T dO
      tile_times_rows<T, DM>(dst, L.ldp, qs, L.ldd, D, dk);  // dK += dS^T Q
      if (dq) {
        // this warp's 16 queries: dS (16 x 64 keys) is the transpose of the four warps' dS^T
        // tiles' columns [16 warp, +16), read in place; staged 16 x 16 at a time in the
        // warp's score tile (its P^T use is done)
        __syncthreads();  // every warp's dS^T tile written
        const int64_t q0 = i0 + warp * 16;
        for (int n = 0; n < D / 16; ++n) {
          FragC<T> acc;
          wmma::fill_fragment(acc, 0.f);
#pragma unroll
          for (int w = 0; w < kWarps; ++w)
            mma_k<T, false, true>(acc, Tiles<T>(smem, L, w).u + warp * 16, L.ldp,
                                  ks + w * 16 * L.ldd + n * 16, L.ldd, 16);
          wmma::store_matrix_sync(sf, acc, 16, wmma::mem_row_major);
          __syncwarp();
          for (int e = lane; e < 256; e += 32) {
            const int64_t t = q0 + e / 16;
            if (t < T_) atomicAdd(dq + (b * T_ + t) * D + n * 16 + e % 16, sf[e]);
          }
          __syncwarp();
        }
      }
    }
    // (the results' staging tile spans the score tiles, where f32 keeps its dS^T: the other
    // warps' last dQ products must be done with it)
    if (dq) __syncthreads();
    write_rows<T, DM>(dk, scale, D, stage, L.ldo, gk + Lo.slice(Lo.gk, b), Lo.gk.st, j0 + warp * 16,
                      S, lane);
    write_rows<T, DM>(dv, kept, E, stage, L.ldo, gv + Lo.slice(Lo.gv, b), Lo.gv.st, j0 + warp * 16,
                      S, lane);
  }
}

// dQ: block = 64 query rows of slice b, streaming keys and values; dQ += dS K in fragments.
template <typename T, int DM>
__global__ void __launch_bounds__(kWarps * 32)
    attention_bwd_q_tc(const T* g, const T* q, const T* k, const T* v, const uint8_t* mask,
                       const float* lse, const float* delta, AttnLayout Lo, int64_t T_, int64_t S,
                       int D, int E,
                       float scale, rng::DropoutDraw drop, int64_t blocks_per_slice, T* gq) {
  if constexpr (!tc_built<T>()) {
    __trap();
  } else {
    extern __shared__ __align__(128) unsigned char smem[];
    const Smem L(D, E, sizeof(T), true);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int r = lane / 2, half = lane % 2;
    const Tiles<T> tl(smem, L, warp);
    T *qs = tl.a, *gs = tl.b, *ks = tl.c, *vs = tl.d, *dst = tl.u;
    float *live = tl.rows, *sf = tl.s, *dpf = tl.t, *stage = tl.o;
    const int64_t b = blockIdx.x / blocks_per_slice;
    const int64_t t0 = (blockIdx.x % blocks_per_slice) * kRows;
    Lo.seek(b, q, k, v, g);
    if (mask) mask += (b / Lo.mask_per) * S;
    load_rows(q, Lo.q.st, t0, T_, D, qs, L.ldd, kRows);
    load_rows(g, Lo.g.st, t0, T_, E, gs, L.lde, kRows);
    const int64_t t = t0 + warp * 16 + r;
    const float li = t < T_ ? lse[b * T_ + t] : -INFINITY;
    const float dli = t < T_ ? delta[b * T_ + t] : 0.f;
    rng::DropoutWalk walk(drop);
    const float kept = float(drop.scale);
    const uint64_t row0 = uint64_t(b * T_ + t) * uint64_t(S);
    FragC<T> dq[DM / 16];
#pragma unroll
    for (int n = 0; n < DM / 16; ++n) wmma::fill_fragment(dq[n], 0.f);
    const T* qw = qs + warp * 16 * L.ldd;
    const T* gw = gs + warp * 16 * L.lde;
    for (int64_t j0 = 0; j0 < S; j0 += kCols) {
      __syncthreads();
      load_rows(k, Lo.k.st, j0, S, D, ks, L.ldd, kCols);
      load_rows(v, Lo.v.st, j0, S, E, vs, L.lde, kCols);
      for (int i = threadIdx.x; i < kCols; i += blockDim.x)
        live[i] = (j0 + i < S && (!mask || mask[j0 + i])) ? 1.f : 0.f;
      __syncthreads();
      rows_times_tile_t(qw, L.ldd, ks, L.ldd, D, sf, L.lds);   // S = Q K^T
      rows_times_tile_t(gw, L.lde, vs, L.lde, E, dpf, L.lds);  // dP = dO V^T
      __syncwarp();
      for (int c = half; c < kCols; c += 2) {
        const float p =
            (live[c] != 0.f && li != -INFINITY) ? expf(sf[r * L.lds + c] * scale - li) : 0.f;
        float dp = dpf[r * L.lds + c];
        if (drop.active()) dp = walk.keep(row0 + uint64_t(j0 + c)) ? dp * kept : 0.f;
        dst[r * L.ldp + c] = convert<T>(p * (dp - dli));
      }
      __syncwarp();
      tile_times_rows<T, DM>(dst, L.ldp, ks, L.ldd, D, dq);  // dQ += dS K
    }
    write_rows<T, DM>(dq, scale, D, stage, L.ldo, gq + Lo.slice(Lo.gq, b), Lo.gq.st, t0 + warp * 16,
                      T_, lane);
  }
}

// The one-pass backward's dQ: its f32 sums (rows b * T + t, D wide) times the scale, into
// grad_q's layout.
template <typename T>
__global__ void attention_dq_store(const float* dq, AttnLayout Lo, int64_t T_, int D, float scale,
                                   int64_t n, T* gq) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t row = i / D, b = row / T_, t = row % T_;
    gq[Lo.slice(Lo.gq, b) + t * Lo.gq.st + i % D] = convert<T>(dq[i] * scale);
  }
}

// What the current device offers the tensor-core kernels, looked up once per device.
struct TcDevice {
  bool f16 = false, sm80 = false;  // the f16 / bf16 and f32 kernels run (sm_70+ / sm_80+ code)
  size_t optin = 0;                // shared memory a block may opt in to
};
const TcDevice& tc_device() {
  static std::mutex mu;
  static std::map<int, TcDevice> known;
  int dev = 0;
  NN_CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(mu);
  auto it = known.find(dev);
  if (it != known.end()) return it->second;
  int major = 0, optin = 0;
  NN_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  NN_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  TcDevice d;
  d.optin = size_t(optin);
  d.f16 = major >= 7;
  if (d.f16) {
    // The code that runs decides, not the GPU: an sm_70 build on an sm_90 GPU runs its
    // compute_70 PTX, where the bf16 and f32 kernels are traps.
    cudaFuncAttributes fa{};
    NN_CUDA_CHECK(cudaFuncGetAttributes(&fa, attention_fwd_tc<__nv_bfloat16, 64>));
    d.sm80 = fa.ptxVersion >= 80;
  }
  return known.emplace(dev, d).first->second;
}

// LIBNN_CUDA_ATTENTION: unset, the tensor-core kernels with the backward in two passes (dQ,
// then dK and dV); `simt`, the plain kernel everywhere; `one-pass-backward`, the tensor-core
// kernels with dQ summed in the dK/dV pass. Read at each launch (a test switches it); another
// value leaves the default and is said once, not ignored in silence.
enum class AttnPath { two_pass, simt, one_pass };
AttnPath attention_path() {
  const char* env = std::getenv("LIBNN_CUDA_ATTENTION");
  if (!env || !*env) return AttnPath::two_pass;
  if (std::strcmp(env, "simt") == 0) return AttnPath::simt;
  if (std::strcmp(env, "one-pass-backward") == 0) return AttnPath::one_pass;
  static std::once_flag said;
  std::call_once(said, [env] {
    std::fprintf(stderr, "libnn: LIBNN_CUDA_ATTENTION=%s ignored (simt, one-pass-backward, or "
                 "unset): the tensor-core kernels stay on, the backward in two passes\n", env);
  });
  return AttnPath::two_pass;
}
bool simt_only() { return attention_path() == AttnPath::simt; }

// Shared memory the kernels need for these head dims, or 0 when the tensor-core path does not
// apply (dtype, head dims, alignment, the device, or LIBNN_CUDA_ATTENTION=simt).
size_t tc_smem(DType t, int64_t D, int64_t E, bool backward,
               std::initializer_list<const void*> ptrs, std::initializer_list<AttnRows> rows) {
  if (simt_only()) return 0;  // (first: any attention launch says another value)
  if (t != DType::f16 && t != DType::bf16 && t != DType::f32) return 0;
  if (D <= 0 || E <= 0 || D % 16 || E % 16 || D > kAttentionMaxDim || E > kAttentionMaxDim)
    return 0;
  for (const void* p : ptrs)
    if (!aligned_to(p, 16)) return 0;
  const int elem = int(element_size(t));
  const int vec = 16 / elem;
  for (const AttnRows& r : rows)  // every row 16-byte aligned too
    if (r.sn % vec || r.sh % vec || r.st % vec) return 0;
  const TcDevice& dev = tc_device();
  if (!dev.f16 || (t != DType::f16 && !dev.sm80)) return 0;
  // (f32 at head dims 128: 153 KB forward and 171 KB backward, within an H100's 227 KB)
  const size_t need = Smem(int(D), int(E), elem, backward).total;
  return need <= dev.optin ? need : 0;
}

// The one-pass backward's dQ sums: B * T rows of D floats.
size_t dq_work_bytes(int64_t B, int64_t T, int64_t D) { return size_t(B * T * D) * sizeof(float); }

template <typename F>
void dispatch_tc(DType t, int64_t D, int64_t E, F&& f) {
  const bool narrow = D <= 64 && E <= 64;
  if (t == DType::f16) narrow ? f.template operator()<__half, 64>() : f.template operator()<__half, 128>();
  else if (t == DType::bf16)
    narrow ? f.template operator()<__nv_bfloat16, 64>() : f.template operator()<__nv_bfloat16, 128>();
  else narrow ? f.template operator()<float, 64>() : f.template operator()<float, 128>();
}

}  // namespace

size_t attention_backward_workspace_bytes(DType t, int64_t B, int64_t T, int64_t D) {
  if (t == DType::f64 || attention_path() != AttnPath::one_pass) return 0;
  return dq_work_bytes(B, T, D);
}

bool launch_attention_forward_tc(DType t, const void* q, const void* k, const void* v,
                                 const uint8_t* mask, const AttnLayout& L, int64_t B, int64_t T,
                                 int64_t S, int64_t D, int64_t E, double scale,
                                 const rng::DropoutDraw& drop, void* out, void* lse,
                                 cudaStream_t s) {
  const size_t smem = tc_smem(t, D, E, false, {q, k, v, out}, {L.q, L.k, L.v, L.o});
  if (smem == 0) return false;
  dispatch_tc(t, D, E, [&]<typename Ty, int DM>() {
    auto kernel = attention_fwd_tc<Ty, DM>;
    allow_dynamic_smem(kernel, smem, "attention");
    const int64_t per = ceil_div(T, kRows);
    kernel<<<blocks_exact(B * ceil_div(T, kRows), "attention"), kWarps * 32, smem, s>>>(
        static_cast<const Ty*>(q), static_cast<const Ty*>(k), static_cast<const Ty*>(v), mask, L,
        T, S, int(D), int(E), float(scale), drop, per, static_cast<Ty*>(out), static_cast<float*>(lse));
    NN_CUDA_CHECK_LAUNCH();
  });
  return true;
}

bool launch_attention_backward_tc(DType t, const void* grad_out, const void* q, const void* k,
                                  const void* v, const uint8_t* mask, const void* lse,
                                  const void* delta, const AttnLayout& L, int64_t B, int64_t T,
                                  int64_t S, int64_t D, int64_t E, double scale,
                                  const rng::DropoutDraw& drop, void* grad_q, void* grad_k,
                                  void* grad_v, float* dq_work, cudaStream_t s) {
  const size_t smem = tc_smem(t, D, E, true, {grad_out, q, k, v, grad_q, grad_k, grad_v},
                              {L.g, L.q, L.k, L.v, L.gq, L.gk, L.gv});
  if (smem == 0) return false;
  if (dq_work) NN_CUDA_CHECK(cudaMemsetAsync(dq_work, 0, dq_work_bytes(B, T, D), s));
  dispatch_tc(t, D, E, [&]<typename Ty, int DM>() {
    const Ty* g = static_cast<const Ty*>(grad_out);
    const float* l = static_cast<const float*>(lse);
    const float* dl = static_cast<const float*>(delta);
    if (B * T > 0 && !dq_work) {
      auto kernel = attention_bwd_q_tc<Ty, DM>;
      allow_dynamic_smem(kernel, smem, "attention_backward");
      kernel<<<blocks_exact(B * ceil_div(T, kRows), "attention_backward"), kWarps * 32, smem, s>>>(
          g, static_cast<const Ty*>(q), static_cast<const Ty*>(k), static_cast<const Ty*>(v),
          mask, l, dl, L, T, S, int(D), int(E), float(scale), drop, ceil_div(T, kRows),
          static_cast<Ty*>(grad_q));
      NN_CUDA_CHECK_LAUNCH();
    }
    if (B * S > 0) {
      auto kernel = attention_bwd_kv_tc<Ty, DM>;
      allow_dynamic_smem(kernel, smem, "attention_backward");
      kernel<<<blocks_exact(B * ceil_div(S, kRows), "attention_backward"), kWarps * 32, smem, s>>>(
          g, static_cast<const Ty*>(q), static_cast<const Ty*>(k), static_cast<const Ty*>(v),
          mask, l, dl, L, T, S, int(D), int(E), float(scale), drop, ceil_div(S, kRows),
          static_cast<Ty*>(grad_k), static_cast<Ty*>(grad_v), dq_work);
      NN_CUDA_CHECK_LAUNCH();
    }
    if (B * T > 0 && dq_work) {
      attention_dq_store<Ty><<<grid_for(B * T * D), kThreads, 0, s>>>(
          dq_work, L, T, int(D), float(scale), B * T * D, static_cast<Ty*>(grad_q));
      NN_CUDA_CHECK_LAUNCH();
    }
  });
  return true;
}

}  // namespace nn::kernels
