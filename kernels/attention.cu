#include "kernels/attention.cuh"
#include "kernels/common.cuh"
#include "kernels/math.cuh"

namespace nn::kernels {
namespace {

constexpr int kRowsPerBlock = 128;  // one thread per query (or key) row
constexpr int kTile = 32;           // keys (or queries) staged in shared memory at a time
// Every shared array is in the dynamic buffer (none static), so the launch's size is the
// kernel's whole use and allow_dynamic_smem's opt-in is exact: see smem_bytes().

// Rows [r0, r0 + n) of a slice (rows `ld` apart, `cols` wide) into a packed shared tile.
template <typename T, typename A>
__device__ __forceinline__ void load_tile(const T* src, int64_t ld, int64_t r0, int n, int cols, A* tile) {
  for (int i = threadIdx.x; i < n * cols; i += blockDim.x)
    tile[i] = A(load(src[(r0 + i / cols) * ld + i % cols]));
}

// Forward: thread = query row t of slice b.
template <typename T, int DM>
__global__ void attention_fwd(const T* q, const T* k, const T* v, const uint8_t* mask,
                              AttnLayout L, int64_t T_, int64_t S, int D, int E, acc_t<T> scale,
                              rng::DropoutDraw drop, int64_t blocks_per_slice, T* out,
                              acc_t<T>* lse) {
  using A = acc_t<T>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  A* ks = reinterpret_cast<A*>(smem_raw);  // kTile x D
  A* vs = ks + kTile * D;                  // kTile x E
  uint8_t* ms = reinterpret_cast<uint8_t*>(vs + kTile * E);  // kTile
  const int64_t b = blockIdx.x / blocks_per_slice;
  const int64_t t = (blockIdx.x % blocks_per_slice) * blockDim.x + threadIdx.x;
  const bool active = t < T_;
  L.seek(b, q, k, v);
  if (mask) mask += (b / L.mask_per) * S;
  A qr[DM], o[DM];
  A m = A(-INFINITY), l = A(0);
  rng::DropoutWalk walk(drop);  // this row's dropout multipliers (the sums l keep every key)
  const A kept = A(drop.scale);
  const uint64_t row0 = uint64_t(b * T_ + t) * uint64_t(S);
#pragma unroll
  for (int d = 0; d < DM; ++d) {
    qr[d] = (active && d < D) ? A(load(q[t * L.q.st + d])) * scale : A(0);
    o[d] = A(0);
  }
  for (int64_t j0 = 0; j0 < S; j0 += kTile) {
    const int n = S - j0 < kTile ? int(S - j0) : kTile;
    load_tile(k, L.k.st, j0, n, D, ks);
    load_tile(v, L.v.st, j0, n, E, vs);
    for (int i = threadIdx.x; i < n; i += blockDim.x) ms[i] = mask ? mask[j0 + i] : 1;
    __syncthreads();
    if (active) {
      for (int j = 0; j < n; ++j) {
        if (!ms[j]) continue;
        A s = 0;
#pragma unroll
        for (int d = 0; d < DM; ++d)
          if (d < D) s += qr[d] * ks[j * D + d];
        if (s > m) {  // rescale what was accumulated under the old maximum
          const A corr = m_exp(m - s);
          l *= corr;
#pragma unroll
          for (int e = 0; e < DM; ++e) o[e] *= corr;
          m = s;
        }
        const A p = s == A(-INFINITY) ? A(0) : m_exp(s - m);  // as a masked key
        l += p;
        const A pz = drop.active() ? (walk.keep(row0 + uint64_t(j0 + j)) ? p * kept : A(0)) : p;
#pragma unroll
        for (int e = 0; e < DM; ++e)
          if (e < E) o[e] += pz * vs[j * E + e];
      }
    }
    __syncthreads();
  }
  if (!active) return;
  // all keys masked: zeros (l is 0 only then; a NaN or infinite score leaves l NaN, and NaN
  // goes on to the output)
  const A inv = l == A(0) ? A(0) : A(1) / l;
#pragma unroll
  for (int e = 0; e < DM; ++e)
    if (e < E) out[L.slice(L.o, b) + t * L.o.st + e] = convert<T>(o[e] * inv);
  lse[b * T_ + t] = l == A(0) ? A(-INFINITY) : m + m_log(l);
}

// delta[r] = dot(dO[r], O[r]) for row r = b * T + t: the per-row term of the softmax backward.
template <typename T>
__global__ void attention_delta(const T* g, const T* o, AttnLayout L, int64_t T_, int64_t rows,
                                int E, acc_t<T>* delta) {
  const int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  const int64_t b = r / T_, t = r % T_;
  g += L.slice(L.g, b) + t * L.g.st;
  o += L.slice(L.o, b) + t * L.o.st;
  acc_t<T> s = 0;
  for (int e = 0; e < E; ++e) s += acc_t<T>(load(g[e])) * acc_t<T>(load(o[e]));
  delta[r] = s;
}

// dQ: thread = query row; streams keys and values.
template <typename T, int DM>
__global__ void attention_bwd_q(const T* g, const T* q, const T* k, const T* v,
                                const uint8_t* mask, const acc_t<T>* lse,
                                const acc_t<T>* delta, AttnLayout L, int64_t T_, int64_t S, int D, int E,
                                acc_t<T> scale, rng::DropoutDraw drop, int64_t blocks_per_slice,
                                T* gq) {
  using A = acc_t<T>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  A* ks = reinterpret_cast<A*>(smem_raw);
  A* vs = ks + kTile * D;
  uint8_t* ms = reinterpret_cast<uint8_t*>(vs + kTile * E);  // kTile
  const int64_t b = blockIdx.x / blocks_per_slice;
  const int64_t t = (blockIdx.x % blocks_per_slice) * blockDim.x + threadIdx.x;
  const bool active = t < T_;
  L.seek(b, q, k, v, g);
  if (mask) mask += (b / L.mask_per) * S;
  A qr[DM], gr[DM], dq[DM];
#pragma unroll
  for (int d = 0; d < DM; ++d) {
    qr[d] = (active && d < D) ? A(load(q[t * L.q.st + d])) * scale : A(0);
    gr[d] = (active && d < E) ? A(load(g[t * L.g.st + d])) : A(0);
    dq[d] = A(0);
  }
  const A l = active ? lse[b * T_ + t] : A(0), dl = active ? delta[b * T_ + t] : A(0);
  const bool live = active && l != A(-INFINITY);
  rng::DropoutWalk walk(drop);
  const A kept = A(drop.scale);
  const uint64_t row0 = uint64_t(b * T_ + t) * uint64_t(S);
  for (int64_t j0 = 0; j0 < S; j0 += kTile) {
    const int n = S - j0 < kTile ? int(S - j0) : kTile;
    load_tile(k, L.k.st, j0, n, D, ks);
    load_tile(v, L.v.st, j0, n, E, vs);
    for (int i = threadIdx.x; i < n; i += blockDim.x) ms[i] = mask ? mask[j0 + i] : 1;
    __syncthreads();
    if (live) {
      for (int j = 0; j < n; ++j) {
        if (!ms[j]) continue;
        A s = 0, dp = 0;
#pragma unroll
        for (int d = 0; d < DM; ++d) {
          if (d < D) s += qr[d] * ks[j * D + d];
          if (d < E) dp += gr[d] * vs[j * E + d];
        }
        if (drop.active()) dp = walk.keep(row0 + uint64_t(j0 + j)) ? dp * kept : A(0);
        const A ds = m_exp(s - l) * (dp - dl);
#pragma unroll
        for (int d = 0; d < DM; ++d)
          if (d < D) dq[d] += ds * ks[j * D + d];
      }
    }
    __syncthreads();
  }
  if (!active) return;
#pragma unroll
  for (int d = 0; d < DM; ++d)
    if (d < D) gq[L.slice(L.gq, b) + t * L.gq.st + d] = convert<T>(dq[d] * scale);
}

// dK, dV: thread = key row; streams queries, output gradients and row statistics.
template <typename T, int DM>
__global__ void attention_bwd_kv(const T* g, const T* q, const T* k, const T* v,
                                 const uint8_t* mask, const acc_t<T>* lse,
                                 const acc_t<T>* delta, AttnLayout L, int64_t T_, int64_t S, int D, int E,
                                 acc_t<T> scale, rng::DropoutDraw drop, int64_t blocks_per_slice,
                                 T* gk, T* gv) {
  using A = acc_t<T>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  A* qs = reinterpret_cast<A*>(smem_raw);  // kTile x D
  A* gs = qs + kTile * D;                  // kTile x E
  A* ls = gs + kTile * E;                  // kTile
  A* dls = ls + kTile;                     // kTile
  const int64_t b = blockIdx.x / blocks_per_slice;
  const int64_t j = (blockIdx.x % blocks_per_slice) * blockDim.x + threadIdx.x;
  L.seek(b, q, k, v, g);
  if (mask) mask += (b / L.mask_per) * S;
  const bool active = j < S && (!mask || mask[j < S ? j : 0]);
  A kr[DM], vr[DM], dk[DM], dv[DM];
  const A kept = A(drop.scale);  // (a thread walks a column: a new Philox block per query)
#pragma unroll
  for (int d = 0; d < DM; ++d) {
    kr[d] = (active && d < D) ? A(load(k[j * L.k.st + d])) : A(0);
    vr[d] = (active && d < E) ? A(load(v[j * L.v.st + d])) : A(0);
    dk[d] = dv[d] = A(0);
  }
  for (int64_t i0 = 0; i0 < T_; i0 += kTile) {
    const int n = T_ - i0 < kTile ? int(T_ - i0) : kTile;
    load_tile(q, L.q.st, i0, n, D, qs);
    load_tile(g, L.g.st, i0, n, E, gs);
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
      ls[i] = lse[b * T_ + i0 + i];
      dls[i] = delta[b * T_ + i0 + i];
    }
    __syncthreads();
    if (active) {
      for (int i = 0; i < n; ++i) {
        if (ls[i] == A(-INFINITY)) continue;
        A s = 0, dp = 0;
#pragma unroll
        for (int d = 0; d < DM; ++d) {
          if (d < D) s += qs[i * D + d] * kr[d];
          if (d < E) dp += gs[i * E + d] * vr[d];
        }
        const A p = m_exp(s * scale - ls[i]);
        A pz = p;
        if (drop.active()) {  // selects: a dropped term is 0 whatever it held
          const bool keep = drop.keep(uint64_t(b * T_ + i0 + i) * uint64_t(S) + uint64_t(j));
          pz = keep ? pz * kept : A(0);
          dp = keep ? dp * kept : A(0);
        }
        const A ds = p * (dp - dls[i]);
#pragma unroll
        for (int d = 0; d < DM; ++d) {
          if (d < E) dv[d] += pz * gs[i * E + d];
          if (d < D) dk[d] += ds * qs[i * D + d];
        }
      }
    }
    __syncthreads();
  }
  if (j >= S) return;
#pragma unroll
  for (int d = 0; d < DM; ++d) {
    if (d < D) gk[L.slice(L.gk, b) + j * L.gk.st + d] = convert<T>(dk[d] * scale);
    if (d < E) gv[L.slice(L.gv, b) + j * L.gv.st + d] = convert<T>(dv[d]);
  }
}

// The dynamic shared memory of the kernels above: the staged kTile x D and kTile x E tiles, then
// the forward's and dQ's kTile mask bytes, or dK/dV's kTile lse and delta values.
template <typename A>
size_t smem_bytes(int64_t D, int64_t E, bool kv) {
  const size_t tiles = size_t(kTile) * size_t(D + E) * sizeof(A);
  return tiles + (kv ? 2 * kTile * sizeof(A) : kTile);
}

// Picks the register-array size (64 or 128) that fits the head dims.
template <typename F>
void dispatch_dims(DType t, int64_t D, int64_t E, const char* op, F&& f) {
  NN_CHECK(D <= kAttentionMaxDim && E <= kAttentionMaxDim, op, ": head dims up to ",
           kAttentionMaxDim, " on CUDA, got ", D, " and ", E);
  dispatch_float(t, op, [&]<typename T>() {
    if (D <= 64 && E <= 64) f.template operator()<T, 64>();
    else f.template operator()<T, 128>();
  });
}

}  // namespace

void launch_attention_forward(DType t, const void* q, const void* k, const void* v,
                              const uint8_t* mask, const AttnLayout& L, int64_t B, int64_t T,
                              int64_t S, int64_t D, int64_t E, double scale,
                              const rng::DropoutDraw& drop, void* out, void* lse, cudaStream_t s) {
  if (B * T == 0) return;
  if (launch_attention_forward_tc(t, q, k, v, mask, L, B, T, S, D, E, scale, drop, out, lse, s))
    return;
  dispatch_dims(t, D, E, "attention", [&]<typename Ty, int DM>() {
    using A = acc_t<Ty>;
    const size_t smem = smem_bytes<A>(D, E, false);
    auto kernel = attention_fwd<Ty, DM>;
    allow_dynamic_smem(kernel, smem, "attention");  // f64, head dims over 96
    kernel<<<blocks_exact(B * ceil_div(T, kRowsPerBlock), "attention"), kRowsPerBlock, smem, s>>>(
        static_cast<const Ty*>(q), static_cast<const Ty*>(k), static_cast<const Ty*>(v), mask, L, T,
        S, int(D), int(E), A(scale), drop, ceil_div(T, kRowsPerBlock), static_cast<Ty*>(out),
        static_cast<A*>(lse));
    NN_CUDA_CHECK_LAUNCH();
  });
}

void launch_attention_backward(DType t, const void* grad_out, const void* q, const void* k,
                               const void* v, const uint8_t* mask, const void* out,
                               const void* lse, const AttnLayout& L, int64_t B, int64_t T,
                               int64_t S, int64_t D,
                               int64_t E, double scale, const rng::DropoutDraw& drop, void* grad_q,
                               void* grad_k, void* grad_v, void* delta, float* dq_work,
                               cudaStream_t s) {
  dispatch_dims(t, D, E, "attention_backward", [&]<typename Ty, int DM>() {
    using A = acc_t<Ty>;
    const Ty* g = static_cast<const Ty*>(grad_out);
    A* dl = static_cast<A*>(delta);
    const A* l = static_cast<const A*>(lse);
    if (B * T > 0) {
      attention_delta<Ty><<<grid_for(B * T), kThreads, 0, s>>>(g, static_cast<const Ty*>(out), L, T,
                                                              B * T, int(E), dl);
      NN_CUDA_CHECK_LAUNCH();
    }
    if (launch_attention_backward_tc(t, grad_out, q, k, v, mask, lse, delta, L, B, T, S, D, E,
                                     scale, drop, grad_q, grad_k, grad_v, dq_work, s))
      return;
    if (B * T > 0) {
      auto kernel = attention_bwd_q<Ty, DM>;
      const size_t smem = smem_bytes<A>(D, E, false);
      allow_dynamic_smem(kernel, smem, "attention_backward");
      kernel<<<blocks_exact(B * ceil_div(T, kRowsPerBlock), "attention_backward"), kRowsPerBlock, smem, s>>>(
          g, static_cast<const Ty*>(q), static_cast<const Ty*>(k), static_cast<const Ty*>(v), mask, l, dl,
          L, T, S, int(D), int(E), A(scale), drop, ceil_div(T, kRowsPerBlock), static_cast<Ty*>(grad_q));
      NN_CUDA_CHECK_LAUNCH();
    }
    if (B * S > 0) {
      auto kernel = attention_bwd_kv<Ty, DM>;
      const size_t smem = smem_bytes<A>(D, E, true);
      allow_dynamic_smem(kernel, smem, "attention_backward");
      kernel<<<blocks_exact(B * ceil_div(S, kRowsPerBlock), "attention_backward"), kRowsPerBlock, smem, s>>>(
          g, static_cast<const Ty*>(q), static_cast<const Ty*>(k), static_cast<const Ty*>(v), mask, l, dl,
          L, T, S, int(D), int(E), A(scale), drop, ceil_div(S, kRowsPerBlock), static_cast<Ty*>(grad_k),
          static_cast<Ty*>(grad_v));
      NN_CUDA_CHECK_LAUNCH();
    }
  });
}

}  // namespace nn::kernels
