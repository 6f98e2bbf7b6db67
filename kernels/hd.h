// NN_HD: a function usable from host C++ and from CUDA kernels (the CPU and GPU backends share
// such formulas, so both compute the same thing).
#pragma once

#ifdef __CUDACC__
#define NN_HD __host__ __device__ __forceinline__
#else
#define NN_HD inline
#endif
