#pragma once
// Lets the plain-C++ helpers in csrc/common compile both in host .cpp files and in .cu kernels.
#if defined(__CUDACC__)
#define MYOPS_HD __host__ __device__ __forceinline__
#else
#define MYOPS_HD inline
#endif
