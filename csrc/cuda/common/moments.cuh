#pragma once
// (count, mean, M2) partial statistics and their fixed-order combination (Chan et al.), shared by
// the reductions in norm_act.cu and batch_norm_chain.cu: no float atomics, so results do not
// depend on scheduling.
namespace myops {
namespace cuda {

struct Moments {
  double n, mean, m2;
};

__device__ inline Moments combine(Moments a, Moments b) {
  const double n = a.n + b.n;
  if (n == 0) return a;
  const double delta = b.mean - a.mean;
  return {n, a.mean + delta * (b.n / n), a.m2 + b.m2 + delta * delta * (a.n * b.n / n)};
}

// Tree-combines one Moments per thread of a block of kThreads (a power of two) through `red`
// (kThreads entries of shared memory); the result is valid in thread 0.
template <int kThreads>
__device__ inline Moments block_combine(Moments m, Moments* red) {
  red[threadIdx.x] = m;
  __syncthreads();
  for (int width = kThreads / 2; width > 0; width /= 2) {
    if (threadIdx.x < width) red[threadIdx.x] = combine(red[threadIdx.x], red[threadIdx.x + width]);
    __syncthreads();
  }
  return red[0];
}
// The same through static shared memory (kernels whose dynamic shared memory is in use).
template <int kThreads>
__device__ inline Moments block_combine(Moments m) {
  __shared__ Moments red[kThreads];
  return block_combine<kThreads>(m, red);
}

// Warp-level fixed-order combination of per-lane Moments (xor butterfly: every lane ends with
// the same result, independent of scheduling).
__device__ inline Moments warp_combine(Moments m) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) {
    const Moments other{__shfl_xor_sync(0xffffffffu, m.n, o), __shfl_xor_sync(0xffffffffu, m.mean, o),
                        __shfl_xor_sync(0xffffffffu, m.m2, o)};
    m = (threadIdx.x & o) ? combine(other, m) : combine(m, other);
  }
  return m;
}

// Sums kCount doubles per thread across a block of kThreads (a multiple of 32) in a fixed order:
// an xor butterfly per warp (both lanes of a pair add the same two values, so every lane holds
// the warp's sum), then each thread adds the warp sums in warp order. Every thread gets the
// sums. Two barriers (a shared-memory tree took log2(kThreads) + 2: the BatchNorm chain's tail
// calls this twice per block). Safe to call repeatedly (it waits for the previous call's readers
// before reusing its scratch).
template <int kThreads, int kCount>
__device__ void block_sum(double (&v)[kCount]) {
  static_assert(kThreads % 32 == 0, "whole warps");
  constexpr int kWarps = kThreads / 32;
  __shared__ double red[kCount][kWarps];
#pragma unroll
  for (int k = 0; k < kCount; ++k)
#pragma unroll
    for (int o = 16; o > 0; o /= 2) v[k] += __shfl_xor_sync(0xffffffffu, v[k], o);
  __syncthreads();
  if (threadIdx.x % 32 == 0)
#pragma unroll
    for (int k = 0; k < kCount; ++k) red[k][threadIdx.x / 32] = v[k];
  __syncthreads();
  // (one value: the loop unrolled, as the BatchNorm chain's tail sums; with two, unrolled loads
  // raised group_stats_kernel's registers from 32 to 42-46)
  if constexpr (kCount == 1) {
    v[0] = red[0][0];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) v[0] += red[0][w];
  } else {
#pragma unroll
    for (int k = 0; k < kCount; ++k) {
      v[k] = red[k][0];
#pragma unroll 1
      for (int w = 1; w < kWarps; ++w) v[k] += red[k][w];
    }
  }
}

}  // namespace cuda
}  // namespace myops
