// The CPU backend's one matrix product (internal). Every GEMM of the CPU backend (matmul,
// convolution, attention) goes through gemm(): f32 on x86-64 with AVX2 + FMA (or AVX-512)
// runs our packed kernel (gemm.cpp, chosen at run time, so portable builds use it too),
// everything else runs Eigen's product.
#pragma once
#include <cstdint>
#include <memory>
#include <type_traits>

namespace nn::cpu {

// A strided matrix operand: element (i, j) is p[i * rs + j * cs]. Row-major with leading
// dimension ld is {p, ld, 1}; its transpose, read in place, is {p, 1, ld}.
template <typename T>
struct MatRef {
  const T* p;
  int64_t rs, cs;
  MatRef t() const { return {p, cs, rs}; }
};

template <typename T>
MatRef<T> row_major(const T* p, int64_t ld) { return {p, ld, 1}; }

// C = alpha * A * B + beta * C, with A (M x K), B (K x N) and C (M x N) row-major with
// leading dimension ldc. beta == 0 never reads C (it may hold garbage). Runs on the calling
// thread's OpenMP team when the product is large enough and not already inside a parallel
// region, else on the calling thread alone.
template <typename T>
void gemm(int64_t M, int64_t N, int64_t K, T alpha, MatRef<T> A, MatRef<T> B, T beta, T* C,
          int64_t ldc);

// B (K x N, f32) packed once into the f32 kernel's panels, for many products with it (a
// recurrence's weight, multiplied every step): gemm_prepacked(..., *pack_b_once(K, N, B), ...)
// is gemm<float>(..., B, ...) without packing B each time. The packed copy is B's values when
// packed (a change to B after it is not seen); B itself must outlive it (products the packed
// kernel does not run, matrix-vector shapes, read it).
struct PackedB;
std::shared_ptr<const PackedB> pack_b_once(int64_t K, int64_t N, MatRef<float> B);
void gemm_prepacked(int64_t M, int64_t N, int64_t K, float alpha, MatRef<float> A,
                    const PackedB& B, float beta, float* C, int64_t ldc);

// Which kernel runs f32 products (other than matrix-vector shapes): Eigen's, or our packed
// product with the AVX2/FMA or the AVX-512 micro-kernel. The default is the widest this CPU
// has, or the one the environment variable LIBNN_CPU_GEMM (eigen, avx2, avx512) names; tests
// may pick another that the CPU supports (set_f32_kernel throws std::invalid_argument
// otherwise). Not meant to be switched while products run.
enum class F32Kernel { eigen, avx2, avx512 };
bool f32_kernel_supported(F32Kernel k);
F32Kernel f32_kernel();
void set_f32_kernel(F32Kernel k);

// bf16 operands (raw bits), f32 result: C = alpha * A * B + beta * C, with A, B, C as in
// gemm(). Runs the AVX512_BF16 kernel (pairs of bf16 products summed into f32 lanes) when
// bf16_gemm_native(), else widens the operands to f32 and runs gemm<float>; so do products
// with one row or fewer than 32 columns (16 with AMX).
// bf16_gemm_native() is true on CPUs with AVX512_BF16 while the f32 kernel is avx512 (so
// LIBNN_CPU_GEMM=avx2 or eigen, and set_f32_kernel, turn it off too).
bool bf16_gemm_native();
// Where the CPU also has AMX (AMX-TILE and AMX-BF16, with the operating system's leave to
// use the tile registers: Intel Xeon since Sapphire Rapids), those products run an AMX tile
// kernel instead while bf16_amx() (on by default; LIBNN_CPU_AMX=0 turns it off for a whole
// program, set_bf16_amx for tests and benchmarks, which throws std::invalid_argument for
// true where bf16_amx_supported() is false).
bool bf16_amx_supported();
bool bf16_amx();
void set_bf16_amx(bool on);
// Whether gemm_bf16's products (of two rows and 16 columns or more) run the AMX tile now:
// bf16_gemm_native() and bf16_amx().
bool bf16_gemm_amx();
void gemm_bf16(int64_t M, int64_t N, int64_t K, float alpha, MatRef<uint16_t> A,
               MatRef<uint16_t> B, float beta, float* C, int64_t ldc);

// One product whatever the operands: T float or double (gemm<T>, result T), or uint16_t for
// bf16 bits (gemm_bf16, result f32). The backend's matmul and convolutions call this.
template <typename T>
using gemm_result_t = std::conditional_t<std::is_same_v<T, uint16_t>, float, T>;
template <typename T>
void gemm_of(int64_t M, int64_t N, int64_t K, gemm_result_t<T> alpha, MatRef<T> A, MatRef<T> B,
             gemm_result_t<T> beta, gemm_result_t<T>* C, int64_t ldc) {
  if constexpr (std::is_same_v<T, uint16_t>) gemm_bf16(M, N, K, alpha, A, B, beta, C, ldc);
  else gemm<T>(M, N, K, alpha, A, B, beta, C, ldc);
}

}  // namespace nn::cpu
