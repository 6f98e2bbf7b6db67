// The CPU GEMM. f32 on a CPU with AVX2 + FMA: a packed, cache-blocked product in the manner
// of Goto and van de Geijn's "Anatomy of high-performance matrix multiplication":
//   for each NC-wide column block of B, for each KC-deep slice of K:
//     pack B's slice into NR-wide panels (kc x NR each, row by row);
//     for each MC-tall row block of A: pack it into MR-tall panels (kc x MR, column by column),
//       then run the MR x NR micro-kernel over every (A panel, B panel) pair.
// Two micro-kernels share that loop nest: AVX2 keeps a 6 x 16 tile of C in 12 ymm registers
// (12 FMAs per k from 2 loads of B and 6 broadcasts of A); AVX-512 keeps an 8 x 32 tile in 16
// zmm registers (16 FMAs per k from 2 loads and 8 broadcasts), twice the flops per
// instruction, which is twice the rate on CPUs with two 512-bit FMA units. Partial tiles at
// the edges go through a small buffer. With several threads, C is cut into one block per
// thread (packed_sgemm). bf16 operands run an AVX512_BF16 tile or, on CPUs with AMX, an AMX
// tile in the same loop nest. The tiles are in gemm_tiles_f32.inc and gemm_tiles_bf16.inc. Every other case (f64, matrix-vector shapes, a CPU without AVX2/FMA,
// a non-x86 build) is Eigen's product.
#include "backend/cpu/gemm.h"

#include "backend/cpu/denormals.h"
#include "core/env.h"
#include "core/first_error.h"

#include <omp.h>

#include <Eigen/Core>
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "nn/dtype.h"

// x86-64 with GCC or Clang: the kernel is compiled for AVX2 + FMA whatever the build's -march
// (function target attributes) and chosen at run time when the CPU has both, so portable
// builds (LIBNN_NATIVE=OFF: the Docker images, the sanitizer build) run it too.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#ifdef __linux__
#include <sys/syscall.h>
#include <unistd.h>
#endif
#define LIBNN_PACKED_SGEMM 1
#define LIBNN_AVX2 __attribute__((target("avx2,fma")))
#define LIBNN_AVX512 __attribute__((target("avx512f,avx2,fma")))
#endif

namespace nn::cpu {
namespace {

// Products below this many flops run on the calling thread alone.
constexpr double kParallelFlops = 2e6;

template <typename T>
void eigen_gemm(int64_t M, int64_t N, int64_t K, T alpha, MatRef<T> A, MatRef<T> B, T beta,
                T* C, int64_t ldc) {
  using RowMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using ColMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;
  using Rows = Eigen::Map<const RowMat, 0, Eigen::OuterStride<>>;
  using Cols = Eigen::Map<const ColMat, 0, Eigen::OuterStride<>>;
  Eigen::Map<RowMat, 0, Eigen::OuterStride<>> c(C, M, N, Eigen::OuterStride<>(ldc));
  auto run = [&](const auto& a, const auto& b) {
    if (beta == T(0)) {
      c.noalias() = alpha * a * b;
    } else {
      if (beta != T(1)) c *= beta;
      c.noalias() += alpha * a * b;
    }
  };
  // Unit-stride views keep Eigen on its fast paths (matrix-vector ones included); an operand
  // with neither stride 1 is copied into `buf` first.
  auto unit_stride = [](MatRef<T>& X, int64_t rows, int64_t cols, RowMat& buf) {
    if (X.cs == 1 || X.rs == 1) return;
    buf.resize(rows, cols);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) buf(i, j) = X.p[i * X.rs + j * X.cs];
    X = row_major<T>(buf.data(), cols);
  };
  RowMat a_copy, b_copy;
  unit_stride(A, M, K, a_copy);
  unit_stride(B, K, N, b_copy);
  auto with_b = [&](const auto& a) {
    if (B.cs == 1) run(a, Rows(B.p, K, N, Eigen::OuterStride<>(B.rs)));
    else run(a, Cols(B.p, K, N, Eigen::OuterStride<>(B.cs)));
  };
  if (A.cs == 1) with_b(Rows(A.p, M, K, Eigen::OuterStride<>(A.rs)));
  else with_b(Cols(A.p, M, K, Eigen::OuterStride<>(A.cs)));
}

// C = beta * C for an empty inner dimension (beta == 0 writes zeros without reading C).
template <typename T>
void scale_c(int64_t M, int64_t N, T beta, T* C, int64_t ldc) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == T(0) ? T(0) : beta * C[i * ldc + j];
}

#ifdef LIBNN_PACKED_SGEMM
constexpr int64_t ceil_to(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// 64-byte aligned scratch that only grows; one per calling thread and packed element type.
template <typename E>
struct Scratch {
  struct Free { void operator()(E* p) const { std::free(p); } };
  std::unique_ptr<E[], Free> buf;
  size_t cap = 0;
  E* get(size_t n) {
    if (n > cap) {
      size_t bytes = (n * sizeof(E) + 63) / 64 * 64;
      buf.reset(static_cast<E*>(std::aligned_alloc(64, bytes)));
      if (!buf) throw std::bad_alloc();
      cap = n;
    }
    return buf.get();
  }
};

#include "backend/cpu/gemm_tiles_f32.inc"
#include "backend/cpu/gemm_tiles_bf16.inc"

// An h x w corner tile (h <= MR, w <= NR) through a full tile in a local buffer.
template <class Tile, typename P = typename Tile::Packed>
LIBNN_AVX2 void edge_kernel(int64_t kc, const P* Ap, const P* Bp, float* c, int64_t ldc,
                            int64_t h, int64_t w, float alpha, float beta) {
  constexpr int64_t MR = Tile::MR, NR = Tile::NR;
  alignas(64) float tile[MR * NR];
  Tile::kernel(kc, Ap, Bp, tile, NR, alpha, 0.f);
  for (int64_t i = 0; i < h; ++i)
    for (int64_t j = 0; j < w; ++j) {
      float& d = c[i * ldc + j];
      d = beta == 0.f ? tile[i * NR + j] : tile[i * NR + j] + beta * d;
    }
}

// One thread's product: the loop nest of the file comment with this thread's own buffers.
// With few rows (M <= 4 MR: up to 32 with the AVX-512 tile, 24 with AVX2's, so a
// convolution's 16 or 32 output channels), each B element meets
// only M rows of A, so moving B costs as much as the arithmetic: each B panel is then packed
// right before its tiles run and read back from L1, instead of the whole kc x nc slice being
// packed first and read back from L2 or beyond (the stage-1 convolution of the CIFAR
// ResNet-20, 16 x 1024 x 144, went from 40 to 32 us a product).
// With `pre` (f32 tiles only), B's panels come packed already (pack_b_once's layout: the
// panel of columns [q NR, q NR + NR) at pre + q K NR, row by row over all of K), this block's
// first column being column `col0` of that B.
template <class Tile>
LIBNN_AVX2 void sgemm_serial(int64_t M, int64_t N, int64_t K, float alpha,
                             MatRef<typename Tile::In> A, MatRef<typename Tile::In> B, float beta,
                             float* C, int64_t ldc, const typename Tile::Packed* pre = nullptr,
                             int64_t col0 = 0) {
  constexpr int64_t MR = Tile::MR, NR = Tile::NR, KC = Tile::KC, MC = Tile::MC, NC = Tile::NC;
  using P = typename Tile::Packed;
  auto prepacked = [&](int64_t j, int64_t pc) { return pre + ((col0 + j) / NR * K + pc) * NR; };
  const FlushDenormals ftz;
  static thread_local Scratch<P> a_scratch, b_scratch;
  // packed elements per panel row: a KC slice takes units(kc) rows of MR (or NR) elements
  auto units = [](int64_t kc) { return Tile::units(kc); };
  const int64_t ku_max = units(std::min(K, KC));
  const bool one_block = M <= 4 * MR;
  P* bpack = b_scratch.get(size_t(ku_max * (one_block ? NR : ceil_to(std::min(N, NC), NR))));
  P* apack = a_scratch.get(size_t(ku_max * ceil_to(std::min(M, MC), MR)));
  [[maybe_unused]] const typename Tile::Scope scope;
  auto tiles = [&](int64_t ic, int64_t mc, int64_t w, int64_t kc, const P* bp, float beta_k,
                   float* Cj) {
    for (int64_t i = 0; i < mc; i += MR) {
      const int64_t h = std::min(MR, mc - i);
      float* c = Cj + (ic + i) * ldc;
      const P* ap = apack + i * units(kc);
      if (h == MR && w == NR) Tile::kernel(kc, ap, bp, c, ldc, alpha, beta_k);
      else edge_kernel<Tile>(kc, ap, bp, c, ldc, h, w, alpha, beta_k);
    }
  };
  for (int64_t jc = 0; jc < N; jc += NC) {
    const int64_t nc = std::min(NC, N - jc);
    for (int64_t pc = 0; pc < K; pc += KC) {
      const int64_t kc = std::min(KC, K - pc);
      const float beta_k = pc == 0 ? beta : 1.f;
      const int64_t ku = units(kc);
      if (one_block) {
        for (int64_t i = 0; i < M; i += MR)
          Tile::pack_a(A, i, std::min(MR, M - i), pc, kc, apack + i * ku);
        for (int64_t j = 0; j < nc; j += NR) {
          const int64_t w = std::min(NR, nc - j);
          if (pre) {
            tiles(0, M, w, kc, prepacked(jc + j, pc), beta_k, C + jc + j);
            continue;
          }
          Tile::pack_b(B, pc, kc, jc + j, w, bpack);
          tiles(0, M, w, kc, bpack, beta_k, C + jc + j);
        }
        continue;
      }
      if (!pre)
        for (int64_t j = 0; j < nc; j += NR)
          Tile::pack_b(B, pc, kc, jc + j, std::min(NR, nc - j), bpack + j * ku);
      for (int64_t ic = 0; ic < M; ic += MC) {
        const int64_t mc = std::min(MC, M - ic);
        for (int64_t i = 0; i < mc; i += MR)
          Tile::pack_a(A, ic + i, std::min(MR, mc - i), pc, kc, apack + i * ku);
        for (int64_t j = 0; j < nc; j += NR)
          tiles(ic, mc, std::min(NR, nc - j), kc, pre ? prepacked(jc + j, pc) : bpack + j * ku,
                beta_k, C + jc + j);
      }
    }
  }
}

// Several threads: C is cut into a grid of nt blocks (rows in multiples of MR, columns in
// multiples of NR), each an independent product on its own thread: no barriers, and each
// thread packs only the rows of A and columns of B its block needs. The grid is the one whose
// blocks read the least of A and B.
template <class Tile>
void packed_sgemm(int64_t M, int64_t N, int64_t K, float alpha, MatRef<typename Tile::In> A,
                  MatRef<typename Tile::In> B, float beta, float* C, int64_t ldc, int nt,
                  const typename Tile::Packed* pre = nullptr) {
  constexpr int64_t MR = Tile::MR, NR = Tile::NR;
  int best_tm = 1;
  double best_cost = -1;
  for (int tm = 1; tm <= nt; ++tm) {
    if (nt % tm) continue;
    const int tn = nt / tm;
    const int64_t rows = ceil_to((M + tm - 1) / tm, MR), cols = ceil_to((N + tn - 1) / tn, NR);
    // a grid that would leave a thread without a block is skipped
    if ((tm > 1 && rows * (tm - 1) >= M) || (tn > 1 && cols * (tn - 1) >= N)) continue;
    const double cost = double(rows) + double(cols);
    if (best_cost < 0 || cost < best_cost) { best_cost = cost; best_tm = tm; }
  }
  const int tm = best_tm, tn = nt / tm;
  const int64_t rows = ceil_to((M + tm - 1) / tm, MR), cols = ceil_to((N + tn - 1) / tn, NR);
  if (tm * tn == 1) return sgemm_serial<Tile>(M, N, K, alpha, A, B, beta, C, ldc, pre);
  FirstError error;  // an exception must not leave an OpenMP region
#pragma omp parallel num_threads(tm * tn)
  {
    // Block t of the grid on thread t, and the blocks of threads the team lacks (OpenMP may
    // give fewer than asked for: OMP_DYNAMIC, OMP_THREAD_LIMIT) on the others in turn: a
    // block left out was C's memory as the allocator had left it.
    for (int t = omp_get_thread_num(); t < tm * tn; t += omp_get_num_threads()) {
      const int64_t r0 = (t / tn) * rows, c0 = (t % tn) * cols;
      const int64_t m = std::min(rows, M - r0), n = std::min(cols, N - c0);
      if (m > 0 && n > 0)
        error.run([&] {
          sgemm_serial<Tile>(m, n, K, alpha, {A.p + r0 * A.rs, A.rs, A.cs},
                             {B.p + c0 * B.cs, B.rs, B.cs}, beta, C + r0 * ldc + c0, ldc, pre, c0);
        });
    }
  }
  error.rethrow();
}
#endif
}  // namespace

bool f32_kernel_supported(F32Kernel k) {
  switch (k) {
    case F32Kernel::eigen: return true;
#ifdef LIBNN_PACKED_SGEMM
    case F32Kernel::avx2: {
      static const bool has = [] {
        __builtin_cpu_init();  // in case this first runs from a static initialiser
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
      }();
      return has;
    }
    case F32Kernel::avx512: {
      static const bool has = [] {
        __builtin_cpu_init();
        return f32_kernel_supported(F32Kernel::avx2) && __builtin_cpu_supports("avx512f");
      }();
      return has;
    }
#endif
    default: return false;
  }
}

namespace {
// The widest kernel this CPU has, unless LIBNN_CPU_GEMM (eigen, avx2, avx512) names another
// it supports; any other value is reported once on stderr and ignored.
F32Kernel initial_kernel() {
  const F32Kernel best = f32_kernel_supported(F32Kernel::avx512) ? F32Kernel::avx512
                         : f32_kernel_supported(F32Kernel::avx2) ? F32Kernel::avx2
                                                                  : F32Kernel::eigen;
  const char* env = std::getenv("LIBNN_CPU_GEMM");
  if (!env || !*env) return best;
  const std::string v = env;
  if (v != "eigen" && v != "avx2" && v != "avx512") {
    std::fprintf(stderr, "libnn: LIBNN_CPU_GEMM=%s ignored (eigen, avx2 or avx512)\n", env);
    return best;
  }
  const F32Kernel asked = v == "eigen" ? F32Kernel::eigen
                          : v == "avx2" ? F32Kernel::avx2
                                        : F32Kernel::avx512;
  if (f32_kernel_supported(asked)) return asked;
  std::fprintf(stderr, "libnn: LIBNN_CPU_GEMM=%s ignored: this CPU or build lacks it\n", env);
  return best;
}

std::atomic<F32Kernel>& chosen_kernel() {
  static std::atomic<F32Kernel> k{initial_kernel()};
  return k;
}
}  // namespace

F32Kernel f32_kernel() { return chosen_kernel().load(std::memory_order_relaxed); }

void set_f32_kernel(F32Kernel k) {
  if (!f32_kernel_supported(k)) throw std::invalid_argument("set_f32_kernel: not supported here");
  chosen_kernel().store(k, std::memory_order_relaxed);
}

namespace {
// The packed f32 kernel that runs an M x N product now (the chosen kernel, a tile no wider
// than N), or eigen: matrix-vector shapes (one row, or fewer columns than a tile) stay with
// Eigen, whose products for them read each operand once instead of padding tiles; fewer
// columns than the AVX-512 tile run the AVX2 one.
F32Kernel f32_tile_for(int64_t M, int64_t N) {
#ifdef LIBNN_PACKED_SGEMM
  const F32Kernel k = f32_kernel();
  if (M < 2 || N < Avx2Tile::NR || k == F32Kernel::eigen) return F32Kernel::eigen;
  return k == F32Kernel::avx512 && N >= Avx512Tile::NR ? F32Kernel::avx512 : F32Kernel::avx2;
#else
  (void)M, (void)N;
  return F32Kernel::eigen;
#endif
}
int threads_for(int64_t M, int64_t N, int64_t K) {
  const double flops = 2.0 * double(M) * double(N) * double(K);
  return omp_in_parallel() || flops < kParallelFlops ? 1 : omp_get_max_threads();
}
}  // namespace

template <typename T>
void gemm(int64_t M, int64_t N, int64_t K, T alpha, MatRef<T> A, MatRef<T> B, T beta, T* C,
          int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) return scale_c(M, N, beta, C, ldc);
#ifdef LIBNN_PACKED_SGEMM
  if constexpr (std::is_same_v<T, float>) {
    switch (f32_tile_for(M, N)) {
      case F32Kernel::avx512:
        return packed_sgemm<Avx512Tile>(M, N, K, alpha, A, B, beta, C, ldc, threads_for(M, N, K));
      case F32Kernel::avx2:
        return packed_sgemm<Avx2Tile>(M, N, K, alpha, A, B, beta, C, ldc, threads_for(M, N, K));
      case F32Kernel::eigen: break;
    }
  }
#endif
  eigen_gemm(M, N, K, alpha, A, B, beta, C, ldc);
}

struct PackedB {
  int64_t K = 0, N = 0;
  MatRef<float> B{nullptr, 0, 0};  // as given (products the packed kernel does not run read it)
  F32Kernel kernel = F32Kernel::eigen;  // whose panels `panels` holds
  std::unique_ptr<float[], void (*)(void*)> panels{nullptr, std::free};
};

std::shared_ptr<const PackedB> pack_b_once(int64_t K, int64_t N, MatRef<float> B) {
  auto p = std::make_shared<PackedB>();
  p->K = K, p->N = N, p->B = B;
#ifdef LIBNN_PACKED_SGEMM
  // (the tile a product of two or more rows would run)
  p->kernel = K > 0 ? f32_tile_for(2, N) : F32Kernel::eigen;
  auto pack = [&]<class Tile>() {
    constexpr int64_t NR = Tile::NR;
    const int64_t panels = (N + NR - 1) / NR;
    p->panels.reset(static_cast<float*>(
        std::aligned_alloc(64, size_t((panels * K * NR * int64_t(sizeof(float)) + 63) / 64 * 64))));
    if (!p->panels) throw std::bad_alloc();
    float* dst = p->panels.get();
    // (panels spread over the threads: a large weight is packed at memory speed)
#pragma omp parallel for schedule(static) if (panels * K * NR > (1 << 16) && !omp_in_parallel())
    for (int64_t q = 0; q < panels; ++q)
      Tile::pack_b(B, 0, K, q * NR, std::min(NR, N - q * NR), dst + q * K * NR);
  };
  if (p->kernel == F32Kernel::avx512) pack.template operator()<Avx512Tile>();
  else if (p->kernel == F32Kernel::avx2) pack.template operator()<Avx2Tile>();
#endif
  return p;
}

void gemm_prepacked(int64_t M, int64_t N, int64_t K, float alpha, MatRef<float> A,
                    const PackedB& B, float beta, float* C, int64_t ldc) {
  if (B.K != K || B.N != N)
    throw std::invalid_argument("gemm_prepacked: the packed operand is of another shape");
#ifdef LIBNN_PACKED_SGEMM
  // (the panels serve while the kernel they were packed for is the one this product takes)
  if (M > 0 && K > 0 && B.panels && f32_tile_for(M, N) == B.kernel) {
    if (B.kernel == F32Kernel::avx512)
      return packed_sgemm<Avx512Tile>(M, N, K, alpha, A, B.B, beta, C, ldc, threads_for(M, N, K),
                                      B.panels.get());
    return packed_sgemm<Avx2Tile>(M, N, K, alpha, A, B.B, beta, C, ldc, threads_for(M, N, K),
                                  B.panels.get());
  }
#endif
  gemm<float>(M, N, K, alpha, A, B.B, beta, C, ldc);
}

namespace {
// AMX needs the CPU's AMX-TILE and AMX-BF16 (CPUID leaf 7: EDX bits 24 and 22) and, on Linux,
// this process's leave to use the tile data registers (arch_prctl ARCH_REQ_XCOMP_PERM for
// XFEATURE_XTILEDATA, which fails where the kernel or the machine's hypervisor does not
// enable them). Asked once, for the whole process.
bool amx_available() {
#if defined(LIBNN_PACKED_SGEMM) && defined(__linux__)
  static const bool has = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    if (!((d >> 24) & 1u) || !((d >> 22) & 1u)) return false;
    constexpr long kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return has;
#else
  return false;
#endif
}

std::atomic<bool>& amx_wanted() {
  static std::atomic<bool> on{env_switch("LIBNN_CPU_AMX", true)};
  return on;
}
}  // namespace

bool bf16_amx_supported() {
  static const bool has = [] {
#ifdef LIBNN_PACKED_SGEMM
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512bf16") &&
           f32_kernel_supported(F32Kernel::avx512) && amx_available();
#else
    return false;
#endif
  }();
  return has;
}

// The switch first: with LIBNN_CPU_AMX=0 the process never asks for the tile registers.
bool bf16_amx() { return amx_wanted().load(std::memory_order_relaxed) && bf16_amx_supported(); }

void set_bf16_amx(bool on) {
  if (on && !bf16_amx_supported()) throw std::invalid_argument("set_bf16_amx: no AMX here");
  amx_wanted().store(on, std::memory_order_relaxed);
}

bool bf16_gemm_amx() { return bf16_gemm_native() && bf16_amx(); }

bool bf16_gemm_native() {
#ifdef LIBNN_PACKED_SGEMM
  static const bool has = [] {
    __builtin_cpu_init();
    return f32_kernel_supported(F32Kernel::avx512) && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512bf16");
  }();
  return has && f32_kernel() == F32Kernel::avx512;
#else
  return false;
#endif
}

void gemm_bf16(int64_t M, int64_t N, int64_t K, float alpha, MatRef<uint16_t> A,
               MatRef<uint16_t> B, float beta, float* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) return scale_c(M, N, beta, C, ldc);
#ifdef LIBNN_PACKED_SGEMM
  // (AMX is asked for, and the process's tile registers with it, only by a product it can run.)
  if (bf16_gemm_native() && M >= 2 && N >= 16) {
    const double flops = 2.0 * double(M) * double(N) * double(K);
    const int nt = omp_in_parallel() || flops < kParallelFlops ? 1 : omp_get_max_threads();
    if (bf16_amx()) return packed_sgemm<AmxTile>(M, N, K, alpha, A, B, beta, C, ldc, nt);
    if (N >= Bf16Tile::NR) return packed_sgemm<Bf16Tile>(M, N, K, alpha, A, B, beta, C, ldc, nt);
  }
#endif
  // Elsewhere (matrix-vector shapes too): the operands widened to f32, the f32 product.
  auto widen = [](const MatRef<uint16_t>& X, int64_t rows, int64_t cols) {
    std::vector<float> f(size_t(rows * cols));
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) f[size_t(i * cols + j)] = bf16_bits_to_float(X.p[i * X.rs + j * X.cs]);
    return f;
  };
  const std::vector<float> a = widen(A, M, K), b = widen(B, K, N);
  gemm<float>(M, N, K, alpha, row_major(a.data(), K), row_major(b.data(), N), beta, C, ldc);
}

template void gemm<float>(int64_t, int64_t, int64_t, float, MatRef<float>, MatRef<float>, float,
                          float*, int64_t);
template void gemm<double>(int64_t, int64_t, int64_t, double, MatRef<double>, MatRef<double>,
                           double, double*, int64_t);

}  // namespace nn::cpu
