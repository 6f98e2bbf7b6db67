#include "kernels/elementwise.cuh"
#include "kernels/int_math.h"
#include "kernels/math.cuh"
#include "kernels/philox.h"

#include <algorithm>
#include <tuple>

namespace nn::kernels {
namespace {

template <typename T, int V>
struct alignas(sizeof(T) * V) Vec {
  T v[V];
};

// out[i] = f(i, in...) over a contiguous range, V elements per thread with vector access. out
// may be one of the inputs (in-place ops: mul_, add_): each element is read, then written, by
// one thread and by no other, so the pointers carry no __restrict__ (which would promise the
// compiler they never alias).
template <int V, typename TO, typename F, typename... TI>
__global__ void map_contiguous(TO* out, int64_t n, F f, const TI*... in) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x * V;
  for (int64_t i = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * V; i < n; i += stride) {
    if (V > 1 && i + V <= n) {
      Vec<TO, V> o;
      // each input loaded as one vector
      [[maybe_unused]] auto vin = [&](const auto* p) { return *reinterpret_cast<const Vec<std::remove_cv_t<std::remove_pointer_t<decltype(p)>>, V>*>(p + i); };
      std::tuple<Vec<TI, V>...> vals{vin(in)...};
#pragma unroll
      for (int k = 0; k < V; ++k)
        o.v[k] = std::apply([&](const auto&... x) { return f(x.v[k]...); }, vals);
      *reinterpret_cast<Vec<TO, V>*>(out + i) = o;
    } else {
      for (int64_t j = i; j < n && j < i + V; ++j) out[j] = f(in[j]...);
    }
  }
}

// The same over arbitrary strides (broadcast and transposed operands).
template <int N, typename TO, typename F, typename... TI>
__global__ void map_strided(TO* out, int64_t n, Geom<N> g, F f, const TI*... in) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    int64_t off[N];
    offsets(g, i, off);
    int k = 1;
    [[maybe_unused]] auto at = [&](const auto* p) { return p[off[k++]]; };
    // evaluation order of a braced list is left to right
    std::tuple<TI...> vals{at(in)...};
    out[off[0]] = std::apply(f, vals);
  }
}

// The same when the innermost dim is long (a bias broadcast over rows, a permute that keeps
// the last dim): one warp per row, row offsets computed once per row, lanes along the row (no
// division per element, accesses along the row coalesced when its strides are 0 or 1).
template <int N, typename TO, typename F, typename... TI>
__global__ void map_rows(TO* out, int64_t rows, Geom<N> g, F f, const TI*... in) {
  const int64_t W = g.shape[g.ndim - 1];
  const int lane = threadIdx.x % 32;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / 32);
  for (int64_t r = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; r < rows; r += warps) {
    int64_t base[N];
    row_offsets(g, r, base);
    for (int64_t c = lane; c < W; c += 32) {
      int k = 1;
      [[maybe_unused]] auto at = [&](const auto* p) {
        const int64_t o = base[k] + c * g.stride[k][g.ndim - 1];
        ++k;
        return p[o];
      };
      std::tuple<TI...> vals{at(in)...};
      out[base[0] + c * g.stride[0][g.ndim - 1]] = std::apply(f, vals);
    }
  }
}

// One input whose unit stride runs along another dim (d) than out's innermost, or the other
// way round (a transpose, a permute into another memory order): map_rows would read or write
// one of the two a 32-byte sector per element. Instead kTile x kTile tiles of dim d (a) and
// the innermost (b) pass through shared memory, read with the lanes along the input's unit dim
// and written with them along the output's, both coalesced (the padded row keeps either
// direction free of bank conflicts). A block per tile, grid-stride over the tiles.
constexpr int kTile = 32, kTileRows = 8;
template <typename TO, typename TI, typename F>
__global__ void map_tiled(TO* out, const TI* in, Geom<2> g, int d, int64_t tiles_a,
                          int64_t tiles_b, int64_t units, F f) {
  __shared__ __align__(16) unsigned char raw[sizeof(TO) * kTile * (kTile + 1)];
  auto tile = reinterpret_cast<TO(*)[kTile + 1]>(raw);
  const int nd = g.ndim;
  const int64_t A = g.shape[d], B = g.shape[nd - 1];
  const bool in_along_b = g.stride[1][nd - 1] == 1;  // else the input runs along a, out along b
  const int x = threadIdx.x;
  for (int64_t u = blockIdx.x; u < units; u += gridDim.x) {
    const int64_t t = u % (tiles_a * tiles_b);
    const int64_t a0 = (t / tiles_b) * kTile, b0 = (t % tiles_b) * kTile;
    int64_t rest = u / (tiles_a * tiles_b), oo = 0, oi = 0;  // every dim but d and the innermost
    for (int k = nd - 2; k >= 0; --k) {
      if (k == d) continue;
      const int64_t idx = rest % g.shape[k];
      rest /= g.shape[k];
      oo += idx * g.stride[0][k];
      oi += idx * g.stride[1][k];
    }
    for (int j = threadIdx.y; j < kTile; j += kTileRows) {
      const int la = in_along_b ? j : x, lb = in_along_b ? x : j;
      if (a0 + la < A && b0 + lb < B)
        tile[la][lb] = f(in[oi + (a0 + la) * g.stride[1][d] + (b0 + lb) * g.stride[1][nd - 1]]);
    }
    __syncthreads();
    for (int j = threadIdx.y; j < kTile; j += kTileRows) {
      const int la = in_along_b ? x : j, lb = in_along_b ? j : x;
      if (a0 + la < A && b0 + lb < B)
        out[oo + (a0 + la) * g.stride[0][d] + (b0 + lb) * g.stride[0][nd - 1]] = tile[la][lb];
    }
    __syncthreads();  // the tile is read whole before the next one is loaded
  }
}

// The dim map_tiled pairs with the innermost, or -1 where tiles do not apply (both operands
// run along the same dim, or either extent is under 8).
inline int tiled_dim(const Geom<2>& g) {
  const int nd = g.ndim;
  if (nd < 2 || g.shape[nd - 1] < 8) return -1;
  const bool out_unit = g.stride[0][nd - 1] == 1, in_unit = g.stride[1][nd - 1] == 1;
  if (out_unit == in_unit) return -1;
  for (int d = 0; d < nd - 1; ++d)
    if (g.shape[d] >= 8 && g.stride[out_unit ? 1 : 0][d] == 1) return d;
  return -1;
}

template <typename TO, int N, typename F, typename... TI>
void launch_map(TO* out, int64_t n, bool contiguous, const Geom<N>& g, cudaStream_t s, F f,
                const TI*... in) {
  if (n == 0) return;
  if (contiguous) {
    constexpr int bytes = std::max({sizeof(TO), sizeof(TI)...});
    constexpr int V = bytes >= 16 ? 1 : int(16 / bytes);
    if (aligned_to(out, 16) && (aligned_to(in, 16) && ...)) {
      map_contiguous<V><<<grid_for(n, V), kThreads, 0, s>>>(out, n, f, in...);
    } else {
      map_contiguous<1><<<grid_for(n), kThreads, 0, s>>>(out, n, f, in...);
    }
    return;
  }
  if constexpr (sizeof...(TI) == 1) {
    if (const int d = tiled_dim(g); d >= 0) {
      int64_t outer = 1;
      for (int k = 0; k < g.ndim - 1; ++k)
        if (k != d) outer *= g.shape[k];
      const int64_t ta = ceil_div(g.shape[d], kTile), tb = ceil_div(g.shape[g.ndim - 1], kTile);
      const int64_t units = outer * ta * tb;
      map_tiled<<<grid_for(units, 1, 1), dim3(kTile, kTileRows), 0, s>>>(out, in..., g, d, ta, tb,
                                                                        units, f);
      NN_CUDA_CHECK_LAUNCH();
      return;
    }
  }
  if (g.ndim >= 1 && g.shape[g.ndim - 1] >= 32 &&
      (n / g.shape[g.ndim - 1] >= 1024 || g.shape[g.ndim - 1] <= 256)) {
    // a warp per row only when there are rows enough to fill the GPU (or rows short enough
    // that few warps finish them quickly): a broadcast scalar merges into one long row
    const int64_t rows = n / g.shape[g.ndim - 1];
    map_rows<N><<<grid_for(rows, 1, kThreads / 32), kThreads, 0, s>>>(out, rows, g, f, in...);
  } else {
    map_strided<N><<<grid_for(n), kThreads, 0, s>>>(out, n, g, f, in...);
  }
  NN_CUDA_CHECK_LAUNCH();
}

template <typename TD, typename TS>
struct CopyF {
  __device__ TD operator()(TS v) const { return convert<TD>(v); }
};
template <typename T>
struct FillF {
  T v;
  __device__ T operator()() const { return v; }
};
template <typename T>
struct UnaryF {
  UnaryOp op;
  unary_t<T> a, b;
  int64_t ia, ib;  // integer tensors: the scalars for int_unary
  __device__ T operator()(T x) const {
    if constexpr (std::is_integral_v<T>) {
      if (int_exact(op)) return T(int_unary(op, int64_t(x), ia, ib));  // kernels/int_math.h
    }
    return convert<T>(unary_value<unary_t<T>>(op, convert<unary_t<T>>(x), a, b));
  }
};
template <typename T>
struct UnaryBackwardF {
  UnaryOp op;
  acc_t<T> a;  // the op's scalar (leaky_relu's slope, elu's alpha)
  __device__ T operator()(T g, T v) const {
    using C = acc_t<T>;
    C gc = load(g), x = load(v), r = C(0);
    switch (op) {
      case UnaryOp::relu: r = x <= C(0) ? C(0) : gc; break;
      case UnaryOp::gelu: {
        C cdf = C(0.5) * (C(1) + m_erf(x * C(0.70710678118654752440)));
        C pdf = C(0.39894228040143267794) * m_exp(C(-0.5) * x * x);
        r = gc * (cdf + x * pdf);
        break;
      }
      case UnaryOp::tanh: r = gc * (C(1) - x * x); break;
      case UnaryOp::sigmoid: r = gc * x * (C(1) - x); break;
      case UnaryOp::silu: {
        const C s = C(1) / (C(1) + m_exp(-x));
        r = gc * s * (C(1) + x * (C(1) - s));
        break;
      }
      case UnaryOp::softplus:
        r = x * a > C(kSoftplusThreshold) ? gc : gc / (C(1) + m_exp(-x * a));
        break;
      case UnaryOp::leaky_relu: r = x > C(0) ? gc : gc * a; break;
      case UnaryOp::elu: r = x > C(0) ? gc : gc * a * m_exp(x); break;  // (NaN: NaN, as the CPU)
      default: break;
    }
    return convert<T>(r);
  }
};
template <typename T>
struct BinaryF {
  BinaryOp op;
  __device__ T operator()(T x, T y) const {
    using C = binary_t<T>;
    return convert<T>(binary_value<C>(op, convert<C>(x), convert<C>(y)));
  }
};
template <typename T, typename C>
struct WhereF {
  __device__ T operator()(C c, T x, T y) const { return load(c) != 0 ? x : y; }
};

// a and b in double, as the CPU backend has them: an f64 tensor keeps its range's precision
// (and ranges past f32's), and values are the CPU's (an FMA where the CPU build has none, or
// the device's logf/sinf in normal draws, may move a value by an ulp).
template <typename T>
__global__ void random_kernel(T* out, int64_t n, bool normal, double a, double b, uint64_t seed,
                              uint64_t offset) {
  // 16-bit: the f32 value, rounded once (as the CPU)
  using W = std::conditional_t<std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>,
                               float, T>;
  constexpr int bits = std::is_same_v<T, __half>          ? rng::kF16UniformBits
                       : std::is_same_v<T, __nv_bfloat16> ? rng::kBF16UniformBits
                                                          : 24;
  const int64_t blocks = (n + 3) / 4, stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t blk = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; blk < blocks; blk += stride) {
    float r[4];
    if (normal) {
      rng::normal4(seed, offset + uint64_t(blk), r);
    } else {
      rng::uniform4(seed, offset + uint64_t(blk), r);
      if constexpr (bits < 24) {
#pragma unroll
        for (int k = 0; k < 4; ++k) r[k] = rng::keep_bits(r[k], bits);
      }
    }
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      int64_t i = blk * 4 + k;
      if (i >= n) continue;
      T v = convert<T>(W(normal ? a + b * r[k] : a + (b - a) * r[k]));
      // [a, b): a draw rounded up to b is a (as the CPU, and PyTorch's CUDA)
      if (!normal && b > a && double(load(v)) >= b) v = convert<T>(W(a));
      out[i] = v;
    }
  }
}

}  // namespace

void launch_copy(DType dst_t, void* dst, DType src_t, const void* src, const Geom<2>& g,
                 int64_t n, bool contiguous, cudaStream_t s) {
  dispatch_all(dst_t, [&]<typename TD>() {
    dispatch_all(src_t, [&]<typename TS>() {
      launch_map(static_cast<TD*>(dst), n, contiguous, g, s, CopyF<TD, TS>{},
                 static_cast<const TS*>(src));
    });
  });
}

void launch_fill(DType t, void* dst, double value, const Geom<1>& g, int64_t n, bool contiguous,
                 cudaStream_t s) {
  dispatch_all(t, [&]<typename T>() {
    // The value converted on the host, exactly as the CPU backend does.
    T v;
    if constexpr (std::is_same_v<T, __half>) v = __float2half_rn(float(value));
    else if constexpr (std::is_same_v<T, __nv_bfloat16>) v = __float2bfloat16_rn(float(value));
    else if constexpr (std::is_integral_v<T>) v = T(int64_t(value));
    else v = T(value);
    launch_map(static_cast<T*>(dst), n, contiguous, g, s, FillF<T>{v});
  });
}

void launch_random(DType t, void* dst, int64_t n, bool normal, double a, double b,
                   uint64_t seed, uint64_t offset, cudaStream_t s) {
  if (n == 0) return;
  dispatch_float(t, "random", [&]<typename T>() {
    random_kernel<<<grid_for(ceil_div(n, 4)), kThreads, 0, s>>>(
        static_cast<T*>(dst), n, normal, a, b, seed, offset);
    NN_CUDA_CHECK_LAUNCH();
  });
}

void launch_unary(UnaryOp op, DType t, void* out, const void* x, double a, double b,
                  const Geom<2>& g, int64_t n, bool contiguous, cudaStream_t s) {
  dispatch_all(t, [&]<typename T>() {
    UnaryF<T> f{op, unary_t<T>(a), unary_t<T>(b), 0, 0};
    if constexpr (std::is_integral_v<T>) int_scalars<T>(op, a, b, f.ia, f.ib);
    launch_map(static_cast<T*>(out), n, contiguous, g, s, f, static_cast<const T*>(x));
  });
}

void launch_unary_backward(UnaryOp op, DType t, void* grad_x, const void* grad, const void* v,
                           double a, const Geom<3>& g, int64_t n, bool contiguous,
                           cudaStream_t s) {
  dispatch_float(t, "unary_backward", [&]<typename T>() {
    launch_map(static_cast<T*>(grad_x), n, contiguous, g, s, UnaryBackwardF<T>{op, acc_t<T>(a)},
               static_cast<const T*>(grad), static_cast<const T*>(v));
  });
}

void launch_binary(BinaryOp op, DType t, void* out, const void* a, const void* b,
                   const Geom<3>& g, int64_t n, bool contiguous, cudaStream_t s) {
  dispatch_all(t, [&]<typename T>() {
    launch_map(static_cast<T*>(out), n, contiguous, g, s, BinaryF<T>{op},
               static_cast<const T*>(a), static_cast<const T*>(b));
  });
}

void launch_where(DType t, bool cond_u8, void* out, const void* cond, const void* a,
                  const void* b, const Geom<4>& g, int64_t n, bool contiguous, cudaStream_t s) {
  dispatch_all(t, [&]<typename T>() {
    if (cond_u8)
      launch_map(static_cast<T*>(out), n, contiguous, g, s, WhereF<T, uint8_t>{},
                 static_cast<const uint8_t*>(cond), static_cast<const T*>(a),
                 static_cast<const T*>(b));
    else
      launch_map(static_cast<T*>(out), n, contiguous, g, s, WhereF<T, T>{},
                 static_cast<const T*>(cond), static_cast<const T*>(a), static_cast<const T*>(b));
  });
}

}  // namespace nn::kernels
